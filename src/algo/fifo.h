// The FIFO every transport hands to the algorithms: a ring of slots with head/tail counters.
//
// The producer fills slot (tail % nslots) and then publishes it by storing tail + 1 with release
// order; the consumer reads tail with acquire order, uses the slot, and frees it by storing
// head + 1 with release order. Counters are 32-bit and wrap; only differences are compared. The
// control words can live in memory shared between processes, so sleeping uses process-shared
// futexes on the counters themselves: a side that goes to sleep sets its *Waiting word first, and
// the other side wakes it after each store. On x86 the strong ordering would hide a missing
// release/acquire; the orders written here are the ones a weaker machine (or a GPU) needs.
//
// Each slot starts with a SlotHeader that says which communicator, operation and step the data
// belongs to and how many bytes follow; receivers check it against their own expectations and
// never copy more than their own arguments allow.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace chorus {

struct alignas(64) FifoControl {
  alignas(64) std::atomic<uint32_t> tail{0};  // slots published by the producer
  alignas(64) std::atomic<uint32_t> head{0};  // slots freed by the consumer
  alignas(64) std::atomic<uint32_t> consumerWaiting{0};
  std::atomic<uint32_t> producerWaiting{0};
  std::atomic<uint32_t> closed{0};  // set when either side goes away or fails
};

struct alignas(64) SlotHeader {
  uint64_t commId;
  uint64_t seq;    // operation sequence number on this connection's communicator
  uint32_t step;   // step of the schedule, for diagnostics and mismatch checks
  uint32_t bytes;  // payload bytes that follow
  // Written last, with release order, by producers that let the consumer act on the header alone
  // (ProtoFlag, src/algo/prims.h): slotReadyFlag(seq, position), unique within a FIFO lap. Kernels'
  // Simple pieces carry it too, published by the tail like the rest of the header: a kernel
  // receiving LL tells by it a Simple piece at its position from an older one (the ends chose
  // different protocols; src/device/lane_protocols.h).
  uint64_t ready;
  // Up to 32 payload bytes may travel here instead (ProtoFlag), so a tiny message is one cache
  // line.
  unsigned char inlineData[32];
};
constexpr size_t kSlotInlineBytes = sizeof(SlotHeader::inlineData);
static_assert(sizeof(SlotHeader) == 64, "slot header is one cache line");

inline size_t fifoSlotStride(size_t slotBytes) { return sizeof(SlotHeader) + slotBytes; }
inline size_t fifoBytes(uint32_t nslots, size_t slotBytes) {
  return sizeof(FifoControl) + size_t(nslots) * fifoSlotStride(slotBytes);
}

// The line area of a FIFO kernels use (the LL protocol, src/device/lane_protocols.h): after the slots,
// fifoSlotLines(slotBytes) lines of 16 bytes per slot. A line is two 8-byte words, each 4 bytes of
// data and a 4-byte flag, written in one store: a reader that finds a word's flag current has that
// word's data, with no counter and no fence between them. Host FIFOs have no line area.
struct alignas(16) FifoLine {
  uint64_t word[2];  // data | flag << 32 (in memory: data, then flag)
};
constexpr uint32_t kMaxSlotLines = 1024;
constexpr uint32_t fifoSlotLines(uint32_t slotBytes) {
  const uint32_t lines = slotBytes / sizeof(FifoLine);
  return lines < 4 ? 4 : lines > kMaxSlotLines ? kMaxSlotLines : lines;
}
inline size_t fifoLineAreaOffset(uint32_t nslots, size_t slotBytes) {
  return (fifoBytes(nslots, slotBytes) + alignof(FifoLine) - 1) / alignof(FifoLine) * alignof(FifoLine);
}
// The 128-byte line area (the LL128 protocol, src/device/lane_protocols.h), after the line area:
// fifoSlotLines128(slotBytes) lines of 128 bytes per slot, each 15 words of data and a flag word,
// written by one warp-wide store (eight threads 16 bytes each) and read by one warp-wide load: a
// reader that finds the flag current has the line's data. A line starts at a multiple of 128
// bytes from the FIFO's start.
struct alignas(16) FifoLine128 {
  uint64_t word[16];  // word[15]: the flag
};
constexpr uint32_t kMaxSlotLines128 = 1024;
constexpr uint32_t fifoSlotLines128(uint32_t slotBytes) {
  const uint32_t lines = slotBytes / sizeof(FifoLine128);
  return lines < 2 ? 2 : lines > kMaxSlotLines128 ? kMaxSlotLines128 : lines;
}
inline size_t fifoLine128AreaOffset(uint32_t nslots, size_t slotBytes) {
  const size_t end = fifoLineAreaOffset(nslots, slotBytes) +
                     size_t(nslots) * fifoSlotLines(static_cast<uint32_t>(slotBytes)) * sizeof(FifoLine);
  return (end + sizeof(FifoLine128) - 1) / sizeof(FifoLine128) * sizeof(FifoLine128);
}
// fifoBytes and both line areas.
inline size_t deviceFifoBytes(uint32_t nslots, uint32_t slotBytes) {
  return fifoLine128AreaOffset(nslots, slotBytes) + size_t(nslots) * fifoSlotLines128(slotBytes) * sizeof(FifoLine128);
}

// What a connector needs to use a FIFO; trivially copyable, like a device handle.
struct FifoView {
  FifoControl* ctrl = nullptr;
  char* slots = nullptr;
  uint32_t nslots = 0;
  uint32_t slotBytes = 0;
  // Lays a FIFO out in `mem` (fifoBytes(nslots, slotBytes) bytes, zeroed).
  static FifoView layout(void* mem, uint32_t nslots, uint32_t slotBytes);
  // The view of a FIFO laid out at `mem` already, without touching it (it may be device memory).
  static FifoView at(void* mem, uint32_t nslots, uint32_t slotBytes) {
    FifoView f;
    f.ctrl = static_cast<FifoControl*>(mem);
    f.slots = static_cast<char*>(mem) + sizeof(FifoControl);
    f.nslots = nslots;
    f.slotBytes = slotBytes;
    return f;
  }

  SlotHeader* header(uint32_t index) const {
    return reinterpret_cast<SlotHeader*>(slots + size_t(index % nslots) * fifoSlotStride(slotBytes));
  }
  char* payload(uint32_t index) const { return reinterpret_cast<char*>(header(index)) + sizeof(SlotHeader); }

  // Producer side.
  bool hasSpace(uint32_t tail) const { return tail - ctrl->head.load(std::memory_order_acquire) < nslots; }
  void publish(uint32_t newTail) const;
  // Consumer side.
  // A signed difference, not !=: a consumer that took a slot on seeing its header (ProtoFlag)
  // may run ahead of a tail store it has not seen yet.
  bool hasData(uint32_t head) const {
    return static_cast<int32_t>(ctrl->tail.load(std::memory_order_acquire) - head) > 0;
  }
  void release(uint32_t newHead) const;

  bool closed() const { return ctrl->closed.load(std::memory_order_acquire) != 0; }
  void close() const;

  // The line area of a FIFO laid out in deviceFifoBytes (ctrl is where the layout starts).
  FifoLine* lines() const {
    return reinterpret_cast<FifoLine*>(reinterpret_cast<char*>(ctrl) + fifoLineAreaOffset(nslots, slotBytes));
  }
  FifoLine128* lines128() const {
    return reinterpret_cast<FifoLine128*>(reinterpret_cast<char*>(ctrl) + fifoLine128AreaOffset(nslots, slotBytes));
  }
};

// What a lane shares with the thread of a transport that moves its FIFO to and from a network
// (the net transport's proxy, in the lane's process); empty for every other transport.
struct ProxyLink {
  int wakeFd = -1;  // the proxy's eventfd: rung after every publish and free of a host FIFO
  // Send FIFOs: per slot, where its payload is when the producer published it by reference
  // instead of copying it into the slot, or null. Written before publish(), cleared by the proxy
  // before release().
  const char** refs = nullptr;
  // Receive FIFOs: per slot, where the consumer wants the payload (posted before the proxy posts
  // that slot's receive, with the byte count it expects in destBytes), or 0, or kDestInSlot once
  // the proxy has taken the slot for itself. The consumer resets the entry to 0 before it frees
  // the slot. See Lane::postAhead.
  std::atomic<uintptr_t>* dests = nullptr;
  uint32_t* destBytes = nullptr;
  static constexpr uintptr_t kDestInSlot = 1;

  void ring() const;
};

}  // namespace chorus
