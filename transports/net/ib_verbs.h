// libibverbs, loaded at run time (dlopen of libibverbs.so.1: libchorus does not link it), and the
// ports the ibverbs network would use: every active port of the HCAs an HCA list selects, with the
// GID chosen for it (transports/net/ib_select.h). A machine without libibverbs or without an RDMA
// device gets an empty list and a sentence saying so: the network is then simply not offered.
#pragma once

#include <string>
#include <vector>

#include "transports/net/ib_select.h"

namespace chorus {
namespace ib {

struct PortInfo {
  std::string device;
  int port = 0;
  bool infiniband = false;  // link layer InfiniBand (else Ethernet: RoCE)
  uint16_t lid = 0;
  int gidIndex = 0;
  Gid gid;
  int activeMtu = 0;  // IBV_MTU_* value
};

// The active ports of the selected HCAs, each with its chosen GID; empty with *why set when there
// is none (no libibverbs, no device, none selected, none active).
std::vector<PortInfo> discoverPorts(const HcaList& hcas, const GidRule& rule, std::string* why);

// The RoCE version of GID `index` of a port as sysfs says it (`<root>/<device>/ports/<port>/
// gid_attrs/types/<index>`: "IB/RoCE v1", "RoCE v1" or "RoCE v2"); 0 when unknown. `root` is
// /sys/class/infiniband on a real machine.
int roceVersion(const std::string& root, const std::string& device, int port, int index);

}  // namespace ib
}  // namespace chorus
