// The device executor (src/device/lane_exec.h) run by blocks of host threads: the kernel's whole
// logic but the CUDA memory model, on every machine and under TSan; the collectives. Ranks are sets
// of blocks over FIFOs in host memory (tests/lane_clique.h). Checked element by element against
// exact references (integers, and floats whose sums are exact in any order), over several
// launches in a row (positions and sequence numbers carry over in the FIFOs and the state, as they
// do on the device), with 1, 3 and 4 threads per block, in Simple, LL and LL128.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/lane_clique.h"

using namespace chorus;
using namespace chorus::device;
using namespace chorus::device::lanetest;

TEST_CASE("device lanes on host threads: all-reduce, ring, tree and direct", "[device_lane]") {
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 3u, 4u}) {
      for (size_t count : {size_t(1), size_t(7), size_t(1000)}) {
        checkAllReduce<float>(Algo::kRing, n, 2, threads, count, false);
        checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, count, count == 7);
        checkAllReduce<double>(Algo::kDirect, n, 1, threads, count, count == 1000);
      }
    }
  }
  checkAllReduce<int8_t>(Algo::kRing, 3, 3, 4, 5001, true);
}

// LL: a 256-byte slot has 16 lines, 13 of them data (104 bytes a piece), and a step's last piece
// mostly ends inside a line; a launch of one protocol follows one of the other on the same FIFOs,
// so positions and flags carry over between them.
TEST_CASE("device lanes on host threads: all-reduce with the LL protocol, and after Simple", "[device_lane]") {
  const ProtoKind ll = ProtoKind::kLL;
  const ProtoKind simple = ProtoKind::kSimple;
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 3u, 4u}) {
      for (size_t count : {size_t(1), size_t(7), size_t(1000)}) {
        checkAllReduce<float>(Algo::kRing, n, 2, threads, count, false, ll, ll);
        checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, count, count == 7, ll, simple);
        checkAllReduce<double>(Algo::kDirect, n, 1, threads, count, count == 1000, simple, ll);
      }
    }
  }
  checkAllReduce<int8_t>(Algo::kRing, 3, 3, 4, 5001, true, ll, ll);
  checkAllReduce<int8_t>(Algo::kTree, 4, 2, 3, 333, false, ll, ll);
}

// LL128: a 256-byte slot has two 128-byte lines, the header and one of data (120 bytes a piece);
// at 1024 bytes, 7 lines of data (840 bytes a piece). Every element size, pieces that end inside a
// line and inside a word, and a launch of LL128 after one of another protocol on the same FIFOs,
// and before one, so positions, flags and the line areas carry over between them.
TEST_CASE("device lanes on host threads: all-reduce with the LL128 protocol, beside Simple and LL", "[device_lane]") {
  const ProtoKind ll128 = ProtoKind::kLL128;
  const ProtoKind ll = ProtoKind::kLL;
  const ProtoKind simple = ProtoKind::kSimple;
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 3u, 4u}) {
      for (size_t count : {size_t(1), size_t(7), size_t(31), size_t(1000)}) {
        checkAllReduce<float>(Algo::kRing, n, 2, threads, count, false, ll128, ll128);
        checkAllReduce<int32_t>(Algo::kTree, n, 1, threads, count, count == 7, ll128, simple);
        checkAllReduce<double>(Algo::kDirect, n, 1, threads, count, count == 1000, ll, ll128);
      }
    }
  }
  checkAllReduce<int8_t>(Algo::kRing, 3, 3, 4, 5001, true, ll128, ll128);
  checkAllReduce<int8_t>(Algo::kTree, 4, 2, 3, 333, false, simple, ll128);
  checkAllReduce<int8_t>(Algo::kRing, 2, 1, 2, 121, false, ll128, ll);
}

// FIFO positions are 32-bit and wrap: pieces across the wrap, in both protocols, from positions
// just before it (the LL flag of the position before the wrap, never written lines' 0, included).
TEST_CASE("device lanes on host threads: FIFO positions that wrap past 2^32", "[device_lane]") {
  const ProtoKind ll = ProtoKind::kLL;
  const ProtoKind simple = ProtoKind::kSimple;
  for (uint32_t before : {1u, 2u, 5u}) {
    const uint32_t start = static_cast<uint32_t>(0) - before;
    checkAllReduce<int32_t>(Algo::kRing, 3, 1, 2, 1000, false, ll, ll, Wiring::kMemory, start);
    checkAllReduce<int32_t>(Algo::kTree, 4, 1, 3, 1000, false, ll, simple, Wiring::kMemory, start);
    checkAllReduce<float>(Algo::kDirect, 2, 1, 1, 300, true, simple, ll, Wiring::kMemory, start);
    checkAllReduce<int32_t>(Algo::kRing, 3, 1, 2, 1000, false, ProtoKind::kLL128, ProtoKind::kLL128, Wiring::kMemory,
                            start);
    checkAllReduce<float>(Algo::kTree, 4, 1, 3, 700, false, ll, ProtoKind::kLL128, Wiring::kMemory, start);
  }
}

TEST_CASE("device lanes on host threads: all-gather, reduce-scatter, broadcast and reduce, Simple, LL and LL128",
          "[device_lane]") {
  for (int n : {2, 3, 4}) {
    for (unsigned threads : {1u, 4u}) {
      const size_t count = 301;
      INFO("ranks " << n << " threads " << threads);
      Clique clique(n, 2, 128, 2);
      // Simple, then LL, then LL128, on the same FIFOs.
      for (int launchNo = 0; launchNo < 3; ++launchNo) {
        clique.setProto(launchNo == 0 ? ProtoKind::kSimple : launchNo == 1 ? ProtoKind::kLL : ProtoKind::kLL128);
        // Each collective its own launch (one buffer pair each), two launches per collective.
        for (CollType coll :
             {CollType::kAllGather, CollType::kReduceScatter, CollType::kBroadcast, CollType::kReduce}) {
          const int root = (launchNo + 1) % n;
          const bool gathers = coll == CollType::kAllGather;
          const bool scatters = coll == CollType::kReduceScatter;
          const size_t inCount = scatters ? count * n : count;
          const size_t outCount = gathers ? count * n : count;
          std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(inCount));
          std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(outCount, -99));
          std::vector<const char*> ip(n);
          std::vector<char*> op(n);
          for (int r = 0; r < n; ++r) {
            for (size_t i = 0; i < inCount; ++i) in[r][i] = valueOf<int32_t>(r + launchNo, i);
            ip[r] = reinterpret_cast<const char*>(in[r].data());
            op[r] = reinterpret_cast<char*>(out[r].data());
          }
          AlgoCall call{coll, count, sizeof(int32_t), root, false};
          const auto errors = clique.launch(Algo::kRing, {call}, chorusInt32, ReduceSpec(), ip, op, threads);
          for (int r = 0; r < n; ++r) {
            INFO("collective " << static_cast<int>(coll) << " rank " << r << " root " << root);
            REQUIRE(errors[r].status == 0);
            for (size_t i = 0; i < outCount; ++i) {
              int32_t want = 0;
              if (gathers) {
                want = valueOf<int32_t>(static_cast<int>(i / count) + launchNo, i % count);
              } else if (coll == CollType::kBroadcast) {
                want = valueOf<int32_t>(root + launchNo, i);
              } else if (coll == CollType::kReduce && r != root) {
                want = -99;
              } else {
                const size_t at = scatters ? r * count + i : i;
                for (int q = 0; q < n; ++q) want += valueOf<int32_t>(q + launchNo, at);
              }
              REQUIRE(out[r][i] == want);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("device lanes on host threads: several all-reduces in a row, and an average", "[device_lane]") {
  const int n = 3;
  Clique clique(n, 2, 256, 2);
  const size_t count = 2000;
  // The launch's two calls share a buffer pair: the second all-reduces the first's result in place.
  std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(count));
  std::vector<const char*> ip(n);
  std::vector<char*> op(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) buf[r][i] = valueOf<int32_t>(r, i) * 6;
    ip[r] = reinterpret_cast<const char*>(buf[r].data());
    op[r] = reinterpret_cast<char*>(buf[r].data());
  }
  ReduceSpec avg;
  avg.hasPostDiv = true;
  avg.divisor = n;
  AlgoCall call{CollType::kAllReduce, count, sizeof(int32_t), 0, true};
  const auto errors = clique.launch(Algo::kRing, {call, call}, chorusInt32, avg, ip, op, 3);
  // The second reads what the first writes, from other channels too: two launches.
  CHECK(clique.lastLaunches() == 2);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    for (size_t i = 0; i < count; ++i) {
      int32_t first = 0;
      for (int q = 0; q < n; ++q) first += valueOf<int32_t>(q, i) * 6;
      first /= n;
      REQUIRE(buf[r][i] == first);  // the average of n equal values is the value
    }
  }
}

// The tuner gives each call its own channel count (fewer for small messages): calls over 1, 4, 2
// and 3 of a clique's 4 channels, one after another on the same FIFOs and device state, each
// channel's positions and sequence numbers carrying over only where a call ran on it.
TEST_CASE("device lanes on host threads: calls of different channel counts in a row share the channels",
          "[device_lane]") {
  const int n = 3;
  Clique clique(n, 4, 256, 2);
  const size_t count = 3001;
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count));
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count));
  std::vector<const char*> ip(n);
  std::vector<char*> op(n);
  int round = 0;
  for (ProtoKind proto : {ProtoKind::kSimple, ProtoKind::kLL, ProtoKind::kLL128}) {
    clique.setProto(proto);
    for (int nch : {1, 4, 2, 3, 1}) {
      INFO("channels " << nch << " protocol " << protoName(proto));
      clique.setChannels(nch);
      ++round;
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) in[r][i] = valueOf<int32_t>(r + round, i);
        out[r].assign(count, -99);
        ip[r] = reinterpret_cast<const char*>(in[r].data());
        op[r] = reinterpret_cast<char*>(out[r].data());
      }
      AlgoCall call{CollType::kAllReduce, count, sizeof(int32_t), 0, false};
      const auto errors = clique.launch(Algo::kRing, {call}, chorusInt32, ReduceSpec(), ip, op, 3);
      for (int r = 0; r < n; ++r) {
        REQUIRE(errors[r].status == 0);
        for (size_t i = 0; i < count; ++i) {
          int32_t want = 0;
          for (int q = 0; q < n; ++q) want += valueOf<int32_t>(q + round, i);
          REQUIRE(out[r][i] == want);
        }
      }
    }
  }
}

// ncclScalarDevice: the scalar lives in device memory and the kernel reads it when it runs
// (ReduceSpec::scalePtr), so the stream's earlier work may write it; the spec's own scale is unused.
TEST_CASE("device lanes on host threads: a pre-multiplied sum reads its scalar when it runs", "[device_lane]") {
  const int n = 3;
  Clique clique(n, 2, 256, 2);
  const size_t count = 1500;
  std::vector<std::vector<float>> f(n, std::vector<float>(count));
  std::vector<std::vector<int64_t>> w(n, std::vector<int64_t>(count));
  std::vector<const char*> fin(n), win(n);
  std::vector<char*> fout(n), wout(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      f[r][i] = float(valueOf<int32_t>(r, i));
      w[r][i] = valueOf<int32_t>(r, i);
    }
    fin[r] = reinterpret_cast<const char*>(f[r].data());
    fout[r] = reinterpret_cast<char*>(f[r].data());
    win[r] = reinterpret_cast<const char*>(w[r].data());
    wout[r] = reinterpret_cast<char*>(w[r].data());
  }
  const float fScale = 3.0f;
  const int64_t wScale = -2;
  ReduceSpec spec;
  spec.hasPre = true;
  spec.scaleF = 100.0;  // not what runs: the scalar at scalePtr does
  spec.scaleI = 100;
  spec.scalePtr = &fScale;
  AlgoCall fcall{CollType::kAllReduce, count, sizeof(float), 0, true};
  auto errors = clique.launch(Algo::kRing, {fcall}, chorusFloat32, spec, fin, fout, 2);
  spec.scalePtr = &wScale;
  AlgoCall wcall{CollType::kAllReduce, count, sizeof(int64_t), 0, true};
  auto werrors = clique.launch(Algo::kRing, {wcall}, chorusInt64, spec, win, wout, 2);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    REQUIRE(werrors[r].status == 0);
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      int64_t sum = 0;
      for (int q = 0; q < n; ++q) sum += valueOf<int32_t>(q, i);
      bad += f[r][i] != float(3 * sum);
      bad += w[r][i] != -2 * sum;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("device lanes on host threads: a group past one launch's lanes runs as several launches", "[device_lane]") {
  const int n = 3;
  Clique clique(n, 1, 256, 2);
  // 170 all-reduces of 8 elements each, on disjoint parts of one buffer: one lane each on the one
  // channel, more than a launch holds.
  const size_t calls = 170;
  const size_t count = 8;
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(calls * count));
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(calls * count, -99));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < calls * count; ++i) in[r][i] = valueOf<int32_t>(r, i);
  }
  // Call c reads and writes elements [c * count, (c + 1) * count): no call waits for another.
  clique.setCallStride(count * sizeof(int32_t));
  std::vector<DeviceError> errors;
  {
    std::vector<const char*> ip(n);
    std::vector<char*> op(n);
    for (int r = 0; r < n; ++r) {
      ip[r] = reinterpret_cast<const char*>(in[r].data());
      op[r] = reinterpret_cast<char*>(out[r].data());
    }
    std::vector<AlgoCall> list(calls, AlgoCall{CollType::kAllReduce, count, sizeof(int32_t), 0, false});
    errors = clique.launch(Algo::kRing, list, chorusInt32, ReduceSpec(), ip, op, 2);
  }
  CHECK(clique.lastLaunches() == (calls + kMaxLaunchLanes - 1) / kMaxLaunchLanes);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    for (size_t i = 0; i < calls * count; ++i) {
      int32_t want = 0;
      for (int q = 0; q < n; ++q) want += valueOf<int32_t>(q, i);
      REQUIRE(out[r][i] == want);
    }
  }
}

// A DDP iteration's all-reduces as the flight recorder of a run on one H200 listed them (2 ranks,
// threads of one process sharing the GPU; device channel limit 32, 512 KiB device slots, chorusAvg
// on float32 and float64): a direct one (Simple, one block), six LL rings over 14 to 31 channels
// (the tuner's one channel per 4 KiB), and the direct one again; there the fifth call stalled in
// the third iteration. Replayed here over 32 channels of 512 KiB slots (8 per FIFO, the default),
// each call its own launch with fresh inputs, in place as DDP's buckets, the average as
// RedOpTable::spec gives it for floats (each input times 1/n, then the sum), every element checked
// against the same sum in the same type (multiples of 1/8 halved: exact); then the list shuffled
// each iteration, and then with channel counts drawn anew for every call; 4 iterations each.
TEST_CASE("device lanes on host threads: a DDP iteration's all-reduces (direct and LL rings of many channel counts)",
          "[device_lane]") {
  const int n = 2;
  struct Call {
    Algo algo;
    ProtoKind proto;
    int channels;
    size_t count;
    bool f64;
  };
  const std::vector<Call> iteration = {
      {Algo::kDirect, ProtoKind::kSimple, 1, 5940, false}, {Algo::kRing, ProtoKind::kLL, 14, 15287, false},
      {Algo::kRing, ProtoKind::kLL, 31, 32572, false},     {Algo::kRing, ProtoKind::kLL, 26, 26882, false},
      {Algo::kRing, ProtoKind::kLL, 29, 15348, true},      {Algo::kRing, ProtoKind::kLL, 25, 25833, false},
      {Algo::kRing, ProtoKind::kLL, 17, 17625, false},     {Algo::kDirect, ProtoKind::kSimple, 1, 5940, false},
  };
  ReduceSpec avg;
  avg.hasPre = true;
  avg.scaleF = 1.0 / n;
  auto value = [](int r, int it, size_t ci, size_t i) {
    return double(static_cast<int>((i * 7 + static_cast<size_t>(r) * 13 + static_cast<size_t>(it) * 5 + ci * 3) % 23) -
                  11) /
           8;
  };
  uint64_t rng = 12345;
  auto draw = [&rng](uint64_t below) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % below;
  };
  for (int mode : {0, 1, 2}) {  // as listed; shuffled; shuffled with channel counts drawn anew
    for (unsigned threads : {1u, 4u}) {
      Clique clique(n, 32, 512 * 1024, 8);
      std::vector<size_t> order(iteration.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      for (int it = 0; it < 4; ++it) {
        if (mode > 0) {
          for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[draw(i)]);
        }
        for (size_t k = 0; k < order.size(); ++k) {
          const size_t ci = order[k];
          Call c = iteration[ci];
          if (mode == 2 && c.algo == Algo::kRing) c.channels = 1 + static_cast<int>(draw(32));
          INFO("mode " << mode << " threads " << threads << " iteration " << it << " call " << k << " (listed " << ci
                       << ") " << algoName(c.algo) << " " << protoName(c.proto) << " channels " << c.channels
                       << " count " << c.count << (c.f64 ? " f64" : " f32"));
          clique.setProto(c.proto);
          clique.setChannels(c.channels);
          auto check = [&](auto zero) {
            using T = decltype(zero);
            std::vector<std::vector<T>> buf(n, std::vector<T>(c.count));
            std::vector<const char*> ip(n);
            std::vector<char*> op(n);
            for (int r = 0; r < n; ++r) {
              for (size_t i = 0; i < c.count; ++i) buf[r][i] = T(value(r, it, ci, i));
              ip[r] = reinterpret_cast<const char*>(buf[r].data());
              op[r] = reinterpret_cast<char*>(buf[r].data());
            }
            const AlgoCall call{CollType::kAllReduce, c.count, sizeof(T), 0, true};
            const auto errors = clique.launch(c.algo, {call}, kTypeOf<T>, avg, ip, op, threads, {}, 5'000'000'000ull);
            for (int r = 0; r < n; ++r) {
              const DeviceError& e = errors[r];
              INFO("rank " << r << " error " << e.status << " block " << e.block << " lane " << e.lane << " step "
                           << e.step << " peer " << e.peer << " waiting " << e.waiting << " channel " << e.seqIndex
                           << " seq " << e.seq);
              REQUIRE(e.status == 0);
            }
            for (int r = 0; r < n; ++r) {
              for (size_t i = 0; i < c.count; ++i) {
                T want = T(0);
                for (int q = 0; q < n; ++q) want = T(want + T(T(value(q, it, ci, i)) * T(avg.scaleF)));
                if (buf[r][i] != want) {
                  INFO("rank " << r << " element " << i);
                  REQUIRE(buf[r][i] == want);
                }
              }
            }
          };
          if (c.f64) {
            check(double(0));
          } else {
            check(float(0));
          }
        }
      }
    }
  }
}
