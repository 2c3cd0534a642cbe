// libibverbs, loaded at run time (dlopen of libibverbs.so.1: libchorus does not link it), as a
// table of the functions the ibverbs network calls (Verbs), and the ports that network would use:
// every active port of the HCAs an HCA list selects, with the GID chosen for it
// (transports/ib/ib_select.h). A machine without libibverbs or without an RDMA device gets an
// empty list and a sentence saying so: the network is then simply not offered.
//
// The data path's calls (ibv_post_send, ibv_post_recv, ibv_poll_cq) are inline in verbs.h and go
// through the context's ops table, so they need no entry here: a fake table (tests/fake_verbs.h)
// hands out contexts whose ops are its own, and the network runs on it unchanged.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "transports/ib/ib_select.h"

namespace chorus {
namespace ib {

// The functions used, each bound to its IBVERBS_1.1 version (regDmabufMr: IBVERBS_1.12, null when
// the library is older).
struct Verbs {
  ibv_device** (*getDeviceList)(int*) = nullptr;
  void (*freeDeviceList)(ibv_device**) = nullptr;
  const char* (*getDeviceName)(ibv_device*) = nullptr;
  ibv_context* (*openDevice)(ibv_device*) = nullptr;
  int (*closeDevice)(ibv_context*) = nullptr;
  int (*queryDevice)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*queryPort)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  int (*queryGid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  ibv_pd* (*allocPd)(ibv_context*) = nullptr;
  int (*deallocPd)(ibv_pd*) = nullptr;
  ibv_mr* (*regMr)(ibv_pd*, void*, size_t, int) = nullptr;
  ibv_mr* (*regDmabufMr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int) = nullptr;
  int (*deregMr)(ibv_mr*) = nullptr;
  ibv_cq* (*createCq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroyCq)(ibv_cq*) = nullptr;
  ibv_qp* (*createQp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modifyQp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*destroyQp)(ibv_qp*) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status) = nullptr;
  // Where the ports' sysfs entries are (RoCE GID types): /sys/class/infiniband.
  std::string sysfsRoot = "/sys/class/infiniband";
  std::string why;  // not loaded: why
  bool loaded() const { return getDeviceList != nullptr; }
};

// libibverbs.so.1's table, loaded once; !loaded() with why set when it cannot be.
const Verbs& systemVerbs();

struct PortInfo {
  std::string device;
  int port = 0;
  bool infiniband = false;  // link layer InfiniBand (else Ethernet: RoCE)
  uint16_t lid = 0;
  int gidIndex = 0;
  Gid gid;
  int activeMtu = 0;         // IBV_MTU_* value
  uint32_t maxMsg = 0;       // the largest message of the port
  int speedMbps = 0;         // active speed times width
  uint64_t guid = 0;         // the node GUID (its chip)
  bool grhRequired = false;  // IBV_QPF_GRH_REQUIRED
  int maxQpWr = 0;           // the device's most work requests per queue
  int maxCqe = 0;            // and entries per completion queue
  std::string pciPath;       // the device's PCI path in sysfs, or ""
};

// The active ports of the selected HCAs, each with its chosen GID; empty with *why set when there
// is none (no libibverbs, no device, none selected, none active).
std::vector<PortInfo> discoverPorts(const Verbs& v, const HcaList& hcas, const GidRule& rule, std::string* why);

// The RoCE version of GID `index` of a port as sysfs says it (`<root>/<device>/ports/<port>/
// gid_attrs/types/<index>`: "IB/RoCE v1", "RoCE v1" or "RoCE v2"); 0 when unknown. `root` is
// /sys/class/infiniband on a real machine.
int roceVersion(const std::string& root, const std::string& device, int port, int index);

// A port's speed in Mbps from its active_speed and active_width codes (NCCL's table); 0 unknown.
int portSpeedMbps(uint8_t activeSpeed, uint8_t activeWidth);

}  // namespace ib
}  // namespace chorus
