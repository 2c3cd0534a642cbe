// chorusDdpBroadcastParameters: the root's parameters to every rank, packed into chunks of
// broadcastChunkBytes (a parameter of that size or more goes alone, in place), on the reducer's
// stream after whatever consumed the last iteration's gradients.
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "src/common/types.h"
#include "src/ddp/reducer.h"

namespace chorus::ddp {

namespace {

// One chunk of chorusDdpBroadcastParameters: the root packs it, everyone else unpacks it, both as
// host functions on the stream around the broadcast, so the one staging buffer is reused in order.
struct Chunk {
  std::vector<std::pair<void*, size_t>> pieces;  // parameter, bytes
  void* staging = nullptr;
  static void pack(void* p) {
    auto* c = static_cast<Chunk*>(p);
    char* at = static_cast<char*>(c->staging);
    for (auto& [ptr, n] : c->pieces) {
      std::memcpy(at, ptr, n);
      at += n;
    }
  }
  static void unpack(void* p) {
    auto* c = static_cast<Chunk*>(p);
    const char* at = static_cast<const char*>(c->staging);
    for (auto& [ptr, n] : c->pieces) {
      std::memcpy(ptr, at, n);
      at += n;
    }
  }
};

}  // namespace

Status Reducer::broadcastParameters(void* const* params, int root) {
  if (!params) return invalidArgument("params is NULL; pass one pointer per parameter");
  if (root < 0 || root >= nranks_) {
    return invalidArgument("root " + std::to_string(root) + " is out of range [0, " + std::to_string(nranks_) + ")");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params[i] && params_[i].count > 0) return invalidArgument("params[" + std::to_string(i) + "] is NULL");
  }
  CHORUS_TRY(waitForConsumer());
  std::lock_guard<std::mutex> g(mu_);
  if (phase_ == Phase::kBackward && marked_ > 0) {
    return invalidUsage("chorusDdpBroadcastParameters during an iteration; call it between iterations");
  }
  CHORUS_TRY(orderAfterConsumerLocked());
  return broadcastLocked(params, root);
}

Status Reducer::broadcastLocked(void* const* params, int root) {
  const size_t cap = opt_.broadcastChunkBytes;
  std::vector<std::unique_ptr<Chunk>> chunks;
  std::vector<std::pair<void*, size_t>> alone;  // parameters of a chunk's size or more, in place
  std::vector<size_t> order;                    // chunk k or alone ~k, in parameter order
  size_t fill = 0, largest = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t bytes = params_[i].count * typeSize(params_[i].type);
    if (bytes == 0) continue;
    if (bytes >= cap) {
      alone.emplace_back(params[i], bytes);
      order.push_back(~(alone.size() - 1));
      continue;
    }
    if (chunks.empty() || fill + bytes > cap || order.back() != chunks.size() - 1) {
      chunks.push_back(std::make_unique<Chunk>());
      order.push_back(chunks.size() - 1);
      fill = 0;
    }
    chunks.back()->pieces.emplace_back(params[i], bytes);
    fill += bytes;
    largest = std::max(largest, fill);
  }
  void* staging = nullptr;
  if (largest > 0) {
    Result<void*> st = store_->alloc(largest);
    if (!st.isOk()) {
      return Status(st.status().code(), "allocating the broadcast's staging buffer: " + st.status().message());
    }
    staging = st.value();
  }
  const bool isRoot = rank_ == root;
  const bool onDevice = store_->onDevice();
  Status s;
  auto note = [&](chorusResult_t rc, const char* what) {
    if (rc != chorusSuccess && s.isOk()) s = fail(rc, what);
  };
  // Device memory: the pieces are copied in and out on the stream (host functions there could not
  // touch device memory).
  auto copyPieces = [&](const Chunk& c, bool in) {
    char* at = static_cast<char*>(c.staging);
    for (auto& [ptr, n] : c.pieces) {
      Status cs = in ? store_->copy(at, ptr, n) : store_->copy(ptr, at, n);
      if (!cs.isOk() && s.isOk()) s = cs;
      at += n;
    }
  };
  for (size_t k : order) {
    if (k >= chunks.size()) {
      auto [ptr, bytes] = alone[~k];
      note(chorusBroadcast(ptr, ptr, bytes, chorusUint8, root, comm_, stream_), "broadcasting a parameter");
      continue;
    }
    Chunk& c = *chunks[k];
    c.staging = staging;
    size_t bytes = 0;
    for (auto& piece : c.pieces) bytes += piece.second;
    if (isRoot && onDevice) copyPieces(c, true);
    if (isRoot && !onDevice) note(chorusLaunchHostFunc(stream_, Chunk::pack, &c), "packing parameters");
    note(chorusBroadcast(staging, staging, bytes, chorusUint8, root, comm_, stream_), "broadcasting parameters");
    if (!isRoot && onDevice) copyPieces(c, false);
    if (!isRoot && !onDevice) note(chorusLaunchHostFunc(stream_, Chunk::unpack, &c), "unpacking parameters");
  }
  Status w = waitLocked("broadcasting the parameters");
  if (staging) store_->free(staging);
  if (!s.isOk()) return s;
  if (!w.isOk()) return w;
  return staging ? freedTogetherLocked("waiting for every rank to free the broadcast's staging buffer") : Status::ok();
}

}  // namespace chorus::ddp
