// The device primitives' kernel, instantiated for every type (src/device/prims_device.cuh).
#include <cuda_runtime.h>

#include "src/device/prims_device.cuh"

namespace chorus::device {

int launchPrims(int type, const DeviceChannel* channels, unsigned nchannels, unsigned threads, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  dispatchType(type, [&]<typename T>() { primsKernel<T><<<nchannels, threads, 0, st>>>(channels); });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace chorus::device
