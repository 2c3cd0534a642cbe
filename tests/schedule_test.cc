// Ring and chain schedules, run in a simulator with no sockets: n ranks execute their step lists
// over bounded FIFOs between ring neighbours. Checks that sends meet receives of the same size,
// that nothing deadlocks with FIFOs of the size the executor uses, that every element is reduced
// from every rank's contribution exactly once, and that copies land in the right blocks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "src/algo/schedule.h"

using namespace chorus;

TEST_CASE("partition cuts counts into nearly equal contiguous parts", "[schedule]") {
  for (size_t count : {0, 1, 5, 7, 100, 1023}) {
    for (int parts : {1, 2, 3, 7, 8}) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        Block b = partition(count, parts, i);
        CHECK(b.offset == next);
        CHECK((b.count == count / parts || b.count == count / parts + 1));
        next += b.count;
      }
      CHECK(next == count);
    }
  }
  CHECK(ringLoopChunk(4096, 4, 4) == 2048);
  CHECK(ringLoopChunk(4096, 4, 8192) == 1);
}

namespace {

// An element's value in the simulation: which ranks' contributions it holds (a bitmask) for
// reductions, or where it came from (rank, index) for copies.
struct Elem {
  uint64_t mask = 0;
  int64_t origin = -1;
};

struct Sim {
  int n;
  size_t capacity;  // FIFO capacity in elements
  std::vector<std::vector<Step>> steps;
  std::vector<std::vector<Elem>> in;
  std::vector<std::vector<Elem>> out;
  std::vector<std::deque<std::vector<Elem>>> fifo;  // fifo[r]: from r to r+1
  std::vector<size_t> fifoElems;
  std::string error;

  bool stepReady(int r, const Step& s) {
    const int prev = (r - 1 + n) % n;
    if (primReceives(s.prim)) {
      if (fifo[prev].empty()) return false;
      if (fifo[prev].front().size() != s.count) {
        error = "rank " + std::to_string(r) + " expects " + std::to_string(s.count) + " elements, the sender sent " +
                std::to_string(fifo[prev].front().size());
        return false;
      }
    }
    if (primSends(s.prim) && fifoElems[r] + s.count > capacity) return false;
    return true;
  }

  void exec(int r, const Step& s) {
    const int prev = (r - 1 + n) % n;
    std::vector<Elem> msg;
    if (primReceives(s.prim)) {
      msg = std::move(fifo[prev].front());
      fifo[prev].pop_front();
      fifoElems[prev] -= s.count;
    }
    std::vector<Elem> sendMsg(s.count);
    for (size_t i = 0; i < s.count; ++i) {
      const Elem local = s.inOff + i < in[r].size() ? in[r][s.inOff + i] : Elem{};
      Elem v;
      switch (s.prim) {
        case Prim::kSend:
        case Prim::kCopySend:
        case Prim::kLocal:
          v = local;
          break;
        case Prim::kRecv:
        case Prim::kRecvCopySend:
          v = msg[i];
          break;
        default:
          if (msg[i].mask & local.mask) error = "an element was reduced twice from one rank";
          v.mask = msg[i].mask | local.mask;
          break;
      }
      sendMsg[i] = v;
      const bool writes = s.prim == Prim::kRecv || s.prim == Prim::kCopySend || s.prim == Prim::kLocal ||
                          s.prim == Prim::kRecvReduceCopySend || s.prim == Prim::kRecvCopySend ||
                          s.prim == Prim::kRecvReduceCopy;
      if (writes) out[r].at(s.outOff + i) = v;
    }
    if (primSends(s.prim)) {
      fifoElems[r] += s.count;
      fifo[r].push_back(std::move(sendMsg));
    }
  }

  // Runs every rank to the end; false on deadlock or error.
  bool run() {
    fifo.assign(n, {});
    fifoElems.assign(n, 0);
    std::vector<size_t> pc(n, 0);
    while (true) {
      bool moved = false;
      bool done = true;
      for (int r = 0; r < n; ++r) {
        while (pc[r] < steps[r].size() && stepReady(r, steps[r][pc[r]])) {
          exec(r, steps[r][pc[r]]);
          ++pc[r];
          moved = true;
        }
        if (!error.empty()) return false;
        done = done && pc[r] == steps[r].size();
      }
      if (done) break;
      if (!moved) {
        error = "deadlock";
        return false;
      }
    }
    for (int r = 0; r < n; ++r) {
      if (!fifo[r].empty()) {
        error = "rank " + std::to_string(r) + " left data unreceived";
        return false;
      }
    }
    return true;
  }
};

Sim makeSim(int n, size_t inElems, size_t outElems, size_t capacity) {
  Sim s;
  s.n = n;
  s.capacity = capacity;
  s.steps.resize(n);
  s.in.assign(n, std::vector<Elem>(inElems));
  s.out.assign(n, std::vector<Elem>(outElems));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < inElems; ++i) s.in[r][i] = Elem{uint64_t(1) << r, int64_t(r) * 1000000 + int64_t(i)};
  }
  return s;
}

}  // namespace

TEST_CASE("ring all-reduce: every element gets every rank's contribution once", "[schedule]") {
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {0, 1, 5, 64, 1000, 4097}) {
      for (size_t loop : {1, 7, 64}) {
        Sim s = makeSim(n, count, count, 2 * loop);
        for (int r = 0; r < n; ++r) s.steps[r] = ringAllReduce(n, r, count, loop);
        INFO("n=" << n << " count=" << count << " loop=" << loop);
        REQUIRE(s.run());
        const uint64_t all = n == 64 ? ~0ull : (uint64_t(1) << n) - 1;
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) REQUIRE(s.out[r][i].mask == all);
        }
      }
    }
  }
}

TEST_CASE("ring reduce-scatter and all-gather put each block where it belongs", "[schedule]") {
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {1, 5, 100}) {
      for (size_t base : {size_t(0), size_t(3)}) {
        std::vector<int> blockOf(n);
        for (int p = 0; p < n; ++p) blockOf[p] = p;
        const size_t stride = count + base;
        Sim rs = makeSim(n, stride * n, stride, 2 * 16);
        for (int r = 0; r < n; ++r) rs.steps[r] = ringReduceScatter(n, r, blockOf, stride, base, count, 16);
        INFO("reduce-scatter n=" << n << " count=" << count << " base=" << base);
        REQUIRE(rs.run());
        const uint64_t all = (uint64_t(1) << n) - 1;
        for (int r = 0; r < n; ++r) {
          for (size_t i = base; i < base + count; ++i) REQUIRE(rs.out[r][i].mask == all);
        }
        Sim ag = makeSim(n, stride, stride * n, 2 * 16);
        for (int r = 0; r < n; ++r) ag.steps[r] = ringAllGather(n, r, blockOf, stride, base, count, 16);
        INFO("all-gather");
        REQUIRE(ag.run());
        for (int r = 0; r < n; ++r) {
          for (int p = 0; p < n; ++p) {
            for (size_t i = base; i < base + count; ++i) {
              REQUIRE(ag.out[r][p * stride + i].origin == int64_t(p) * 1000000 + int64_t(i));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("chain broadcast and reduce from every root", "[schedule]") {
  for (int n = 1; n <= 8; ++n) {
    for (int root = 0; root < n; ++root) {
      const size_t count = 77;
      Sim b = makeSim(n, count, count, 20);
      for (int r = 0; r < n; ++r) b.steps[r] = chainBroadcast(n, r, root, count, 10);
      INFO("broadcast n=" << n << " root=" << root);
      REQUIRE(b.run());
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) REQUIRE(b.out[r][i].origin == int64_t(root) * 1000000 + int64_t(i));
      }
      Sim red = makeSim(n, count, count, 20);
      for (int r = 0; r < n; ++r) red.steps[r] = chainReduce(n, r, root, count, 10);
      INFO("reduce");
      REQUIRE(red.run());
      for (size_t i = 0; i < count; ++i) REQUIRE(red.out[root][i].mask == (uint64_t(1) << n) - 1);
    }
  }
}

TEST_CASE("splitLocal cuts one rank's copy into vector-aligned parts for several blocks", "[schedule]") {
  for (size_t elem : {size_t(1), size_t(2), size_t(4), size_t(8)}) {
    for (size_t count : {size_t(1), size_t(3), size_t(17), size_t(4096), size_t(65539), size_t(1) << 22}) {
      const auto parts = splitLocal(count, elem, 64 << 10, 32);
      INFO("elem " << elem << " count " << count);
      REQUIRE(!parts.empty());
      CHECK(parts.size() <= 32);
      CHECK(parts.size() == std::min<size_t>(32, std::max<size_t>(1, count * elem / (64 << 10))));
      size_t next = 0;
      for (const Step& p : parts) {
        CHECK(p.prim == Prim::kLocal);
        CHECK(p.inOff == next);
        CHECK(p.outOff == next);
        CHECK(p.count > 0);
        CHECK((p.inOff * elem) % 16 == 0);  // every part starts on a whole vector
        next += p.count;
      }
      CHECK(next == count);
    }
  }
  CHECK(splitLocal(0, 4, 64 << 10, 32).empty());
  CHECK(splitLocal(1000, 3, 64, 4).size() == 4);  // an element size that does not divide 16
}

// Blocks of their own sizes (the v-collectives' shape): every rank's counts alike, each rank's
// block places its own (gaps between blocks, blocks out of rank order), some blocks empty.
TEST_CASE("ring reduce-scatter and all-gather of blocks of any sizes", "[schedule]") {
  std::mt19937 rng(7);
  for (int n = 1; n <= 8; ++n) {
    for (int trial = 0; trial < 12; ++trial) {
      for (size_t loop : {size_t(1), size_t(7), size_t(16)}) {
        std::vector<size_t> count(n);
        for (int r = 0; r < n; ++r) count[r] = trial == 0 ? 0 : rng() % 4 == 0 ? 0 : rng() % 60;
        // Each rank's layout of the buffer of blocks: its own displacements, in a shuffled order.
        std::vector<std::vector<size_t>> at(n, std::vector<size_t>(n));
        std::vector<size_t> ownAt(n), extent(n, 0);
        for (int r = 0; r < n; ++r) {
          std::vector<int> order(n);
          for (int q = 0; q < n; ++q) order[q] = q;
          std::shuffle(order.begin(), order.end(), rng);
          size_t next = rng() % 3;
          for (int q : order) {
            at[r][q] = next;
            next += count[q] + rng() % 3;
          }
          extent[r] = next;
          ownAt[r] = rng() % 4;
        }
        std::vector<int> blockOf(n);
        for (int p = 0; p < n; ++p) blockOf[p] = p;
        std::shuffle(blockOf.begin(), blockOf.end(), rng);
        std::vector<int> posOf(n);
        for (int p = 0; p < n; ++p) posOf[blockOf[p]] = p;
        size_t maxExtent = 0, maxOwn = 0;
        for (int r = 0; r < n; ++r) {
          maxExtent = std::max(maxExtent, extent[r]);
          maxOwn = std::max(maxOwn, ownAt[r] + count[r]);
        }
        INFO("n=" << n << " trial=" << trial << " loop=" << loop);
        // The simulation's rank p is ring position p, so it holds rank blockOf[p]'s buffers.
        Sim rs = makeSim(n, maxExtent, maxOwn, 2 * loop);
        for (int p = 0; p < n; ++p) {
          const int r = blockOf[p];
          // Position p's element of rank q's block is bit p + 8q; a gap is none: a read of the
          // wrong block or of a gap shows in the sum.
          for (Elem& e : rs.in[p]) e.mask = 0;
          for (int q = 0; q < n; ++q) {
            for (size_t i = 0; i < count[q]; ++i) rs.in[p][at[r][q] + i].mask = uint64_t(1) << (p + 8 * q);
          }
          rs.steps[p] = ringReduceScatterBlocks(n, p, blockOf, RankBlocks{at[r].data(), count.data(), ownAt[r]}, loop);
        }
        REQUIRE(rs.run());
        for (int p = 0; p < n; ++p) {
          const int r = blockOf[p];
          const uint64_t all = ((uint64_t(1) << n) - 1) << (8 * r);
          for (size_t i = 0; i < maxOwn; ++i) {
            const bool mine = i >= ownAt[r] && i < ownAt[r] + count[r];
            // Every position contributed its element of rank r's block, read where its layout
            // puts that block; nothing else of the output is written.
            REQUIRE(rs.out[p][i].mask == (mine ? all : 0));
          }
        }
        Sim ag = makeSim(n, maxOwn, maxExtent, 2 * loop);
        for (int p = 0; p < n; ++p) {
          const int r = blockOf[p];
          ag.steps[p] = ringAllGatherBlocks(n, p, blockOf, RankBlocks{at[r].data(), count.data(), ownAt[r]}, loop);
        }
        REQUIRE(ag.run());
        for (int p = 0; p < n; ++p) {
          const int r = blockOf[p];
          std::vector<int64_t> expect(maxExtent, -1);
          for (int q = 0; q < n; ++q) {
            // Rank q's own elements come from ring position posOf[q]'s input.
            for (size_t i = 0; i < count[q]; ++i) {
              expect[at[r][q] + i] = int64_t(posOf[q]) * 1000000 + int64_t(ownAt[q] + i);
            }
          }
          for (size_t i = 0; i < maxExtent; ++i) REQUIRE(ag.out[p][i].origin == expect[i]);
        }
      }
    }
  }
}
