// The one-copy all-reduce (device memory, 2 to 8 ranks of one host whose GPUs reach each other):
// each rank's kernel reads its share of every rank's input in place (the same process's pointers,
// or another process's cuMem allocation mapped here) and writes the reduced share into every
// rank's output (src/device/lane_exec.h, OneCopy); no FIFO and no connection. It runs only where
// every rank's record agrees at enqueue (src/core/comm_onecopy.cc: every buffer on its GPU,
// registered between processes, the same reduction), so the tuner offers it beside the algorithm
// that runs otherwise (Tuner::Choice::oneCopyIfAgreed). docs/GPU.md, "One-copy all-reduce".
#include <algorithm>

#include "src/algo/algorithm.h"

namespace chorus {

uint32_t oneCopyParts(size_t bytes, int nranks) {
  const size_t per = bytes / static_cast<size_t>(std::max(1, nranks)) / (256 * 1024);
  return static_cast<uint32_t>(std::clamp<size_t>(per, 1, kOneCopyMaxParts));
}

namespace {

class OneCopy final : public Algorithm {
 public:
  const char* name() const override { return "one-copy"; }
  bool runs(CollType coll) const override { return coll == CollType::kAllReduce; }
  bool runsOn(MemKind mem) const override { return mem == MemKind::kDevice; }
  int maxRanks() const override { return kOneCopyMaxRanks; }

  // A record to and from every peer at enqueue (in the row's cost per call), then one pass: a
  // signal round before and after (two hops), every rank reading (n - 1)/n of the message from
  // its peers and writing as much into theirs, on its blocks (oneCopyParts). It has no protocol
  // of its own: it is estimated once, as Simple.
  double estimateUs(const CostQuery& q) const override {
    if (!q.singleHost || q.proto != ProtoKind::kSimple) return kNever;
    const double n = q.nranks;
    CostQuery parts = q;
    parts.channels = static_cast<int>(oneCopyParts(static_cast<size_t>(q.bytes), q.nranks));
    return costUs(parts, 1, 2 * q.hopUs(), 2 * (n - 1) / n);
  }

  void connections(const AlgoContext&, std::vector<ConnKey>*) const override {}

  // One lane per block, each a part of every rank's share: no steps, no connector.
  void plan(const AlgoContext& ctx, const AlgoCall& call, std::vector<LanePlan>* lanes) const override {
    const uint32_t parts = oneCopyParts(call.count * call.elemSize, ctx.nranks);
    for (uint32_t k = 0; k < parts; ++k) {
      LanePlan lane;
      lane.channel = static_cast<int>(k);
      lane.oneCopy = true;
      lane.byReference = false;
      lanes->push_back(std::move(lane));
    }
  }
};

}  // namespace

const Algorithm& oneCopyAlgorithm() {
  static const OneCopy oneCopy;
  return oneCopy;
}

}  // namespace chorus
