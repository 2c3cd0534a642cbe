// CHORUS_HD marks functions compiled for both host and device (under nvcc), inlined on host.
#pragma once

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__ __forceinline__
#else
#define CHORUS_HD inline __attribute__((always_inline))
#endif
