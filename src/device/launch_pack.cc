#include "src/device/launch_pack.h"

#include <algorithm>

#include "src/common/status.h"

namespace chorus::device {

AlgoContext laneContext(const AlgoContext& base, int nChannels, ProtoKind proto) {
  AlgoContext ctx = base;
  ctx.nChannels = nChannels;
  ctx.slotBytes = protoSlotDataBytes(proto, static_cast<uint32_t>(base.slotBytes));
  ctx.peerSlotBytes = protoSlotDataBytes(proto, static_cast<uint32_t>(base.peerSlotBytes));
  return ctx;
}

bool LaunchPacker::fits(const Item* items, size_t nitems) const {
  size_t lanes = lanes_;
  size_t blocks = blocks_.size();
  std::map<uint16_t, BlockKey> held;
  for (size_t i = 0; i < nitems; ++i) {
    lanes += items[i].n;
    if (!blocks_.count(items[i].key)) ++blocks;
    for (size_t l = 0; l < items[i].n; ++l) {
      const DeviceLane& lane = items[i].lanes[l];
      for (int k = 0; k < kMaxLanePeers; ++k) {
        for (uint16_t c : {lane.send[k], lane.recv[k]}) {
          if (c == kNoConnector) continue;
          auto it = connectorBlock_.find(c);
          if (it != connectorBlock_.end() && it->second != items[i].key) return false;
          auto [h, added] = held.emplace(c, items[i].key);
          if (!added && h->second != items[i].key) return false;
        }
      }
    }
  }
  return lanes <= kMaxLaunchLanes && blocks <= static_cast<size_t>(kMaxBlocks);
}

void LaunchPacker::take(const Item* items, size_t nitems) {
  for (size_t i = 0; i < nitems; ++i) {
    std::vector<DeviceLane>& block = blocks_[items[i].key];
    for (size_t l = 0; l < items[i].n; ++l) {
      const DeviceLane& lane = items[i].lanes[l];
      block.push_back(lane);
      for (int k = 0; k < kMaxLanePeers; ++k) {
        if (lane.send[k] != kNoConnector) connectorBlock_[lane.send[k]] = items[i].key;
        if (lane.recv[k] != kNoConnector) connectorBlock_[lane.recv[k]] = items[i].key;
      }
    }
    lanes_ += items[i].n;
  }
}

void LaunchPacker::flush() {
  if (blocks_.empty()) return;
  LaunchParams& p = out_.emplace_back();
  header_.applyTo(p);
  uint32_t b = 0;
  uint32_t li = 0;
  for (auto& [key, lanes] : blocks_) {
    p.laneBegin[b++] = static_cast<uint16_t>(li);
    for (const DeviceLane& l : lanes) p.lanes[li++] = l;
  }
  p.laneBegin[b] = static_cast<uint16_t>(li);
  p.nblocks = b;
  blocks_.clear();
  connectorBlock_.clear();
  lanes_ = 0;
  reads_.clear();
  writes_.clear();
}

void LaunchPacker::addCollective(const std::vector<DeviceLane>& lanes, Span reads, Span writes) {
  if (lanes.empty()) return;
  // One item per channel; a collective is never cut (at most kMaxChannels lanes on as many blocks).
  std::vector<Item> items;
  for (const DeviceLane& l : lanes) {
    CHORUS_CHECK(l.seqKind == SeqKind::kColl);
    items.push_back(Item{&l, 1, channelKey(l.seqIndex)});
  }
  bool hazard = false;
  for (const Span& w : writes_) hazard = hazard || w.overlaps(reads) || w.overlaps(writes);
  for (const Span& r : reads_) hazard = hazard || r.overlaps(writes);
  if (hazard || !fits(items.data(), items.size())) flush();
  CHORUS_CHECK(fits(items.data(), items.size()));
  take(items.data(), items.size());
  reads_.push_back(reads);
  writes_.push_back(writes);
}

void LaunchPacker::addP2pRound(const std::vector<DeviceLane>& send, int sendQueue, const std::vector<DeviceLane>& recv,
                               int recvQueue) {
  // Chunk k of a round is lanes [k * kP2pChunk, (k + 1) * kP2pChunk) of each queue: the peer's
  // matching queue is cut at the same lanes, so matching chunks are one item on both ranks.
  const size_t n = std::max(send.size(), recv.size());
  for (size_t at = 0; at < n; at += kP2pChunk) {
    Item items[2];
    size_t nitems = 0;
    if (at < send.size()) {
      items[nitems++] = Item{send.data() + at, std::min(kP2pChunk, send.size() - at), queueKey(sendQueue)};
    }
    if (at < recv.size()) {
      items[nitems++] = Item{recv.data() + at, std::min(kP2pChunk, recv.size() - at), queueKey(recvQueue)};
    }
    if (!fits(items, nitems)) flush();
    CHORUS_CHECK(fits(items, nitems));
    take(items, nitems);
  }
}

std::vector<LaunchParams> LaunchPacker::finish() {
  flush();
  return std::move(out_);
}

}  // namespace chorus::device
