// Packing one communicator's device lanes into kernel launches (host code, every build).
//
// A launch runs each of its blocks' lanes in order and every block at once, and all of them must
// be resident together. Lanes of one channel (collectives) go to one block in issue order; each
// point-to-point queue (a peer and a direction) gets a block of its own. A group that does not fit
// one launch (more than kMaxLaunchLanes lanes or kMaxBlocks blocks), or whose collectives would
// meet in one connector from two blocks, or whose later collective touches bytes an earlier one
// writes (blocks of other channels may not have finished with them), is cut into launches that
// run one after another on the stream.
//
// Cutting never deadlocks, whatever each rank decides on its own (a rank cuts for its own
// buffers): every rank adds its work in one global order (collectives in issue order, then
// point-to-point by round, a round being the send to rank + d and the receive from rank - d, cut
// in chunks of kP2pChunk lanes per queue), each launch holds a contiguous part of that order, and
// each block its lanes in that order. So the earliest unfinished item is, on every rank, at the
// front of a block of a launch whose predecessors are done: it runs.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "src/algo/algorithm.h"
#include "src/device/launch_desc.h"

namespace chorus::device {

// What the algorithms plan a device collective in: the communicator's context over its first
// `nChannels` rings (the tuner's choice for the call's size), and under LL the slots' payload is
// what their lines hold, since a ring step's chunk must fit the FIFO (ringLoopChunk).
AlgoContext laneContext(const AlgoContext& base, int nChannels, ProtoKind proto);

// A byte range an operation reads or writes ([begin, end); empty when begin is null).
struct Span {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool overlaps(const Span& o) const { return begin && o.begin && begin < o.end && o.begin < end; }
};

// Part `channel` of a point-to-point transfer of `bytes` cut over `channels` channels
// (Tuner::p2pChannels), [offset, offset + bytes): every part but the last a whole number of
// 16-byte vectors, none empty where each channel has at least 16 * kMaxP2pChannels bytes (the
// tuner cuts from Tuner::kP2pChannelBytes a channel). Both ends cut alike from the same bytes.
struct P2pSlice {
  size_t offset = 0;
  size_t bytes = 0;
};
inline P2pSlice p2pSlice(size_t bytes, int channels, int channel) {
  const auto n = static_cast<size_t>(channels < 1 ? 1 : channels);
  const size_t each = ((bytes + n - 1) / n + 15) / 16 * 16;
  const size_t offset = each * static_cast<size_t>(channel) < bytes ? each * static_cast<size_t>(channel) : bytes;
  return P2pSlice{offset, bytes - offset < each ? bytes - offset : each};
}

// Lanes of one point-to-point queue a launch takes at most per round: half a launch each way.
constexpr size_t kP2pChunk = kMaxLaunchLanes / 2;

class LaunchPacker {
 public:
  // `header`: every field of the launches but the blocks and lanes.
  explicit LaunchPacker(const LaunchHeader& header) : header_(header) {}
  explicit LaunchPacker(const LaunchParams& base) : header_(LaunchHeader::of(base)) {}

  // One collective: its lanes (lane.seqIndex is the channel, its block), the bytes it reads and
  // the bytes it writes.
  void addCollective(const std::vector<DeviceLane>& lanes, Span reads, Span writes);
  // One round of point-to-point on one channel: the lanes to one peer and those from another
  // (either empty), each in issue order; `sendQueue`/`recvQueue` name the queues (any distinct
  // numbers: a queue is a peer, a direction and a channel). Every rank adds its rounds in one
  // order: by distance, then channel.
  void addP2pRound(const std::vector<DeviceLane>& send, int sendQueue, const std::vector<DeviceLane>& recv,
                   int recvQueue);
  // The launches, in the order they must run; none when there were no lanes.
  std::vector<LaunchParams> finish();

 private:
  // Which block a lane runs on: a channel, or a point-to-point queue.
  using BlockKey = long;
  static BlockKey channelKey(int channel) { return channel; }
  static BlockKey queueKey(int queue) { return 1000000L + queue; }

  struct Item {
    const DeviceLane* lanes;
    size_t n;
    BlockKey key;
  };
  // Whether `items` fit the launch being built (room, and no connector held by another block).
  bool fits(const Item* items, size_t nitems) const;
  void take(const Item* items, size_t nitems);
  void flush();

  LaunchHeader header_;
  std::vector<LaunchParams> out_;
  // The launch being built.
  std::map<BlockKey, std::vector<DeviceLane>> blocks_;
  std::map<uint16_t, BlockKey> connectorBlock_;
  size_t lanes_ = 0;
  std::vector<Span> reads_;
  std::vector<Span> writes_;
};

}  // namespace chorus::device
