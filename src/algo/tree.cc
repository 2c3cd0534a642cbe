// The double binary tree all-reduce (NCCL's): half the elements up and down each of two trees at
// once (src/topo buildRankTrees), over connections to the tree neighbours only: tree 0 on the
// per-peer "direct" family, tree 1 on the "gather" one. Each tree is one lane running
// treeAllReduce (src/algo/schedule.h); every rank ends with its tree roots' bits.
#include <cmath>

#include "src/algo/algorithm.h"

namespace chorus {

namespace {

ConnFamily treeFamily(int t) { return t == 0 ? ConnFamily::kDirect : ConnFamily::kGather; }

class Tree final : public Algorithm {
 public:
  const char* name() const override { return "tree"; }
  bool runs(CollType coll) const override { return coll == CollType::kAllReduce; }

  // Up and down the deeper tree (2 log2(n) steps); a rank inner in one tree is a leaf of the
  // other and sends twice the message in all.
  // Its two lanes are its channels (two blocks on device memory).
  double estimateUs(const CostQuery& q) const override {
    if (q.nranks < 3) return kNever;  // two ranks: a tree is the ring's one hop, run twice
    CostQuery two = q;
    two.channels = 2;
    return costUs(two, 2 * std::ceil(std::log2(q.nranks)), q.model.treeLatencyUs, 2);
  }

  void connections(const AlgoContext& ctx, std::vector<ConnKey>* out) const override {
    for (int t = 0; t < 2; ++t) {
      const std::vector<int>& parent = *ctx.treeParent[t];
      for (int p = 0; p < ctx.nranks; ++p) {
        if (p != ctx.rank && (parent[ctx.rank] == p || parent[p] == ctx.rank)) connectPeer(treeFamily(t), p, out);
      }
    }
  }

  void plan(const AlgoContext& ctx, const AlgoCall& call, std::vector<LanePlan>* lanes) const override {
    const size_t pieceElems = std::max<size_t>(1, ctx.peerSlotBytes / call.elemSize);
    for (int t = 0; t < 2; ++t) {
      const Block b = partition(call.count, 2, t);
      if (b.count == 0) continue;
      // Connector 0 is the parent (when there is one); the children follow.
      LanePlan lane;
      int k = 0;
      const int parent = (*ctx.treeParent[t])[ctx.rank];
      if (parent >= 0) {
        lane.send[k] = lane.recv[k] = ConnRef{treeFamily(t), parent};
        ++k;
      }
      const std::vector<int> children = ctx.treeChildren(t);
      CHORUS_CHECK(k + static_cast<int>(children.size()) <= kMaxLanePeers);
      for (int c : children) {
        lane.send[k] = lane.recv[k] = ConnRef{treeFamily(t), c};
        ++k;
      }
      lane.steps = treeAllReduce(parent >= 0, static_cast<int>(children.size()), b.offset, b.count, pieceElems);
      lane.channel = 0;
      lane.slotBytes = ctx.peerSlotBytes;
      lanes->push_back(std::move(lane));
    }
  }
};

}  // namespace

const Algorithm& treeAlgorithm() {
  static const Tree tree;
  return tree;
}

}  // namespace chorus
