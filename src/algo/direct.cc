// The direct all-reduce (intra-host or few ranks, small messages): every rank sends its input to
// every peer and folds all contributions in rank order (DirectLane, src/core/lane.h), over one
// connection per peer and direction of the "direct" family.
#include "src/algo/algorithm.h"

namespace chorus {

namespace {

class Direct final : public Algorithm {
 public:
  const char* name() const override { return "direct"; }
  bool runs(CollType coll) const override { return coll == CollType::kAllReduce; }

  void connections(const AlgoContext& ctx, std::vector<ConnKey>* out) const override {
    connectEveryPeer(ctx, ConnFamily::kDirect, out);
  }

  void plan(const AlgoContext& ctx, const AlgoCall&, std::vector<LanePlan>* lanes) const override {
    LanePlan lane;
    lane.kind = LanePlan::Kind::kDirect;
    lane.slotBytes = ctx.peerSlotBytes;
    lanes->push_back(std::move(lane));
  }
};

}  // namespace

const Algorithm& directAlgorithm() {
  static const Direct direct;
  return direct;
}

}  // namespace chorus
