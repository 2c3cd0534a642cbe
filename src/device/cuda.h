// CUDA as the rest of the library sees it: whether the driver is in the process, what a pointer
// is, devices, device memory that other processes can map, and CUDA streams. No CUDA header here,
// so every layer may include it in every build.
//
// Chorus never loads the CUDA driver on its own initiative. A program that has touched CUDA has
// loaded libcuda.so.1 (its runtime does so on the first call); until it is loaded no pointer can
// be device memory, so every buffer takes the host path and a host-only program never
// initialises CUDA (tests/api_test.cc checks /proc/self/maps). The driver's entry points are
// found at run time in the loaded library (cuGetProcAddress); the CUDA runtime is linked
// statically into libchorus.so, so `ldd libchorus.so` names no CUDA library.
//
// The probe (driverLoaded, memInfo) exists in every build: a build without the toolkit still
// recognises a device pointer and says it cannot use it. Everything else needs a CUDA build
// (built()) and otherwise answers with an error saying so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "src/common/status.h"

namespace chorus::cuda {

// Whether this build has the device path (the CUDA toolkit was found when it was built).
bool built();

// Whether the CUDA driver library is loaded in this process. Costs a few nanoseconds (the
// loader's count of objects it ever loaded, compared with the count when last checked) except
// right after a library was loaded.
bool driverLoaded();

// What a buffer is.
struct MemInfo {
  bool device = false;   // device memory (or managed memory): the device path
  int ordinal = -1;      // the device it is on, when `device`
  bool managed = false;  // managed (unified) memory
};
// Host memory (pinned host memory included) unless the driver is loaded and says otherwise.
Result<MemInfo> memInfo(const void* p);

// Devices (CUDA builds; these load the driver through the runtime when it is not loaded yet).
Result<int> deviceCount();
Result<int> currentDevice();
// An error that says what to change when `device` is not a device of this machine.
Status checkDevice(int device, const char* what);
// Whether kernels on device `a` can read and write device `b`'s memory (the same device, or
// peer access).
bool canAccessPeer(int a, int b);

// Device memory on `device` that other processes can map later: cuMem with a POSIX file
// descriptor handle where the driver supports it, cudaMalloc otherwise. Freed with
// freeShareable, which tells the two apart.
Result<void*> allocShareable(size_t bytes, int device);
Status freeShareable(void* p);

// A CUDA stream (cudaStream_t) wrapped by chorusStreamFromCuda: waits for it / whether it is done
// (an error of the stream's counts as done; synchronize returns it).
Status streamSynchronize(void* stream);
bool streamDone(void* stream);

// A driver error code as text ("CUDA_ERROR_INVALID_VALUE: invalid argument"), for messages.
std::string driverErrorText(int code);
// A runtime error (cudaError_t) as text.
std::string runtimeErrorText(int code);

}  // namespace chorus::cuda
