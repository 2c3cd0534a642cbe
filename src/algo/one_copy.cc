// The one-copy collectives (device memory, 2 to 8 ranks of one host whose GPUs reach each
// other): each rank's kernel reads its share of the ranks' inputs in place (the same process's
// pointers, or another process's cuMem allocation mapped here) and writes it, reduced where the
// collective reduces, into the outputs it goes to (src/device/one_copy_exec.h, OneCopy); no FIFO and
// no connection. An all-reduce, reduce or broadcast shares the message out over the ranks; a
// reduce-scatter's rank makes its own output block from every input, an all-gather's copies its
// input into every output. It runs only where every rank's record agrees at enqueue (agreed below;
// the core's exchange, src/core/comm_onecopy.cc: every buffer on its GPU, registered between
// processes), so the tuner offers it beside the algorithm that runs otherwise
// (Algorithm::Taken::kIfAgreed, Tuner::Choice::ifAgreed). docs/records/2026-11-28-gpu-one-copy.md.
#include <algorithm>

#include "src/algo/algorithm.h"

namespace chorus {

uint32_t oneCopyParts(CollType coll, size_t bytes, int nranks) {
  // A rank's share is a whole block where a buffer holds a block per rank, else its part of the
  // message.
  const Collective& c = collective(coll);
  const bool ownBlock = c.send.perRank || c.recv.perRank;
  const size_t share = ownBlock ? bytes : bytes / static_cast<size_t>(std::max(1, nranks));
  const size_t per = share / (256 * 1024);
  return static_cast<uint32_t>(std::clamp<size_t>(per, 1, kOneCopyMaxParts));
}

namespace {

class OneCopy final : public Algorithm {
 public:
  const char* name() const override { return "one-copy"; }
  // Blocks of one size: a v-collective's are the ring's.
  bool runs(CollType coll) const override { return runsOnChannels(coll) && !collective(coll).perRankCounts; }
  bool runsOn(MemKind mem) const override { return mem == MemKind::kDevice; }
  int maxRanks() const override { return kOneCopyMaxRanks; }
  Taken taken() const override { return Taken::kIfAgreed; }

  // Every rank offers its buffers and issued the same call: collective, root, count, type and
  // reduction, a pre-multiplied sum's scalar included (each rank's kernel applies its own
  // reduction to every rank's input).
  bool agreed(const std::vector<AgreedCall>& all) const override {
    if (all.empty()) return false;
    const AgreedCall& first = all[0];
    for (const AgreedCall& r : all) {
      if (!r.offers || r.coll != first.coll || r.root != first.root || r.count != first.count || r.type != first.type ||
          r.redKind != first.redKind || r.hasPre != first.hasPre || r.hasPostDiv != first.hasPostDiv ||
          r.scaleF != first.scaleF || r.scaleI != first.scaleI || r.divisor != first.divisor) {
        return false;
      }
    }
    return true;
  }

  // A record to and from every peer at enqueue (in the row's cost per call), then one pass: a
  // signal round before and after (two hops) around each rank's share moved on its blocks
  // (oneCopyParts). The load is what a rank moves to or from its peers, in units of the call's
  // bytes (CostQuery::bytes: an all-gather's input, a reduce-scatter's output): an all-reduce
  // reads (n - 1)/n of the message from its peers and writes as much into theirs; a reduce
  // reads as much and writes its share into the root's output; a broadcast writes its share into
  // n - 1 outputs; a reduce-scatter reads n - 1 blocks, an all-gather writes n - 1. It has no
  // protocol of its own: it is estimated once, as Simple.
  double estimateUs(const CostQuery& q) const override {
    if (!q.singleHost || q.proto != ProtoKind::kSimple || !runs(q.coll)) return kNever;
    const double n = q.nranks;
    CostQuery parts = q;
    parts.channels = static_cast<int>(oneCopyParts(q.coll, static_cast<size_t>(q.bytes), q.nranks));
    const Collective& c = collective(q.coll);
    double load = 2 * (n - 1) / n;
    if (c.recv.at == BufferUse::At::kRoot) load = 1;
    if (c.send.at == BufferUse::At::kRoot) load = (n - 1) / n;
    if (c.send.perRank || c.recv.perRank) load = n - 1;
    return costUs(parts, 1, 2 * q.hopUs(), load);
  }

  void connections(const AlgoContext&, std::vector<ConnKey>*) const override {}

  // One lane per block, each a part of every rank's share: no steps, no connector.
  void plan(const AlgoContext& ctx, const AlgoCall& call, std::vector<LanePlan>* lanes) const override {
    const uint32_t parts = oneCopyParts(call.coll, call.count * call.elemSize, ctx.nranks);
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
