// An in-process fake of libibverbs for the ibverbs network's tests (there is no RDMA device here):
// a table of the functions the network calls (ib::Verbs) over made-up devices and ports, whose
// contexts carry their own ops, so the inline ibv_post_send / ibv_post_recv / ibv_poll_cq of
// <infiniband/verbs.h> reach the fake too.
//
// What it models of reliable-connected queue pairs, and checks:
//   - the state machine RESET -> INIT -> RTR -> RTS, with the attributes each step needs (a step
//     without them, or out of order, fails with EINVAL as a NIC's driver does); posting a send
//     before RTS fails;
//   - addressing: a queue pair's path (its RTR destination: the LID on InfiniBand, the GID on RoCE,
//     which must be global there) must name the port of the destination queue pair, else its
//     writes are never answered (IBV_WC_RETRY_EXC_ERR);
//   - RDMA writes, writes with immediate and reads, checked against registrations: the local
//     buffer against its lkey (IBV_WC_LOC_PROT_ERR), the remote range against its rkey and access
//     (IBV_WC_REM_ACCESS_ERR); a write with immediate takes a posted receive of the target queue
//     pair, and waits (receiver-not-ready, retried for ever as with rnr_retry 7) while there is none;
//   - send queue depth (a post past max_send_wr fails with ENOMEM) and completion queue room (an
//     overflow is counted: a test expects none);
//   - delivery in order per queue pair (RC), and optionally in a random order across queue pairs
//     (seeded), only when someone polls a completion queue (and not while held);
//   - faults: a queue pair that stops answering (writes to it end in IBV_WC_RETRY_EXC_ERR), or a
//     fabric that swallows every write (no completion at all).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transports/ib/verbs.h"

namespace chorus {
namespace fakeib {

struct PortSpec {
  bool infiniband = false;
  bool active = true;
  uint16_t lid = 0;
  std::vector<ib::Gid> gids;  // the GID table (RoCE versions go to the sysfs tree)
  int mtu = IBV_MTU_4096;
  uint32_t maxMsg = 1u << 30;
  bool grhRequired = false;
};
struct DeviceSpec {
  std::string name;
  uint64_t guid = 0;
  std::vector<PortSpec> ports;
  int maxQpWr = 16384;
  int maxCqe = 1 << 20;
};

struct Stats {
  uint64_t writes = 0;       // RDMA writes delivered (with or without immediate)
  uint64_t plainWrites = 0;  // of which without immediate
  uint64_t reads = 0;
  uint64_t rnrWaits = 0;                    // deliveries put off for want of a posted receive
  uint64_t cqOverflows = 0;                 // completions that found their queue full
  int maxSendInFlight = 0;                  // the most work requests one send queue held
  std::map<uint32_t, uint64_t> writesByQp;  // by source queue pair number
};

// One fake fabric at a time: the functions of its table are plain C functions over it.
class Fabric {
 public:
  // `sysfsRoot`: a folder to write the ports' RoCE GID types into (gid_attrs/types), as
  // /sys/class/infiniband has them; the table's sysfsRoot points there.
  Fabric(std::vector<DeviceSpec> devices, const std::string& sysfsRoot);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  const ib::Verbs& verbs() const { return verbs_; }
  void setReorder(bool on, uint32_t seed = 1);
  void setSwallow(bool on);   // every write from now on vanishes without a completion
  void setHold(bool on);      // nothing is delivered while on (work requests queue up)
  void kill(uint32_t qpNum);  // the queue pair stops answering
  void setDmabuf(bool on);    // ibv_reg_dmabuf_mr present (registers the iova range of host memory)
  uint32_t newestQp() const;  // the number of the queue pair made last
  Stats stats() const;
  // Contexts, protection domains, registrations, completion queues and queue pairs still open.
  int openObjects() const;

 private:
  ib::Verbs verbs_;
};

ib::Gid roceGid(const char* ipv4, int version);       // an IPv4-mapped GID with its RoCE version
ib::Gid ibGid(uint64_t subnetPrefix, uint64_t guid);  // an InfiniBand GID

// A RoCE device `name` with port 1 active (GIDs: link-local v1, `ipv4` v1, `ipv4` v2) and port 2 down.
DeviceSpec roceDevice(const std::string& name, const char* ipv4, uint64_t guid);
// An InfiniBand device `name` with port 1 active at `lid`.
DeviceSpec ibDevice(const std::string& name, uint16_t lid, uint64_t guid);

// A fabric installed under the ibverbs network (ib::useVerbs) for a scope, its sysfs tree in a
// temporary folder.
class Installed {
 public:
  explicit Installed(std::vector<DeviceSpec> devices, bool dmabuf = false);
  ~Installed();
  Installed(const Installed&) = delete;
  Installed& operator=(const Installed&) = delete;
  Fabric& fab() { return *fab_; }
  // Builds the network anew on the fabric (after settings change).
  void reinstall();
  // Puts back the system's libibverbs (the network closes what it kept open) and says how many
  // objects of the fabric are still open: 0 unless something leaked.
  int uninstall();

 private:
  std::string root_;
  std::unique_ptr<Fabric> fab_;
  bool installed_ = false;
};

}  // namespace fakeib
}  // namespace chorus
