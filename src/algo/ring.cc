// The ring: every collective that runs on channels. Each channel takes its share of the elements
// over its own ring (one connection to the next rank, one from the previous); the all-reduce is
// reduce-scatter then all-gather, broadcast and reduce are chains that start or end at the root,
// and all-gather and reduce-scatter move rank blocks along the ring (src/algo/schedule.h); each
// collective's descriptor names its schedule (Collective::ring, src/algo/coll.cc).
#include "src/algo/algorithm.h"

namespace chorus {

namespace {

class Ring final : public Algorithm {
 public:
  const char* name() const override { return "ring"; }
  bool runs(CollType coll) const override { return runsOnChannels(coll); }
  double estimateUs(const CostQuery& q) const override { return ringCostUs(q); }

  void connections(const AlgoContext& ctx, std::vector<ConnKey>* out) const override {
    if (ctx.nranks < 2) return;
    for (int c = 0; c < ctx.nChannels; ++c) {
      out->push_back(ConnKey{ConnFamily::kRing, c, ctx.ringNext(c), true});
      out->push_back(ConnKey{ConnFamily::kRing, c, ctx.ringPrev(c), false});
    }
  }

  void plan(const AlgoContext& ctx, const AlgoCall& call, std::vector<LanePlan>* lanes) const override {
    const size_t loop = ringLoopChunk(ctx.slotBytes, ctx.slots, call.elemSize);
    for (int c = 0; c < ctx.nChannels; ++c) {
      // A v-collective's channels are cut by its longest block (every rank's alike), each
      // block's part by the schedule.
      const Block b = partition(call.blocks ? call.blocks->longest() : call.count, ctx.nChannels, c);
      if (b.count == 0) continue;
      // Position p of this channel's ring holds rank blockOf[p]; its block is its rank's.
      const std::vector<int>& blockOf = (*ctx.rings)[c];
      const int pos = (*ctx.ringPos)[c];
      int rootPos = 0;
      while (rootPos < ctx.nranks && blockOf[rootPos] != call.root) ++rootPos;
      LanePlan lane;
      // runs() takes the collectives on channels only, each with its ring schedule.
      lane.steps = collective(call.coll).ring(RingShare{ctx.nranks, pos, rootPos, &blockOf, call.count, b.offset,
                                                        b.count, loop, call.blocks, ctx.nChannels, c});
      if (ctx.nranks > 1) {
        lane.send[0] = ConnRef{ConnFamily::kRing, c};
        lane.recv[0] = ConnRef{ConnFamily::kRing, c};
      }
      lane.channel = c;
      lane.slotBytes = ctx.slotBytes;
      lanes->push_back(std::move(lane));
    }
  }
};

}  // namespace

const Algorithm& ringAlgorithm() {
  static const Ring ring;
  return ring;
}

}  // namespace chorus
