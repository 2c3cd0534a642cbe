// Topology detection against real machines' hwloc XML files (tests/data/topologies, from hwloc's
// own test data) and against the live machine.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "src/topo/topo.h"

using namespace chorus::topo;

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
