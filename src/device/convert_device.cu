// The DDP layer's compression hooks on device gradients (src/ddp/grad_store.h): float32 or
// float64 buckets into float16 or bfloat16 and back, with the host's rounding
// (kernels/numeric.h's fromFloat and toFloat, a float64 going through float32 as on the host), so
// host and device reducers send the same bits.
#include <cuda_runtime.h>

#include "include/chorus/chorus.h"
#include "kernels/numeric.h"
#include "src/device/prims_device.h"

namespace chorus::device {
namespace {

constexpr unsigned kConvertThreads = 256;
constexpr unsigned kConvertMaxBlocks = 4096;

template <typename Wide, typename Low>
__global__ void narrowKernel(const Wide* src, uint16_t* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = fromFloat<Low>(static_cast<float>(src[i])).bits;
  }
}

template <typename Wide, typename Low>
__global__ void widenKernel(const uint16_t* src, Wide* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = static_cast<Wide>(toFloat(Low{src[i]}));
  }
}

template <typename Wide, typename Low>
int convertAs(const void* src, void* dst, size_t n, bool narrow, cudaStream_t stream) {
  const size_t want = (n + kConvertThreads - 1) / kConvertThreads;
  const unsigned blocks = static_cast<unsigned>(want < kConvertMaxBlocks ? want : kConvertMaxBlocks);
  if (narrow) {
    narrowKernel<Wide, Low>
        <<<blocks, kConvertThreads, 0, stream>>>(static_cast<const Wide*>(src), static_cast<uint16_t*>(dst), n);
  } else {
    widenKernel<Wide, Low>
        <<<blocks, kConvertThreads, 0, stream>>>(static_cast<const uint16_t*>(src), static_cast<Wide*>(dst), n);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launchConvert(const void* src, void* dst, size_t n, int wide, int low, bool narrow, void* stream) {
  if (n == 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  const bool f64 = wide == chorusFloat64;
  if (wide != chorusFloat32 && !f64) return static_cast<int>(cudaErrorInvalidValue);
  if (low == chorusFloat16) {
    return f64 ? convertAs<double, Half>(src, dst, n, narrow, s) : convertAs<float, Half>(src, dst, n, narrow, s);
  }
  if (low == chorusBfloat16) {
    return f64 ? convertAs<double, BFloat16>(src, dst, n, narrow, s)
               : convertAs<float, BFloat16>(src, dst, n, narrow, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int loadConvertKernels() {
  const void* kernels[] = {
      reinterpret_cast<const void*>(narrowKernel<float, Half>),
      reinterpret_cast<const void*>(narrowKernel<double, Half>),
      reinterpret_cast<const void*>(narrowKernel<float, BFloat16>),
      reinterpret_cast<const void*>(narrowKernel<double, BFloat16>),
      reinterpret_cast<const void*>(widenKernel<float, Half>),
      reinterpret_cast<const void*>(widenKernel<double, Half>),
      reinterpret_cast<const void*>(widenKernel<float, BFloat16>),
      reinterpret_cast<const void*>(widenKernel<double, BFloat16>),
  };
  for (const void* k : kernels) {
    cudaFuncAttributes attr;
    const cudaError_t e = cudaFuncGetAttributes(&attr, k);
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  return 0;
}

}  // namespace chorus::device
