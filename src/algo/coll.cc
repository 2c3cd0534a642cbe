#include "src/algo/coll.h"

namespace chorus {

namespace {

using At = BufferUse::At;
using Root = Collective::Root;

constexpr BufferUse kNone{};
constexpr BufferUse kEvery{At::kEveryRank, false};
constexpr BufferUse kEveryBlocks{At::kEveryRank, true};
constexpr BufferUse kAtRoot{At::kRoot, false};
constexpr BufferUse kAtRootBlocks{At::kRoot, true};

// Schedules of the whole buffer count from the channel's share.
std::vector<Step> shifted(std::vector<Step> steps, size_t offset) {
  for (Step& s : steps) {
    s.inOff += offset;
    s.outOff += offset;
  }
  return steps;
}

std::vector<Step> ringAllReduceShare(const RingShare& s) {
  return shifted(ringAllReduce(s.n, s.pos, s.count, s.loopChunk), s.offset);
}
std::vector<Step> chainBroadcastShare(const RingShare& s) {
  return shifted(chainBroadcast(s.n, s.pos, s.rootPos, s.count, s.loopChunk), s.offset);
}
std::vector<Step> chainReduceShare(const RingShare& s) {
  return shifted(chainReduce(s.n, s.pos, s.rootPos, s.count, s.loopChunk), s.offset);
}
std::vector<Step> ringAllGatherShare(const RingShare& s) {
  return ringAllGather(s.n, s.pos, *s.blockOf, s.whole, s.offset, s.count, s.loopChunk);
}
std::vector<Step> ringReduceScatterShare(const RingShare& s) {
  return ringReduceScatter(s.n, s.pos, *s.blockOf, s.whole, s.offset, s.count, s.loopChunk);
}

// Reduce-scatter then all-gather: 2(n-1) steps, each rank sending 2(n-1)/n of the message.
constexpr RingTraffic kRingAllReduce{2, 1, 2, 0, 0};
// Half of it, on n blocks of the message each: every rank sends n - 1 of them.
constexpr RingTraffic kRingBlocks{1, 0.5, 0, 1, 0};
// A pipeline along the chain: its length once ((n - 1) hops, half the ring's lap), then the
// message at the link's speed.
constexpr RingTraffic kChain{1, 0.5, 0, 0, 1};

}  // namespace

constexpr Collective kCollectives[kCollCount] = {
    {CollType::kAllReduce, "AllReduce", true, true, Root::kNone, kEvery, kEvery, ringAllReduceShare, kRingAllReduce},
    {CollType::kBroadcast, "Broadcast", true, false, Root::kRoot, kAtRoot, kEvery, chainBroadcastShare, kChain},
    {CollType::kReduce, "Reduce", true, true, Root::kRoot, kEvery, kAtRoot, chainReduceShare, kChain},
    {CollType::kAllGather, "AllGather", true, false, Root::kNone, kEvery, kEveryBlocks, ringAllGatherShare,
     kRingBlocks},
    {CollType::kReduceScatter, "ReduceScatter", true, true, Root::kNone, kEveryBlocks, kEvery, ringReduceScatterShare,
     kRingBlocks},
    {CollType::kAlltoAll, "AlltoAll", false, false, Root::kNone, kEveryBlocks, kEveryBlocks, nullptr, {}},
    {CollType::kGather, "Gather", false, false, Root::kRoot, kEvery, kAtRootBlocks, nullptr, {}},
    {CollType::kScatter, "Scatter", false, false, Root::kRoot, kAtRootBlocks, kEvery, nullptr, {}},
    {CollType::kSend, "Send", false, false, Root::kPeer, kEvery, kNone, nullptr, {}},
    {CollType::kRecv, "Recv", false, false, Root::kPeer, kNone, kEvery, nullptr, {}},
};

namespace {

// Every row in its place, and a schedule exactly for those on channels.
constexpr bool rowsInOrder() {
  for (int c = 0; c < kCollCount; ++c) {
    const Collective& row = kCollectives[c];
    if (static_cast<int>(row.type) != c || row.onChannels != (c < kChannelColls)) return false;
    if (row.onChannels != (row.ring != nullptr)) return false;
  }
  return true;
}
static_assert(rowsInOrder(), "each collective's row at its CollType, the ones on channels first with a ring schedule");

}  // namespace

}  // namespace chorus
