// The operations a communicator runs, as the layers above the transports see them: one descriptor
// per collective (Collective, its row in coll.cc) says what the API checks, what the planner,
// the ranks' agreement and the flight recorder record, how the ring schedules it and what that
// costs, and how the one-copy kernel lays it out. Code that needs to tell collectives apart reads
// the descriptor; the switches left over collectives are over the ones that are not on channels
// (src/core/launch.cc, expandP2p) and fail closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/algo/schedule.h"

namespace chorus {

// The collectives on channels come first, up to kAlltoAll (the tuner keeps a table for each of
// them: kChannelColls); a new one goes before kAlltoAll, with its row in coll.cc.
enum class CollType {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllGatherV,
  kReduceScatterV,
  kAlltoAll,
  kGather,
  kScatter,
  kSend,
  kRecv
};
constexpr int kCollCount = static_cast<int>(CollType::kRecv) + 1;
constexpr int kChannelColls = static_cast<int>(CollType::kAlltoAll);

// Who passes one of a collective's buffers, and how many blocks of `count` elements it holds.
struct BufferUse {
  enum class At : uint8_t {
    kNone,       // not an argument (a send's receive buffer)
    kEveryRank,  // every rank's
    kRoot,       // the root's only (ignored elsewhere, as NCCL and MPI do)
  };
  At at = At::kNone;
  bool perRank = false;  // nranks blocks of `count`, block r for rank r (else `count`)
  bool usedBy(int rank, int root) const { return at == At::kEveryRank || (at == At::kRoot && rank == root); }
};

// The blocks of a v-collective (all-gather-v, reduce-scatter-v): rank r's is counts[r] elements
// at element displs[r] of the buffer of blocks, in this rank's layout; the counts are the same on
// every rank, the displacements each rank's own.
struct BlockLayout {
  std::vector<size_t> counts;
  std::vector<size_t> displs;
  size_t longest() const;
  size_t extent() const;  // elements the buffer of blocks spans
  uint64_t countsHash() const;
};

// One channel's share of a collective on the ring (Ring::plan): this rank's position, the root's,
// the ranks along the ring, and the channel's elements [offset, offset + count) of the call's
// `whole` (a rank block's, where the buffers hold one block per rank).
struct RingShare {
  int n = 1;
  int pos = 0;
  int rootPos = 0;
  const std::vector<int>* blockOf = nullptr;  // position p holds rank blockOf[p]'s block
  size_t whole = 0;
  size_t offset = 0;
  size_t count = 0;
  size_t loopChunk = 0;
  // A v-collective's blocks, cut per channel by the schedule (channel `channel` of `channels`).
  const BlockLayout* blocks = nullptr;
  int channels = 1;
  int channel = 0;
};

// What the ring (the chain for rooted collectives) sends, for the tuner's estimate (costUs's
// steps, latency and load): steps x (n - 1) steps, latency x the ring's lap latency, and a load
// (bytes each rank sends over its message) of loadPerHopOverN x (n - 1)/n + loadPerHop x (n - 1)
// + loadFixed.
struct RingTraffic {
  double steps = 0;
  double latency = 0;
  double loadPerHopOverN = 0;
  double loadPerHop = 0;
  double loadFixed = 0;
};

struct Collective {
  CollType type;
  const char* name;  // logs, errors, the flight recorder and traces
  bool onChannels;   // runs as an algorithm's lanes (else point-to-point transfers: launch.cc)
  bool reduces;      // combines the ranks' data with an operator (and so takes its spec)
  enum class Root : uint8_t { kNone, kRoot, kPeer } root;  // what the call's `root` argument is
  BufferUse send;
  BufferUse recv;
  // Each rank's block has its own size (a v-collective: the call's BlockLayout); `count` is this
  // rank's own block.
  bool perRankCounts;
  // On channels: the ring's (chain's) steps for one channel's share, and their traffic.
  std::vector<Step> (*ring)(const RingShare&);
  RingTraffic ringTraffic;
};

// Indexed by CollType (src/algo/coll.cc); read inline, since every call reads it several times.
extern const Collective kCollectives[kCollCount];
inline const Collective& collective(CollType c) { return kCollectives[static_cast<int>(c)]; }

inline const char* collName(CollType c) { return collective(c).name; }
inline bool reduces(CollType c) { return collective(c).reduces; }
inline bool runsOnChannels(CollType c) { return collective(c).onChannels; }

}  // namespace chorus
