// The device executor of the primitives (src/algo/prims.h), as the host sees it: what one channel
// of a kernel needs, and the launcher. No CUDA in this header; the kernel is in prims_device.cuh,
// compiled by nvcc (prims_device.cu) in every CUDA build.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/reduce.h"
#include "src/algo/fifo.h"
#include "src/algo/schedule.h"

namespace chorus::device {

// A FIFO end as the device sees it (src/algo/fifo.h's layout): the raw counters (FifoControl's
// atomics have the layout of plain 32-bit words) and slots, in memory both sides can reach.
struct DeviceFifo {
  uint32_t* tail = nullptr;
  uint32_t* head = nullptr;
  char* slots = nullptr;
  uint32_t nslots = 0;
  uint32_t slotBytes = 0;
  uint32_t position = 0;  // this side's tail (send) or head (receive) at launch
};

// The device's view of a FIFO laid out by FifoView::layout, starting at `position`.
inline DeviceFifo deviceFifo(const FifoView& f, uint32_t position = 0) {
  return DeviceFifo{reinterpret_cast<uint32_t*>(&f.ctrl->tail),
                    reinterpret_cast<uint32_t*>(&f.ctrl->head),
                    f.slots,
                    f.nslots,
                    f.slotBytes,
                    position};
}

// How a channel's run ended (DeviceChannel::result[0]).
enum class DeviceResult : uint32_t { kDone = 0, kNeedData = 1, kNeedSpace = 2, kMismatch = 3 };

// One channel: one thread block runs `steps` over one send and one receive FIFO.
struct DeviceChannel {
  const Step* steps = nullptr;  // device-visible
  uint32_t nsteps = 0;
  const char* input = nullptr;
  char* output = nullptr;
  ReduceSpec spec;
  uint64_t commId = 0;
  uint64_t seq = 0;
  // By the index the steps name (Step::sendTo, Step::recvFrom); unused entries stay empty.
  DeviceFifo send[kMaxLanePeers];
  DeviceFifo recv[kMaxLanePeers];
  // Polls of a counter without progress before the block gives up on a wait and returns.
  uint64_t spinLimit = 1ull << 32;
  // Written by the kernel, when not null: DeviceResult, the step it stopped at, and the final
  // positions of send connector 0 and receive connector 0.
  uint32_t* result = nullptr;
};

// Runs channels[0, nchannels) (device-visible), one block of `threads` threads each, on `stream`
// (a cudaStream_t; null: the default stream). `type` is a chorusDataType_t. Returns a cudaError_t.
int launchPrims(int type, const DeviceChannel* channels, unsigned nchannels, unsigned threads, void* stream);

}  // namespace chorus::device
