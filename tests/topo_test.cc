// Topology detection against real machines' hwloc XML files (tests/data/topologies, from hwloc's
// own test data) and against the live machine.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/topo/topo.h"

using namespace chorus::topo;
using chorus::AllReduceModel;
using chorus::ringAllReduceUs;
using chorus::treeAllReduceUs;
using chorus::treeMaxBytes;

namespace {

Machine load(const std::string& file) {
  auto m = detect(std::string(CHORUS_TOPO_DATA) + "/" + file);
  INFO(m.status().message());
  REQUIRE(m.isOk());
  return m.value();
}

bool hasName(const Device& d, const std::string& n) {
  for (const auto& x : d.names) {
    if (x == n) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a 2-socket Xeon with three class-0302 GPUs and a ConnectX-2", "[topo]") {
  Machine m = load("24em64t-2n6c2t-pci.xml");
  CHECK(m.packages == 2);
  CHECK(m.numaNodes == 2);
  CHECK(m.cores == 12);
  CHECK(m.pus == 24);
  REQUIRE(m.gpus.size() == 3);
  for (const auto& g : m.gpus) {
    CHECK(g.vendor == 0x10de);
    CHECK(g.classId == 0x0302);  // 3D controllers, with no OS device: found by class alone
  }
  CHECK(m.gpus[0].numa == 0);
  CHECK(m.gpus[1].numa == 1);
  CHECK(linkClass(m, 1, 2) == LinkClass::kSameHostBridge);
  CHECK(linkClass(m, 0, 1) == LinkClass::kCrossSocket);
  REQUIRE(m.nics.size() == 3);
  // ib0 and mlx4_0 are one port of one PCI function: one NIC, not two.
  int ib = 0;
  for (const auto& n : m.nics) {
    if (hasName(n, "mlx4_0")) {
      ++ib;
      CHECK(hasName(n, "ib0"));
      CHECK(n.numa == 0);
    }
  }
  CHECK(ib == 1);
}

TEST_CASE("a 2-socket Xeon with a CUDA GPU next to a ConnectX", "[topo]") {
  Machine m = load("32em64t-2n8c2t-pci-normalio.xml");
  CHECK(m.packages == 2);
  CHECK(m.numaNodes == 2);
  REQUIRE(m.gpus.size() == 3);
  size_t cuda = m.gpus.size();
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    if (hasName(m.gpus[i], "cuda0")) cuda = i;
  }
  REQUIRE(cuda < m.gpus.size());
  const Device* mlx = nullptr;
  for (const auto& n : m.nics) {
    if (hasName(n, "mlx5_0")) mlx = &n;
  }
  REQUIRE(mlx != nullptr);
  CHECK(mlx->numa == m.gpus[cuda].numa);
  CHECK(linkClass(*mlx, m.gpus[cuda]) == LinkClass::kSameSwitch);
  CHECK(linkClass(*mlx, m.gpus[0]) == LinkClass::kCrossSocket);
}

TEST_CASE("4 NUMA nodes with 8 Ethernet ports over 4 host bridges and no GPU", "[topo]") {
  Machine m = load("96em64t-4n4d3ca2co-pci.xml");
  CHECK(m.numaNodes == 4);
  CHECK(m.cores == 96);
  CHECK(m.gpus.empty());
  REQUIRE(m.nics.size() == 8);
  std::set<int> numas;
  std::set<int64_t> bridges;
  for (const auto& n : m.nics) {
    numas.insert(n.numa);
    bridges.insert(n.hostBridge);
    CHECK(n.names.size() == 1);
  }
  CHECK(numas == std::set<int>{0, 1, 2, 3});
  CHECK(bridges.size() == 4);
  CHECK(linkClass(m.nics[0], m.nics[1]) == LinkClass::kSameSwitch);  // two ports of one card
  CHECK(linkClass(m.nics[0], m.nics[2]) != LinkClass::kSameSwitch);
}

TEST_CASE("POWER8 with four P100s and an NVLink bandwidth matrix", "[topo]") {
  Machine m = load("power8gpudistances.xml");
  CHECK(m.packages == 2);
  REQUIRE(m.gpus.size() == 4);
  REQUIRE(m.nvlink.size() == 4);
  CHECK(linkClass(m, 0, 1) == LinkClass::kNvlink);
  CHECK(linkClass(m, 2, 3) == LinkClass::kNvlink);
  CHECK(m.nvlink[0][1] == 40000);
  CHECK(linkClass(m, 0, 2) == LinkClass::kCrossSocket);
  CHECK(linkClass(m, 1, 3) == LinkClass::kCrossSocket);
  for (size_t i = 0; i < 4; ++i) CHECK(hasName(m.gpus[i], "cuda" + std::to_string(i)));
}

TEST_CASE("the live machine, and a file that is not there", "[topo]") {
  auto live = detect("");
  REQUIRE(live.isOk());
  CHECK(live.value().pus >= 1);
  CHECK(live.value().numaNodes >= 1);
  auto missing = detect("/nonexistent/topology.xml");
  REQUIRE(!missing.isOk());
  CHECK(missing.status().message().find("/nonexistent/topology.xml") != std::string::npos);
  CHECK(missing.status().message().find("check the path") != std::string::npos);
  // The origin named is the one the caller gives (chorus-topo's argument, not the variable).
  auto named = detect("/nonexistent/topology.xml", "the argument FILE");
  REQUIRE(!named.isOk());
  CHECK(named.status().message().find("(the argument FILE)") != std::string::npos);
  CHECK(named.status().message().find("CHORUS_TOPO_FILE") == std::string::npos);
}

TEST_CASE("a file that is there but no topology is told so, not to check its path", "[topo]") {
  char dir[] = "/tmp/chorus_topo_test.XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = std::string(dir) + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plain.txt", "this is a text file\n"},
      {"empty.xml", "  \n"},
      {"other.xml", "<?xml version=\"1.0\"?>\n<html><body>no topology</body></html>\n"},
      {"broken.xml", "<topology><object type=\"Machine\"\n"},
  };
  for (const auto& [name, text] : cases) {
    const std::string path = write(name, text);
    auto m = detect(path);
    INFO(name << ": " << (m.isOk() ? std::string("accepted") : m.status().message()));
    REQUIRE(!m.isOk());
    CHECK(m.status().message().find(path) != std::string::npos);
    CHECK(m.status().message().find("check the path") == std::string::npos);
    CHECK(m.status().message().find("hwloc XML file (lstopo FILE.xml)") != std::string::npos);
    std::remove(path.c_str());
  }
  rmdir(dir);
}

namespace {

// Every rank once; each host's ranks contiguous around the ring; the ring leaves each host once.
void checkRingShape(const std::vector<int>& ring, const std::vector<RankPlace>& ranks) {
  REQUIRE(ring.size() == ranks.size());
  std::set<int> seen(ring.begin(), ring.end());
  CHECK(seen.size() == ranks.size());
  std::set<int> hosts;
  for (const auto& r : ranks) hosts.insert(r.host);
  int crossings = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    if (ranks[ring[i]].host != ranks[ring[(i + 1) % ring.size()]].host) ++crossings;
  }
  CHECK(crossings == (hosts.size() > 1 ? static_cast<int>(hosts.size()) : 0));
}

bool adjacent(const std::vector<int>& ring, int a, int b) {
  for (size_t i = 0; i < ring.size(); ++i) {
    const int x = ring[i];
    const int y = ring[(i + 1) % ring.size()];
    if ((x == a && y == b) || (x == b && y == a)) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("rings on one host put NVLink pairs next to each other", "[topo]") {
  Machine m = load("power8gpudistances.xml");
  // Ranks 0..3 drive GPUs 0, 2, 1, 3: rank order alone would cross the sockets four times.
  std::vector<RankPlace> ranks = {{0, 0, -1}, {0, 2, -1}, {0, 1, -1}, {0, 3, -1}};
  const auto ring = buildRing(ranks, {m}, 0);
  checkRingShape(ring, ranks);
  CHECK(adjacent(ring, 0, 2));  // GPUs 0 and 1
  CHECK(adjacent(ring, 1, 3));  // GPUs 2 and 3
  auto reversed = buildRing(ranks, {m}, 1);
  std::reverse(reversed.begin(), reversed.end());
  CHECK(reversed == ring);
}

TEST_CASE("rings across hosts enter and leave each host next to its NIC", "[topo]") {
  Machine m = load("24em64t-2n6c2t-pci.xml");
  // Two such hosts, three GPU ranks each, GPUs in reverse order of rank.
  std::vector<RankPlace> ranks;
  for (int h = 0; h < 2; ++h) {
    for (int g = 2; g >= 0; --g) ranks.push_back({h, g, -1});
  }
  const auto ring = buildRing(ranks, {m, m}, 0);
  checkRingShape(ring, ranks);
  // GPU 0 shares NUMA node 0 and a host bridge with the NICs: the ring crosses between hosts at
  // it, so it is at one end of its host's stretch; GPUs 1 and 2 (one host bridge) are adjacent.
  for (int h = 0; h < 2; ++h) {
    const int gpu0 = h * 3 + 2;
    const int gpu1 = h * 3 + 1;
    const int gpu2 = h * 3 + 0;
    size_t pos = 0;
    while (ring[pos] != gpu0) ++pos;
    const int before = ring[(pos + ring.size() - 1) % ring.size()];
    const int after = ring[(pos + 1) % ring.size()];
    CHECK((ranks[before].host != h || ranks[after].host != h));
    CHECK(adjacent(ring, gpu1, gpu2));
  }
}

TEST_CASE("rings of CPU ranks group each NUMA node", "[topo]") {
  Machine m = load("96em64t-4n4d3ca2co-pci.xml");
  std::vector<RankPlace> ranks;
  for (int r = 0; r < 8; ++r) ranks.push_back({0, -1, r % 4});  // unbound ranks spread round-robin
  const auto ring = buildRing(ranks, {m}, 0);
  checkRingShape(ring, ranks);
  int changes = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    if (ranks[ring[i]].numa != ranks[ring[(i + 1) % ring.size()]].numa) ++changes;
  }
  CHECK(changes == 4);  // each NUMA node entered once
}

TEST_CASE("rings over uneven hosts and many ranks a host", "[topo]") {
  Machine m = load("96em64t-4n4d3ca2co-pci.xml");
  std::vector<RankPlace> ranks = {{0, -1, 0}, {1, -1, 2}, {0, -1, 1}};  // 2 + 1, interleaved ranks
  checkRingShape(buildRing(ranks, {m, m}, 0), ranks);
  std::vector<RankPlace> many;
  for (int r = 0; r < 24; ++r) many.push_back({r / 12, -1, r % 4});  // 2 hosts x 12: nearest neighbour
  const auto ring = buildRing(many, {m, m}, 0);
  checkRingShape(ring, many);
  int changes = 0;
  for (size_t i = 0; i + 1 < ring.size(); ++i) {
    if (many[ring[i]].host == many[ring[i + 1]].host && many[ring[i]].numa != many[ring[i + 1]].numa) ++changes;
  }
  CHECK(changes == 6);  // 3 NUMA changes inside each host
}

TEST_CASE("a machine description survives its text form", "[topo]") {
  for (const char* file : {"power8gpudistances.xml", "32em64t-2n8c2t-pci-normalio.xml", "24em64t-2n6c2t-pci.xml",
                           "96em64t-4n4d3ca2co-pci.xml"}) {
    INFO(file);
    const Machine m = load(file);
    auto back = parseMachine(serialize(m));
    REQUIRE(back.isOk());
    const Machine& b = back.value();
    CHECK(b.packages == m.packages);
    CHECK(b.numaNodes == m.numaNodes);
    CHECK(b.cores == m.cores);
    CHECK(b.pus == m.pus);
    CHECK(b.nvlink == m.nvlink);
    REQUIRE(b.gpus.size() == m.gpus.size());
    REQUIRE(b.nics.size() == m.nics.size());
    for (size_t i = 0; i < m.gpus.size(); ++i) {
      CHECK(b.gpus[i].busId == m.gpus[i].busId);
      CHECK(b.gpus[i].switches == m.gpus[i].switches);
      CHECK(b.gpus[i].hostBridge == m.gpus[i].hostBridge);
      CHECK(b.gpus[i].names == m.gpus[i].names);
    }
    for (size_t i = 0; i < m.nics.size(); ++i) {
      CHECK(b.nics[i].busId == m.nics[i].busId);
      CHECK(b.nics[i].numa == m.nics[i].numa);
      CHECK(b.nics[i].names == m.nics[i].names);
    }
    CHECK(serialize(b) == serialize(m));
  }
  CHECK_FALSE(parseMachine("").isOk());
  CHECK_FALSE(parseMachine("machine 1 1 x 2\n").isOk());
  CHECK_FALSE(parseMachine("machine 1 1 2 2\ndev q - 0 0 0 0 0 0 0 0\n").isOk());
  CHECK_FALSE(parseMachine("machine 1 1 2 2\nnvlink 3 0 0 0\n").isOk());
}

TEST_CASE("ranks are placed on GPUs modulo their count, CPU ranks by affinity or spread", "[topo]") {
  const Machine gpu = load("power8gpudistances.xml");
  for (int l = 0; l < 8; ++l) CHECK(placeRank(gpu, l, 8, -1).gpu == l % 4);
  CHECK(placeRank(gpu, 1, 8, -1).numa == gpu.gpus[1].numa);
  const Machine cpu = load("96em64t-4n4d3ca2co-pci.xml");
  CHECK(placeRank(cpu, 3, 8, 2).numa == 2);  // bound: where it is bound
  std::vector<int> perNode(4, 0);
  for (int l = 0; l < 8; ++l) {
    const RankPlace p = placeRank(cpu, l, 8, -1);
    CHECK(p.gpu == -1);
    REQUIRE(p.numa >= 0);
    REQUIRE(p.numa < 4);
    ++perNode[p.numa];
  }
  CHECK(perNode == std::vector<int>{2, 2, 2, 2});  // unbound: spread evenly, in blocks
  CHECK(placeRank(cpu, 0, 8, -1).numa == placeRank(cpu, 1, 8, -1).numa);
  CHECK(boundNuma(cpu) == -1);  // from a file: no live affinity to judge
}

namespace {

// Every node reaches the root, and parents are nodes.
void checkTree(const std::vector<int>& parent, int root) {
  const int n = static_cast<int>(parent.size());
  REQUIRE(root >= 0);
  REQUIRE(parent[root] == -1);
  for (int r = 0; r < n; ++r) {
    int x = r;
    int hops = 0;
    while (parent[x] >= 0 && hops <= n) {
      REQUIRE(parent[x] < n);
      x = parent[x];
      ++hops;
    }
    CHECK(x == root);
    CHECK(hops <= n);
  }
}

}  // namespace

TEST_CASE("double binary trees: two valid trees, and each node is a leaf in at least one", "[topo]") {
  for (int n = 1; n <= 70; ++n) {
    INFO("nodes " << n);
    const DoubleTree t = buildDoubleTree(n);
    std::vector<int> children[2];
    int depth[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      checkTree(t.parent[k], t.root[k]);
      children[k].assign(n, 0);
      for (int r = 0; r < n; ++r) {
        if (t.parent[k][r] >= 0) ++children[k][t.parent[k][r]];
        int d = 0;
        for (int x = r; t.parent[k][x] >= 0; x = t.parent[k][x]) ++d;
        depth[k] = std::max(depth[k], d);
      }
      for (int r = 0; r < n; ++r) CHECK(children[k][r] <= 2);
      // A binary tree: its depth grows with log2(n), which is what makes it fast at many hosts.
      int log2 = 0;
      while ((1 << log2) < n) ++log2;
      CHECK(depth[k] <= log2 + 1);
    }
    int innerInBoth = 0;
    for (int r = 0; r < n; ++r) innerInBoth += (children[0][r] > 0 && children[1][r] > 0) ? 1 : 0;
    CHECK(innerInBoth <= 1);
  }
}

TEST_CASE("trees over ranks: one node per host, the host's ranks chained below it", "[topo]") {
  std::vector<RankPlace> ranks;
  for (int h = 0; h < 4; ++h) {
    for (int l = 0; l < 3; ++l) ranks.push_back({h, -1, l % 2});
  }
  const Machine m = load("96em64t-4n4d3ca2co-pci.xml");
  const auto ring = buildRing(ranks, {m, m, m, m}, 0);
  const DoubleTree t = buildRankTrees(ranks, ring);
  for (int k = 0; k < 2; ++k) {
    checkTree(t.parent[k], t.root[k]);
    for (size_t r = 0; r < ranks.size(); ++r) {
      const int p = t.parent[k][r];
      if (p < 0) continue;
      // Across hosts only between the hosts' first ranks (in ring order).
      if (ranks[p].host != ranks[r].host) {
        for (int x : {static_cast<int>(r), p}) {
          size_t pos = 0;
          while (ring[pos] != x) ++pos;
          CHECK((pos == 0 || ranks[ring[pos - 1]].host != ranks[x].host));
        }
      }
    }
  }
  CHECK(t.root[0] != t.root[1]);
}

TEST_CASE("channels: bottleneck, estimates and NICs spread over equal choices", "[topo]") {
  const Machine p8 = load("power8gpudistances.xml");
  std::vector<RankPlace> one = {{0, 0, -1}, {0, 1, -1}, {0, 2, -1}, {0, 3, -1}};
  auto plans = buildChannels(one, {p8}, 2);
  REQUIRE(plans.size() == 2);
  // Two NVLink islands: the ring must cross between them, across the sockets.
  CHECK(plans[0].bottleneck == "across sockets");
  CHECK(plans[0].busBwGBs == linkBwGBs(LinkClass::kCrossSocket));
  for (int nic : plans[0].nicOfRank) CHECK(nic == -1);  // one host: no NIC on the ring

  const Machine eth = load("96em64t-4n4d3ca2co-pci.xml");
  std::vector<RankPlace> two;
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 4; ++l) two.push_back(RankPlace{h, -1, l});
  }
  plans = buildChannels(two, {eth, eth}, 4);
  std::set<int> nicsUsed;
  for (const auto& p : plans) {
    CHECK(p.bottleneck == "network");
    CHECK(p.hopLatencyUs > 1);
    int ends = 0;
    for (size_t r = 0; r < two.size(); ++r) {
      if (p.nicOfRank[r] < 0) continue;
      ++ends;
      // The NIC chosen is one nearest the rank that uses it.
      CHECK(eth.nics[p.nicOfRank[r]].numa == two[r].numa);
      if (two[r].host == 0) nicsUsed.insert(p.nicOfRank[r]);
    }
    CHECK(ends == 4);  // each host entered once and left once
  }
  CHECK(nicsUsed.size() > 1);  // channels spread over NICs that are equally near
}

TEST_CASE("GPUs in the CUDA driver's order, as it makes them visible", "[topo]") {
  Machine m = load("power8gpudistances.xml");
  Machine same = m;
  orderGpusAsCuda(same, {});
  CHECK(serialize(same) == serialize(m));  // no driver: hwloc's order stands
  // CUDA_VISIBLE_DEVICES=3,2 with a driver that prints 8-digit domains in upper case.
  Machine two = m;
  orderGpusAsCuda(two, {"0000000B:01:00.0", "0000000a:01:00.0"});
  REQUIRE(two.gpus.size() == 2);
  CHECK(two.gpus[0].busId == "000b:01:00.0");
  CHECK(two.gpus[1].busId == "000a:01:00.0");
  CHECK(linkClass(two, 0, 1) == LinkClass::kNvlink);  // the matrix followed the reordering
  Machine split = m;
  orderGpusAsCuda(split, {"0002:01:00.0", "000b:01:00.0", "0000:99:00.0"});
  REQUIRE(split.gpus.size() == 3);
  CHECK(linkClass(split, 0, 1) == LinkClass::kCrossSocket);
  CHECK(split.gpus[2].busId == "0000:99:00.0");  // hwloc did not see it: kept, without locality
  CHECK(split.gpus[2].numa == -1);
  CHECK(placeRank(split, 5, 6, -1).gpu == 2);  // local rank mod the visible GPUs
}

TEST_CASE("caches are described and travel with the machine", "[topo]") {
  const Machine m = load("96em64t-4n4d3ca2co-pci.xml");
  REQUIRE_FALSE(m.caches.empty());
  CHECK(m.caches.size() == m.cacheBytes.size());
  CHECK(m.caches[0] > 0);
  CHECK(m.cacheBytes[0] > 0);
  const auto back = parseMachine(serialize(m));
  REQUIRE(back.isOk());
  CHECK(back.value().caches == m.caches);
  CHECK(back.value().cacheBytes == m.cacheBytes);
  CHECK_FALSE(parseMachine("machine 1 1 1 1\ncache 2 1 1024\n").isOk());  // levels in order
}

TEST_CASE("the tuner: the tree for latency-bound sizes at several hosts, the ring otherwise", "[topo]") {
  const Machine eth = load("96em64t-4n4d3ca2co-pci.xml");
  // Ranks per host -> the model, from the same builders the runtime uses.
  auto model = [&](std::vector<int> perHost, double* netLatency) {
    std::vector<RankPlace> ranks;
    for (size_t h = 0; h < perHost.size(); ++h) {
      for (int l = 0; l < perHost[h]; ++l) ranks.push_back(placeRank(eth, l, perHost[h], -1));
      for (size_t r = ranks.size() - perHost[h]; r < ranks.size(); ++r) ranks[r].host = static_cast<int>(h);
    }
    const auto plans = buildChannels(ranks, std::vector<Machine>(perHost.size(), eth), 1);
    *netLatency = plans[0].hopLatencyUs;
    return allReduceModel(ranks, plans[0], buildRankTrees(ranks, plans[0].ring));
  };
  double lat = 0;

  // One host: the tree is a chain as long as the ring, so it never wins.
  AllReduceModel m = model({8}, &lat);
  CHECK(treeMaxBytes(m) == 0);
  for (double b : {8.0, 4096.0, 1e6}) CHECK(treeAllReduceUs(m, b) >= ringAllReduceUs(m, b));
  // Two hosts, one rank each: both cross one hop up and one down.
  m = model({1, 1}, &lat);
  CHECK(m.ringLatencyUs == Approx(2 * lat));
  CHECK(m.treeLatencyUs == Approx(2 * lat));
  CHECK(treeMaxBytes(m) == 0);

  // Three hosts: NCCL's tree over three nodes is a chain (the root has one child), as deep as
  // the ring's four steps, so still no tree.
  m = model({1, 1, 1}, &lat);
  CHECK(m.ringLatencyUs == Approx(4 * lat));
  CHECK(m.treeLatencyUs == Approx(4 * lat));
  CHECK(treeMaxBytes(m) == 0);

  // Four hosts: the ring takes 6 network steps, the tree 2 up and 2 down; per byte the ring sends
  // 3/2 of the message and the tree 2, so they cross at 2 x latency / (1/2 / bandwidth).
  m = model({1, 1, 1, 1}, &lat);
  CHECK(m.ringLatencyUs == Approx(6 * lat));
  CHECK(m.treeLatencyUs == Approx(4 * lat));
  const size_t cross = treeMaxBytes(m);
  CHECK(static_cast<double>(cross) == Approx(4 * lat * m.bwGBs * 1e3).epsilon(1e-6));
  CHECK(treeAllReduceUs(m, cross * 0.9) < ringAllReduceUs(m, cross * 0.9));
  CHECK(treeAllReduceUs(m, cross * 1.1) > ringAllReduceUs(m, cross * 1.1));

  // Sixteen hosts: the ring's 30 network steps against a tree of depth at most log2(16) + 1, so the
  // tree reaches further than at four hosts.
  m = model(std::vector<int>(16, 1), &lat);
  CHECK(m.ringLatencyUs == Approx(30 * lat));
  CHECK(m.treeLatencyUs <= 2 * 5 * lat);
  CHECK(treeMaxBytes(m) > cross);

  // Two hosts of eight ranks: a step of the ring crosses the network two laps in sixteen, while
  // the tree crosses it once each way; the chains inside the hosts cost little.
  m = model({8, 8}, &lat);
  CHECK(m.ringLatencyUs > m.treeLatencyUs);
  CHECK(m.treeLatencyUs < 2 * (lat + 7 * lat / 10));
  CHECK(treeMaxBytes(m) > 0);
}

TEST_CASE("DGX-2: sixteen V100s on twelve NVSwitches, every pair NVLink through the switch fabric", "[topo]") {
  // hwloc's NVLinkBandwidth matrix there holds GPU-to-switch links only (6 per GPU, 25 GB/s each,
  // the GPUs of each baseboard on its own 6 switches): no two GPUs have a direct link, and the two
  // baseboards share no switch, yet all 16 GPUs reach each other at 6 x 25 GB/s.
  Machine m = load("nvidiaDGX2.xml");
  REQUIRE(m.gpus.size() == 16);
  REQUIRE(m.nvswitch.size() == 16);
  for (size_t a = 0; a < 16; ++a) {
    CHECK(m.nvswitch[a] == 6 * 25000);
    CHECK(m.gpus[a].linkGBs > 15);  // PCIe 3.0 x16
    for (size_t b = 0; b < 16; ++b) {
      if (a == b) continue;
      CHECK(m.nvlink[a][b] == 0);
      CHECK(linkClass(m, a, b) == LinkClass::kNvlink);
      CHECK(gpuPairGBs(m, a, b) == Approx(150));
    }
  }
  const std::string text = describe(m);
  CHECK(text.find("GPU 0 - GPU 15: NVLink through NVSwitch, ~150 GB/s") != std::string::npos);
  // The description travels with the switch links and the link speeds.
  auto back = parseMachine(serialize(m));
  REQUIRE(back.isOk());
  CHECK(back.value().nvswitch == m.nvswitch);
  CHECK(back.value().gpus[3].linkGBs == Approx(m.gpus[3].linkGBs));
  CHECK(gpuPairGBs(back.value(), 0, 9) == Approx(150));
  // A rank per GPU: every hop of the ring is NVLink, at the fabric's bandwidth.
  std::vector<RankPlace> ranks;
  for (int g = 0; g < 16; ++g) ranks.push_back(RankPlace{0, g, -1});
  const auto plans = buildChannels(ranks, {m}, 2);
  for (const auto& p : plans) {
    CHECK(p.bottleneck == "NVLink");
    CHECK(p.busBwGBs == Approx(150));
  }
  // In the CUDA driver's order, the switch links follow their GPUs.
  Machine some = m;
  orderGpusAsCuda(some, {m.gpus[9].busId, m.gpus[2].busId});
  REQUIRE(some.nvswitch.size() == 2);
  CHECK(some.nvswitch[0] == m.nvswitch[9]);
  CHECK(linkClass(some, 0, 1) == LinkClass::kNvlink);
  // Half the GPUs without switch links (a failed baseboard, say): those pairs are PCIe again.
  Machine half = m;
  for (size_t a = 8; a < 16; ++a) half.nvswitch[a] = 0;
  CHECK(linkClass(half, 0, 7) == LinkClass::kNvlink);
  CHECK(linkClass(half, 0, 8) != LinkClass::kNvlink);
  CHECK(gpuPairGBs(half, 0, 8) <= m.gpus[0].linkGBs);
}

TEST_CASE("a machine description of an older version, without link speeds, still reads", "[topo]") {
  const std::string old =
      "machine 1 1 4 8\n"
      "dev g 0000:04:00.0 4318 5367 770 0 0 3 1 0000:03 1 cuda0\n"
      "dev n 0000:05:00.0 5555 4119 512 0 0 3 0 1 eth0\n";
  auto m = parseMachine(old);
  REQUIRE(m.isOk());
  CHECK(m.value().gpus[0].linkGBs == 0);
  CHECK(m.value().nics[0].linkGBs == 0);
  CHECK(m.value().nvswitch.empty());
  CHECK_FALSE(parseMachine("machine 1 1 4 8\nnvswitch 2 1 2\n").isOk());  // a list for GPUs it lacks
}
