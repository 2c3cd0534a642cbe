// The correctness grid with ranks as threads of this process (the in-process transport, or shm
// with CHORUS_P2P_DISABLE=1). Each rank runs every case on its own thread; the main thread checks
// the results (Catch2's assertions are not thread-safe), including that the ranks agree bit for
// bit where the collective gives every rank the same result.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/reduce_host.h"
#include "tests/grid/grid.h"
#include "tests/test_util.h"

using namespace chorus::test;

namespace {

void runGrid(int n, const GridOptions& opts, bool withStream) {
  if (const char* isa = std::getenv("CHORUS_CPU_ISA")) {
    auto parsed = chorus::parseCpuIsa(isa);
    // ctest runs the ISA variants only on CPUs that have the ISA (tests/needs_cpu.sh).
    if (parsed && !chorus::hostKernelsFor(*parsed)) {
      FAIL("CHORUS_CPU_ISA=" << isa << " but this CPU cannot run it (ctest skips this variant on such CPUs)");
    }
  }
  World world(n);
  REQUIRE(world.ok());
  const std::vector<Case> cases = makeGrid(n, opts);
  std::vector<std::vector<CaseResult>> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      chorusStream_t stream = nullptr;
      if (withStream) chorusStreamCreate(&stream);
      for (const auto& c : cases) results[r].push_back(runCase(world.comm(r), c, stream));
      if (stream) chorusStreamDestroy(stream);
    });
  }
  for (auto& t : threads) t.join();
  size_t failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (int r = 0; r < n; ++r) {
      if (!results[r][i].ok) {
        ++failed;
        if (failed < 20) FAIL_CHECK(results[r][i].error);
      }
    }
    for (int r = 1; r < n; ++r) {
      if (results[0][i].resultHash != results[r][i].resultHash) {
        ++failed;
        if (failed < 20) FAIL_CHECK("ranks 0 and " << r << " differ bitwise: " << cases[i].describe());
      }
    }
  }
  INFO(cases.size() << " cases at " << n << " ranks");
  CHECK(failed == 0);
}

int gridRanks() {
  const char* v = std::getenv("CHORUS_TEST_RANKS");
  return v ? std::atoi(v) : 0;
}

}  // namespace

TEST_CASE("full grid, one thread per rank, NULL stream", "[grid]") {
  const int only = gridRanks();
  for (int n : {2, 3, 4}) {
    if (only && n != only) continue;
    SECTION(std::to_string(n) + " ranks") { runGrid(n, GridOptions{}, false); }
  }
}

TEST_CASE("pairwise grid on host streams", "[grid][stream]") {
  GridOptions opts;
  opts.full = false;
  opts.large = false;
  runGrid(3, opts, true);
}
