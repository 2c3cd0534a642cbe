// A step program on the device: one thread block runs one channel's schedule (the Steps of
// src/algo/schedule.h) over FIFOs in memory both sides can reach (host-pinned or peer memory), with
// the same slot layout and counter protocol as the host lanes (transports/fifo.h).
//
// Per piece: thread 0 waits for the receive slot's data and the send slot's space, reading the
// counters with acquire loads at system scope; the block does the primitive with a strided loop
// over the piece's elements (the element functions of kernels/reduce.h); after a block barrier,
// thread 0 writes the slot header and publishes with a release store. Counter waits are bounded:
// after `spinLimit` polls without progress the kernel records the step it stalled on and returns,
// so a stuck peer fails loudly instead of hanging the device.
//
// Compiled by nvcc in every CUDA build; not run on machines without a GPU.
#pragma once

#include <cuda/atomic>

#include "kernels/reduce.h"
#include "src/algo/schedule.h"
#include "transports/fifo.h"

namespace chorus::device {

// A FIFO end as the device sees it: raw counters and slots (FifoControl's atomics have the layout
// of plain 32-bit words).
struct DeviceFifo {
  uint32_t* tail = nullptr;
  uint32_t* head = nullptr;
  char* slots = nullptr;
  uint32_t nslots = 0;
  uint32_t slotBytes = 0;
  uint32_t position = 0;  // this side's tail (send) or head (receive) at launch
};

struct DeviceLaneArgs {
  const Step* steps = nullptr;  // device-visible
  uint32_t nsteps = 0;
  const char* input = nullptr;
  char* output = nullptr;
  ReduceSpec spec;
  uint64_t commId = 0;
  uint64_t seq = 0;
  DeviceFifo send;
  DeviceFifo recv;
  uint64_t spinLimit = 1ull << 32;
  // Written by the kernel: 0 done, 1 stalled waiting for data, 2 for space, 3 header mismatch;
  // with the step where it happened and the final counter positions.
  uint32_t* result = nullptr;
};

__device__ inline uint32_t acquireLoad(uint32_t* p) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).load(cuda::memory_order_acquire);
}
__device__ inline void releaseStore(uint32_t* p, uint32_t v) {
  cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
}

__device__ inline SlotHeader* slotHeader(const DeviceFifo& f, uint32_t index) {
  return reinterpret_cast<SlotHeader*>(f.slots + size_t(index % f.nslots) * (sizeof(SlotHeader) + f.slotBytes));
}

template <typename T>
__global__ void stepProgramKernel(DeviceLaneArgs a) {
  __shared__ uint32_t status;
  uint32_t sendPos = a.send.position;
  uint32_t recvPos = a.recv.position;
  const size_t slotElems = a.send.slotBytes ? a.send.slotBytes / sizeof(T) : a.recv.slotBytes / sizeof(T);
  if (threadIdx.x == 0) status = 0;
  __syncthreads();
  for (uint32_t s = 0; s < a.nsteps && status == 0; ++s) {
    const Step st = a.steps[s];
    const bool rx = primReceives(st.prim);
    const bool tx = primSends(st.prim);
    const size_t npieces = slotElems ? (st.count + slotElems - 1) / slotElems : 0;
    for (size_t piece = 0; piece < npieces; ++piece) {
      const size_t off = piece * slotElems;
      const size_t n = st.count - off < slotElems ? st.count - off : slotElems;
      if (threadIdx.x == 0) {
        uint64_t spins = 0;
        while (rx && acquireLoad(a.recv.tail) == recvPos && ++spins < a.spinLimit) {
        }
        if (rx && spins >= a.spinLimit) status = 1;
        spins = 0;
        while (status == 0 && tx && sendPos - acquireLoad(a.send.head) >= a.send.nslots && ++spins < a.spinLimit) {
        }
        if (status == 0 && tx && spins >= a.spinLimit) status = 2;
        if (status == 0 && rx) {
          const SlotHeader* h = slotHeader(a.recv, recvPos);
          if (h->commId != a.commId || h->seq != a.seq || h->bytes != n * sizeof(T)) status = 3;
        }
      }
      __syncthreads();
      if (status != 0) break;
      const T* rslot = rx ? reinterpret_cast<const T*>(slotHeader(a.recv, recvPos) + 1) : nullptr;
      T* sslot = tx ? reinterpret_cast<T*>(slotHeader(a.send, sendPos) + 1) : nullptr;
      const char* in = a.input + (st.inOff + off) * sizeof(T);
      char* out = a.output + (st.outOff + off) * sizeof(T);
      for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        T v{};
        switch (st.prim) {
          case Prim::kSend:
            v = ElemOps<T>::pre(a.spec, loadElem<T>(in, i));
            break;
          case Prim::kRecv:
          case Prim::kRecvCopySend:
            v = rslot[i];
            storeElem<T>(out, i, v);
            break;
          case Prim::kCopySend:
            v = loadElem<T>(in, i);
            if (out != in) storeElem<T>(out, i, v);
            break;
          case Prim::kRecvReduceSend:
            v = reduceOne<T>(a.spec, rslot[i], loadElem<T>(in, i), false);
            break;
          case Prim::kRecvReduceCopySend:
          case Prim::kRecvReduceCopy:
            v = reduceOne<T>(a.spec, rslot[i], loadElem<T>(in, i), true);
            storeElem<T>(out, i, v);
            break;
          case Prim::kLocal:
            storeElem<T>(out, i, ElemOps<T>::pre(a.spec, loadElem<T>(in, i)));
            break;
        }
        if (tx) sslot[i] = v;
      }
      __syncthreads();  // every thread's writes to the slot and output precede the publish
      if (threadIdx.x == 0) {
        if (tx) {
          SlotHeader* h = slotHeader(a.send, sendPos);
          h->commId = a.commId;
          h->seq = a.seq;
          h->step = s;
          h->bytes = static_cast<uint32_t>(n * sizeof(T));
          releaseStore(a.send.tail, sendPos + 1);
        }
        if (rx) releaseStore(a.recv.head, recvPos + 1);
      }
      if (tx) ++sendPos;
      if (rx) ++recvPos;
    }
  }
  if (threadIdx.x == 0 && a.result) {
    a.result[0] = status;
    a.result[1] = sendPos;
    a.result[2] = recvPos;
  }
}

}  // namespace chorus::device
