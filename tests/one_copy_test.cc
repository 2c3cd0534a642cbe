// The one-copy collectives' kernel (src/device/one_copy_exec.h, OneCopy) run by blocks of host
// threads: ranks are sets of blocks whose buffers and signal areas are plain host memory, each
// rank's OneCopyArgs naming every rank's, as the communicator fills them with peers' mapped device
// memory. Checked element by element against a reference folded here in rank order, for several
// types and operators, 2 to 8 ranks, 1 to 3 blocks per rank, aligned and unaligned buffers, in
// place and not, several operations in a row (the barriers' numbers advance), and a rank that
// never comes (the deadline and the abort word end the wait, naming it). Then the host's decision
// from the ranks' records (made-up GPUs and processes), which every rank takes alike.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "include/chorus/chorus.h"
#include "src/core/onecopy.h"
#include "src/device/launch_pack.h"
#include "tests/host_block.h"
#include "tests/ref_ops.h"

using namespace chorus;
using namespace chorus::device;

namespace {

// n ranks' device state, signal areas and the arguments of their one-copy lanes.
class OneCopyRanks {
 public:
  OneCopyRanks(int n, int parts) : n_(n), parts_(parts), ranks_(n) {
    for (Rank& k : ranks_) {
      k.signal.assign(kOneCopySignalWords, 0);
      k.p2p.assign(2 * n, 0);
      std::memset(&k.state, 0, sizeof(k.state));
      k.state.p2pSendSeq = k.p2p.data();
      k.state.p2pRecvSeq = k.p2p.data() + n;
    }
  }

  // One all-reduce of `count` elements per rank (in[r] to out[r]), every rank's blocks at once
  // (ranks with runs[r] false never run). Returns each rank's error record.
  std::vector<DeviceError> allReduce(int type, const ReduceSpec& spec, size_t count, const std::vector<const char*>& in,
                                     const std::vector<char*>& out, unsigned threads,
                                     const std::vector<bool>& runs = {}, uint64_t timeoutNs = 20'000'000'000ull,
                                     uint32_t* abortWord = nullptr) {
    return run(CollType::kAllReduce, 0, type, spec, count, in, out, threads, runs, timeoutNs, abortWord);
  }
  // One collective `coll` (root `root`) of the call's `count` as OneCopyArgs counts it.
  std::vector<DeviceError> run(CollType coll, int root, int type, const ReduceSpec& spec, size_t count,
                               const std::vector<const char*>& in, const std::vector<char*>& out, unsigned threads,
                               const std::vector<bool>& runs = {}, uint64_t timeoutNs = 20'000'000'000ull,
                               uint32_t* abortWord = nullptr) {
    std::vector<DeviceError> errors(n_);
    std::vector<std::vector<LaunchParams>> launches(n_);
    for (int r = 0; r < n_; ++r) {
      Rank& k = ranks_[r];
      k.args = std::make_unique<OneCopyArgs>();
      k.args->nranks = static_cast<uint32_t>(n_);
      k.args->rank = static_cast<uint32_t>(r);
      k.args->parts = static_cast<uint32_t>(parts_);
      k.args->layout = oneCopyLayout(collective(coll));
      k.args->root = static_cast<uint8_t>(root);
      k.args->count = count;
      for (int q = 0; q < n_; ++q) {
        k.args->input[q] = in[q];
        k.args->output[q] = out[q];
        k.args->signal[q] = ranks_[q].signal.data();
      }
      std::memset(&errors[r], 0, sizeof(DeviceError));
      LaunchParams base;
      base.state = &k.state;
      base.error = &errors[r];
      base.abortFlag = abortWord ? abortWord : &noAbort_;
      base.commId = 5;
      base.timeoutNs = timeoutNs;
      LaunchPacker packer(base);
      std::vector<DeviceLane> lanes;
      for (int part = 0; part < parts_; ++part) {
        DeviceLane l;
        l.type = static_cast<uint8_t>(type);
        l.seqKind = SeqKind::kColl;
        l.seqIndex = part;
        l.input = in[r];
        l.output = out[r];
        l.spec = spec;
        l.oneCopy = k.args.get();
        lanes.push_back(l);
      }
      packer.addCollective(lanes, Span{}, Span{});
      launches[r] = packer.finish();
    }
    runOnHostThreads(launches, threads, runs);
    return errors;
  }
  // Rank r's device counters (a test may put the ranks out of step).
  DeviceCommState& state(int r) { return ranks_[r].state; }

 private:
  struct Rank {
    std::vector<uint64_t> signal;
    std::vector<uint64_t> p2p;
    DeviceCommState state;
    std::unique_ptr<OneCopyArgs> args;
  };
  int n_;
  int parts_;
  std::vector<Rank> ranks_;
  uint32_t noAbort_ = 0;
};

// Rank r's element i of operation `round`: small integers, so sums and products are exact.
template <typename T>
T valueOf(int r, size_t i, int round) {
  return T(static_cast<int>((i * 5 + static_cast<size_t>(r) * 11 + static_cast<size_t>(round) * 3) % 7) - 3);
}

template <typename T>
constexpr int kTypeOf = -1;
template <>
constexpr int kTypeOf<int8_t> = chorusInt8;
template <>
constexpr int kTypeOf<int32_t> = chorusInt32;
template <>
constexpr int kTypeOf<uint64_t> = chorusUint64;
template <>
constexpr int kTypeOf<float> = chorusFloat32;
template <>
constexpr int kTypeOf<double> = chorusFloat64;

// `rounds` all-reduces in a row through the same ranks; `shift` bytes past 16-byte alignment.
template <typename T>
void check(int n, int parts, RedKind kind, size_t count, bool inPlace, size_t shift, unsigned threads, int rounds = 2) {
  INFO("ranks " << n << " parts " << parts << " op " << static_cast<int>(kind) << " count " << count
                << (inPlace ? " in place" : "") << " shift " << shift << " threads " << threads);
  OneCopyRanks ranks(n, parts);
  ReduceSpec spec;
  spec.kind = kind;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<char>> in(n, std::vector<char>(count * sizeof(T) + 32));
    std::vector<std::vector<char>> out(n, std::vector<char>(count * sizeof(T) + 32));
    std::vector<const char*> ip(n);
    std::vector<char*> op(n);
    auto at = [&](std::vector<char>& v) {
      char* p = v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) % 16) % 16 + shift;
      return p;
    };
    for (int r = 0; r < n; ++r) {
      char* i = at(in[r]);
      char* o = at(out[r]);
      for (size_t e = 0; e < count; ++e) {
        const T v = valueOf<T>(r, e, round);
        std::memcpy(i + e * sizeof(T), &v, sizeof(T));
        const T junk = T(99);
        std::memcpy(o + e * sizeof(T), inPlace ? &v : &junk, sizeof(T));
      }
      ip[r] = inPlace ? o : i;
      op[r] = o;
    }
    const auto errors = ranks.allReduce(kTypeOf<T>, spec, count, ip, op, threads);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << " round " << round);
      REQUIRE(errors[r].status == 0);
      for (size_t e = 0; e < count; ++e) {
        T want = valueOf<T>(0, e, round);
        for (int q = 1; q < n; ++q) want = test::refOp<T>(kind, want, valueOf<T>(q, e, round));
        T got;
        std::memcpy(&got, op[r] + e * sizeof(T), sizeof(T));
        INFO("element " << e);
        REQUIRE(got == want);
      }
    }
  }
}

}  // namespace

TEST_CASE("one-copy all-reduce on host threads: ranks, parts and sizes", "[one_copy]") {
  for (int n : {2, 3, 4, 8}) {
    for (int parts : {1, 3}) {
      for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(64), size_t(1001)}) {
        check<int32_t>(n, parts, RedKind::kSum, count, false, 0, 3);
      }
    }
  }
  check<int32_t>(4, 2, RedKind::kSum, 4099, true, 0, 4, 3);
}

TEST_CASE("one-copy all-reduce on host threads: types, operators, unaligned buffers", "[one_copy]") {
  for (RedKind kind : {RedKind::kSum, RedKind::kProd, RedKind::kMax, RedKind::kMin}) {
    check<float>(3, 2, kind, 777, false, 0, 3);
    check<double>(2, 1, kind, 300, true, 8, 2);
    check<int8_t>(4, 2, kind, 1000, false, 3, 3);
    check<uint64_t>(3, 1, kind, 129, true, 0, 2);
  }
  for (RedKind kind : {RedKind::kBand, RedKind::kBor, RedKind::kBxor}) {  // integers only
    check<int8_t>(4, 2, kind, 1000, false, 3, 3);
    check<uint64_t>(3, 1, kind, 129, true, 0, 2);
  }
  // Unaligned: only the element loop runs; aligned but not a whole vector long: both loops.
  check<float>(3, 2, RedKind::kSum, 1000, false, 4, 3);
  check<float>(5, 1, RedKind::kSum, 37, true, 0, 1);
}

namespace {

// One-copy's other collectives, `rounds` in a row through the same ranks: every rank's output
// (every byte of it) against a reference folded here; the buffers a collective must not touch
// (a broadcast's inputs off the root, a reduce's outputs off it) hold values that would show.
template <typename T>
void checkColl(CollType coll, int n, int parts, RedKind kind, size_t count, bool inPlace, size_t shift,
               unsigned threads, int rounds = 2) {
  const int root = static_cast<int>(count % static_cast<size_t>(n));
  INFO(collName(coll) << " ranks " << n << " parts " << parts << " op " << static_cast<int>(kind) << " count " << count
                      << (inPlace ? " in place" : "") << " shift " << shift << " root " << root);
  OneCopyRanks ranks(n, parts);
  ReduceSpec spec;
  spec.kind = kind;
  const size_t ic = coll == CollType::kReduceScatter ? count * n : count;
  const size_t oc = coll == CollType::kAllGather ? count * n : count;
  const T junk = T(99);
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<char>> inBuf(n, std::vector<char>((ic + oc) * sizeof(T) + 32));
    std::vector<std::vector<char>> outBuf(n, std::vector<char>((ic + oc) * sizeof(T) + 32));
    std::vector<const char*> ip(n);
    std::vector<char*> op(n);
    for (int r = 0; r < n; ++r) {
      auto at = [&](std::vector<char>& v) {
        return v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) % 16) % 16 + shift;
      };
      char* o = at(outBuf[r]);
      for (size_t e = 0; e < oc; ++e) std::memcpy(o + e * sizeof(T), &junk, sizeof(T));
      char* i = at(inBuf[r]);
      if (inPlace) {
        // NCCL's in place: an all-gather's input is its block of the output, a reduce-scatter's
        // output its block of the input; the others, the one buffer.
        i = coll == CollType::kAllGather ? o + static_cast<size_t>(r) * count * sizeof(T) : o;
        if (coll == CollType::kReduceScatter) o = i + static_cast<size_t>(r) * count * sizeof(T);
      }
      for (size_t e = 0; e < ic; ++e) {
        const T v = valueOf<T>(r, e, round);
        std::memcpy(i + e * sizeof(T), &v, sizeof(T));
      }
      ip[r] = i;
      op[r] = o;
    }
    const auto errors = ranks.run(coll, root, kTypeOf<T>, spec, count, ip, op, threads);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << " round " << round);
      REQUIRE(errors[r].status == 0);
      for (size_t e = 0; e < oc; ++e) {
        auto folded = [&](size_t j) {
          T w = valueOf<T>(0, j, round);
          for (int q = 1; q < n; ++q) w = test::refOp<T>(kind, w, valueOf<T>(q, j, round));
          return w;
        };
        T want = junk;
        switch (coll) {
          case CollType::kBroadcast:
            want = valueOf<T>(root, e, round);
            break;
          case CollType::kReduce:
            // Off the root, in place, the output is the input, as it was.
            want = r == root ? folded(e) : inPlace ? valueOf<T>(r, e, round) : junk;
            break;
          case CollType::kReduceScatter:
            want = folded(static_cast<size_t>(r) * count + e);
            break;
          case CollType::kAllGather:
            want = valueOf<T>(static_cast<int>(e / count), e % count, round);
            break;
          default:
            break;
        }
        T got;
        std::memcpy(&got, op[r] + e * sizeof(T), sizeof(T));
        INFO("element " << e);
        REQUIRE(got == want);
      }
      if (!inPlace && coll == CollType::kBroadcast) {
        // The root's input alone is read; every input is as it was.
        for (size_t e = 0; e < ic; ++e) {
          T v;
          std::memcpy(&v, ip[r] + e * sizeof(T), sizeof(T));
          REQUIRE(v == valueOf<T>(r, e, round));
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("one-copy reduce-scatter, all-gather, broadcast and reduce on host threads", "[one_copy]") {
  for (CollType c : {CollType::kReduceScatter, CollType::kAllGather, CollType::kBroadcast, CollType::kReduce}) {
    // Ranks and blocks per rank in pairs (every rank's blocks are threads spinning at the
    // barriers: 8 ranks of 3 blocks would be 72 on the CI's two cores, under TSan too).
    for (const auto& [n, parts] : {std::pair{2, 3}, std::pair{3, 1}, std::pair{4, 2}, std::pair{8, 1}}) {
      for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(64), size_t(1001)}) {
        for (bool inPlace : {false, true}) checkColl<int32_t>(c, n, parts, RedKind::kSum, count, inPlace, 0, 3);
      }
    }
    for (RedKind kind : {RedKind::kProd, RedKind::kMax, RedKind::kMin}) {
      checkColl<float>(c, 3, 2, kind, 777, false, 0, 3);
      checkColl<double>(c, 2, 1, kind, 300, true, 8, 2);
      checkColl<int8_t>(c, 4, 2, kind, 1000, false, 3, 3);
      checkColl<uint64_t>(c, 3, 1, kind, 129, true, 0, 2);
    }
    for (RedKind kind : {RedKind::kBand, RedKind::kBor, RedKind::kBxor}) {
      checkColl<int8_t>(c, 4, 2, kind, 1000, false, 3, 3);
      checkColl<uint64_t>(c, 3, 1, kind, 129, true, 0, 2);
    }
    // Unaligned (the element loop alone), and short of a vector per part (both loops).
    checkColl<float>(c, 3, 2, RedKind::kSum, 1000, false, 4, 3);
    checkColl<float>(c, 5, 1, RedKind::kSum, 37, true, 0, 1);
    checkColl<int32_t>(c, 4, 2, RedKind::kSum, 4099, true, 0, 4, 3);
  }
}

TEST_CASE("one-copy all-reduce on host threads: pre-multiplied sums and integer averages", "[one_copy]") {
  const int n = 3;
  const size_t count = 500;
  OneCopyRanks ranks(n, 2);
  std::vector<std::vector<int32_t>> buf(n, std::vector<int32_t>(count));
  std::vector<const char*> ip(n);
  std::vector<char*> op(n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) buf[r][i] = valueOf<int32_t>(r, i, 0) * 6;
    ip[r] = reinterpret_cast<const char*>(buf[r].data());
    op[r] = reinterpret_cast<char*>(buf[r].data());
  }
  ReduceSpec premul;
  premul.hasPre = true;
  premul.scaleI = 2;
  REQUIRE(ranks.allReduce(chorusInt32, premul, count, ip, op, 3)[0].status == 0);
  ReduceSpec avg;
  avg.hasPostDiv = true;
  avg.divisor = n;
  const auto errors = ranks.allReduce(chorusInt32, avg, count, ip, op, 3);
  for (int r = 0; r < n; ++r) {
    REQUIRE(errors[r].status == 0);
    for (size_t i = 0; i < count; ++i) {
      int32_t sum = 0;
      for (int q = 0; q < n; ++q) sum += valueOf<int32_t>(q, i, 0) * 6 * 2;
      REQUIRE(buf[r][i] == sum);  // the average of n equal sums is the sum
    }
  }
}

TEST_CASE("a one-copy all-reduce waiting on a rank that never comes ends at the deadline or the abort word",
          "[one_copy]") {
  const int n = 3;
  const size_t count = 256;
  for (const bool byAbort : {false, true}) {
    INFO((byAbort ? "abort" : "deadline"));
    OneCopyRanks ranks(n, 2);
    std::vector<std::vector<float>> in(n, std::vector<float>(count, 1.0f));
    std::vector<std::vector<float>> out(n, std::vector<float>(count));
    std::vector<const char*> ip(n);
    std::vector<char*> op(n);
    for (int r = 0; r < n; ++r) {
      ip[r] = reinterpret_cast<const char*>(in[r].data());
      op[r] = reinterpret_cast<char*>(out[r].data());
    }
    uint32_t abortWord = 0;
    std::thread aborter;
    if (byAbort) aborter = abortAfter(&abortWord, std::chrono::milliseconds(100));
    const auto start = std::chrono::steady_clock::now();
    // Rank 1 never runs; ranks 0 and 2 wait for it to arrive.
    const auto errors = ranks.allReduce(chorusFloat32, ReduceSpec(), count, ip, op, 2, {true, false, true},
                                        byAbort ? 60'000'000'000ull : 200'000'000ull, &abortWord);
    if (aborter.joinable()) aborter.join();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
    for (int r : {0, 2}) {
      INFO("rank " << r);
      const DeviceError& e = errors[r];
      CHECK(e.status == static_cast<uint32_t>(byAbort ? DeviceFault::kAborted : DeviceFault::kTimeout));
      CHECK(e.waiting == 3);  // for the peer to arrive
      CHECK(e.peer == 1);
      CHECK(e.step == 0);
      CHECK(e.seq == 1);
      CHECK(e.seqKind == static_cast<uint32_t>(SeqKind::kColl));
      CHECK((e.seqIndex == 0 || e.seqIndex == 1));
      // Nothing was written: no rank reduced a part whose inputs were not all there.
      for (size_t i = 0; i < count; ++i) REQUIRE(out[r][i] == 0.0f);
    }
  }
}

TEST_CASE("a one-copy all-reduce whose ranks are at different operations is an error, not a pass", "[one_copy]") {
  // Rank 1 has run five more operations on channel 0 than rank 0 (as if the ranks had issued
  // different ones): rank 0 sees rank 1's signal past its own operation and says so.
  const int n = 2;
  const size_t count = 64;
  OneCopyRanks ranks(n, 1);
  ranks.state(1).collSeq[0] = 5;
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count, 1));
  std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count, 0));
  std::vector<const char*> ip(n);
  std::vector<char*> op(n);
  for (int r = 0; r < n; ++r) {
    ip[r] = reinterpret_cast<const char*>(in[r].data());
    op[r] = reinterpret_cast<char*>(out[r].data());
  }
  const auto errors = ranks.allReduce(chorusInt32, ReduceSpec(), count, ip, op, 2, {}, 200'000'000ull);
  CHECK(errors[0].status == static_cast<uint32_t>(DeviceFault::kMismatch));
  CHECK(errors[0].peer == 1);
  CHECK(errors[0].waiting == 3);
  // Rank 1 waits for rank 0 to reach its (later) operation, until its deadline.
  CHECK(errors[1].status == static_cast<uint32_t>(DeviceFault::kTimeout));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) REQUIRE(out[r][i] == 0);  // nothing reduced
  }
}

namespace {

// A rank's process: `proc` numbers processes of the one host; `p2pOff` sets CHORUS_P2P_DISABLE.
PeerInfo process(int proc, bool p2pOff = false) {
  PeerInfo p;
  p.hostHash = 42;
  p.processNonce = 1000 + static_cast<uint64_t>(proc);
  p.pid = 100 + proc;
  p.flags = p2pOff ? PeerInfo::kP2pDisabled : 0;
  return p;
}

// A record that offers: `gpu` names its GPU, `reach` the GPUs that GPU reaches (itself first).
OneCopyRecord offering(uint64_t gpu, std::initializer_list<uint64_t> reach, uint64_t count = 1000) {
  OneCopyRecord r;
  r.call.offers = 1;
  r.call.count = count;
  r.call.type = chorusFloat32;
  r.gpu.uuid[0] = gpu;
  r.gpu.uuid[1] = gpu * 7;
  for (uint64_t g : reach) {
    r.gpu.reach[r.gpu.nreach][0] = g;
    r.gpu.reach[r.gpu.nreach][1] = g * 7;
    ++r.gpu.nreach;
  }
  return r;
}

}  // namespace

TEST_CASE("one-copy: every rank decides alike from the records", "[one_copy]") {
  const Algorithm& oneCopy = algorithm(Algo::kOneCopy);
  // Processes sharing one GPU, as on a one-GPU machine.
  CHECK(oneCopyAgreed(oneCopy, {process(0), process(1), process(2)},
                      {offering(1, {1}), offering(1, {1}), offering(1, {1})}));
  // Threads of one process on one GPU.
  CHECK(oneCopyAgreed(oneCopy, {process(0), process(0)}, {offering(1, {1}), offering(1, {1})}));
  // Two GPUs with peer access both ways, in two processes; in one process no (a cuMem allocation
  // is mapped for its own GPU only).
  CHECK(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1, 2}), offering(2, {2, 1})}));
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(0)}, {offering(1, {1, 2}), offering(2, {2, 1})}));
  // Mixed: two processes of two threads each, each process's threads on one GPU.
  CHECK(oneCopyAgreed(oneCopy, {process(0), process(0), process(1), process(1)},
                      {offering(1, {1, 2}), offering(1, {1, 2}), offering(2, {2, 1}), offering(2, {2, 1})}));
  // Peer access one way only, or none: no.
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1, 2}), offering(2, {2})}));
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(0)}, {offering(1, {1}), offering(2, {2})}));
  // Three ranks: every pair must reach, not only pairs with rank 0.
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1), process(2)},
                            {offering(1, {1, 2, 3}), offering(2, {2, 1}), offering(3, {3, 1})}));
  // CHORUS_P2P_DISABLE on one rank, between processes: no (on one GPU, in one process: still yes).
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1, true)}, {offering(1, {1}), offering(1, {1})}));
  CHECK(oneCopyAgreed(oneCopy, {process(0, true), process(0, true)}, {offering(1, {1}), offering(1, {1})}));
  // One rank not offering (a buffer not registered, or not on its GPU), or another call: no.
  OneCopyRecord shy = offering(1, {1});
  shy.call.offers = 0;
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1), process(2)}, {offering(1, {1}), shy, offering(1, {1})}));
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1}), offering(1, {1}, 999)}));
  OneCopyRecord other = offering(1, {1});
  other.call.type = chorusInt32;
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1}), other}));
  // Another collective, or another root.
  OneCopyRecord gather = offering(1, {1});
  gather.call.coll = static_cast<uint32_t>(CollType::kAllGather);
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1}), gather}));
  CHECK(oneCopyAgreed(oneCopy, {process(0), process(1)}, {gather, gather}));
  OneCopyRecord bcast0 = offering(1, {1});
  bcast0.call.coll = static_cast<uint32_t>(CollType::kBroadcast);
  OneCopyRecord bcast1 = bcast0;
  bcast1.call.root = 1;
  CHECK(oneCopyAgreed(oneCopy, {process(0), process(1)}, {bcast1, bcast1}));
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {bcast0, bcast1}));
  // The reduction must be the same everywhere: a pre-multiplied sum whose scalar differs between
  // ranks runs as any all-reduce (the kernel applies one rank's scalar to every input).
  OneCopyRecord twice = offering(1, {1});
  twice.call.hasPre = 1;
  twice.call.scaleF = 2.0;
  OneCopyRecord thrice = twice;
  thrice.call.scaleF = 3.0;
  CHECK(oneCopyAgreed(oneCopy, {process(0), process(1)}, {twice, twice}));
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {twice, thrice}));
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {twice, offering(1, {1})}));
  OneCopyRecord maxed = offering(1, {1});
  maxed.call.redKind = static_cast<uint32_t>(RedKind::kMax);
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1}), maxed}));
  // A rank without a GPU record never reaches.
  OneCopyRecord none = offering(0, {});
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1}), none}));
}

TEST_CASE("one-copy: the algorithm decides on the calls, the core on the GPUs", "[one_copy]") {
  // The agreement is a hook of the algorithm (Algorithm::agreed): one-copy's wants every rank
  // offering the same call; an algorithm not taken where ranks agree never agrees.
  AgreedCall call;
  call.offers = 1;
  call.count = 1000;
  call.type = chorusFloat32;
  AgreedCall shy = call;
  shy.offers = 0;
  const Algorithm& oneCopy = algorithm(Algo::kOneCopy);
  REQUIRE(oneCopy.taken() == Algorithm::Taken::kIfAgreed);
  CHECK(oneCopy.agreed({call, call, call}));
  CHECK_FALSE(oneCopy.agreed({call, shy}));
  CHECK_FALSE(oneCopy.agreed({}));
  for (int a = 0; a < algorithmCount(); ++a) {
    const Algorithm& other = algorithm(static_cast<Algo>(a));
    if (other.taken() != Algorithm::Taken::kIfAgreed) CHECK_FALSE(other.agreed({call, call}));
  }
  // The same calls, GPUs that do not reach each other: the core says no.
  CHECK_FALSE(oneCopyAgreed(oneCopy, {process(0), process(1)}, {offering(1, {1}), offering(2, {2})}));
}

TEST_CASE("one-copy: blocks per rank grow with each rank's share", "[one_copy]") {
  CHECK(oneCopyParts(0, 2) == 1);
  CHECK(oneCopyParts(1024, 2) == 1);
  CHECK(oneCopyParts(size_t(1) << 20, 2) == 2);   // 512 KiB each
  CHECK(oneCopyParts(size_t(1) << 20, 4) == 1);   // 256 KiB each
  CHECK(oneCopyParts(size_t(8) << 20, 4) == 8);   // 2 MiB each
  CHECK(oneCopyParts(size_t(1) << 30, 2) == 16);  // capped
  CHECK(oneCopyParts(size_t(1) << 30, 8) == 16);
  // The message's share for the all-reduce, reduce and broadcast; the whole call's bytes for an
  // all-gather (each input) and a reduce-scatter (each output).
  for (CollType c : {CollType::kAllReduce, CollType::kReduce, CollType::kBroadcast}) {
    CHECK(oneCopyParts(c, size_t(8) << 20, 4) == 8);
  }
  for (CollType c : {CollType::kAllGather, CollType::kReduceScatter}) {
    CHECK(oneCopyParts(c, size_t(1) << 20, 4) == 4);
    CHECK(oneCopyParts(c, size_t(8) << 20, 4) == 16);
    CHECK(oneCopyParts(c, 1000, 8) == 1);
  }
}
