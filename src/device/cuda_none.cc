// Devices and device memory (src/device/cuda.h) in a build without the CUDA toolkit: every
// question gets the answer that this build has no device path. The probe (cuda_probe.cc) still
// recognises device pointers, so a call with one fails with a sentence instead of touching it.
#include "src/device/cuda.h"

namespace chorus::cuda {
namespace {

Status noCuda(const std::string& what) {
  return invalidUsage(what + ": this build of Chorus has no CUDA (the toolkit was not found when it was built, or " +
                      "CHORUS_ENABLE_CUDA was OFF); rebuild it with the CUDA toolkit");
}

}  // namespace

bool built() { return false; }
Result<int> deviceCount() { return 0; }
Result<int> currentDevice() { return noCuda("asking for the current CUDA device"); }
Result<bool> currentDeviceChosen() { return noCuda("asking for the current CUDA device"); }
Status checkDevice(int device, const char* what) { return noCuda(std::string(what) + " is " + std::to_string(device)); }
bool canAccessPeer(int, int) { return false; }
Result<void*> allocShareable(size_t, int) { return noCuda("allocating device memory"); }
Status freeShareable(void*) { return noCuda("freeing device memory"); }
Result<GpuIdentity> gpuIdentity(int) { return noCuda("identifying a GPU"); }
Result<std::vector<GpuIdentity>> reachableGpus(int) { return noCuda("asking which GPUs a GPU reaches"); }
size_t shareableBytes(const void*) { return 0; }
ShareableRange shareableRange(const void*, size_t) { return {}; }
Result<int> exportShareable(void*) { return noCuda("exporting device memory"); }
Result<void*> importShareable(int, size_t, int) { return noCuda("mapping another process's device memory"); }
Result<IpcHandle> ipcExport(void*) { return noCuda("exporting device memory"); }
Result<void*> ipcOpen(const IpcHandle&, int) { return noCuda("opening another process's device memory"); }
void ipcClose(void*) {}
Status zeroDevice(void*, size_t) { return noCuda("zeroing device memory"); }
Result<void*> hostRegister(void*, size_t) { return noCuda("mapping host memory for kernels"); }
void hostUnregister(void*) {}
Status streamSynchronize(void*) { return noCuda("synchronising a CUDA stream"); }
bool streamDone(void*) { return true; }
DeviceGuard::DeviceGuard(int) : status_(noCuda("choosing a CUDA device")) {}
DeviceGuard::~DeviceGuard() = default;
Result<void*> deviceAlloc(size_t, void*) { return noCuda("allocating device memory"); }
void deviceFree(void*) {}
Result<void*> hostAllocMapped(size_t) { return noCuda("allocating mapped host memory"); }
void hostFreeMapped(void*) {}
Status enablePeerAccess(int) { return noCuda("enabling peer access"); }
Result<void*> streamCreate() { return noCuda("creating a CUDA stream"); }
void* legacyDefaultStream() { return reinterpret_cast<void*>(uintptr_t{0x1}); }  // cudaStreamLegacy's value
void streamDestroy(void*) {}
Result<bool> streamCapturing(void*) { return false; }
Result<void*> eventCreate() { return noCuda("creating a CUDA event"); }
void eventDestroy(void*) {}
Status eventRecord(void*, void*) { return noCuda("recording a CUDA event"); }
Status streamWaitEvent(void*, void*) { return noCuda("ordering CUDA streams"); }
bool eventDone(void*) { return true; }
Status copyToDevice(void*, const void*, size_t, void*) { return noCuda("copying to device memory"); }
Status loadKernels() { return noCuda("loading the collective kernel"); }
Status launch(const device::LaunchParams&, void*) { return noCuda("launching a kernel"); }
Status memsetAsync(void*, size_t, void*) { return noCuda("zeroing device memory"); }
Status copyAsync(void*, const void*, size_t, void*) { return noCuda("copying device memory"); }
Status convertAsync(const void*, void*, size_t, int, int, bool, void*) { return noCuda("converting device memory"); }
Result<void*> timingEventCreate() { return noCuda("creating a CUDA event"); }
Result<double> elapsedSeconds(void*, void*) { return noCuda("timing CUDA events"); }
std::string runtimeErrorText(int code) { return "CUDA runtime error " + std::to_string(code); }

}  // namespace chorus::cuda
