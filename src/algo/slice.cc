// The slice all-reduce (one host, large messages): each rank reduces one slice of the message
// from every rank's contribution, read in place where it can be, and hands the result to every
// peer (SliceLane, src/core/lane.h). Per peer and direction: a "direct" connection for inputs and
// a "gather" one for results.
#include "src/algo/algorithm.h"

namespace chorus {

namespace {

class Slice final : public Algorithm {
 public:
  const char* name() const override { return "slice"; }
  bool runs(CollType coll) const override { return coll == CollType::kAllReduce; }

  void connections(const AlgoContext& ctx, std::vector<ConnKey>* out) const override {
    connectEveryPeer(ctx, ConnFamily::kDirect, out);
    connectEveryPeer(ctx, ConnFamily::kGather, out);
  }

  void plan(const AlgoContext& ctx, const AlgoCall&, std::vector<LanePlan>* lanes) const override {
    LanePlan lane;
    lane.kind = LanePlan::Kind::kSlice;
    lane.slotBytes = ctx.peerSlotBytes;
    lanes->push_back(std::move(lane));
  }
};

}  // namespace

const Algorithm& sliceAlgorithm() {
  static const Slice slice;
  return slice;
}

}  // namespace chorus
