// The launch kernel's build without LL128 (launches of Simple and LL lanes), instantiated here alone
// (src/device/launch_kernels.h says why).
#include <cuda_runtime.h>

#include "src/device/launch_kernels.h"
#include "src/device/prims_device.cuh"

namespace chorus::device {

template int launchBuild<false>(const LaunchParams&, unsigned, void*);
template const void* buildSymbol<false>();

}  // namespace chorus::device
