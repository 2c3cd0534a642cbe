// Host-side launchers of the device reductions (kernels/reduce_device.cu). The stream is a
// cudaStream_t passed as void* so that this header needs no CUDA. Return a cudaError_t value.
#pragma once

#include <cstddef>

#include "kernels/reduce.h"

namespace chorus::device {

constexpr unsigned kThreadsPerBlock = 256;

// dst = pre(src) over n elements of `type` (a chorusDataType_t), on `stream`.
int launchPre(const ReduceSpec& s, int type, void* dst, const void* src, size_t n, void* stream);
// dst = post?(recv OP pre(local)).
int launchReduce(const ReduceSpec& s, int type, void* dst, const void* recv, const void* local, size_t n, bool last,
                 void* stream);

}  // namespace chorus::device
