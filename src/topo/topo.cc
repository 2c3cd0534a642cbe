#include "src/topo/topo.h"

#include <hwloc.h>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "src/common/os.h"

namespace chorus::topo {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

std::string busIdOf(const hwloc_obj_t o) {
  const auto& p = o->attr->pcidev;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", p.domain, p.bus, p.dev, p.func);
  return buf;
}

bool isNvidiaGpu(const hwloc_obj_t o) {
  const auto& p = o->attr->pcidev;
  return p.vendor_id == 0x10de && (p.class_id == 0x0300 || p.class_id == 0x0302);
}

bool isNetworkOsdev(const hwloc_obj_t c) {
  return c->type == HWLOC_OBJ_OS_DEVICE &&
         (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK || c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS);
}

// Where a PCI device sits: its bridges, host bridge, NUMA node and package.
Device deviceOf(hwloc_topology_t t, hwloc_obj_t o) {
  Device d;
  d.busId = busIdOf(o);
  d.vendor = o->attr->pcidev.vendor_id;
  d.device = o->attr->pcidev.device_id;
  d.classId = o->attr->pcidev.class_id;
  for (hwloc_obj_t a = o->parent; a && a->type == HWLOC_OBJ_BRIDGE; a = a->parent) {
    if (a->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
      d.hostBridge = static_cast<int64_t>(a->gp_index);
      break;
    }
    char buf[24];
    std::snprintf(buf, sizeof(buf), "%04x:%02x", a->attr->bridge.downstream.pci.domain,
                  a->attr->bridge.downstream.pci.secondary_bus);
    d.switches.push_back(buf);
  }
  hwloc_obj_t cpuSide = hwloc_get_non_io_ancestor_obj(t, o);
  if (cpuSide && cpuSide->nodeset && hwloc_bitmap_weight(cpuSide->nodeset) == 1) {
    hwloc_obj_t node =
        hwloc_get_numanode_obj_by_os_index(t, static_cast<unsigned>(hwloc_bitmap_first(cpuSide->nodeset)));
    if (node) d.numa = static_cast<int>(node->logical_index);
  }
  if (cpuSide) {
    hwloc_obj_t pkg =
        cpuSide->type == HWLOC_OBJ_PACKAGE ? cpuSide : hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, cpuSide);
    if (pkg) d.package = static_cast<int>(pkg->logical_index);
  }
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
    if (c->type == HWLOC_OBJ_OS_DEVICE && c->name) d.names.push_back(c->name);
  }
  d.linkGBs = o->attr->pcidev.linkspeed > 0 ? o->attr->pcidev.linkspeed : 0;
  return d;
}

// An NVSwitch in a distance matrix: hwloc's NVML backend adds each switch a GPU's links reach as
// its PCI function (class 0680, NVIDIA), subtype "NVSwitch".
bool isNvSwitch(hwloc_obj_t o) {
  if (!o || o->type != HWLOC_OBJ_PCI_DEVICE) return false;
  if (o->subtype && std::strcmp(o->subtype, "NVSwitch") == 0) return true;
  return o->attr->pcidev.vendor_id == 0x10de && (o->attr->pcidev.class_id >> 8) == 0x06;
}

// A live NIC's port speed from sysfs (Mb/s there), GB/s; 0 when the interface does not say.
double portSpeedGBs(const Device& nic) {
  for (const std::string& name : nic.names) {
    std::ifstream f("/sys/class/net/" + name + "/speed");
    long mbps = 0;
    if (f >> mbps && mbps > 0) return mbps / 8000.0;
  }
  return 0;
}

// The GPU (index into m.gpus) an object of a distance matrix stands for, or -1.
int gpuIndexOf(const Machine& m, hwloc_obj_t o) {
  while (o && o->type == HWLOC_OBJ_OS_DEVICE) o = o->parent;
  if (!o || o->type != HWLOC_OBJ_PCI_DEVICE) return -1;
  const std::string id = busIdOf(o);
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    if (m.gpus[i].busId == id) return static_cast<int>(i);
  }
  return -1;
}

// Per link class, in enum order: its name, the cost of a ring hop over it (lower is better), and
// an estimate of its bandwidth in GB/s for the tuner.
struct LinkInfo {
  const char* name;
  int cost;
  double bwGBs;
};
constexpr LinkInfo kLinks[] = {
    {"NVLink", 0, 20},         {"same PCI switch", 1, 24}, {"same host bridge", 2, 20},
    {"same NUMA node", 3, 16}, {"same package", 4, 12},    {"across sockets", 8, 10},
};
const LinkInfo& linkInfo(LinkClass c) { return kLinks[static_cast<int>(c)]; }

}  // namespace

const char* linkClassName(LinkClass c) { return linkInfo(c).name; }

namespace {

// A file CHORUS_TOPO_DUMP_FILE wrote: the machine of the host with this host's name, else of the
// first host (a dump from one machine, replayed elsewhere).
Result<Machine> machineFromDump(const std::string& path, const std::string& origin, const std::string& text) {
  const nlohmann::json dump = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (dump.is_discarded() || !dump.is_object() || !dump.contains("hosts") || !dump["hosts"].is_array() ||
      dump["hosts"].empty()) {
    return invalidArgument(path + " (" + origin +
                           ") is JSON but not a topology CHORUS_TOPO_DUMP_FILE wrote: give that, or an hwloc XML file");
  }
  const std::string self = hostName();
  const nlohmann::json* chosen = &dump["hosts"][0];
  for (const auto& h : dump["hosts"]) {
    if (h.is_object() && h.value("name", "") == self) chosen = &h;
  }
  if (!chosen->is_object() || !chosen->contains("machine") || !(*chosen)["machine"].is_string()) {
    return invalidArgument(path + " (" + origin +
                           "): its hosts carry no \"machine\" description (written by an older Chorus); dump it again");
  }
  auto m = parseMachine((*chosen)["machine"].get<std::string>());
  if (!m.isOk()) return invalidArgument(path + " (" + origin + "): " + m.status().message());
  return m;
}

}  // namespace

Result<Machine> detect(const std::string& xmlPath, const std::string& origin) {
  // What a file that is there but is no topology gets told.
  const auto notATopology = [&](const std::string& why) {
    return invalidArgument(xmlPath + " (" + origin + ") " + why +
                           ": give an hwloc XML file (lstopo FILE.xml) or a CHORUS_TOPO_DUMP_FILE dump");
  };
  if (!xmlPath.empty()) {
    std::ifstream f(xmlPath);
    if (!f) {
      return invalidArgument("cannot read " + xmlPath + " (" + origin + "): " + std::strerror(errno) +
                             "; check the path");
    }
    std::stringstream text;
    text << f.rdbuf();
    if (f.bad()) return invalidArgument("cannot read " + xmlPath + " (" + origin + "): " + std::strerror(errno));
    const std::string s = text.str();
    const size_t first = s.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return notATopology("is empty");
    if (s[first] == '{') return machineFromDump(xmlPath, origin, s);
    if (s[first] != '<') return notATopology("is neither XML nor JSON");
  }
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return systemError("hwloc_topology_init failed");
  Topology t(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  // The components that open a GPU vendor's runtime stay out: OpenCL's (NVIDIA's ICD loads
  // libcuda), CUDA's, Level Zero's, ROCm SMI's and GL's. A host-only job must never load the CUDA
  // driver (src/device/cuda.h), and GPUs are found as PCI devices anyway; NVML's NVLink matrix stays.
  for (const char* c : {"opencl", "cuda", "levelzero", "rsmi", "gl"}) {
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, c);
  }
  // The file was read above, so hwloc refusing it means its XML is not a topology hwloc can load.
  if (!xmlPath.empty() && hwloc_topology_set_xml(raw, xmlPath.c_str()) != 0) {
    return notATopology("is not an hwloc topology (hwloc could not parse its XML)");
  }
  if (hwloc_topology_load(raw) != 0) {
    if (!xmlPath.empty()) return notATopology("is not an hwloc topology (hwloc could not load it)");
    return systemError("hwloc could not load the topology of this machine");
  }
  Machine m;
  m.packages = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PACKAGE);
  m.numaNodes = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_NUMANODE);
  m.cores = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_CORE);
  m.pus = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PU);
  for (hwloc_obj_type_t t : {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L4CACHE}) {
    const int n = hwloc_get_nbobjs_by_type(raw, t);
    if (n <= 0) break;
    m.caches.push_back(n);
    m.cacheBytes.push_back(hwloc_get_obj_by_type(raw, t, 0)->attr->cache.size);
  }
  for (hwloc_obj_t o = hwloc_get_next_pcidev(raw, nullptr); o; o = hwloc_get_next_pcidev(raw, o)) {
    bool network = (o->attr->pcidev.class_id >> 8) == 0x02 || o->attr->pcidev.class_id == 0x0c06;  // net / IB
    for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) network = network || isNetworkOsdev(c);
    if (isNvidiaGpu(o)) {
      m.gpus.push_back(deviceOf(raw, o));
    } else if (network) {
      m.nics.push_back(deviceOf(raw, o));
    }
  }
  // Network interfaces that are not PCI functions (virtual devices): NICs without a bus id.
  for (hwloc_obj_t o = hwloc_get_next_osdev(raw, nullptr); o; o = hwloc_get_next_osdev(raw, o)) {
    if (!isNetworkOsdev(o) || (o->parent && o->parent->type == HWLOC_OBJ_PCI_DEVICE)) continue;
    Device d;
    if (o->name) d.names.push_back(o->name);
    m.nics.push_back(d);
  }
  if (xmlPath.empty()) {
    for (int i = 0; i < m.numaNodes; ++i) {
      hwloc_obj_t node = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
      std::vector<int> cpus;
      if (node && node->cpuset) {
        for (int c = hwloc_bitmap_first(node->cpuset); c >= 0; c = hwloc_bitmap_next(node->cpuset, c)) {
          cpus.push_back(c);
        }
      }
      m.numaCpus.push_back(std::move(cpus));
    }
  }
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_name(raw, "NVLinkBandwidth", &nr, &dist, 0) == 0 && nr > 0 && dist) {
    // GPU-to-GPU links, and GPU-to-switch links summed per GPU (the matrix is heterogeneous on
    // NVSwitch machines: GPUs' OS devices, then the switches' PCI functions).
    m.nvlink.assign(m.gpus.size(), std::vector<uint64_t>(m.gpus.size(), 0));
    std::vector<uint64_t> toSwitches(m.gpus.size(), 0);
    for (unsigned a = 0; a < dist->nbobjs; ++a) {
      const int ga = gpuIndexOf(m, dist->objs[a]);
      if (ga < 0) continue;
      for (unsigned b = 0; b < dist->nbobjs; ++b) {
        const uint64_t v = dist->values[a * dist->nbobjs + b];
        const int gb = gpuIndexOf(m, dist->objs[b]);
        if (gb >= 0 && ga != gb) {
          m.nvlink[ga][gb] = v;
        } else if (gb < 0 && isNvSwitch(dist->objs[b])) {
          toSwitches[ga] += v;
        }
      }
    }
    if (std::any_of(toSwitches.begin(), toSwitches.end(), [](uint64_t v) { return v > 0; })) {
      m.nvswitch = std::move(toSwitches);
    }
    hwloc_distances_release(raw, dist);
  }
  if (xmlPath.empty()) {
    // A NIC moves no more than its port or its PCIe link allows: the slower of those known.
    for (Device& nic : m.nics) {
      const double port = portSpeedGBs(nic);
      if (port > 0) nic.linkGBs = nic.linkGBs > 0 ? std::min(nic.linkGBs, port) : port;
    }
  }
  if (xmlPath.empty()) orderGpusAsCuda(m, cudaVisibleBusIds());
  return m;
}

LinkClass linkClass(const Device& a, const Device& b) {
  for (const auto& s : a.switches) {
    if (std::find(b.switches.begin(), b.switches.end(), s) != b.switches.end()) return LinkClass::kSameSwitch;
  }
  if (a.hostBridge >= 0 && a.hostBridge == b.hostBridge) return LinkClass::kSameHostBridge;
  if (a.numa >= 0 && a.numa == b.numa) return LinkClass::kSameNuma;
  if (a.package >= 0 && a.package == b.package) return LinkClass::kSamePackage;
  return LinkClass::kCrossSocket;
}

namespace {

// NVLink bandwidth between two GPUs in the matrix's unit (MB/s): direct links (the larger of the
// two directions hwloc reports) plus the switch fabric's share.
uint64_t nvlinkBetween(const Machine& m, size_t a, size_t b) {
  uint64_t v = 0;
  if (!m.nvlink.empty()) v = std::max(m.nvlink[a][b], m.nvlink[b][a]);
  if (!m.nvswitch.empty()) v += std::min(m.nvswitch[a], m.nvswitch[b]);
  return v;
}

}  // namespace

LinkClass linkClass(const Machine& m, size_t gpuA, size_t gpuB) {
  if (nvlinkBetween(m, gpuA, gpuB) > 0) return LinkClass::kNvlink;
  return linkClass(m.gpus[gpuA], m.gpus[gpuB]);
}

double gpuPairGBs(const Machine& m, size_t gpuA, size_t gpuB) {
  if (const uint64_t nv = nvlinkBetween(m, gpuA, gpuB); nv > 0) return nv / 1000.0;
  // PCIe: the slower of the two GPUs' links (generation x width). A path between sockets also
  // crosses their interconnect, which hwloc does not describe: its estimate caps the link.
  const LinkClass k = linkClass(m.gpus[gpuA], m.gpus[gpuB]);
  const double a = m.gpus[gpuA].linkGBs;
  const double b = m.gpus[gpuB].linkGBs;
  if (a <= 0 || b <= 0) return linkInfo(k).bwGBs;
  const double link = std::min(a, b);
  return k == LinkClass::kCrossSocket ? std::min(link, linkInfo(k).bwGBs) : link;
}

std::string describe(const Machine& m) {
  std::ostringstream o;
  o << m.packages << " package(s), " << m.numaNodes << " NUMA node(s), " << m.cores << " cores, " << m.pus
    << " hardware threads, " << m.gpus.size() << " NVIDIA GPU(s), " << m.nics.size() << " NIC(s)\n";
  if (!m.caches.empty()) {
    o << "caches:";
    for (size_t l = 0; l < m.caches.size(); ++l) {
      o << (l ? "," : "") << " " << m.caches[l] << " x L" << l + 1 << " " << m.cacheBytes[l] / 1024 << " KiB";
    }
    o << "\n";
  }
  auto where = [](const Device& d) {
    std::ostringstream w;
    w << (d.busId.empty() ? "(not PCI)" : d.busId) << " numa " << d.numa << " package " << d.package;
    if (!d.switches.empty()) w << " bridge " << d.switches.front();
    if (d.hostBridge >= 0) w << " host-bridge #" << d.hostBridge;
    if (d.linkGBs > 0) {
      char gbs[32];
      std::snprintf(gbs, sizeof(gbs), " link %.1f GB/s", d.linkGBs);
      w << gbs;
    }
    for (const auto& n : d.names) w << " " << n;
    return w.str();
  };
  for (size_t i = 0; i < m.gpus.size(); ++i) o << "GPU " << i << ": " << where(m.gpus[i]) << "\n";
  for (size_t i = 0; i < m.nics.size(); ++i) o << "NIC " << i << ": " << where(m.nics[i]) << "\n";
  for (size_t a = 0; a < m.gpus.size(); ++a) {
    for (size_t b = a + 1; b < m.gpus.size(); ++b) {
      o << "GPU " << a << " - GPU " << b << ": " << linkClassName(linkClass(m, a, b));
      if (nvlinkBetween(m, a, b) > 0) {
        const bool viaSwitch = !m.nvswitch.empty() && m.nvswitch[a] > 0 && m.nvswitch[b] > 0;
        o << (viaSwitch ? " through NVSwitch" : "");
      }
      char gbs[32];
      std::snprintf(gbs, sizeof(gbs), ", ~%.0f GB/s", gpuPairGBs(m, a, b));
      o << gbs << "\n";
    }
  }
  return o.str();
}

int hopCost(LinkClass c) { return linkInfo(c).cost; }

namespace {

int numaOf(const Machine& m, const RankPlace& r) { return r.gpu >= 0 ? m.gpus[r.gpu].numa : r.numa; }

// One hop inside a host: GPU ranks by the link between their GPUs (a shared GPU costs nothing);
// CPU ranks by whether they share a NUMA node.
int pairCost(const Machine& m, const RankPlace& a, const RankPlace& b) {
  if (a.gpu >= 0 && b.gpu >= 0) return a.gpu == b.gpu ? 0 : hopCost(linkClass(m, a.gpu, b.gpu));
  const int na = numaOf(m, a);
  const int nb = numaOf(m, b);
  if (na < 0 || nb < 0) return hopCost(LinkClass::kSameNuma);
  return na == nb ? 0 : hopCost(LinkClass::kCrossSocket);
}

// The cost of reaching one NIC from a rank: by PCI locality for a GPU rank, by NUMA node for a
// CPU rank.
int nicCostOf(const Machine& m, const Device& nic, const RankPlace& r) {
  if (r.gpu >= 0) return hopCost(linkClass(nic, m.gpus[r.gpu]));
  const int n = numaOf(m, r);
  if (n < 0 || nic.numa < 0) return hopCost(LinkClass::kSameNuma);
  return n == nic.numa ? 0 : hopCost(LinkClass::kCrossSocket);
}

// Entering or leaving the host at this rank: the cost to the nearest NIC (0 without NICs).
int nicCost(const Machine& m, const RankPlace& r) {
  int best = -1;
  for (const Device& nic : m.nics) {
    const int c = nicCostOf(m, nic, r);
    if (best < 0 || c < best) best = c;
  }
  return best < 0 ? 0 : best;
}

// The order of one host's ranks: a cycle when it is the only host, otherwise a path whose ends
// are the host's way in and out.
std::vector<int> orderHost(const std::vector<int>& members, const std::vector<RankPlace>& ranks, const Machine& m,
                           bool cycle) {
  auto cost = [&](const std::vector<int>& o) {
    int c = 0;
    for (size_t i = 0; i + 1 < o.size(); ++i) c += pairCost(m, ranks[o[i]], ranks[o[i + 1]]);
    if (cycle && o.size() > 2) c += pairCost(m, ranks[o.back()], ranks[o.front()]);
    if (!cycle) c += nicCost(m, ranks[o.front()]) + nicCost(m, ranks[o.back()]);
    return c;
  };
  std::vector<int> best = members;  // sorted by rank
  if (members.size() <= 2) return best;
  if (members.size() <= 8) {
    // Every order (a cycle keeps its lowest rank first: rotations are the same ring); ties keep
    // the lexicographically first, so every rank picks the same.
    std::vector<int> o = members;
    int bestCost = cost(o);
    auto begin = cycle ? o.begin() + 1 : o.begin();
    while (std::next_permutation(begin, o.end())) {
      const int c = cost(o);
      if (c < bestCost) {
        bestCost = c;
        best = o;
      }
    }
    return best;
  }
  // Nearest neighbour from the lowest rank (a path starts at the rank nearest a NIC).
  std::vector<int> left = members;
  std::vector<int> o;
  size_t start = 0;
  if (!cycle) {
    for (size_t i = 1; i < left.size(); ++i) {
      if (nicCost(m, ranks[left[i]]) < nicCost(m, ranks[left[start]])) start = i;
    }
  }
  o.push_back(left[start]);
  left.erase(left.begin() + static_cast<std::ptrdiff_t>(start));
  while (!left.empty()) {
    size_t next = 0;
    for (size_t i = 1; i < left.size(); ++i) {
      if (pairCost(m, ranks[o.back()], ranks[left[i]]) < pairCost(m, ranks[o.back()], ranks[left[next]])) next = i;
    }
    o.push_back(left[next]);
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(next));
  }
  return o;
}

}  // namespace

std::vector<int> buildRing(const std::vector<RankPlace>& ranks, const std::vector<Machine>& hosts, int channel) {
  // Hosts in the order of their lowest rank; each host's ranks in rank order to start with.
  std::vector<int> hostOrder;
  std::vector<std::vector<int>> members(hosts.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int h = ranks[r].host;
    if (members[h].empty()) hostOrder.push_back(h);
    members[h].push_back(static_cast<int>(r));
  }
  std::vector<int> ring;
  const bool cycle = hostOrder.size() == 1;
  for (int h : hostOrder) {
    const std::vector<int> o = orderHost(members[h], ranks, hosts[h], cycle);
    ring.insert(ring.end(), o.begin(), o.end());
  }
  if (channel % 2 == 1) std::reverse(ring.begin(), ring.end());
  return ring;
}

Result<Machine> detectCached(const std::string& xmlPath) {
  static std::mutex mu;
  static std::map<std::string, Machine> cache;
  std::lock_guard<std::mutex> g(mu);
  auto it = cache.find(xmlPath);
  if (it != cache.end()) return it->second;
  CHORUS_ASSIGN_OR_RETURN(Machine m, detect(xmlPath));
  cache[xmlPath] = m;
  return m;
}

namespace {

void putDevice(std::ostringstream& o, char kind, const Device& d) {
  o << "dev " << kind << " " << (d.busId.empty() ? "-" : d.busId) << " " << d.vendor << " " << d.device << " "
    << d.classId << " " << d.numa << " " << d.package << " " << d.hostBridge << " " << d.switches.size();
  for (const auto& sw : d.switches) o << " " << sw;
  o << " " << d.names.size();
  for (const auto& n : d.names) o << " " << n;
  o << " " << d.linkGBs << "\n";
}

}  // namespace

std::string serialize(const Machine& m) {
  std::ostringstream o;
  o << "machine " << m.packages << " " << m.numaNodes << " " << m.cores << " " << m.pus << "\n";
  for (size_t l = 0; l < m.caches.size(); ++l)
    o << "cache " << l + 1 << " " << m.caches[l] << " " << m.cacheBytes[l] << "\n";
  for (const auto& g : m.gpus) putDevice(o, 'g', g);
  for (const auto& n : m.nics) putDevice(o, 'n', n);
  if (!m.nvlink.empty()) {
    o << "nvlink " << m.nvlink.size();
    for (const auto& row : m.nvlink) {
      for (uint64_t v : row) o << " " << v;
    }
    o << "\n";
  }
  if (!m.nvswitch.empty()) {
    o << "nvswitch " << m.nvswitch.size();
    for (uint64_t v : m.nvswitch) o << " " << v;
    o << "\n";
  }
  return o.str();
}

Result<Machine> parseMachine(const std::string& text) {
  auto bad = [](const std::string& why) { return invalidArgument("malformed machine description: " + why); };
  std::istringstream in(text);
  std::string line;
  Machine m;
  bool header = false;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string kind;
    if (!(l >> kind)) continue;
    if (kind == "machine") {
      constexpr int kMaxCount = 1 << 20;
      if (!(l >> m.packages >> m.numaNodes >> m.cores >> m.pus) || m.packages < 0 || m.numaNodes < 0 || m.cores < 0 ||
          m.pus < 0 || m.packages > kMaxCount || m.numaNodes > kMaxCount || m.cores > kMaxCount || m.pus > kMaxCount) {
        return bad("machine line: " + line);
      }
      header = true;
    } else if (kind == "cache") {
      size_t level = 0;
      int count = 0;
      uint64_t bytes = 0;
      if (!(l >> level >> count >> bytes) || level != m.caches.size() + 1) return bad("cache line: " + line);
      m.caches.push_back(count);
      m.cacheBytes.push_back(bytes);
    } else if (kind == "dev") {
      char k = 0;
      Device d;
      size_t nsw = 0;
      size_t nnames = 0;
      if (!(l >> k >> d.busId >> d.vendor >> d.device >> d.classId >> d.numa >> d.package >> d.hostBridge >> nsw) ||
          (k != 'g' && k != 'n') || nsw > 64) {
        return bad("device line: " + line);
      }
      if (d.busId == "-") d.busId.clear();
      d.switches.resize(nsw);
      for (auto& sw : d.switches) {
        if (!(l >> sw)) return bad("device line: " + line);
      }
      if (!(l >> nnames) || nnames > 64) return bad("device line: " + line);
      d.names.resize(nnames);
      for (auto& n : d.names) {
        if (!(l >> n)) return bad("device line: " + line);
      }
      // Its link speed (absent from descriptions of older versions).
      if (!(l >> d.linkGBs) || d.linkGBs < 0) d.linkGBs = 0;
      (k == 'g' ? m.gpus : m.nics).push_back(std::move(d));
    } else if (kind == "nvlink") {
      size_t n = 0;
      if (!(l >> n) || n != m.gpus.size()) return bad("nvlink matrix size");
      m.nvlink.assign(n, std::vector<uint64_t>(n, 0));
      for (auto& row : m.nvlink) {
        for (auto& v : row) {
          if (!(l >> v)) return bad("nvlink matrix");
        }
      }
    } else if (kind == "nvswitch") {
      size_t n = 0;
      if (!(l >> n) || n != m.gpus.size()) return bad("nvswitch list size");
      m.nvswitch.assign(n, 0);
      for (auto& v : m.nvswitch) {
        if (!(l >> v)) return bad("nvswitch list");
      }
    } else {
      return bad("unknown line: " + line);
    }
  }
  if (!header) return bad("no machine line");
  // Every index a device carries must point into what the machine line declares, and the NVLink
  // matrix must cover every GPU (it may come before GPUs declared later).
  for (const auto* list : {&m.gpus, &m.nics}) {
    for (const Device& d : *list) {
      if (d.numa < -1 || d.numa >= std::max(m.numaNodes, 1) || d.package < -1 || d.package >= std::max(m.packages, 1)) {
        return bad("device " + d.busId + " lies in NUMA node " + std::to_string(d.numa) + " / package " +
                   std::to_string(d.package) + ", outside the machine's " + std::to_string(m.numaNodes) + " / " +
                   std::to_string(m.packages));
      }
    }
  }
  if (!m.nvlink.empty() && m.nvlink.size() != m.gpus.size()) return bad("nvlink matrix size");
  if (!m.nvswitch.empty() && m.nvswitch.size() != m.gpus.size()) return bad("nvswitch list size");
  return m;
}

int boundNuma(const Machine& m) {
  if (m.numaCpus.empty()) return -1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  for (size_t n = 0; n < m.numaCpus.size(); ++n) {
    int inside = 0;
    for (int c : m.numaCpus[n]) inside += (c < CPU_SETSIZE && CPU_ISSET(c, &set)) ? 1 : 0;
    if (inside > 0 && inside == CPU_COUNT(&set)) return static_cast<int>(n);
  }
  return -1;
}

RankPlace placeRank(const Machine& host, int localRank, int localSize, int boundNumaNode) {
  RankPlace r;
  if (!host.gpus.empty()) {
    r.gpu = localRank % static_cast<int>(host.gpus.size());
    r.numa = host.gpus[r.gpu].numa;
  } else if (boundNumaNode >= 0) {
    r.numa = boundNumaNode;
  } else if (host.numaNodes > 0 && localSize > 0) {
    r.numa = localRank * host.numaNodes / localSize;
  }
  return r;
}

int nearestNic(const Machine& m, const RankPlace& r) {
  int best = -1;
  int bestCost = 0;
  for (size_t i = 0; i < m.nics.size(); ++i) {
    const int c = nicCostOf(m, m.nics[i], r);
    if (best < 0 || c < bestCost) {
      best = static_cast<int>(i);
      bestCost = c;
    }
  }
  return best;
}

double linkBwGBs(LinkClass c) { return linkInfo(c).bwGBs; }

namespace {

constexpr double kNetworkBwGBs = 1.25;  // 10 Gb/s Ethernet: hwloc does not say how fast a NIC is
constexpr double kNetworkLatencyUs = 20;
constexpr double kLocalLatencyUs = 1;

// The class of one hop inside a host (as pairCost judges it).
LinkClass hopClass(const Machine& m, const RankPlace& a, const RankPlace& b) {
  if (a.gpu >= 0 && b.gpu >= 0) return a.gpu == b.gpu ? LinkClass::kNvlink : linkClass(m, a.gpu, b.gpu);
  const int na = numaOf(m, a);
  const int nb = numaOf(m, b);
  return na >= 0 && na == nb ? LinkClass::kSameNuma : LinkClass::kCrossSocket;
}

// Among the NICs nearest a rank, the one channel c uses, so channels spread over equal NICs.
int nicForChannel(const Machine& m, const RankPlace& r, int channel) {
  const int best = nearestNic(m, r);
  if (best < 0) return -1;
  const int cost = nicCostOf(m, m.nics[best], r);
  std::vector<int> equal;
  for (size_t i = 0; i < m.nics.size(); ++i) {
    if (nicCostOf(m, m.nics[i], r) == cost) equal.push_back(static_cast<int>(i));
  }
  return equal[static_cast<size_t>(channel) % equal.size()];
}

}  // namespace

std::vector<ChannelPlan> buildChannels(const std::vector<RankPlace>& ranks, const std::vector<Machine>& hosts,
                                       int nChannels) {
  std::vector<ChannelPlan> plans;
  const size_t n = ranks.size();
  for (int c = 0; c < nChannels; ++c) {
    ChannelPlan p;
    p.ring = buildRing(ranks, hosts, c);
    p.nicOfRank.assign(n, -1);
    bool network = false;
    LinkClass worst = LinkClass::kNvlink;
    // The slowest hop by its bandwidth: a host's own link (hopGBs), or the network between the
    // two NICs (the slower port where both are known).
    double slowest = 0;
    for (size_t i = 0; i < n && n > 1; ++i) {
      const int a = p.ring[i];
      const int b = p.ring[(i + 1) % n];
      double gbs = 0;
      std::string name;
      if (ranks[a].host != ranks[b].host) {
        network = true;
        p.nicOfRank[a] = nicForChannel(hosts[ranks[a].host], ranks[a], c);
        p.nicOfRank[b] = nicForChannel(hosts[ranks[b].host], ranks[b], c);
        const double na = p.nicOfRank[a] >= 0 ? hosts[ranks[a].host].nics[p.nicOfRank[a]].linkGBs : 0;
        const double nb = p.nicOfRank[b] >= 0 ? hosts[ranks[b].host].nics[p.nicOfRank[b]].linkGBs : 0;
        gbs = na > 0 && nb > 0 ? std::min(na, nb) : kNetworkBwGBs;
        name = "network";
      } else {
        const Machine& m = hosts[ranks[a].host];
        const LinkClass k = hopClass(m, ranks[a], ranks[b]);
        if (hopCost(k) > hopCost(worst)) worst = k;
        const bool twoGpus = ranks[a].gpu >= 0 && ranks[b].gpu >= 0 && ranks[a].gpu != ranks[b].gpu;
        gbs = twoGpus ? gpuPairGBs(m, ranks[a].gpu, ranks[b].gpu) : linkBwGBs(k);
        name = linkClassName(k);
      }
      if (slowest == 0 || gbs < slowest) {
        slowest = gbs;
        p.bottleneck = name;
      }
    }
    if (slowest == 0) {
      p.bottleneck = linkClassName(worst);
      slowest = linkBwGBs(worst);
    }
    p.busBwGBs = slowest;
    p.hopLatencyUs = network ? kNetworkLatencyUs : kLocalLatencyUs;
    plans.push_back(std::move(p));
  }
  return plans;
}

namespace {

// Parent of node r in the in-order binary tree over n nodes rooted at 0 (NCCL's btree): the
// lowest set bit of r says its level.
int btreeParent(int n, int r) {
  if (r == 0) return -1;
  int bit = 1;
  while (bit < n && !(bit & r)) bit <<= 1;
  int up = (r ^ bit) | (bit << 1);
  if (up >= n) up = r ^ bit;
  return up;
}

}  // namespace

DoubleTree buildDoubleTree(int n) {
  DoubleTree t;
  t.parent[0].resize(static_cast<size_t>(n));
  t.parent[1].resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    t.parent[0][r] = btreeParent(n, r);
    if (n % 2 == 1) {
      // Shifted by one: node r plays btree node r - 1.
      const int p = btreeParent(n, (r - 1 + n) % n);
      t.parent[1][r] = p < 0 ? -1 : (p + 1) % n;
    } else {
      // Mirrored: node r plays btree node n - 1 - r.
      const int p = btreeParent(n, n - 1 - r);
      t.parent[1][r] = p < 0 ? -1 : n - 1 - p;
    }
  }
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < n; ++r) {
      if (t.parent[k][r] < 0) t.root[k] = r;
    }
  }
  return t;
}

DoubleTree buildRankTrees(const std::vector<RankPlace>& ranks, const std::vector<int>& ring) {
  // Hosts in the order of their lowest rank (as buildRing orders them); each host's ranks in ring
  // order.
  std::vector<int> hostOrder;
  std::map<int, std::vector<int>> chain;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (chain.find(ranks[r].host) == chain.end()) {
      hostOrder.push_back(ranks[r].host);
      chain[ranks[r].host];
    }
  }
  for (int r : ring) chain[ranks[r].host].push_back(r);
  const DoubleTree nodes = buildDoubleTree(static_cast<int>(hostOrder.size()));
  DoubleTree t;
  for (int k = 0; k < 2; ++k) {
    t.parent[k].assign(ranks.size(), -1);
    for (size_t h = 0; h < hostOrder.size(); ++h) {
      const std::vector<int>& c = chain[hostOrder[h]];
      const int up = nodes.parent[k][h];
      t.parent[k][c[0]] = up < 0 ? -1 : chain[hostOrder[up]][0];
      for (size_t i = 1; i < c.size(); ++i) t.parent[k][c[i]] = c[i - 1];
    }
    t.root[k] = hostOrder.empty() ? -1 : chain[hostOrder[nodes.root[k]]][0];
  }
  return t;
}

namespace {

double hopLatencyUs(const std::vector<RankPlace>& ranks, int a, int b) {
  return ranks[a].host == ranks[b].host ? kLocalLatencyUs : kNetworkLatencyUs;
}

}  // namespace

AllReduceModel allReduceModel(const std::vector<RankPlace>& ranks, const ChannelPlan& ring, const DoubleTree& trees) {
  AllReduceModel m;
  const int n = static_cast<int>(ranks.size());
  m.nranks = n;
  m.bwGBs = ring.busBwGBs;
  if (n < 2) return m;
  double lap = 0;
  for (int i = 0; i < n; ++i) lap += hopLatencyUs(ranks, ring.ring[i], ring.ring[(i + 1) % n]);
  m.ringLatencyUs = 2.0 * (n - 1) / n * lap;
  double deepest = 0;
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < n; ++r) {
      double path = 0;
      for (int x = r, hops = 0; trees.parent[k][x] >= 0 && hops < n; x = trees.parent[k][x], ++hops) {
        path += hopLatencyUs(ranks, x, trees.parent[k][x]);
      }
      deepest = std::max(deepest, path);
    }
  }
  m.treeLatencyUs = 2 * deepest;
  return m;
}

namespace {

// "0000:04:00.0", "00000000:04:00.0" or "0000:04:00" in either case -> "0000:04:00.0"; empty if
// it is not a bus id.
std::string normalBusId(const std::string& id) {
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned dev = 0;
  unsigned func = 0;
  if (std::sscanf(id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &func) < 3) return "";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", domain, bus, dev, func);
  return buf;
}

}  // namespace

void orderGpusAsCuda(Machine& m, const std::vector<std::string>& cudaBusIds) {
  if (cudaBusIds.empty()) return;
  std::vector<Device> gpus;
  std::vector<int> from;  // index in the old m.gpus, or -1
  for (const auto& raw : cudaBusIds) {
    const std::string id = normalBusId(raw);
    int found = -1;
    for (size_t i = 0; i < m.gpus.size(); ++i) {
      if (normalBusId(m.gpus[i].busId) == id) found = static_cast<int>(i);
    }
    if (found >= 0) {
      gpus.push_back(m.gpus[found]);
    } else {
      Device d;  // visible to CUDA, unknown to hwloc: no locality
      d.busId = id.empty() ? raw : id;
      d.vendor = 0x10de;
      gpus.push_back(d);
    }
    from.push_back(found);
  }
  if (!m.nvlink.empty()) {
    std::vector<std::vector<uint64_t>> nv(gpus.size(), std::vector<uint64_t>(gpus.size(), 0));
    for (size_t a = 0; a < gpus.size(); ++a) {
      for (size_t b = 0; b < gpus.size(); ++b) {
        if (from[a] >= 0 && from[b] >= 0) nv[a][b] = m.nvlink[from[a]][from[b]];
      }
    }
    m.nvlink = std::move(nv);
  }
  if (!m.nvswitch.empty()) {
    std::vector<uint64_t> sw(gpus.size(), 0);
    for (size_t a = 0; a < gpus.size(); ++a) sw[a] = from[a] >= 0 ? m.nvswitch[from[a]] : 0;
    m.nvswitch = std::move(sw);
  }
  m.gpus = std::move(gpus);
}

std::vector<std::string> cudaVisibleBusIds() {
  // The driver API of a libcuda the program has already loaded (RTLD_NOLOAD loads nothing): a
  // host-only program never loads or initialises CUDA, and a process in which nothing loaded it has
  // no device memory yet. Then the GPUs keep hwloc's (PCI) order, which only steers where ranks are
  // placed; the answer of a loaded driver is kept (CUDA_VISIBLE_DEVICES is read once per process).
  static std::mutex mu;
  static std::vector<std::string> ids;
  static bool known = false;
  std::lock_guard<std::mutex> g(mu);
  if (known) return ids;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) return {};
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using BusIdFn = int (*)(char*, int, int);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(dlsym(lib, "cuDeviceGet"));
  auto busId = reinterpret_cast<BusIdFn>(dlsym(lib, "cuDeviceGetPCIBusId"));
  int n = 0;
  if (init && count && get && busId && init(0) == 0 && count(&n) == 0) {
    for (int i = 0; i < n; ++i) {
      int dev = 0;
      char buf[64] = {0};
      if (get(&dev, i) == 0 && busId(buf, sizeof(buf), dev) == 0) ids.emplace_back(buf);
    }
  }
  // The handle stays: the driver does not expect to be unloaded after cuInit.
  known = true;
  return ids;
}

}  // namespace chorus::topo
