// The device side of a launch, as the host sees it: the kernel that runs a LaunchParams
// (src/device/launch_desc.h) with one CUDA thread block per block of lanes. No CUDA in this
// header; the kernel is in prims_device.cuh, compiled by nvcc (prims_device.cu) in every CUDA
// build.
#pragma once

#include "src/device/launch_desc.h"

namespace chorus::device {

// Threads per block of the launch kernel.
constexpr unsigned kLaunchThreads = 512;

// Enqueues the kernel for `p` on `stream` (a cudaStream_t; null: the legacy default stream), one
// block of `threads` threads per block of lanes, passing the whole struct. The memory p names must
// be reachable from the current device. Returns a cudaError_t (0: enqueued).
int launchLanes(const LaunchParams& p, unsigned threads, void* stream);

// The build of the launch kernel that `p` needs (with LL128 or without), as the host's handle of
// a __global__ function: for cudaGetFuncBySymbol, where a launch goes through the driver with
// only launchParamsBytes(p) of parameters (cuda::launch).
const void* kernelSymbol(const LaunchParams& p);

// Loads the launch kernel into the current device's context now. Under lazy module loading (the
// default since CUDA 12.2) the first launch would load it, and loading waits for every kernel
// running in the context: a first collective would wait behind the user's stream. Called when a
// communicator's device side is made, before any collective. Returns a cudaError_t (0: loaded).
int loadKernels();

// Enqueues the conversion of n elements between a wide type (chorusFloat32 or chorusFloat64)
// and a 16-bit one (chorusFloat16 or chorusBfloat16) on `stream` (convert_device.cu):
// narrowing when `narrow`, widening otherwise. Returns a cudaError_t (0: enqueued).
int launchConvert(const void* src, void* dst, size_t n, int wide, int low, bool narrow, void* stream);
// Loads every conversion kernel into the current device's context, for the reason loadKernels
// loads the launch kernel: a DDP hook's first conversion, loaded lazily, would wait for every
// kernel running in the context, among them a peer rank's collective that waits for this rank's.
// Returns a cudaError_t (0: loaded).
int loadConvertKernels();

}  // namespace chorus::device
