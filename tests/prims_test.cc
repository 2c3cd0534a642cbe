// The primitives (src/algo/prims.h) run by the host executor: a ring all-reduce of three ranks
// stepped by one thread through FIFOs too small to hold a step, with and without a worker group,
// checked element by element; the worker group's parts; and the split of a piece among workers.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "include/chorus/chorus.h"
#include "src/algo/fifo.h"
#include "src/algo/prims.h"
#include "src/algo/schedule.h"
#include "src/core/host_exec.h"
#include "src/core/lane.h"
#include "src/core/lane_wait.h"
#include "src/core/memshare.h"
#include "src/core/workers.h"

using namespace chorus;

namespace {

struct AlignedFifo {
  explicit AlignedFifo(uint32_t nslots, uint32_t slotBytes) : mem(fifoBytes(nslots, slotBytes) + 64, 0) {
    void* base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
    view = FifoView::layout(base, nslots, slotBytes);
  }
  std::vector<char> mem;
  FifoView view;
};

// Progresses every lane in turn, on this thread, until all are done; a turn in which none moves
// while some still wait is a deadlock.
void stepUntilDone(std::vector<Lane>& lanes) {
  for (int turn = 0; turn < 1000000; ++turn) {
    bool all = true;
    bool movedAny = false;
    for (Lane& lane : lanes) {
      if (lane.done()) continue;
      WaitInfo w;
      bool moved = false;
      const Status s = lane.progress(&w, &moved);
      REQUIRE((s.isOk() || s.inProgress()));
      all = all && s.isOk();
      movedAny = movedAny || moved;
    }
    if (all) break;
    REQUIRE(movedAny);
  }
  for (const Lane& lane : lanes) REQUIRE(lane.done());
}

// The arguments of one rank's all-reduce lane of `type` from `in` into `out` (the same vector:
// in place).
template <typename T>
LaneArgs laneOf(chorusDataType_t type, const std::vector<T>& in, std::vector<T>& out, const HostKernels& kernels,
                uint32_t slotBytes, WorkerGroup* workers, const ReduceSpec& spec = ReduceSpec()) {
  LaneArgs a;
  a.input = reinterpret_cast<const char*>(in.data());
  a.output = reinterpret_cast<char*>(out.data());
  a.elemSize = sizeof(T);
  a.type = type;
  a.spec = spec;
  a.kernels = &kernels;
  a.commId = 9;
  a.seq = 1;
  a.slotBytes = slotBytes;
  a.workers = workers;
  return a;
}

// Runs a ring all-reduce of `count` int32 on `n` ranks, every lane progressed in turn by this
// thread; returns each rank's output.
std::vector<std::vector<int32_t>> ringOnOneThread(int n, size_t count, WorkerGroup* workers) {
  const uint32_t nslots = 2;
  const uint32_t slotBytes = 4096;
  const HostKernels kernels = *hostKernelsFor(CpuIsa::kScalar);
  std::vector<std::unique_ptr<AlignedFifo>> fifos;  // fifos[r]: r -> r+1
  for (int r = 0; r < n; ++r) fifos.push_back(std::make_unique<AlignedFifo>(nslots, slotBytes));
  std::vector<SendCursor> sends(n);
  std::vector<RecvCursor> recvs(n);
  std::vector<std::vector<int32_t>> in(n), out(n, std::vector<int32_t>(count, -1));
  std::vector<Lane> lanes;
  for (int r = 0; r < n; ++r) {
    in[r].resize(count);
    for (size_t i = 0; i < count; ++i) in[r][i] = static_cast<int32_t>((i * 7 + r * 1000003) % 65537) - 30000;
    sends[r].fifo = fifos[r]->view;
    sends[r].peer = (r + 1) % n;
    recvs[r].fifo = fifos[(r + n - 1) % n]->view;
    recvs[r].peer = (r + n - 1) % n;
  }
  for (int r = 0; r < n; ++r) {
    lanes.emplace_back(laneOf(chorusInt32, in[r], out[r], kernels, slotBytes, workers),
                       ringAllReduce(n, r, count, ringLoopChunk(slotBytes, nslots, 4)), &sends[r], &recvs[r]);
  }
  stepUntilDone(lanes);
  // The sum, computed here in 64 bits and wrapped as the library's integer sum wraps.
  std::vector<int32_t> want(count);
  for (size_t i = 0; i < count; ++i) {
    uint32_t sum = 0;
    for (int r = 0; r < n; ++r) sum += static_cast<uint32_t>(in[r][i]);
    want[i] = static_cast<int32_t>(sum);
  }
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      INFO("rank " << r << " element " << i);
      REQUIRE(out[r][i] == want[i]);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("primitives: a ring all-reduce resumes across full FIFOs, with and without workers", "[prims]") {
  WorkerGroup two(2);
  WorkerGroup three(3);
  for (size_t count : {size_t(1), size_t(1023), size_t(5000), size_t(40000)}) {
    INFO("count " << count);
    const auto alone = ringOnOneThread(3, count, nullptr);
    CHECK(ringOnOneThread(3, count, &two) == alone);
    CHECK(ringOnOneThread(3, count, &three) == alone);
  }
}

namespace {

// One tree of seven ranks (rank r's children are 2r+1 and 2r+2), every lane progressed in turn by
// this thread, int32 with `spec`; returns each rank's output.
std::vector<std::vector<int32_t>> treeOnOneThread(const ReduceSpec& spec, size_t count, WorkerGroup* workers) {
  const int n = 7;
  const uint32_t nslots = 2;
  const uint32_t slotBytes = 4096;
  const HostKernels kernels = *hostKernelsFor(CpuIsa::kScalar);
  // One FIFO per tree edge and direction: up[r] carries r -> parent, down[r] parent -> r.
  std::vector<std::unique_ptr<AlignedFifo>> up, down;
  std::vector<SendCursor> upSend(n), downSend(n);
  std::vector<RecvCursor> upRecv(n), downRecv(n);
  for (int r = 0; r < n; ++r) {
    up.push_back(std::make_unique<AlignedFifo>(nslots, slotBytes));
    down.push_back(std::make_unique<AlignedFifo>(nslots, slotBytes));
    upSend[r].fifo = upRecv[r].fifo = up[r]->view;
    downSend[r].fifo = downRecv[r].fifo = down[r]->view;
  }
  std::vector<std::vector<int32_t>> in(n), out(n, std::vector<int32_t>(count, -1));
  std::vector<Lane> lanes;
  for (int r = 0; r < n; ++r) {
    in[r].resize(count);
    for (size_t i = 0; i < count; ++i) in[r][i] = static_cast<int32_t>((i * 13 + r * 101) % 2001) - 1000;
  }
  for (int r = 0; r < n; ++r) {
    LaneConnectors conns;
    int k = 0;
    if (r > 0) {
      conns.send[k] = &upSend[r];
      conns.recv[k++] = &downRecv[r];
    }
    int children = 0;
    for (int c = 2 * r + 1; c <= 2 * r + 2 && c < n; ++c, ++children) {
      conns.send[k] = &downSend[c];
      conns.recv[k++] = &upRecv[c];
    }
    lanes.emplace_back(laneOf(chorusInt32, in[r], out[r], kernels, slotBytes, workers, spec),
                       treeAllReduce(r > 0, children, 0, count, slotBytes / 4), conns);
  }
  stepUntilDone(lanes);
  for (size_t i = 0; i < count; ++i) {
    int64_t sum = 0;
    for (int r = 0; r < n; ++r) sum += spec.hasPre ? int64_t(in[r][i]) * int64_t(spec.scaleI) : in[r][i];
    const int64_t want = spec.hasPostDiv ? sum / int64_t(spec.divisor) : sum;
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << " element " << i);
      REQUIRE(out[r][i] == want);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("primitives: a tree all-reduce folds children's partial results once, with and without workers", "[prims]") {
  // The pre-op must touch each rank's input once (not a child's partial result again) and the
  // post-op must run once, at the root.
  ReduceSpec premul;
  premul.hasPre = true;
  premul.scaleI = 3;
  ReduceSpec avg;
  avg.hasPostDiv = true;
  avg.divisor = 7;
  WorkerGroup two(2);
  for (const ReduceSpec& spec : {ReduceSpec{}, premul, avg}) {
    for (size_t count : {size_t(1), size_t(1025), size_t(9000)}) {
      INFO("count " << count << " pre " << spec.hasPre << " div " << spec.hasPostDiv);
      const auto alone = treeOnOneThread(spec, count, nullptr);
      CHECK(treeOnOneThread(spec, count, &two) == alone);
    }
  }
}

namespace {

// Which all-reduce schedule, and for the slice all-reduce which pairs of ranks read each other's
// memory in place.
enum class Sched { kDirect, kSlice };
enum class Reads { kNone, kAll, kSome };

// An all-reduce of `n` ranks over float32 with `spec`, every lane progressed in turn by this
// thread, one FIFO per ordered pair of ranks; `inPlace`: each rank's output is its input.
// `headerPublishes`: whether consumers may take a slot on its ready word (in-process and shared
// memory) or must read the tail counter (socket proxies). Checks every rank's output, bit for
// bit, against every contribution pre-multiplied and folded in rank order; returns them.
std::vector<std::vector<float>> allReduceOnOneThread(Sched sched, int n, size_t count, const ReduceSpec& spec,
                                                     bool inPlace, bool headerPublishes, uint32_t slotBytes,
                                                     WorkerGroup* workers, Reads reads = Reads::kNone) {
  const uint32_t nslots = 2;
  const HostKernels kernels = *hostKernelsFor(CpuIsa::kScalar);
  std::vector<std::unique_ptr<AlignedFifo>> fifos;  // fifos[s * n + d]: s -> d
  std::vector<SendCursor> sends(n * n);
  std::vector<RecvCursor> recvs(n * n);
  for (int i = 0; i < n * n; ++i) {
    fifos.push_back(std::make_unique<AlignedFifo>(nslots, slotBytes));
    sends[i].fifo = recvs[i].fifo = fifos.back()->view;
    sends[i].peer = i % n;
    recvs[i].peer = i / n;
    recvs[i].headerPublishes = headerPublishes;
  }
  // Ranks are threads of one process here: a pair that "reads" describes plain pointers.
  std::vector<std::unique_ptr<MemShare>> shares;
  for (int r = 0; r < n; ++r) {
    std::vector<MemShare::Reach> reach(n, MemShare::Reach::kNone);
    for (int p = 0; p < n; ++p) {
      const bool yes = p != r && (reads == Reads::kAll || (reads == Reads::kSome && (r + p) % 3 != 0));
      if (yes) reach[p] = MemShare::Reach::kAddressSpace;
    }
    shares.push_back(std::make_unique<MemShare>(nullptr, reach));
  }
  std::vector<std::vector<float>> in(n), out(n);
  std::vector<std::vector<char>> scratch(n, std::vector<char>(slotBytes));
  for (int r = 0; r < n; ++r) {
    in[r].resize(count);
    // Values whose sums round, so a different fold order gives different bits; -0.0 and +0.0
    // meet at element 3 (max and min must pick the same one on every rank).
    for (size_t i = 0; i < count; ++i) in[r][i] = 1.0f / float(1 + (i * 7 + size_t(r) * 13) % 29) - 0.3f;
    if (count > 3) in[r][3] = r % 2 ? -0.0f : 0.0f;
    out[r].assign(count, -7.0f);
  }
  std::vector<Lane> lanes;
  for (int r = 0; r < n; ++r) {
    LaneConnectors conns;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      const int ks = sched == Sched::kDirect ? (p - r - 1 + n) % n : sliceIndex(n, r, p);
      const int kr = sched == Sched::kDirect ? directRecvIndex(r, p) : sliceIndex(n, r, p);
      conns.send[ks] = &sends[r * n + p];
      conns.recv[kr] = &recvs[p * n + r];
    }
    std::vector<float>& dst = inPlace ? in[r] : out[r];
    if (inPlace) out[r] = in[r];  // the inputs, kept for the reference
    LaneArgs a = laneOf(chorusFloat32, in[r], dst, kernels, slotBytes, workers, spec);
    a.scratch = scratch[r].data();
    if (sched == Sched::kDirect) {
      a.proto = ProtoKind::kFlag;
      lanes.emplace_back(a, directAllReduce(n, r, count, slotBytes / 4, inPlace), conns);
    } else {
      a.share = shares[r].get();
      lanes.emplace_back(a, sliceAllReduce(n, r, count, slotBytes / 4, inPlace), conns);
    }
  }
  std::vector<std::vector<float>> inputs = inPlace ? out : in;
  stepUntilDone(lanes);
  std::vector<std::vector<float>>& result = inPlace ? in : out;
  if (sched == Sched::kSlice && reads != Reads::kSome) {
    // What crossed each connection: the two offers and a done where the receiver reads in place,
    // otherwise the "bytes follow" slot, the sender's input for the receiver's slice and the
    // sender's reduced slice. A pre-multiplying operator offers nothing: each rank's scalar is its
    // own, so its input leaves multiplied through the FIFO.
    const size_t pieceElems = slotBytes / 4;
    for (int src = 0; src < n; ++src) {
      for (int dst = 0; dst < n; ++dst) {
        if (src == dst) continue;
        const auto pieces = [&](int r) { return (partition(count, n, r).count + pieceElems - 1) / pieceElems; };
        const size_t want = reads == Reads::kAll && !spec.hasPre ? 3 : 1 + pieces(dst) + pieces(src);
        INFO("connection " << src << " -> " << dst);
        CHECK(sends[src * n + dst].tail == want);
      }
    }
  }
  // The reference: every rank's contribution, pre-multiplied, folded in rank order.
  const auto op = [&](float x, float y) {
    switch (spec.kind) {
      case RedKind::kSum:
        return x + y;
      case RedKind::kProd:
        return x * y;
      case RedKind::kMax:
        return x > y ? x : y;
      default:
        return x < y ? x : y;
    }
  };
  const auto pre = [&](float x) { return spec.hasPre ? float(double(x) * spec.scaleF) : x; };
  for (size_t i = 0; i < count; ++i) {
    float want = op(pre(inputs[0][i]), pre(inputs[1][i]));
    for (int r = 2; r < n; ++r) want = op(want, pre(inputs[r][i]));
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << " element " << i);
      REQUIRE(std::memcmp(&result[r][i], &want, 4) == 0);
    }
  }
  return result;
}

ReduceSpec premulSpec() {
  ReduceSpec s;
  s.hasPre = true;
  s.scaleF = 0.75;
  return s;
}
ReduceSpec kindSpec(RedKind k) {
  ReduceSpec s;
  s.kind = k;
  return s;
}

}  // namespace

// A lane looks for its piece, finds none, and only then asks why: a peer that published its last
// piece and closed its connection in between (its call done, its communicator destroyed) left
// that piece to take; only an empty FIFO that is closed is a failure.
TEST_CASE("a closed connection is an error only once what the peer sent before closing is taken", "[prims]") {
  AlignedFifo fifo(2, 1024);
  SendCursor send;
  send.fifo = fifo.view;
  send.peer = 0;
  RecvCursor recv;
  recv.fifo = fifo.view;
  recv.peer = 1;
  WaitInfo w;

  Status s = lanes::waitForData(&recv, &w, Prim::kRecv, 0, 1);
  CHECK(s.inProgress());
  CHECK_FALSE(w.closed);

  send.publish();
  fifo.view.close();
  s = lanes::waitForData(&recv, &w, Prim::kRecv, 0, 1);
  CHECK(s.inProgress());
  CHECK_FALSE(w.closed);

  recv.consume();
  s = lanes::waitForData(&recv, &w, Prim::kRecv, 1, 1);
  CHECK(s.code() == chorusRemoteError);
  CHECK(w.closed);
  CHECK(s.message().find("rank 1 closed its connection") != std::string::npos);
}

TEST_CASE("primitives: the direct all-reduce folds in rank order, the same bits on every rank", "[prims]") {
  WorkerGroup two(2);
  for (int n = 2; n <= kMaxLanePeers + 1; ++n) {
    for (const ReduceSpec& spec : {ReduceSpec{}, premulSpec(), kindSpec(RedKind::kMax), kindSpec(RedKind::kMin)}) {
      // Inline pieces (up to 32 bytes), one piece, and several through two-slot FIFOs.
      for (size_t count : {size_t(5), size_t(8), size_t(300), size_t(2500)}) {
        for (bool inPlace : {false, true}) {
          for (bool headerPublishes : {true, false}) {
            INFO("n " << n << " kind " << int(spec.kind) << " pre " << spec.hasPre << " count " << count << " in place "
                      << inPlace << " header publishes " << headerPublishes);
            const auto alone =
                allReduceOnOneThread(Sched::kDirect, n, count, spec, inPlace, headerPublishes, 1024, nullptr);
            if (count == 2500 && headerPublishes) {
              CHECK(allReduceOnOneThread(Sched::kDirect, n, count, spec, inPlace, headerPublishes, 8192, &two) ==
                    alone);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("primitives: the slice all-reduce, its peers reading in place or sent bytes", "[prims]") {
  WorkerGroup two(2);
  for (int n = 2; n <= kMaxLanePeers + 1; ++n) {
    for (const ReduceSpec& spec : {ReduceSpec{}, premulSpec(), kindSpec(RedKind::kMax), kindSpec(RedKind::kMin)}) {
      // Fewer elements than ranks (empty slices), one piece per slice, and many pieces per slice
      // through two-slot FIFOs (a MemDesc fills the 1 KiB slot's first 200 bytes).
      for (size_t count : {size_t(5), size_t(200), size_t(4001)}) {
        for (bool inPlace : {false, true}) {
          for (Reads reads : {Reads::kNone, Reads::kAll, Reads::kSome}) {
            INFO("n " << n << " kind " << int(spec.kind) << " pre " << spec.hasPre << " count " << count << " in place "
                      << inPlace << " reads " << int(reads));
            const auto alone =
                allReduceOnOneThread(Sched::kSlice, n, count, spec, inPlace, false, 1024, nullptr, reads);
            if (count == 4001) {
              CHECK(allReduceOnOneThread(Sched::kSlice, n, count, spec, inPlace, false, 8192, &two, reads) == alone);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("primitives: each primitive's sources and destinations", "[prims]") {
  char in[1], out[1], r[1], s[1];
  const PieceMove send = primMove(Prim::kSend, 0, in, out, r, s);
  CHECK((send.fold == Fold::kPre && send.a == in && send.dst == s && !send.dst2));
  const PieceMove rrcs = primMove(Prim::kRecvReduceCopySend, 0, in, out, r, s);
  CHECK((rrcs.fold == Fold::kReducePost && rrcs.a == r && rrcs.b == in && rrcs.dst == out && rrcs.dst2 == s));
  const PieceMove rrs = primMove(Prim::kRecvReduceSend, 0, in, out, r, s);
  CHECK((rrs.fold == Fold::kReduce && rrs.a == r && rrs.b == in && rrs.dst == s && !rrs.dst2));
  const PieceMove rcs = primMove(Prim::kRecvCopySend, 0, in, out, r, s);
  CHECK((rcs.fold == Fold::kCopy && rcs.a == r && rcs.dst == out && rcs.dst2 == s));
  const PieceMove local = primMove(Prim::kLocal, 0, in, out, nullptr, nullptr);
  CHECK((local.fold == Fold::kPre && local.a == in && local.dst == out));
  // The direct all-reduce's folds: own input first, onto the output, two received, own last.
  char r0[1];
  const PieceMove own = primMove(Prim::kRecvReduceCopy, kOwnFirst | kNoPost, in, out, r, nullptr);
  CHECK((own.fold == Fold::kReduce && own.a == in && own.b == r && own.dst == out && own.preA));
  const PieceMove onto = primMove(Prim::kRecvReduceCopy, kFoldIntoOutput, in, out, r, nullptr);
  CHECK((onto.fold == Fold::kReducePost && onto.a == out && onto.b == r && onto.dst == out && onto.noPre));
  const PieceMove pair = primMove(Prim::kRecvPairReduceCopy, kNoPost, in, out, r, nullptr, r0);
  CHECK((pair.fold == Fold::kReduce && pair.a == r0 && pair.b == r && pair.dst == out && pair.noPre));
  const PieceMove mine = primMove(Prim::kLocalReduce, 0, in, out, nullptr, nullptr);
  CHECK((mine.fold == Fold::kReducePost && mine.a == out && mine.b == in && mine.dst == out && !mine.noPre));
}

TEST_CASE("a worker group calls every part once per run", "[prims][workers]") {
  WorkerGroup g(4);
  REQUIRE(g.size() == 4);
  std::atomic<int> calls[4] = {};
  struct Ctx {
    std::atomic<int>* calls;
  } ctx{calls};
  for (int run = 0; run < 2000; ++run) {
    g.run(
        [](const void* c, int part, int parts) {
          REQUIRE(parts == 4);
          static_cast<const Ctx*>(c)->calls[part].fetch_add(1, std::memory_order_relaxed);
        },
        &ctx);
  }
  for (auto& c : calls) CHECK(c.load() == 2000);
}

TEST_CASE("a piece split among workers gives the bits of one thread", "[prims][workers]") {
  const HostKernels kernels = *hostKernelsFor(CpuIsa::kScalar);
  WorkerGroup g(3);
  for (size_t n : {size_t(1024), size_t(1037), size_t(4099)}) {
    std::vector<float> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = 0.1f * float(i % 97);
      b[i] = 1.0f / float(1 + i % 13);
    }
    for (Fold fold : {Fold::kCopy, Fold::kPre, Fold::kReduce, Fold::kReducePost}) {
      LaneArgs args;
      args.elemSize = 4;
      args.type = chorusFloat32;
      args.kernels = &kernels;
      args.spec.hasPre = true;
      args.spec.scaleF = 0.5;
      std::vector<float> one(n, -1.0f), one2(n, -1.0f), split(n, -2.0f), split2(n, -2.0f);
      auto mv = [&](std::vector<float>& d, std::vector<float>& d2) {
        return PieceMove{fold, reinterpret_cast<const char*>(a.data()), reinterpret_cast<const char*>(b.data()),
                         reinterpret_cast<char*>(d.data()), reinterpret_cast<char*>(d2.data())};
      };
      hostMove(args, mv(one, one2), n);
      args.workers = &g;
      hostMove(args, mv(split, split2), n);
      INFO("n " << n << " fold " << int(fold));
      CHECK(split == one);
      CHECK(split2 == one);
      // Against the definitions, element by element.
      for (size_t i = 0; i < n; ++i) {
        const float pb = b[i] * 0.5f;
        const float want = fold == Fold::kCopy ? a[i] : fold == Fold::kPre ? a[i] * 0.5f : a[i] + pb;
        REQUIRE(one[i] == want);
      }
    }
  }
}
