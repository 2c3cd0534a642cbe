#include "src/topo/topo.h"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

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
  return d;
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

}  // namespace

const char* linkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kNvlink:
      return "NVLink";
    case LinkClass::kSameSwitch:
      return "same PCI switch";
    case LinkClass::kSameHostBridge:
      return "same host bridge";
    case LinkClass::kSameNuma:
      return "same NUMA node";
    case LinkClass::kSamePackage:
      return "same package";
    default:
      return "across sockets";
  }
}

Result<Machine> detect(const std::string& xmlPath) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return systemError("hwloc_topology_init failed");
  Topology t(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (!xmlPath.empty() && hwloc_topology_set_xml(raw, xmlPath.c_str()) != 0) {
    return invalidArgument("cannot read the hwloc XML file " + xmlPath + " (CHORUS_TOPO_FILE): check the path");
  }
  if (hwloc_topology_load(raw) != 0) {
    return systemError("hwloc could not load the topology" + (xmlPath.empty() ? "" : " from " + xmlPath));
  }
  Machine m;
  m.packages = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PACKAGE);
  m.numaNodes = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_NUMANODE);
  m.cores = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_CORE);
  m.pus = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PU);
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
  unsigned nr = 1;
  hwloc_distances_s* dist = nullptr;
  if (hwloc_distances_get_by_name(raw, "NVLinkBandwidth", &nr, &dist, 0) == 0 && nr > 0 && dist) {
    m.nvlink.assign(m.gpus.size(), std::vector<uint64_t>(m.gpus.size(), 0));
    for (unsigned a = 0; a < dist->nbobjs; ++a) {
      const int ga = gpuIndexOf(m, dist->objs[a]);
      if (ga < 0) continue;
      for (unsigned b = 0; b < dist->nbobjs; ++b) {
        const int gb = gpuIndexOf(m, dist->objs[b]);
        if (gb >= 0 && ga != gb) m.nvlink[ga][gb] = dist->values[a * dist->nbobjs + b];
      }
    }
    hwloc_distances_release(raw, dist);
  }
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

LinkClass linkClass(const Machine& m, size_t gpuA, size_t gpuB) {
  if (!m.nvlink.empty() && (m.nvlink[gpuA][gpuB] > 0 || m.nvlink[gpuB][gpuA] > 0)) return LinkClass::kNvlink;
  return linkClass(m.gpus[gpuA], m.gpus[gpuB]);
}

std::string describe(const Machine& m) {
  std::ostringstream o;
  o << m.packages << " package(s), " << m.numaNodes << " NUMA node(s), " << m.cores << " cores, " << m.pus
    << " hardware threads, " << m.gpus.size() << " NVIDIA GPU(s), " << m.nics.size() << " NIC(s)\n";
  auto where = [](const Device& d) {
    std::ostringstream w;
    w << (d.busId.empty() ? "(not PCI)" : d.busId) << " numa " << d.numa << " package " << d.package;
    if (!d.switches.empty()) w << " bridge " << d.switches.front();
    if (d.hostBridge >= 0) w << " host-bridge #" << d.hostBridge;
    for (const auto& n : d.names) w << " " << n;
    return w.str();
  };
  for (size_t i = 0; i < m.gpus.size(); ++i) o << "GPU " << i << ": " << where(m.gpus[i]) << "\n";
  for (size_t i = 0; i < m.nics.size(); ++i) o << "NIC " << i << ": " << where(m.nics[i]) << "\n";
  for (size_t a = 0; a < m.gpus.size(); ++a) {
    for (size_t b = a + 1; b < m.gpus.size(); ++b) {
      o << "GPU " << a << " - GPU " << b << ": " << linkClassName(linkClass(m, a, b));
      if (!m.nvlink.empty() && m.nvlink[a][b] > 0) o << " (" << m.nvlink[a][b] << ")";
      o << "\n";
    }
  }
  return o.str();
}

int hopCost(LinkClass c) {
  switch (c) {
    case LinkClass::kNvlink:
      return 0;
    case LinkClass::kSameSwitch:
      return 1;
    case LinkClass::kSameHostBridge:
      return 2;
    case LinkClass::kSameNuma:
      return 3;
    case LinkClass::kSamePackage:
      return 4;
    default:
      return 8;
  }
}

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

// Entering or leaving the host at this rank: the cost to the nearest NIC (0 without NICs).
int nicCost(const Machine& m, const RankPlace& r) {
  int best = -1;
  for (const Device& nic : m.nics) {
    int c;
    if (r.gpu >= 0) {
      c = hopCost(linkClass(nic, m.gpus[r.gpu]));
    } else {
      const int n = numaOf(m, r);
      c = (n < 0 || nic.numa < 0) ? hopCost(LinkClass::kSameNuma)
          : n == nic.numa         ? 0
                                  : hopCost(LinkClass::kCrossSocket);
    }
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

}  // namespace chorus::topo
