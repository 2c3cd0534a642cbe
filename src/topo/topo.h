// What a rank's machine looks like, as hwloc describes it: packages, NUMA nodes, cores, and the PCI
// devices collectives care about (GPUs and NICs) with where they hang in the PCI tree. Detected from
// the live machine or from an hwloc XML file (CHORUS_TOPO_FILE, or tests replaying real machines).
// The ring and tree builders take these records as plain data: no hwloc past detect().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/core/status.h"

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
};

struct Machine {
  int packages = 0;
  int numaNodes = 0;
  int cores = 0;
  int pus = 0;
  std::vector<Device> gpus;  // class 0300/0302, vendor 0x10de, in PCI order
  std::vector<Device> nics;  // Ethernet and RDMA devices (an ib0 and its mlx5_0 are one NIC)
  // GPU x GPU NVLink bandwidth (hwloc's "NVLinkBandwidth" matrix, its unit), in `gpus` order;
  // empty when hwloc reports none.
  std::vector<std::vector<uint64_t>> nvlink;
};

// The live machine (xmlPath empty) or the machine an hwloc XML file describes.
Result<Machine> detect(const std::string& xmlPath);

LinkClass linkClass(const Machine& m, size_t gpuA, size_t gpuB);
LinkClass linkClass(const Device& a, const Device& b);

// Several lines a person can read: counts, then each GPU and NIC with its locality.
std::string describe(const Machine& m);

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

}  // namespace chorus::topo
