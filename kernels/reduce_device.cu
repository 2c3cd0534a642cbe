// The reductions of kernels/reduce.h compiled for the device: the same element functions the host
// paths use, in a grid-stride kernel. Built by nvcc for CHORUS_CUDA_ARCHITECTURES whenever the CUDA
// toolkit is found; nothing here runs without a GPU.
#include <cuda_runtime.h>

#include "kernels/reduce.h"
#include "kernels/reduce_device.h"

namespace chorus::device {
namespace {

template <typename T>
__global__ void preKernel(ReduceSpec s, void* dst, const void* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    storeElem<T>(dst, i, ElemOps<T>::pre(s, loadElem<T>(src, i)));
  }
}

template <typename T>
__global__ void reduceKernel(ReduceSpec s, void* dst, const void* recv, const void* local, size_t n, bool last) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    storeElem<T>(dst, i, reduceOne<T>(s, loadElem<T>(recv, i), loadElem<T>(local, i), last));
  }
}

unsigned gridFor(size_t n) {
  const size_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(blocks < 1024 ? (blocks ? blocks : 1) : 1024);
}

}  // namespace

int launchPre(const ReduceSpec& s, int type, void* dst, const void* src, size_t n, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  dispatchType(type, [&]<typename T>() { preKernel<T><<<gridFor(n), kThreadsPerBlock, 0, st>>>(s, dst, src, n); });
  return static_cast<int>(cudaGetLastError());
}

int launchReduce(const ReduceSpec& s, int type, void* dst, const void* recv, const void* local, size_t n, bool last,
                 void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  dispatchType(type, [&]<typename T>() {
    reduceKernel<T><<<gridFor(n), kThreadsPerBlock, 0, st>>>(s, dst, recv, local, n, last);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace chorus::device
