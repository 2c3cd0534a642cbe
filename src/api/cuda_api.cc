// The buffers of a call (buffers.h) and the device memory functions of chorus_cuda.h.
#include <string>

#include "include/chorus/chorus_cuda.h"
#include "src/api/buffers.h"
#include "src/common/guard.h"
#include "src/device/cuda.h"

namespace chorus {

namespace {

std::string where(const cuda::MemInfo& m) {
  if (!m.device) return "host memory";
  return std::string(m.managed ? "managed memory of CUDA device " : "memory of CUDA device ") +
         std::to_string(m.ordinal);
}

}  // namespace

Result<bool> onDevice(Communicator& c, const BufUse* bufs, int n, const Stream* stream) {
  const bool cudaStream = stream && stream->isCuda();
  // One look at the loader for the whole call: in a program that has not loaded CUDA (the usual
  // host-only one) every buffer is host memory and the driver is not asked.
  const bool driver = cuda::driverLoaded();
  cuda::MemInfo first;
  const char* firstName = nullptr;
  const void* firstPtr = nullptr;
  for (int i = 0; i < n; ++i) {
    if (!bufs[i].ptr) continue;
    if (firstName && bufs[i].ptr == firstPtr) continue;  // in place: the driver was asked once
    cuda::MemInfo m;
    if (driver) {
      CHORUS_ASSIGN_OR_RETURN(m, cuda::memInfo(bufs[i].ptr));
    }
    if (!firstName) {
      first = m;
      firstName = bufs[i].name;
      firstPtr = bufs[i].ptr;
      continue;
    }
    if (m.device != first.device || m.ordinal != first.ordinal) {
      return invalidArgument(std::string(firstName) + " is " + where(first) + " but " + bufs[i].name + " is " +
                             where(m) + ": the buffers of one call must be of one kind, on one device");
    }
  }
  // No buffer (count 0): the call goes with its stream. On a CUDA stream it is a device
  // operation, so it is never queued on a wrapper, which has no worker to run host work.
  if (!firstName) return cudaStream;
  if (!first.device) {
    if (cudaStream) {
      return invalidArgument(std::string(firstName) + " is host memory but the stream wraps a CUDA stream " +
                             "(chorusStreamFromCuda): host buffers go on a host stream (chorusStreamCreate) or the " +
                             "NULL stream");
    }
    return false;
  }
  if (!cuda::built()) {
    return invalidUsage(std::string(firstName) + " is " + where(first) +
                        " but this build of Chorus has no CUDA (the toolkit was not found when it was built, or "
                        "CHORUS_ENABLE_CUDA was OFF): rebuild it with the CUDA toolkit");
  }
  const int bound = c.devicePath().bindCudaDevice(first.ordinal);
  if (bound != first.ordinal) {
    return invalidArgument(std::string(firstName) + " is " + where(first) + " but the communicator's device is " +
                           std::to_string(bound) + " (chorusCommCuDevice): pass buffers of device " +
                           std::to_string(bound) + ", or make a communicator on device " +
                           std::to_string(first.ordinal) + " (chorusConfig_t.cudaDevice)");
  }
  return true;
}

}  // namespace chorus

using namespace chorus;

extern "C" {

chorusResult_t chorusCudaMemAlloc(void** ptr, size_t size) {
  return guard("chorusCudaMemAlloc", [&]() -> Status {
    if (!ptr) return invalidArgument("ptr (where the address is written) is NULL");
    *ptr = nullptr;
    CHORUS_ASSIGN_OR_RETURN(int device, cuda::currentDevice());
    CHORUS_ASSIGN_OR_RETURN(*ptr, cuda::allocShareable(size, device));
    return Status::ok();
  });
}

chorusResult_t chorusCudaMemFree(void* ptr) {
  return guard("chorusCudaMemFree", [&]() -> Status { return cuda::freeShareable(ptr); });
}

chorusResult_t chorusPointerGetDevice(const void* ptr, int* device) {
  return guard("chorusPointerGetDevice", [&]() -> Status {
    if (!device) return invalidArgument("device (the output pointer) is NULL");
    *device = -1;
    if (!ptr) return Status::ok();
    CHORUS_ASSIGN_OR_RETURN(cuda::MemInfo m, cuda::memInfo(ptr));
    if (m.device) *device = m.ordinal;
    return Status::ok();
  });
}

}  // extern "C"
