// The operations a communicator runs, as the algorithms see them.
#pragma once

namespace chorus {

// The collectives on channels come first (the tuner keeps a table for each of them).
enum class CollType {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSend,
  kRecv
};
const char* collName(CollType c);

// Collectives that run as schedules over the channels (ring, chain, or an all-reduce algorithm);
// the others are sends and receives between pairs of ranks.
// Whether the collective combines the ranks' data with an operator (and so takes its spec).
inline bool reduces(CollType c) {
  return c == CollType::kAllReduce || c == CollType::kReduce || c == CollType::kReduceScatter;
}

inline bool runsOnChannels(CollType c) {
  return c == CollType::kAllReduce || c == CollType::kBroadcast || c == CollType::kReduce ||
         c == CollType::kAllGather || c == CollType::kReduceScatter;
}

}  // namespace chorus
