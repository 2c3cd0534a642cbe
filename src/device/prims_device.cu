// The launch kernel, compiled once: every element type is a branch inside it (lane_exec.h's
// runLane), so one launch runs a group whatever its types.
#include <cuda_runtime.h>

#include "src/device/prims_device.cuh"
#include "src/device/prims_device.h"

namespace chorus::device {

int launchLanes(const LaunchParams& p, unsigned threads, void* stream) {
  if (p.nblocks == 0) return 0;
  launchKernel<<<p.nblocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int loadKernels() {
  cudaFuncAttributes attr;
  return static_cast<int>(cudaFuncGetAttributes(&attr, launchKernel));
}

}  // namespace chorus::device
