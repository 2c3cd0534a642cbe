// The primitives (src/algo/prims.h) on the device: BlockExec is the executor of one CUDA thread
// block, and primsKernel runs one channel per block with the same Primitives template the host
// lanes run.
//
// Per piece: thread 0 waits for the receive slot's data and the send slot's room, reading the
// counters with acquire loads at system scope, bounded by spinLimit polls; the block shares the
// answer through shared memory. Every thread moves a strided share of the piece with the element
// functions of kernels/reduce.h; after a block barrier thread 0 stamps the header and publishes
// with a release store at system scope.
#pragma once

#include <cuda/atomic>

#include "kernels/reduce.h"
#include "src/algo/prims.h"
#include "src/device/prims_device.h"

namespace chorus::device {

__device__ inline uint32_t acquireLoad(uint32_t* p) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).load(cuda::memory_order_acquire);
}
__device__ inline void releaseStore(uint32_t* p, uint32_t v) {
  cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
}

template <typename T>
class BlockExec {
 public:
  // `flag`: a word of shared memory for the block's waits.
  __device__ BlockExec(const DeviceChannel& c, uint32_t* flag) : c_(c), flag_(flag) {
    for (int i = 0; i < kMaxLanePeers; ++i) {
      sends_[i] = c.send[i];
      recvs_[i] = c.recv[i];
    }
  }

  __device__ void select(int sendTo, int recvFrom) {
    curSend_ = sendTo;
    curRecv_ = recvFrom;
  }

  // The tail counter alone decides (a ready word a host producer wrote is not polled here).
  __device__ bool waitData(bool) {
    if (leader()) {
      uint64_t spins = 0;
      while (static_cast<int32_t>(acquireLoad(recvEnd().tail) - recvEnd().position) <= 0 && ++spins < c_.spinLimit) {
      }
      *flag_ = spins < c_.spinLimit;
    }
    return share();
  }
  __device__ bool waitSpace() {
    if (leader()) {
      uint64_t spins = 0;
      while (sendEnd().position - acquireLoad(sendEnd().head) >= sendEnd().nslots && ++spins < c_.spinLimit) {
      }
      *flag_ = spins < c_.spinLimit;
    }
    return share();
  }
  __device__ const SlotHeader* recvHeader() const { return header(recvEnd()); }
  __device__ const char* recvPayload(char*) const { return reinterpret_cast<const char*>(header(recvEnd()) + 1); }
  __device__ SlotHeader* sendHeader() const { return header(sendEnd()); }
  __device__ char* sendPayload(Prim, const char*, const char*) const {
    return reinterpret_cast<char*>(header(sendEnd()) + 1);
  }
  __device__ void move(const PieceMove& m, size_t n) const {
    const bool toDst = m.dst && !(m.fold == Fold::kCopy && m.dst == m.a);
    const ReduceSpec full = c_.spec;  // register copies: the stores below may alias global memory
    ReduceSpec spec = full;
    if (m.noPre) spec.hasPre = false;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
      T v;
      switch (m.fold) {
        case Fold::kCopy:
          v = loadElem<T>(m.a, i);
          break;
        case Fold::kPre:
          v = ElemOps<T>::pre(spec, loadElem<T>(m.a, i));
          break;
        default: {
          // preA: pre(a) OP b (b pre-multiplied unless noPre).
          const T a = m.preA ? ElemOps<T>::pre(full, loadElem<T>(m.a, i)) : loadElem<T>(m.a, i);
          v = reduceOne<T>(spec, a, loadElem<T>(m.b, i), m.fold == Fold::kReducePost);
          break;
        }
      }
      if (toDst) storeElem<T>(m.dst, i, v);
      if (m.dst2) storeElem<T>(m.dst2, i, v);
    }
    __syncthreads();  // every thread's writes to the slot and the output precede the publish
  }
  __device__ bool leader() const { return threadIdx.x == 0; }
  __device__ void publish(bool flag) {
    if (leader() && flag) {
      cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(header(sendEnd())->ready)
          .store(slotReadyFlag(c_.seq, sendEnd().position), cuda::memory_order_release);
    }
    ++sendEnd().position;
    if (leader()) releaseStore(sendEnd().tail, sendEnd().position);
  }
  __device__ void release() {
    ++recvEnd().position;
    if (leader()) releaseStore(recvEnd().head, recvEnd().position);
  }
  __device__ void moved() {}
  // Device buffers always travel as bytes: a peer reading this GPU's memory in place needs CUDA
  // IPC handles, which device lanes do not exchange. An offer from a peer is refused.
  __device__ uint32_t offer(int, bool, char*, size_t) const { return 0; }
  __device__ bool accept(int, bool, const char*, uint32_t, size_t) const { return false; }
  __device__ bool exposed(int) const { return false; }
  __device__ bool reads(int) const { return false; }
  __device__ const char* peerBuffer(int, bool) const { return nullptr; }

  __device__ uint32_t sendPosition() const { return sends_[0].position; }
  __device__ uint32_t recvPosition() const { return recvs_[0].position; }

 private:
  __device__ DeviceFifo& sendEnd() { return sends_[curSend_]; }
  __device__ const DeviceFifo& sendEnd() const { return sends_[curSend_]; }
  __device__ DeviceFifo& recvEnd() { return recvs_[curRecv_]; }
  __device__ const DeviceFifo& recvEnd() const { return recvs_[curRecv_]; }
  __device__ static SlotHeader* header(const DeviceFifo& f) {
    return reinterpret_cast<SlotHeader*>(f.slots + size_t(f.position % f.nslots) * (sizeof(SlotHeader) + f.slotBytes));
  }
  // Thread 0's answer, for every thread; the second barrier keeps the next wait from overwriting it early.
  __device__ bool share() const {
    __syncthreads();
    const bool ok = *flag_ != 0;
    __syncthreads();
    return ok;
  }

  const DeviceChannel& c_;
  DeviceFifo sends_[kMaxLanePeers];
  DeviceFifo recvs_[kMaxLanePeers];
  int curSend_ = 0;
  int curRecv_ = 0;
  uint32_t* flag_;
};

template <typename T>
__global__ void primsKernel(const DeviceChannel* channels) {
  __shared__ uint32_t flag;
  const DeviceChannel& c = channels[blockIdx.x];
  BlockExec<T> ex(c, &flag);
  const uint32_t slotBytes = c.send[0].slotBytes ? c.send[0].slotBytes : c.recv[0].slotBytes;
  const size_t slotElems = slotBytes >= sizeof(T) ? slotBytes / sizeof(T) : 1;
  Primitives<BlockExec<T>> prims(ex, SlotTag{c.commId, c.seq}, sizeof(T), slotElems, c.input, c.output);
  PrimCursor at;
  const PrimStop stop = prims.run(c.steps, c.nsteps, &at);
  if (threadIdx.x == 0 && c.result) {
    c.result[0] = static_cast<uint32_t>(stop.status);
    c.result[1] = static_cast<uint32_t>(at.step);
    c.result[2] = ex.sendPosition();
    c.result[3] = ex.recvPosition();
  }
}

}  // namespace chorus::device
