// What a rank's machine looks like, as hwloc describes it: packages, NUMA nodes, cores, and the PCI
// devices collectives care about (GPUs and NICs) with where they hang in the PCI tree. Detected from
// the live machine or from an hwloc XML file (CHORUS_TOPO_FILE, or tests replaying real machines).
// The ring and tree builders take these records as plain data: no hwloc past detect().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/algo/tuner.h"
#include "src/common/status.h"

namespace chorus::topo {

// How two devices of one host reach each other, best first.
enum class LinkClass {
  kNvlink,          // a direct GPU link hwloc reports bandwidth for
  kSameSwitch,      // below one PCI switch (a bridge that is not a host bridge)
  kSameHostBridge,  // below one host bridge
  kSameNuma,        // different host bridges of one NUMA node
  kSamePackage,     // different NUMA nodes of one package
  kCrossSocket,     // across packages
};
const char* linkClassName(LinkClass c);

struct Device {
  std::string busId;  // "0000:04:00.0"
  uint16_t vendor = 0;
  uint16_t device = 0;
  uint16_t classId = 0;
  int numa = -1;     // logical index of the NUMA node it is local to, -1 when unknown
  int package = -1;  // logical index of that package, -1 when unknown
  // PCI bridges above the device, nearest first, as "domain:bus" of their secondary bus; the last
  // is below the host bridge. hostBridge: the host bridge's own index (its gp_index).
  std::vector<std::string> switches;
  int64_t hostBridge = -1;
  std::vector<std::string> names;  // OS devices: cuda0, nvml0, eth0, ib0, mlx5_0, ...
  // How fast it moves data, one direction, in GB/s; 0: unknown. A PCI device: its PCIe link
  // (generation x width, as hwloc reads it); a NIC: the slower of that and its port speed (sysfs,
  // live detection only), where known.
  double linkGBs = 0;
};

struct Machine {
  int packages = 0;
  int numaNodes = 0;
  int cores = 0;
  int pus = 0;
  // Data or unified caches by level (index 0: L1), the size of one and how many there are.
  std::vector<uint64_t> cacheBytes;
  std::vector<int> caches;
  // class 0300/0302, vendor 0x10de: in PCI order, or, on a live machine where the CUDA driver
  // answers, the devices it makes visible in its order (CUDA_VISIBLE_DEVICES applies).
  std::vector<Device> gpus;
  std::vector<Device> nics;  // Ethernet and RDMA devices (an ib0 and its mlx5_0 are one NIC)
  // GPU x GPU NVLink bandwidth (hwloc's "NVLinkBandwidth" matrix, its unit), in `gpus` order;
  // empty when hwloc reports none.
  std::vector<std::vector<uint64_t>> nvlink;
  // Per GPU, its NVLink bandwidth to NVSwitches (the matrix's GPU-to-switch entries summed, same
  // unit), in `gpus` order; empty when no GPU reaches a switch. The switches of one machine form
  // one fabric (DGX-2's two baseboards are joined by switch-to-switch links the matrix does not
  // show), so two GPUs on switches reach each other at the smaller of their two sums.
  std::vector<uint64_t> nvswitch;
  // Operating-system CPU numbers of each NUMA node (logical order). Live detection only; not part
  // of serialize(): only the rank on this machine needs it, to place itself.
  std::vector<std::vector<int>> numaCpus;
};

// The live machine (xmlPath empty) or the machine an hwloc XML file (or a CHORUS_TOPO_DUMP_FILE
// dump) describes; `origin` says in errors where the path came from.
Result<Machine> detect(const std::string& xmlPath, const std::string& origin = "CHORUS_TOPO_FILE");
// Puts m.gpus in the order of `cudaBusIds` (the CUDA driver's visible devices, by PCI bus id in
// any case and domain width) and drops GPUs it does not list; GPUs it lists that hwloc did not
// find are added with what the bus id says. Empty `cudaBusIds`: m is left as it is. The NVLink
// matrix follows the new order.
void orderGpusAsCuda(Machine& m, const std::vector<std::string>& cudaBusIds);
// The PCI bus ids of the devices the CUDA driver makes visible, in its order; empty while the
// program has not loaded the driver (libcuda.so.1 is never loaded here, only looked up).
std::vector<std::string> cudaVisibleBusIds();

// detect(), once per process and path (hwloc takes milliseconds to load a machine with its PCI
// tree; every communicator of a process asks).
Result<Machine> detectCached(const std::string& xmlPath);

// A Machine as text and back, to travel between ranks (numaCpus stays behind).
std::string serialize(const Machine& m);
Result<Machine> parseMachine(const std::string& text);

// The NUMA node (logical index) the calling thread's CPU affinity lies within, or -1 when it spans
// several (unbound) or the machine was not detected live.
int boundNuma(const Machine& m);

LinkClass linkClass(const Machine& m, size_t gpuA, size_t gpuB);
LinkClass linkClass(const Device& a, const Device& b);
// One direction's bandwidth between two GPUs of `m`, GB/s: NVLink (direct links plus the
// NVSwitch fabric), else the slower of their PCIe links, else the class's estimate.
double gpuPairGBs(const Machine& m, size_t gpuA, size_t gpuB);

// Several lines a person can read: counts, then each GPU and NIC with its locality.
std::string describe(const Machine& m);

// What a rank tells the others at init about itself: the NUMA node its CPU affinity lies within
// (-1: unbound) and the length of its machine's description (serialize()), which follows.
struct TopoRecord {
  int32_t boundNuma = -1;
  uint32_t machineBytes = 0;
};

// Where one rank runs: which host (an index into the hosts' Machines), and the GPU it drives (an
// index into that Machine's gpus, or -1 for a CPU rank, then placed by its NUMA node, -1 unknown).
struct RankPlace {
  int host = 0;
  int gpu = -1;
  int numa = -1;
};

// The cost of one ring hop inside a host, from the link class (lower is better).
int hopCost(LinkClass c);

// A ring over all ranks: the ranks of each host next to each other, hosts in the order of their
// lowest rank, each host's ranks ordered so the hops inside it cost the least (every order is
// tried up to 8 ranks a host, nearest-neighbour beyond), and, across hosts, entered and left
// through the ranks nearest the host's NICs. A pure function of its inputs: every rank computes
// the same ring. Channel c > 0 runs the same ring reversed on odd c, so two channels use each
// link both ways.
std::vector<int> buildRing(const std::vector<RankPlace>& ranks, const std::vector<Machine>& hosts, int channel);

// Where a rank runs, as every rank can compute it from the allgathered records: the ranks of each
// host in rank order are its local ranks 0, 1, ...; a rank drives GPU (local rank mod GPUs) when
// its host has GPUs; a CPU rank is placed on the NUMA node its affinity lies within (boundNuma),
// and an unbound one is spread: local rank l of L goes to node l * nodes / L.
RankPlace placeRank(const Machine& host, int localRank, int localSize, int boundNumaNode);

// The NIC (index into the host's nics) nearest a rank, or -1 when the host has none.
int nearestNic(const Machine& m, const RankPlace& r);

// One ring (channel) with what the tuner needs from it: the slowest hop and what it costs.
struct ChannelPlan {
  std::vector<int> ring;
  std::string bottleneck;      // "NVLink", "same PCI switch", ..., "network"
  double busBwGBs = 0;         // estimated bandwidth of the slowest hop
  double hopLatencyUs = 0;     // estimated latency of the slowest hop
  std::vector<int> nicOfRank;  // per rank: the NIC its host stretch is entered or left by, or -1
};
// Bandwidth and latency estimates per link class and for the network (documented in
// docs/topology.md; they rank choices, they are not measurements), for hops whose links hwloc
// does not measure (gpuPairGBs and NIC speeds take precedence).
double linkBwGBs(LinkClass c);
std::vector<ChannelPlan> buildChannels(const std::vector<RankPlace>& ranks, const std::vector<Machine>& hosts,
                                       int nChannels);

// NCCL's double binary tree over n nodes (in-order numbering; the second tree mirrors the first
// when n is even and shifts it by one when n is odd, so no node is an inner node of both):
// parent of each node in each tree, -1 for the roots.
struct DoubleTree {
  std::vector<int> parent[2];
  int root[2] = {-1, -1};
};
DoubleTree buildDoubleTree(int n);
// The trees across the hosts of a job, over ranks: each host is a node, represented by its first
// rank of `ring`; the host's other ranks hang below it in ring order (a chain), as in NCCL.
DoubleTree buildRankTrees(const std::vector<RankPlace>& ranks, const std::vector<int>& ring);

// The inputs of the tuner's all-reduce cost model (src/algo/tuner.h) for these ranks, this ring
// and these trees: the ring's and the deeper tree's latencies, and the slowest hop's bandwidth.
// Same inputs, same answer on every rank.
AllReduceModel allReduceModel(const std::vector<RankPlace>& ranks, const ChannelPlan& ring, const DoubleTree& trees);

}  // namespace chorus::topo
