// The launch kernel's build with LL128 (launches that have an LL128 lane), instantiated here alone
// (src/device/launch_kernels.h says why).
#include <cuda_runtime.h>

#include "src/device/launch_kernels.h"
#include "src/device/prims_device.cuh"

namespace chorus::device {

template int launchBuild<true>(const LaunchParams&, unsigned, void*);
template const void* buildSymbol<true>();

}  // namespace chorus::device
