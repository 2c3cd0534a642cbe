// The two builds of the launch kernel (prims_device.cuh), each instantiated in a translation unit
// of its own (launch_kernel_ll128.cu, launch_kernel_simple.cu) so that the build compiles them in
// parallel; prims_device.cu reaches them through these. CUDA-built only.
#pragma once

#include "src/device/launch_desc.h"

namespace chorus::device {

// Enqueues build kWithLL128 of the launch kernel for `p` on `stream`; a cudaError_t (0: enqueued).
template <bool kWithLL128>
int launchBuild(const LaunchParams& p, unsigned threads, void* stream);
// That build's host handle (a __global__ function's address).
template <bool kWithLL128>
const void* buildSymbol();

extern template int launchBuild<true>(const LaunchParams&, unsigned, void*);
extern template int launchBuild<false>(const LaunchParams&, unsigned, void*);
extern template const void* buildSymbol<true>();
extern template const void* buildSymbol<false>();

}  // namespace chorus::device
