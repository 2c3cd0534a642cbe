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
#include <vector>

#include "src/common/settings.h"
#include "src/common/status.h"

namespace chorus::device {
struct LaunchParams;
}

namespace chorus::cuda {

// CHORUS_CUMEM_ENABLE, read where device memory to share is allocated (cuda_runtime.cc); declared
// in the probe, which every build has, so that a build without CUDA knows the name too.
extern const BoolSetting kCuMemEnable;

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
// Whether the program chose this thread's current device: it is not 0, or its primary context
// is active (any allocation or launch makes it so, and cudaSetDevice from CUDA 12 on).
Result<bool> currentDeviceChosen();
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

// What names a GPU the same way in every process of a host (CUDA_VISIBLE_DEVICES renumbers
// devices, not these): its UUID and PCI bus id ("0000:1b:00.0").
struct GpuIdentity {
  uint64_t uuid[2] = {0, 0};
  char busId[16] = {0};
  int sms = 0;  // its multiprocessors (0: unknown, a GPU this process does not see)
};
Result<GpuIdentity> gpuIdentity(int device);
// The GPUs kernels on `device` reach by peer access, `device` itself first: every GPU of the
// machine NVML says it reads and writes, whether or not CUDA_VISIBLE_DEVICES shows it to this
// process (those have no bus id here); without NVML, the visible devices CUDA says it reaches.
Result<std::vector<GpuIdentity>> reachableGpus(int device);

// Device memory shared with another process of the host (transports/cuda_ipc). An allocation of
// allocShareable made with cuMem has a mapped size (0: it is not one) and is exported as a POSIX
// file descriptor that keeps the memory alive as long as any process holds or maps it; the
// importer maps it read/write for its own `device` (freed with freeShareable). Memory from
// cudaMalloc goes as a legacy IPC handle instead, valid while the exporter keeps it.
size_t shareableBytes(const void* p);
// The allocation of allocShareable (cuMem) or importShareable that holds [p, p + bytes): its base,
// mapped size and an id unique in this process, never reused; all zero when none does.
struct ShareableRange {
  void* base = nullptr;
  size_t bytes = 0;
  uint64_t id = 0;
};
ShareableRange shareableRange(const void* p, size_t bytes);
Result<int> exportShareable(void* p);
Result<void*> importShareable(int fd, size_t bytes, int device);
struct IpcHandle {
  unsigned char bytes[64] = {0};
};
Result<IpcHandle> ipcExport(void* p);
Result<void*> ipcOpen(const IpcHandle& h, int device);
void ipcClose(void* p);
// Zeroes device memory (a stream of its own, waited for).
Status zeroDevice(void* p, size_t bytes);

// Host memory allocated elsewhere (a shared mapping), pinned and mapped into every device's
// address space; returns the address kernels use. Undone by hostUnregister before it is unmapped.
Result<void*> hostRegister(void* p, size_t bytes);
void hostUnregister(void* p);

// A CUDA stream (cudaStream_t) wrapped by chorusStreamFromCuda: waits for it / whether it is done
// (an error of the stream's counts as done; synchronize returns it).
Status streamSynchronize(void* stream);
bool streamDone(void* stream);

// --- What a launch needs (CUDA builds; an error saying so otherwise) ---
// Allocations and copies below never break a capture another stream of the thread is making
// (they run in relaxed capture mode) and never touch the legacy default stream.

// Makes `device` current on this thread for the guard's life; the previous one comes back.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  [[maybe_unused]] int prev_ = -1;  // read by the CUDA build only
  Status status_;
};

// Device memory on the current device, zeroed (`stream` does the zeroing and is waited for).
Result<void*> deviceAlloc(size_t bytes, void* stream);
void deviceFree(void* p);
// Pinned host memory mapped into every device's address space, zeroed: the same pointer works on
// the host and in kernels (unified addressing).
Result<void*> hostAllocMapped(size_t bytes);
void hostFreeMapped(void* p);
// Lets kernels on the current device reach `peer`'s memory (already enabled is fine).
Status enablePeerAccess(int peer);
// A non-blocking stream of the current device (it never waits for the legacy default stream).
Result<void*> streamCreate();
// The handle of the legacy default stream (cudaStreamLegacy), whatever the calling program's
// default-stream mode: what a CUDA stream of 0 handed to Chorus stands for, as it does for NCCL.
void* legacyDefaultStream();
void streamDestroy(void* stream);
// Whether work is being captured into a graph on `stream`.
Result<bool> streamCapturing(void* stream);
// Events for ordering streams (no timing).
Result<void*> eventCreate();
void eventDestroy(void* event);
Status eventRecord(void* event, void* stream);
Status streamWaitEvent(void* stream, void* event);
// Whether the work before the event's record is done (an error counts as done).
bool eventDone(void* event);
// Copies host memory to device memory on `stream` and waits for it. Chorus copies from pinned
// memory only (DeviceComm::copyIn): pageable copies stalled ranks that are threads (docs/GPU.md).
Status copyToDevice(void* dst, const void* src, size_t bytes, void* stream);
// Loads the launch kernel and the conversion kernels into the current device's context
// (prims_device.h, loadKernels and loadConvertKernels): done when a communicator's device side is
// made and when a DDP reducer on device gradients is, so that no launch waits for a lazy load.
Status loadKernels();
// Enqueues the launch kernel for `p` on `stream` (current device).
Status launch(const device::LaunchParams& p, void* stream);

// --- Stream-ordered work on gradient storage (the DDP layer, src/ddp/grad_store.h) ---
// Sets `bytes` bytes at `p` (device memory) to zero on `stream`.
Status memsetAsync(void* p, size_t bytes, void* stream);
// Copies `bytes` bytes between buffers the current device reaches, on `stream`.
Status copyAsync(void* dst, const void* src, size_t bytes, void* stream);
// Converts `n` elements on `stream`, rounding as the host does (kernels/numeric.h's fromFloat,
// a float64 through float32): float32 or float64 at `src` into float16 or bfloat16 at `dst`
// (`narrow`), or those back (`!narrow`: src is the 16-bit type, dst the wide one). `wide` and
// `low` are chorusDataType_t values.
Status convertAsync(const void* src, void* dst, size_t n, int wide, int low, bool narrow, void* stream);
// Events that keep time (eventCreate's do not): elapsedSeconds waits for both.
Result<void*> timingEventCreate();
Result<double> elapsedSeconds(void* start, void* end);

// A driver error code as text ("CUDA_ERROR_INVALID_VALUE: invalid argument"), for messages.
std::string driverErrorText(int code);
// A runtime error (cudaError_t) as text.
std::string runtimeErrorText(int code);

}  // namespace chorus::cuda
