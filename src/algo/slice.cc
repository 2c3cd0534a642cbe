// The slice all-reduce (one host, large messages): each rank reduces one slice of the message
// from every rank's contribution, read in place where the peer offers its buffers (threads of one
// process; registered memory between processes), and every rank gets every slice
// (sliceAllReduce, src/algo/schedule.h). One connection per peer and direction of the "direct"
// family carries the offers, the bytes where there is no offer, and the dones.
#include <algorithm>

#include "src/algo/algorithm.h"

namespace chorus {

namespace {

class Slice final : public Algorithm {
 public:
  const char* name() const override { return "slice"; }
  bool runs(CollType coll) const override { return coll == CollType::kAllReduce; }
  int maxRanks() const override { return kMaxLanePeers + 1; }
  // It reads host buffers in place (threads of a process, registered memory); kernels run the ring.
  bool runsOn(MemKind mem) const override { return mem == MemKind::kHost; }
  // Between processes only registered memory is readable in place: a rank whose buffers are
  // registered takes it where the ring runs, and meets its ring neighbours' first slot.
  Taken taken() const override { return Taken::kAlone; }
  std::optional<Algo> aloneBeside() const override { return Algo::kRing; }

  // Three exchanges (descriptors, results, dones), each one hop; every rank reads n - 1 slices of
  // 1/n and sends its slice's result to n - 1 ranks. Only on one host.
  double estimateUs(const CostQuery& q) const override {
    if (!q.singleHost || q.nranks < 2) return kNever;
    const double n = q.nranks;
    return costUs(q, 3, 3 * q.hopUs(), 2 * (n - 1) / n);
  }

  void connections(const AlgoContext& ctx, std::vector<ConnKey>* out) const override {
    connectEveryPeer(ctx, ConnFamily::kDirect, out);
  }

  void plan(const AlgoContext& ctx, const AlgoCall& call, std::vector<LanePlan>* lanes) const override {
    LanePlan lane;
    lane.slotBytes = ctx.peerSlotBytes;
    lane.scratch = call.inPlace;
    lane.byReference = false;
    const size_t pieceElems = std::max<size_t>(1, ctx.peerSlotBytes / call.elemSize);
    lane.steps = sliceAllReduce(ctx.nranks, ctx.rank, call.count, pieceElems, call.inPlace);
    for (int p = 0; p < ctx.nranks; ++p) {
      if (p == ctx.rank) continue;
      const int k = sliceIndex(ctx.nranks, ctx.rank, p);
      lane.send[k] = ConnRef{ConnFamily::kDirect, p};
      lane.recv[k] = ConnRef{ConnFamily::kDirect, p};
    }
    lanes->push_back(std::move(lane));
    if (call.chosenAlone && ctx.nranks > 1) {
      // A hello to the next rank of the first ring, one from the previous: a neighbour that ran
      // the ring meets it as its first slot, and this rank meets the ring's.
      LanePlan hello;
      hello.slotBytes = ctx.slotBytes;
      hello.byReference = false;
      hello.steps.push_back(Step{Prim::kSignal, kStepHello, 0, 0, 0, 0, 0});
      hello.steps.push_back(Step{Prim::kWaitSignal, kStepHello, 0, 0, 0, 0, 0});
      hello.send[0] = ConnRef{ConnFamily::kRing, 0};
      hello.recv[0] = ConnRef{ConnFamily::kRing, 0};
      lanes->push_back(std::move(hello));
    }
  }
};

}  // namespace

const Algorithm& sliceAlgorithm() {
  static const Slice slice;
  return slice;
}

}  // namespace chorus
