// The v-collectives (chorusAllGatherV, chorusReduceScatterV) on host memory, ranks as threads:
// every element of every block against a reference computed here, the elements between blocks
// untouched, in place and not, empty blocks, blocks out of rank order, sizes that span several
// channels and loops; and the arguments they refuse.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/test_util.h"

using chorus::test::onRanks;
using chorus::test::World;

namespace {

constexpr int64_t kUntouched = -777;

// Every rank's counts alike; each rank's displacements its own: blocks in a shuffled order with
// gaps of up to `gap` elements.
struct Layout {
  std::vector<size_t> counts;
  std::vector<std::vector<size_t>> displs;  // per rank
  std::vector<size_t> extent;               // per rank
};

Layout makeLayout(int n, std::mt19937& rng, size_t maxCount, size_t gap, bool someEmpty) {
  Layout l;
  l.counts.resize(n);
  for (int r = 0; r < n; ++r) l.counts[r] = someEmpty && rng() % 3 == 0 ? 0 : rng() % (maxCount + 1);
  l.displs.assign(n, std::vector<size_t>(n));
  l.extent.assign(n, 0);
  for (int me = 0; me < n; ++me) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    size_t next = gap ? rng() % gap : 0;
    for (int r : order) {
      l.displs[me][r] = next;
      next += l.counts[r] + (gap ? rng() % gap : 0);
    }
    l.extent[me] = next;
  }
  return l;
}

int64_t value(int rank, size_t i) { return int64_t(rank) * 1000003 + int64_t(i) * 7 - 5000; }

void checkAllGatherV(int n, const Layout& l, bool inPlace) {
  World w(n);
  REQUIRE(w.ok());
  std::vector<std::vector<int64_t>> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    out[r].assign(l.extent[r] + 3, kUntouched);
    in[r].resize(l.counts[r]);
    for (size_t i = 0; i < l.counts[r]; ++i) in[r][i] = value(r, i);
    if (inPlace) std::copy(in[r].begin(), in[r].end(), out[r].begin() + static_cast<ptrdiff_t>(l.displs[r][r]));
  }
  const auto rc = onRanks(n, [&](int r) {
    const int64_t* send = inPlace ? out[r].data() + l.displs[r][r] : in[r].data();
    return chorusAllGatherV(send, l.counts[r], out[r].data(), l.counts.data(), l.displs[r].data(), chorusInt64, w[r],
                            nullptr);
  });
  for (int r = 0; r < n; ++r) REQUIRE(rc[r] == chorusSuccess);
  for (int me = 0; me < n; ++me) {
    std::vector<int64_t> expect(out[me].size(), kUntouched);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < l.counts[r]; ++i) expect[l.displs[me][r] + i] = value(r, i);
    }
    for (size_t i = 0; i < expect.size(); ++i) {
      INFO("rank " << me << " element " << i);
      REQUIRE(out[me][i] == expect[i]);
    }
  }
}

void checkReduceScatterV(int n, const Layout& l, bool inPlace, chorusRedOp_t op) {
  World w(n);
  REQUIRE(w.ok());
  std::vector<std::vector<int64_t>> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    in[r].assign(l.extent[r] + 2, kUntouched);
    for (int b = 0; b < n; ++b) {
      for (size_t i = 0; i < l.counts[b]; ++i) in[r][l.displs[r][b] + i] = value(r, i) + b;
    }
    out[r].assign(l.counts[r] + 2, kUntouched);
  }
  const std::vector<std::vector<int64_t>> original = in;
  const auto rc = onRanks(n, [&](int r) {
    int64_t* recv = inPlace ? in[r].data() + l.displs[r][r] : out[r].data();
    return chorusReduceScatterV(in[r].data(), l.counts.data(), l.displs[r].data(), recv, l.counts[r], chorusInt64, op,
                                w[r], nullptr);
  });
  for (int r = 0; r < n; ++r) REQUIRE(rc[r] == chorusSuccess);
  for (int me = 0; me < n; ++me) {
    for (size_t i = 0; i < l.counts[me]; ++i) {
      int64_t want = value(0, i) + me;
      for (int r = 1; r < n; ++r) {
        const int64_t v = value(r, i) + me;
        want = op == chorusSum ? want + v : std::max(want, v);
      }
      const int64_t got = inPlace ? in[me][l.displs[me][me] + i] : out[me][i];
      INFO("rank " << me << " element " << i);
      REQUIRE(got == want);
    }
    if (!inPlace) {
      // The input as it was; nothing past the output's count written.
      REQUIRE(in[me] == original[me]);
      REQUIRE(out[me][l.counts[me]] == kUntouched);
      REQUIRE(out[me][l.counts[me] + 1] == kUntouched);
    } else {
      for (size_t i = 0; i < in[me].size(); ++i) {
        const bool mine = i >= l.displs[me][me] && i < l.displs[me][me] + l.counts[me];
        if (!mine) REQUIRE(in[me][i] == original[me][i]);
      }
    }
  }
}

}  // namespace

TEST_CASE("all-gather-v and reduce-scatter-v with a count per rank", "[api][vcoll]") {
  std::mt19937 rng(11);
  for (int n : {1, 2, 3, 5}) {
    for (int trial = 0; trial < 4; ++trial) {
      // Small blocks with gaps and empty ones; then blocks that span several channels and loops.
      const bool big = trial == 3;
      const Layout l = makeLayout(n, rng, big ? 300000 : 50, big ? 0 : 4, !big);
      for (bool inPlace : {false, true}) {
        INFO("ranks " << n << " trial " << trial << (inPlace ? " in place" : ""));
        checkAllGatherV(n, l, inPlace);
        checkReduceScatterV(n, l, inPlace, trial % 2 ? chorusMax : chorusSum);
      }
    }
  }
}

TEST_CASE("all-gather-v with displs NULL packs the blocks in rank order", "[api][vcoll]") {
  const int n = 3;
  World w(n);
  REQUIRE(w.ok());
  const std::vector<size_t> counts = {2, 0, 3};
  std::vector<std::vector<float>> out(n, std::vector<float>(6, -1.0f));
  const auto rc = onRanks(n, [&](int r) {
    const std::vector<float> mine(counts[r], static_cast<float>(r + 1));
    return chorusAllGatherV(mine.data(), counts[r], out[r].data(), counts.data(), nullptr, chorusFloat32, w[r],
                            nullptr);
  });
  for (int r = 0; r < n; ++r) {
    REQUIRE(rc[r] == chorusSuccess);
    CHECK(out[r] == std::vector<float>{1, 1, 3, 3, 3, -1});
  }
}

TEST_CASE("v-collectives refuse counts they cannot use and touch nothing", "[api][vcoll][misuse]") {
  World w(2);
  REQUIRE(w.ok());
  std::vector<int32_t> buf(16, 5);
  const std::vector<int32_t> before = buf;
  const size_t counts[2] = {3, 4};
  const size_t overlap[2] = {0, 2};
  // Rank 0 alone: each call fails in its argument checks, before anything is issued.
  CHECK(chorusAllGatherV(buf.data(), 3, buf.data() + 8, nullptr, nullptr, chorusInt32, w[0], nullptr) ==
        chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(w[0])).find("recvcounts is NULL") != std::string::npos);
  CHECK(chorusAllGatherV(buf.data(), 4, buf.data() + 8, counts, nullptr, chorusInt32, w[0], nullptr) ==
        chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(w[0])).find("sendcount 4 differs from recvcounts[0] = 3") != std::string::npos);
  CHECK(chorusAllGatherV(buf.data(), 3, buf.data() + 8, counts, overlap, chorusInt32, w[0], nullptr) ==
        chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(w[0])).find("overlap in recvbuff") != std::string::npos);
  CHECK(chorusReduceScatterV(buf.data(), counts, nullptr, buf.data() + 8, 2, chorusInt32, chorusSum, w[0], nullptr) ==
        chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(w[0])).find("recvcount 2 differs from sendcounts[0] = 3") != std::string::npos);
  CHECK(chorusReduceScatterV(buf.data(), counts, nullptr, nullptr, 3, chorusInt32, chorusSum, w[0], nullptr) ==
        chorusInvalidArgument);
  CHECK(buf == before);
  // The communicator is still good: both ranks run one together.
  std::vector<std::vector<int32_t>> out(2, std::vector<int32_t>(7, 0));
  const auto rc = onRanks(2, [&](int r) {
    const std::vector<int32_t> mine(counts[r], r + 10);
    return chorusAllGatherV(mine.data(), counts[r], out[r].data(), counts, nullptr, chorusInt32, w[r], nullptr);
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(rc[r] == chorusSuccess);
    CHECK(out[r] == std::vector<int32_t>{10, 10, 10, 11, 11, 11, 11});
  }
}
