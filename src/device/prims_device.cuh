// The launch kernel: a CUDA thread block is the Block of src/device/lane_exec.h, so the kernel
// runs the same executor and primitives the host tests run on host threads. Counters, the error
// record and the abort word are reached with system-scope atomics (other GPUs and the host read
// and write them); the deadline clock is the GPU's global timer.
#pragma once

#include <cuda/atomic>

#include "src/device/lane_exec.h"
#include "src/device/line128.cuh"
#include "src/device/prims_device.h"

namespace chorus::device {

class CudaBlock {
 public:
  __device__ explicit CudaBlock(uint64_t* shared) : shared_(shared) {}
  __device__ unsigned tid() const { return threadIdx.x; }
  __device__ unsigned nthreads() const { return blockDim.x; }
  __device__ unsigned index() const { return blockIdx.x; }
  __device__ void sync() { __syncthreads(); }
  __device__ uint32_t acquire(uint32_t* p) {
    return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).load(cuda::memory_order_acquire);
  }
  __device__ void release(uint32_t* p, uint32_t v) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
  }
  __device__ void store(uint32_t* p, uint32_t v) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_relaxed);
  }
  __device__ uint64_t acquire64(uint64_t* p) {
    return cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).load(cuda::memory_order_acquire);
  }
  __device__ void release64(uint64_t* p, uint64_t v) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_release);
  }
  __device__ bool claim(uint32_t* p) {
    uint32_t expected = 0;
    return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).compare_exchange_strong(
        expected, 1, cuda::memory_order_acq_rel);
  }
  __device__ uint64_t nowNs() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ void relax() {}
  __device__ bool any(bool v) { return __syncthreads_or(v) != 0; }
  // A line in one 16-byte access (each 8-byte word of it is single-copy atomic, which is what LL
  // relies on), volatile: polled lines are read from memory every time.
  __device__ FifoLine loadLine(const FifoLine* l) {
    FifoLine v;
    asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v.word[0]), "=l"(v.word[1]) : "l"(l) : "memory");
    return v;
  }
  __device__ void storeLine(FifoLine* l, uint64_t w0, uint64_t w1) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(l), "l"(w0), "l"(w1) : "memory");
  }
  // LL128: the eight threads of a group move a 128-byte line in one warp-wide access
  // (src/device/line128.cuh).
  static constexpr unsigned kLineGroup = 8;
  static constexpr unsigned kWarp = 32;
  __device__ FifoLine loadPart(const FifoLine128* l, unsigned v) { return loadLinePart(l, v); }
  __device__ void storePart(FifoLine128* l, unsigned v, uint64_t w0, uint64_t w1) { storeLinePart(l, v, w0, w1); }
  __device__ bool lineAny(bool v) { return __any_sync(0xffffffffu, v) != 0; }
  __device__ void lineSync() { __syncwarp(0xffffffffu); }
  // Thread `from`'s value for every thread; the second barrier keeps the next share from
  // overwriting it early.
  __device__ uint64_t shareFrom(unsigned from, uint64_t v) {
    if (threadIdx.x == from) *shared_ = v;
    __syncthreads();
    v = *shared_;
    __syncthreads();
    return v;
  }
  __device__ uint64_t share(uint64_t v) { return shareFrom(0, v); }

 private:
  uint64_t* shared_;
};

static_assert(kLaunchThreads % CudaBlock::kWarp == 0, "LL128's votes take whole warps");

// __grid_constant__: the lanes are read in place from the parameter space, never copied.
// Two builds of it: with LL128 for launches that have an LL128 lane, without for the rest. The
// kernel takes the registers its most demanding path needs, up to 128 a thread at 512 threads;
// with LL128 in it the kernel spills more (ptxas -v, sm_90, the vector moves out of line: 24
// bytes of spill stores without LL128, 240 with it), so Simple and LL launches keep the kernel
// without.
template <bool kWithLL128>
__global__ void __launch_bounds__(kLaunchThreads) launchKernel(const __grid_constant__ LaunchParams p) {
  __shared__ uint64_t shared;
  CudaBlock b(&shared);
  runBlock<CudaBlock, kWithLL128>(b, p);
}

// Each build is instantiated in a translation unit of its own (launch_kernel_ll128.cu,
// launch_kernel_simple.cu), so that a build compiles the two in parallel: each takes ptxas
// minutes per architecture. The kernel's host side reaches them through these.
template <bool kWithLL128>
int launchBuild(const LaunchParams& p, unsigned threads, void* stream) {
  launchKernel<kWithLL128><<<p.nblocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}
template <bool kWithLL128>
const void* buildSymbol() {
  return reinterpret_cast<const void*>(&launchKernel<kWithLL128>);
}

}  // namespace chorus::device
