#include "src/algo/coll.h"

#include <algorithm>

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

// A v-collective's blocks on one channel: each rank's channel part of its block, and this rank's
// own part's place in its other buffer.
struct ChannelBlocks {
  std::vector<size_t> at, count;
  size_t ownAt = 0;
  explicit ChannelBlocks(const RingShare& s) : at(s.n), count(s.n) {
    const BlockLayout& l = *s.blocks;
    for (int r = 0; r < s.n; ++r) {
      const Block part = partition(l.counts[r], s.channels, s.channel);
      at[r] = l.displs[r] + part.offset;
      count[r] = part.count;
    }
    const int me = (*s.blockOf)[s.pos];
    ownAt = partition(l.counts[me], s.channels, s.channel).offset;
  }
  RankBlocks blocks() const { return RankBlocks{at.data(), count.data(), ownAt}; }
};

std::vector<Step> ringAllGatherVShare(const RingShare& s) {
  const ChannelBlocks c(s);
  return ringAllGatherBlocks(s.n, s.pos, *s.blockOf, c.blocks(), s.loopChunk);
}
std::vector<Step> ringReduceScatterVShare(const RingShare& s) {
  const ChannelBlocks c(s);
  return ringReduceScatterBlocks(s.n, s.pos, *s.blockOf, c.blocks(), s.loopChunk);
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
    {CollType::kAllReduce, "AllReduce", true, true, Root::kNone, kEvery, kEvery, false, ringAllReduceShare,
     kRingAllReduce},
    {CollType::kBroadcast, "Broadcast", true, false, Root::kRoot, kAtRoot, kEvery, false, chainBroadcastShare, kChain},
    {CollType::kReduce, "Reduce", true, true, Root::kRoot, kEvery, kAtRoot, false, chainReduceShare, kChain},
    {CollType::kAllGather, "AllGather", true, false, Root::kNone, kEvery, kEveryBlocks, false, ringAllGatherShare,
     kRingBlocks},
    {CollType::kReduceScatter, "ReduceScatter", true, true, Root::kNone, kEveryBlocks, kEvery, false,
     ringReduceScatterShare, kRingBlocks},
    {CollType::kAllGatherV, "AllGatherV", true, false, Root::kNone, kEvery, kEveryBlocks, true, ringAllGatherVShare,
     kRingBlocks},
    {CollType::kReduceScatterV, "ReduceScatterV", true, true, Root::kNone, kEveryBlocks, kEvery, true,
     ringReduceScatterVShare, kRingBlocks},
    {CollType::kAlltoAll, "AlltoAll", false, false, Root::kNone, kEveryBlocks, kEveryBlocks, false, nullptr, {}},
    {CollType::kGather, "Gather", false, false, Root::kRoot, kEvery, kAtRootBlocks, false, nullptr, {}},
    {CollType::kScatter, "Scatter", false, false, Root::kRoot, kAtRootBlocks, kEvery, false, nullptr, {}},
    {CollType::kSend, "Send", false, false, Root::kPeer, kEvery, kNone, false, nullptr, {}},
    {CollType::kRecv, "Recv", false, false, Root::kPeer, kNone, kEvery, false, nullptr, {}},
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

size_t BlockLayout::longest() const {
  size_t m = 0;
  for (size_t c : counts) m = std::max(m, c);
  return m;
}

size_t BlockLayout::extent() const {
  size_t end = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > 0) end = std::max(end, displs[r] + counts[r]);
  }
  return end;
}

uint64_t BlockLayout::countsHash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the counts
  for (size_t c : counts) {
    for (int b = 0; b < 8; ++b) {
      h ^= (static_cast<uint64_t>(c) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

}  // namespace chorus
