// The launch kernel's host side: which of its two builds (with LL128 and without:
// prims_device.cuh) a launch takes. Every element type is a branch inside the kernel (lane_exec.h's
// runLane), so one launch runs a group whatever its types. The builds are compiled apart
// (launch_kernels.h).
#include <cuda_runtime.h>

#include "src/device/lane_exec.h"
#include "src/device/launch_kernels.h"
#include "src/device/prims_device.h"

namespace chorus::device {

int launchLanes(const LaunchParams& p, unsigned threads, void* stream) {
  if (p.nblocks == 0) return 0;
  return launchHasLL128(p) ? launchBuild<true>(p, threads, stream) : launchBuild<false>(p, threads, stream);
}

const void* kernelSymbol(const LaunchParams& p) {
  return launchHasLL128(p) ? buildSymbol<true>() : buildSymbol<false>();
}

int loadKernels() {
  cudaFuncAttributes attr;
  const cudaError_t e = cudaFuncGetAttributes(&attr, buildSymbol<false>());
  return static_cast<int>(e != cudaSuccess ? e : cudaFuncGetAttributes(&attr, buildSymbol<true>()));
}

}  // namespace chorus::device
