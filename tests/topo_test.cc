// Topology detection against real machines' hwloc XML files (tests/data/topologies, from hwloc's
// own test data) and against the live machine.
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
