// CHORUS_HD marks functions compiled for both host and device (under nvcc), inlined on host.
#pragma once

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__ __forceinline__
#else
#define CHORUS_HD inline __attribute__((always_inline))
#endif

// CHORUS_HD_OUTLINE marks one that stays a function of its own on the device, called, not
// inlined: its registers are then its own, not what the caller's live state leaves
// (src/device/lane_exec.h's vector moves). Inlined or not on host, as the compiler likes.
#if defined(__CUDACC__)
#define CHORUS_HD_OUTLINE __host__ __device__ __noinline__ inline
#else
#define CHORUS_HD_OUTLINE inline
#endif
