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

// CHORUS_HD_EXEC marks the device executor's functions (src/device/lane_exec.h and the files it
// includes): inlined into the kernel on the device, as CHORUS_HD; on the host, where only the
// tests run the executor (on blocks of host threads), inlined as the compiler likes. Forced
// inlining there put the whole executor, every type, operator and protocol, into one function:
// the device lane tests (then one file) took 14 to 30 minutes of one core to compile under ASan
// and UBSan, and a minute and a half without it.
#if defined(__CUDACC__)
#define CHORUS_HD_EXEC __host__ __device__ __forceinline__
#else
#define CHORUS_HD_EXEC inline
#endif
