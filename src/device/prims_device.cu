// The launch kernel, compiled twice (with LL128 and without: prims_device.cuh): every element
// type is a branch inside it (lane_exec.h's runLane), so one launch runs a group whatever its
// types.
#include <cuda_runtime.h>

#include "src/device/prims_device.cuh"
#include "src/device/prims_device.h"

namespace chorus::device {

int launchLanes(const LaunchParams& p, unsigned threads, void* stream) {
  if (p.nblocks == 0) return 0;
  if (launchHasLL128(p)) {
    launchKernel<true><<<p.nblocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  } else {
    launchKernel<false><<<p.nblocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

const void* kernelSymbol(const LaunchParams& p) {
  return launchHasLL128(p) ? reinterpret_cast<const void*>(&launchKernel<true>)
                           : reinterpret_cast<const void*>(&launchKernel<false>);
}

int loadKernels() {
  cudaFuncAttributes attr;
  const cudaError_t e = cudaFuncGetAttributes(&attr, launchKernel<false>);
  return static_cast<int>(e != cudaSuccess ? e : cudaFuncGetAttributes(&attr, launchKernel<true>));
}

}  // namespace chorus::device
