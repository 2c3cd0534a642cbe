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
Status checkDevice(int device, const char* what) { return noCuda(std::string(what) + " is " + std::to_string(device)); }
bool canAccessPeer(int, int) { return false; }
Result<void*> allocShareable(size_t, int) { return noCuda("allocating device memory"); }
Status freeShareable(void*) { return noCuda("freeing device memory"); }
Status streamSynchronize(void*) { return noCuda("synchronising a CUDA stream"); }
bool streamDone(void*) { return true; }
std::string runtimeErrorText(int code) { return "CUDA runtime error " + std::to_string(code); }

}  // namespace chorus::cuda
