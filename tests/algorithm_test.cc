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
