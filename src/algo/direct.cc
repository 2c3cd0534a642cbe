// The direct all-reduce (intra-host or few ranks, small messages): every rank sends its input to
// every peer and folds all contributions in rank order (directAllReduce, src/algo/schedule.h),
// over one connection per peer and direction of the "direct" family, with the flag protocol
// (ProtoFlag: a small piece is one cache line).
#include <algorithm>

#include "src/algo/algorithm.h"

namespace chorus {

namespace {

class Direct final : public Algorithm {
 public:
  const char* name() const override { return "direct"; }
  bool runs(CollType coll) const override { return coll == CollType::kAllReduce; }
  int maxRanks() const override { return kMaxLanePeers + 1; }
  // One lane of one step over one hop: a lone call runs on the calling thread.
  bool runsInline() const override { return true; }

  // One step over one hop, every rank sending its whole message to each of the n - 1 others, in
  // one lane (one block on device memory); never past its setting's bytes (directMaxBytes).
  double estimateUs(const CostQuery& q) const override {
    if (q.bytes > static_cast<double>(q.directMaxBytes)) return kNever;
    CostQuery one = q;
    one.channels = 1;
    return costUs(one, 1, q.hopUs(), q.nranks - 1);
  }

  void connections(const AlgoContext& ctx, std::vector<ConnKey>* out) const override {
    connectEveryPeer(ctx, ConnFamily::kDirect, out);
  }

  void plan(const AlgoContext& ctx, const AlgoCall& call, std::vector<LanePlan>* lanes) const override {
    LanePlan lane;
    lane.slotBytes = ctx.peerSlotBytes;
    lane.proto = ProtoKind::kFlag;
    lane.scratch = call.inPlace;
    const size_t pieceElems = std::max<size_t>(1, ctx.peerSlotBytes / call.elemSize);
    lane.steps = directAllReduce(ctx.nranks, ctx.rank, call.count, pieceElems, call.inPlace);
    for (int k = 0; k < ctx.nranks - 1; ++k) {
      lane.send[k] = ConnRef{ConnFamily::kDirect, directSendPeer(ctx.nranks, ctx.rank, k)};
    }
    for (int p = 0; p < ctx.nranks; ++p) {
      if (p != ctx.rank) lane.recv[directRecvIndex(ctx.rank, p)] = ConnRef{ConnFamily::kDirect, p};
    }
    lanes->push_back(std::move(lane));
  }
};

}  // namespace

const Algorithm& directAlgorithm() {
  static const Direct direct;
  return direct;
}

}  // namespace chorus
