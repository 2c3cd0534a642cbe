// The algorithm registry (src/algo/algorithm.h): names round-trip through CHORUS_ALGO, and every
// lane a plan names uses only connections the algorithm asked for, with steps that cover the call.
#include <catch2/catch.hpp>
#include <set>
#include <tuple>
#include <vector>

#include "src/algo/algorithm.h"
#include "src/topo/topo.h"

using namespace chorus;

TEST_CASE("every registered algorithm is named by CHORUS_ALGO", "[algorithm]") {
  REQUIRE(algorithmCount() >= 4);
  for (int i = 0; i < algorithmCount(); ++i) {
    const Algo a = static_cast<Algo>(i);
    auto parsed = parseAlgoSetting(algoName(a));
    REQUIRE(parsed.isOk());
    CHECK(parsed.value() == a);
  }
  CHECK(std::string(algoName(Algo::kRing)) == "ring");
  CHECK(std::string(algoName(Algo::kTree)) == "tree");
}

TEST_CASE("plans use only the connections their algorithm asked for, and cover the call", "[algorithm]") {
  const int n = 5;
  std::vector<std::vector<int>> rings = {{0, 1, 2, 3, 4}, {0, 2, 4, 1, 3}};
  const topo::DoubleTree trees = topo::buildDoubleTree(n);
  for (int rank = 0; rank < n; ++rank) {
    std::vector<int> pos(2);
    for (int c = 0; c < 2; ++c) {
      for (int p = 0; p < n; ++p) {
        if (rings[c][p] == rank) pos[c] = p;
      }
    }
    AlgoContext ctx;
    ctx.rank = rank;
    ctx.nranks = n;
    ctx.nChannels = 2;
    ctx.rings = &rings;
    ctx.ringPos = &pos;
    ctx.treeParent[0] = &trees.parent[0];
    ctx.treeParent[1] = &trees.parent[1];
    ctx.slotBytes = 4096;
    ctx.peerSlotBytes = 1024;
    ctx.slots = 4;
    for (int i = 0; i < algorithmCount(); ++i) {
      const Algorithm& alg = algorithm(static_cast<Algo>(i));
      INFO("rank " << rank << " algorithm " << alg.name());
      std::vector<ConnKey> keys;
      alg.connections(ctx, &keys);
      std::set<std::tuple<ConnFamily, int, bool>> asked;
      for (const ConnKey& k : keys) {
        CHECK(k.peer != rank);
        asked.emplace(k.family, k.index, k.send);
      }
      for (CollType coll : {CollType::kAllReduce, CollType::kBroadcast, CollType::kAllGather}) {
        if (!alg.runs(coll)) continue;
        const size_t count = 10007;
        std::vector<LanePlan> lanes;
        alg.plan(ctx, AlgoCall{coll, count, 4, 2}, &lanes);
        REQUIRE(!lanes.empty());
        if (lanes.front().oneCopy) {
          // A one-copy collective: a block per part, no steps, no connectors; its kernel reads
          // and writes the peers' buffers (covered by one_copy_test).
          CHECK(lanes.size() == oneCopyParts(coll, count * 4, n));
          for (size_t k = 0; k < lanes.size(); ++k) {
            CHECK(lanes[k].oneCopy);
            CHECK(lanes[k].channel == static_cast<int>(k));
            CHECK(lanes[k].steps.empty());
            for (int i = 0; i < kMaxLanePeers; ++i) CHECK((lanes[k].send[i].index < 0 && lanes[k].recv[i].index < 0));
          }
          CHECK(keys.empty());
          continue;
        }
        std::vector<int> written(count, 0);
        for (const LanePlan& lp : lanes) {
          for (const Step& s : lp.steps) {
            REQUIRE(s.sendTo < kMaxLanePeers);
            REQUIRE(s.recvFrom < kMaxLanePeers);
            if (primSends(s.prim)) {
              REQUIRE(lp.send[s.sendTo].index >= 0);
              CHECK(asked.count({lp.send[s.sendTo].family, lp.send[s.sendTo].index, true}) == 1);
            }
            if (primReceives(s.prim)) {
              REQUIRE(lp.recv[s.recvFrom].index >= 0);
              CHECK(asked.count({lp.recv[s.recvFrom].family, lp.recv[s.recvFrom].index, false}) == 1);
            }
            if (coll == CollType::kAllReduce && s.prim != Prim::kSend && s.prim != Prim::kRecvReduceSend &&
                !primIsControl(s.prim) && !(s.flags & kOutIsScratch)) {
              for (size_t e = s.outOff; e < s.outOff + s.count && e < count; ++e) written[e] = 1;
            }
          }
        }
        // An all-reduce writes every element of this rank's output.
        if (coll == CollType::kAllReduce) {
          for (size_t e = 0; e < count; ++e) REQUIRE(written[e] == 1);
        }
      }
    }
  }
}

// The descriptors (src/algo/coll.cc) against what NCCL's and MPI's calls take, written out here:
// the root argument, who passes each buffer, and which hold a block per rank.
TEST_CASE("each collective's descriptor says what its call takes", "[algorithm][coll]") {
  using At = BufferUse::At;
  using Root = Collective::Root;
  struct Expect {
    CollType c;
    const char* name;
    bool channels, reduces;
    Root root;
    At send;
    bool sendBlocks;
    At recv;
    bool recvBlocks;
  };
  const Expect table[] = {
      {CollType::kAllReduce, "AllReduce", true, true, Root::kNone, At::kEveryRank, false, At::kEveryRank, false},
      {CollType::kBroadcast, "Broadcast", true, false, Root::kRoot, At::kRoot, false, At::kEveryRank, false},
      {CollType::kReduce, "Reduce", true, true, Root::kRoot, At::kEveryRank, false, At::kRoot, false},
      {CollType::kAllGather, "AllGather", true, false, Root::kNone, At::kEveryRank, false, At::kEveryRank, true},
      {CollType::kReduceScatter, "ReduceScatter", true, true, Root::kNone, At::kEveryRank, true, At::kEveryRank, false},
      {CollType::kAllGatherV, "AllGatherV", true, false, Root::kNone, At::kEveryRank, false, At::kEveryRank, true},
      {CollType::kReduceScatterV, "ReduceScatterV", true, true, Root::kNone, At::kEveryRank, true, At::kEveryRank,
       false},
      {CollType::kAlltoAll, "AlltoAll", false, false, Root::kNone, At::kEveryRank, true, At::kEveryRank, true},
      {CollType::kGather, "Gather", false, false, Root::kRoot, At::kEveryRank, false, At::kRoot, true},
      {CollType::kScatter, "Scatter", false, false, Root::kRoot, At::kRoot, true, At::kEveryRank, false},
      {CollType::kSend, "Send", false, false, Root::kPeer, At::kEveryRank, false, At::kNone, false},
      {CollType::kRecv, "Recv", false, false, Root::kPeer, At::kNone, false, At::kEveryRank, false},
  };
  REQUIRE(sizeof(table) / sizeof(table[0]) == static_cast<size_t>(kCollCount));
  for (const Expect& e : table) {
    const Collective& d = collective(e.c);
    INFO(e.name);
    CHECK(d.type == e.c);
    CHECK(std::string(collName(e.c)) == e.name);
    CHECK(runsOnChannels(e.c) == e.channels);
    CHECK(reduces(e.c) == e.reduces);
    CHECK(d.root == e.root);
    CHECK(d.send.at == e.send);
    CHECK(d.send.perRank == e.sendBlocks);
    CHECK(d.recv.at == e.recv);
    CHECK(d.recv.perRank == e.recvBlocks);
    CHECK((d.ring != nullptr) == e.channels);
    CHECK(d.perRankCounts == (e.c == CollType::kAllGatherV || e.c == CollType::kReduceScatterV));
  }
  // A root-only buffer is the root's alone; a buffer of every rank's is everyone's.
  const BufferUse& bcastIn = collective(CollType::kBroadcast).send;
  CHECK(bcastIn.usedBy(2, 2));
  CHECK_FALSE(bcastIn.usedBy(1, 2));
  CHECK(collective(CollType::kBroadcast).recv.usedBy(1, 2));
  CHECK_FALSE(collective(CollType::kSend).recv.usedBy(0, 1));
}

// Each descriptor's ring schedule is the one its collective had by name: one channel's share of
// the whole buffer counts from the share's offset, a rank block's is cut per block.
TEST_CASE("the ring runs each collective on channels by its descriptor's schedule", "[algorithm][coll]") {
  const int n = 4;
  const std::vector<int> blockOf = {0, 1, 2, 3};
  const size_t whole = 1000, offset = 250, count = 250, loop = 64;
  auto same = [](const std::vector<Step>& a, const std::vector<Step>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].prim != b[i].prim || a[i].inOff != b[i].inOff || a[i].outOff != b[i].outOff ||
          a[i].count != b[i].count || a[i].flags != b[i].flags) {
        return false;
      }
    }
    return true;
  };
  auto shifted = [](std::vector<Step> s, size_t by) {
    for (Step& x : s) {
      x.inOff += by;
      x.outOff += by;
    }
    return s;
  };
  for (int pos = 0; pos < n; ++pos) {
    const RingShare share{n, pos, 2, &blockOf, whole, offset, count, loop};
    INFO("position " << pos);
    CHECK(same(collective(CollType::kAllReduce).ring(share), shifted(ringAllReduce(n, pos, count, loop), offset)));
    CHECK(same(collective(CollType::kBroadcast).ring(share), shifted(chainBroadcast(n, pos, 2, count, loop), offset)));
    CHECK(same(collective(CollType::kReduce).ring(share), shifted(chainReduce(n, pos, 2, count, loop), offset)));
    CHECK(
        same(collective(CollType::kAllGather).ring(share), ringAllGather(n, pos, blockOf, whole, offset, count, loop)));
    CHECK(same(collective(CollType::kReduceScatter).ring(share),
               ringReduceScatter(n, pos, blockOf, whole, offset, count, loop)));
  }
}
