// The CUDA probe of every build (src/device/cuda.h): is the driver in the process, and what is a
// pointer. It reaches the driver only through entry points found in the already loaded library,
// so it never loads or initialises CUDA itself.
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include "src/device/cuda.h"

#if CHORUS_HAVE_CUDA
#include <cuda.h>
#endif

namespace chorus::cuda {
namespace {

// The driver ABI this file uses, by value (a build without the toolkit has no cuda.h).
constexpr int kAttrMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttrIsManaged = 8;      // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr int kAttrDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeDevice = 2;
constexpr int kErrorNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED
#if CHORUS_HAVE_CUDA
static_assert(kAttrMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE &&
              kAttrIsManaged == CU_POINTER_ATTRIBUTE_IS_MANAGED &&
              kAttrDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL && kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE &&
              kErrorNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
#endif

using PointerGetAttributesFn = int (*)(unsigned, int*, void**, unsigned long long);
using ErrorTextFn = int (*)(int, const char**);
using GetProcAddressFn = int (*)(const char*, void**, int, unsigned long long, int*);

struct Driver {
  PointerGetAttributesFn pointerGetAttributes = nullptr;
  ErrorTextFn errorName = nullptr;
  ErrorTextFn errorString = nullptr;
};

// The loader's count of objects loaded so far: it changes whenever a library is loaded.
unsigned long long loaderAdds() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;
      },
      &adds);
  return adds;
}

class Probe {
 public:
  bool loaded() {
    if (loaded_.load(std::memory_order_acquire)) return true;  // a loaded driver is never unloaded
    const unsigned long long adds = loaderAdds();
    if (adds == checkedAt_.load(std::memory_order_acquire)) return false;
    std::lock_guard<std::mutex> g(mu_);
    if (loaded_.load(std::memory_order_relaxed)) return true;
    // RTLD_NOLOAD: a handle only if the library is already there; it loads nothing.
    void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (!h) {
      checkedAt_.store(adds, std::memory_order_release);
      return false;
    }
    resolve(h);  // the handle is kept: the driver stays as long as the process
    loaded_.store(true, std::memory_order_release);
    return true;
  }
  const Driver& driver() const { return driver_; }

 private:
  void resolve(void* h) {
    auto getProc = reinterpret_cast<GetProcAddressFn>(dlsym(h, "cuGetProcAddress_v2"));
    auto find = [&](const char* name) -> void* {
      void* fn = nullptr;
      int found = 0;
      // CUDA 12.0's entry points: the ones this file's signatures describe.
      if (getProc && getProc(name, &fn, 12000, 0, &found) == 0 && fn) return fn;
      return dlsym(h, name);
    };
    driver_.pointerGetAttributes = reinterpret_cast<PointerGetAttributesFn>(find("cuPointerGetAttributes"));
    driver_.errorName = reinterpret_cast<ErrorTextFn>(find("cuGetErrorName"));
    driver_.errorString = reinterpret_cast<ErrorTextFn>(find("cuGetErrorString"));
  }

  std::mutex mu_;
  std::atomic<bool> loaded_{false};
  std::atomic<unsigned long long> checkedAt_{0};
  Driver driver_;  // written once, before loaded_ is set
};

Probe& probe() {
  static auto* p = new Probe();  // lives through exit, for calls from other static destructors
  return *p;
}

}  // namespace

const BoolSetting kCuMemEnable{"CHORUS_CUMEM_ENABLE", true, SettingScope::kProcess,
                               "0: device memory to share comes from cudaMalloc with legacy IPC handles"};

bool driverLoaded() { return probe().loaded(); }

Result<MemInfo> memInfo(const void* p) {
  MemInfo info;
  if (!p || !driverLoaded()) return info;
  const Driver& d = probe().driver();
  if (!d.pointerGetAttributes) return info;
  unsigned type = 0;
  unsigned managed = 0;
  int ordinal = -1;
  int attrs[] = {kAttrMemoryType, kAttrIsManaged, kAttrDeviceOrdinal};
  void* data[] = {&type, &managed, &ordinal};
  // Unlike cuPointerGetAttribute, this answers zeros for memory CUDA does not know.
  const int rc = d.pointerGetAttributes(3, attrs, data, reinterpret_cast<unsigned long long>(p));
  if (rc == kErrorNotInitialized) return info;  // no context was ever made: no device memory exists
  if (rc != 0) {
    char at[32];
    std::snprintf(at, sizeof(at), "%p", p);
    return systemError(std::string("the CUDA driver could not say what the buffer at ") + at +
                       " is: " + driverErrorText(rc));
  }
  info.managed = managed != 0;
  info.device = type == kMemoryTypeDevice || info.managed;
  info.ordinal = info.device ? ordinal : -1;
  return info;
}

std::string driverErrorText(int code) {
  const Driver& d = probe().driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.errorName) d.errorName(code, &name);
  if (d.errorString) d.errorString(code, &text);
  std::string s = name ? name : "CUDA driver error " + std::to_string(code);
  if (text) s += std::string(": ") + text;
  return s;
}

}  // namespace chorus::cuda
