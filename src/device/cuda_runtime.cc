// Devices and device memory (src/device/cuda.h) in a CUDA build: the CUDA runtime, linked
// statically, and the driver's virtual memory entry points found through it at run time.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "src/common/config.h"
#include "src/device/cuda.h"
#include "src/device/gpu_reach.h"
#include "src/device/prims_device.h"

namespace chorus::cuda {
namespace {

// The driver's virtual memory functions, as of CUDA 12.0.
struct VmmApi {
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) addressFree = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) setAccess = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuDeviceGetAttribute) attribute = nullptr;
  decltype(&::cuMemRetainAllocationHandle) retain = nullptr;
  decltype(&::cuMemExportToShareableHandle) exportHandle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) importHandle = nullptr;
  bool ok = false;
};

template <typename F>
bool entry(const char* name, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return false;
  }
  *fn = reinterpret_cast<F>(p);
  return true;
}

const VmmApi& vmm() {
  static const VmmApi api = [] {
    VmmApi a;
    a.ok = entry("cuMemCreate", &a.create) && entry("cuMemRelease", &a.release) &&
           entry("cuMemAddressReserve", &a.reserve) && entry("cuMemAddressFree", &a.addressFree) &&
           entry("cuMemMap", &a.map) && entry("cuMemUnmap", &a.unmap) && entry("cuMemSetAccess", &a.setAccess) &&
           entry("cuMemGetAllocationGranularity", &a.granularity) && entry("cuDeviceGetAttribute", &a.attribute) &&
           entry("cuMemRetainAllocationHandle", &a.retain) && entry("cuMemExportToShareableHandle", &a.exportHandle) &&
           entry("cuMemImportFromShareableHandle", &a.importHandle);
    return a;
  }();
  return api;
}

// The cuMem allocations of allocShareable and importShareable, by address: their mapped size, to
// undo them.
struct VmmAllocations {
  struct Entry {
    size_t size;
    uint64_t id;  // unique in this process, never reused
  };
  std::mutex mu;
  std::map<uintptr_t, Entry> at;  // guarded by mu
  uint64_t nextId = 1;            // guarded by mu
};
VmmAllocations& vmmAllocations() {
  static auto* a = new VmmAllocations();
  return *a;
}

Status runtimeStatus(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return Status::ok();
  (void)cudaGetLastError();  // not sticky: clear it so later calls do not see it
  return Status(chorusUnhandledCudaError, what + ": " + runtimeErrorText(rc));
}

Status driverStatus(CUresult rc, const std::string& what) {
  if (rc == CUDA_SUCCESS) return Status::ok();
  return Status(chorusUnhandledCudaError, what + ": " + driverErrorText(rc));
}
// The same for a call named by a literal: its text becomes a string only when the call failed (a
// launch makes several such calls, and a name past the small-string buffer would allocate).
Status runtimeStatus(cudaError_t rc, const char* what) {
  return rc == cudaSuccess ? Status::ok() : runtimeStatus(rc, std::string(what));
}
Status driverStatus(CUresult rc, const char* what) {
  return rc == CUDA_SUCCESS ? Status::ok() : driverStatus(rc, std::string(what));
}

// Relaxed capture mode for this thread while it lives: allocating, freeing and copying are then
// allowed while another stream of the thread captures a graph (as NCCL does around its own).
class RelaxedCapture {
 public:
  RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// Maps `handle` (its first `size` bytes) at a new address, read/write for `device` and every device
// of this process that reaches it by peer access (devicesGranted, as ncclMemAlloc), and releases
// the handle (the mapping keeps the memory); the address is freed with freeShareable.
Result<void*> mapAndRelease(CUmemGenericAllocationHandle handle, size_t size, size_t align, int device,
                            const char* what) {
  const VmmApi& a = vmm();
  CUdeviceptr ptr = 0;
  CUresult rc = a.reserve(&ptr, size, align, 0, 0);
  if (rc == CUDA_SUCCESS) {
    rc = a.map(ptr, size, 0, handle, 0);
    if (rc == CUDA_SUCCESS) {
      int count = 0;
      if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
      const std::vector<int> granted = devicesGranted(device, count, [](int d, int owner) {
        int can = 0;
        return cudaDeviceCanAccessPeer(&can, d, owner) == cudaSuccess && can;
      });
      std::vector<CUmemAccessDesc> access(granted.size());
      for (size_t i = 0; i < granted.size(); ++i) {
        access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access[i].location.id = granted[i];
        access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      }
      rc = a.setAccess(ptr, size, access.data(), access.size());
      if (rc != CUDA_SUCCESS) a.unmap(ptr, size);
    }
    if (rc != CUDA_SUCCESS) a.addressFree(ptr, size);
  }
  a.release(handle);
  CHORUS_TRY(driverStatus(rc, "mapping " + std::to_string(size) + " bytes of " + what));
  VmmAllocations& all = vmmAllocations();
  std::lock_guard<std::mutex> g(all.mu);
  all.at[ptr] = VmmAllocations::Entry{size, all.nextId++};
  return reinterpret_cast<void*>(ptr);
}

// A cuMem allocation exportable as a POSIX file descriptor, or null when the device or driver
// cannot make one (the caller falls back to cudaMalloc).
Result<void*> vmmAlloc(size_t bytes, int device) {
  // CHORUS_CUMEM_ENABLE=0 (NCCL_CUMEM_ENABLE=0 through the drop-in): cudaMalloc and legacy IPC
  // handles, as on a driver without cuMem descriptors.
  static const bool off = [] {
    const Result<int64_t> v = kCuMemEnable.current();  // 0 or 1, checked at every init too
    return v.isOk() && v.value() == 0;
  }();
  const VmmApi& a = vmm();
  if (off || !a.ok) return nullptr;
  int vmmOk = 0;
  int fdOk = 0;
  if (a.attribute(&vmmOk, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) != CUDA_SUCCESS ||
      a.attribute(&fdOk, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device) != CUDA_SUCCESS ||
      !vmmOk || !fdOk) {
    return nullptr;
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  CHORUS_TRY(
      driverStatus(a.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity"));
  const size_t size = (bytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle handle;
  CHORUS_TRY(driverStatus(a.create(&handle, size, &prop, 0), "cuMemCreate of " + std::to_string(size) + " bytes"));
  // The mapping keeps the memory; the handle is not needed to free it (file descriptors for other
  // processes are exported from the address later, cuMemRetainAllocationHandle).
  return mapAndRelease(handle, size, gran, device, "device memory");
}

}  // namespace

bool built() { return true; }

Result<int> deviceCount() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) {
    (void)cudaGetLastError();
    return 0;
  }
  CHORUS_TRY(runtimeStatus(rc, "cudaGetDeviceCount"));
  return n;
}

Result<int> currentDevice() {
  int d = -1;
  CHORUS_TRY(runtimeStatus(cudaGetDevice(&d), "cudaGetDevice"));
  return d;
}

Result<bool> currentDeviceChosen() {
  CHORUS_ASSIGN_OR_RETURN(const int d, currentDevice());
  if (d != 0) return true;
  static decltype(&::cuDevicePrimaryCtxGetState) state = nullptr;
  static decltype(&::cuDeviceGet) get = nullptr;
  static const bool found = entry("cuDevicePrimaryCtxGetState", &state) && entry("cuDeviceGet", &get);
  if (!found) return false;  // a driver without it: the local rank decides, as before
  CUdevice dev = 0;
  CHORUS_TRY(driverStatus(get(&dev, d), "cuDeviceGet"));
  unsigned flags = 0;
  int active = 0;
  CHORUS_TRY(driverStatus(state(dev, &flags, &active), "cuDevicePrimaryCtxGetState"));
  return active != 0;
}

Status checkDevice(int device, const char* what) {
  CHORUS_ASSIGN_OR_RETURN(int n, deviceCount());
  if (n == 0)
    return invalidArgument(std::string(what) + " is " + std::to_string(device) +
                           " but this machine has no CUDA device (or no driver)");
  if (device < 0 || device >= n) {
    return invalidArgument(std::string(what) + " is " + std::to_string(device) +
                           " but this machine's CUDA devices are 0 to " + std::to_string(n - 1));
  }
  return Status::ok();
}

bool canAccessPeer(int a, int b) {
  if (a == b) return true;
  int ok = 0;
  if (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return ok != 0;
}

Result<void*> allocShareable(size_t bytes, int device) {
  if (bytes == 0) return invalidArgument("size is 0: allocate at least one byte");
  CHORUS_TRY(checkDevice(device, "the device"));
  CHORUS_ASSIGN_OR_RETURN(void* p, vmmAlloc(bytes, device));
  if (p) return p;
  int prev = -1;
  CHORUS_TRY(runtimeStatus(cudaGetDevice(&prev), "cudaGetDevice"));
  CHORUS_TRY(runtimeStatus(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")"));
  const cudaError_t rc = cudaMalloc(&p, bytes);
  (void)cudaSetDevice(prev);
  CHORUS_TRY(
      runtimeStatus(rc, "cudaMalloc of " + std::to_string(bytes) + " bytes on device " + std::to_string(device)));
  return p;
}

size_t shareableBytes(const void* p) {
  std::lock_guard<std::mutex> g(vmmAllocations().mu);
  auto it = vmmAllocations().at.find(reinterpret_cast<uintptr_t>(p));
  return it == vmmAllocations().at.end() ? 0 : it->second.size;
}

ShareableRange shareableRange(const void* p, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  VmmAllocations& all = vmmAllocations();
  std::lock_guard<std::mutex> g(all.mu);
  auto it = all.at.upper_bound(at);
  if (it == all.at.begin()) return {};
  --it;
  if (at - it->first > it->second.size || bytes > it->second.size - (at - it->first)) return {};
  return ShareableRange{reinterpret_cast<void*>(it->first), it->second.size, it->second.id};
}

Result<int> exportShareable(void* p) {
  if (shareableBytes(p) == 0) return internalError("exporting device memory that allocShareable did not map");
  const VmmApi& a = vmm();
  CUmemGenericAllocationHandle handle;
  CHORUS_TRY(driverStatus(a.retain(&handle, p), "cuMemRetainAllocationHandle"));
  int fd = -1;
  const CUresult rc = a.exportHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  a.release(handle);
  CHORUS_TRY(driverStatus(rc, "cuMemExportToShareableHandle"));
  return fd;
}

Result<void*> importShareable(int fd, size_t bytes, int device) {
  const VmmApi& a = vmm();
  if (!a.ok) return internalError("mapping another process's device memory: the driver has no cuMem entry points");
  CUmemGenericAllocationHandle handle;
  CHORUS_TRY(driverStatus(a.importHandle(&handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                          "cuMemImportFromShareableHandle"));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t gran = 0;
  if (const CUresult rc = a.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM); rc != CUDA_SUCCESS) {
    a.release(handle);
    return driverStatus(rc, "cuMemGetAllocationGranularity");
  }
  // Read and write from this process's device (the memory may be on another GPU: peer access).
  return mapAndRelease(handle, bytes, gran, device, "another process's device memory");
}

Result<IpcHandle> ipcExport(void* p) {
  cudaIpcMemHandle_t h;
  CHORUS_TRY(runtimeStatus(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle"));
  IpcHandle out;
  static_assert(sizeof(h) == sizeof(out.bytes));
  std::memcpy(out.bytes, &h, sizeof(h));
  return out;
}

Result<void*> ipcOpen(const IpcHandle& handle, int device) {
  DeviceGuard on(device);
  CHORUS_TRY(on.status());
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.bytes, sizeof(h));
  void* p = nullptr;
  CHORUS_TRY(runtimeStatus(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle"));
  return p;
}

void ipcClose(void* p) {
  if (!p) return;
  (void)cudaIpcCloseMemHandle(p);
  (void)cudaGetLastError();
}

Status zeroDevice(void* p, size_t bytes) {
  RelaxedCapture relaxed;
  cudaStream_t s = nullptr;
  CHORUS_TRY(runtimeStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  Status st = runtimeStatus(cudaMemsetAsync(p, 0, bytes, s), "cudaMemsetAsync");
  if (st.isOk()) st = runtimeStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  (void)cudaStreamDestroy(s);
  return st;
}

Result<void*> hostRegister(void* p, size_t bytes) {
  RelaxedCapture relaxed;
  CHORUS_TRY(runtimeStatus(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable),
                           "cudaHostRegister of " + std::to_string(bytes) + " bytes"));
  void* d = nullptr;
  Status st = runtimeStatus(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer");
  if (!st.isOk()) {
    (void)cudaHostUnregister(p);
    return st;
  }
  return d;
}

void hostUnregister(void* p) {
  if (!p) return;
  RelaxedCapture relaxed;
  (void)cudaHostUnregister(p);
  (void)cudaGetLastError();
}

Result<GpuIdentity> gpuIdentity(int device) {
  cudaDeviceProp prop;
  CHORUS_TRY(runtimeStatus(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  GpuIdentity id;
  static_assert(sizeof(prop.uuid.bytes) == sizeof(id.uuid));
  std::memcpy(id.uuid, prop.uuid.bytes, sizeof(id.uuid));
  id.sms = prop.multiProcessorCount;
  CHORUS_TRY(runtimeStatus(cudaDeviceGetPCIBusId(id.busId, sizeof(id.busId), device), "cudaDeviceGetPCIBusId"));
  return id;
}

namespace {

// The few NVML entry points reachableGpus needs, by their C ABI (the toolkit has no nvml.h):
// stable since NVML's first releases.
struct NvmlApi {
  using Device = void*;
  int (*init)() = nullptr;                          // nvmlInit_v2
  int (*count)(unsigned*) = nullptr;                // nvmlDeviceGetCount_v2
  int (*byIndex)(unsigned, Device*) = nullptr;      // nvmlDeviceGetHandleByIndex_v2
  int (*uuid)(Device, char*, unsigned) = nullptr;   // nvmlDeviceGetUUID
  int (*p2p)(Device, Device, int, int*) = nullptr;  // nvmlDeviceGetP2PStatus
  static constexpr int kSuccess = 0;                // NVML_SUCCESS
  static constexpr int kCapsRead = 0;               // NVML_P2P_CAPS_INDEX_READ
  static constexpr int kCapsWrite = 1;              // NVML_P2P_CAPS_INDEX_WRITE
  static constexpr int kP2pOk = 0;                  // NVML_P2P_STATUS_OK
  bool ok = false;
};

// Opened once, on the device path's first use (the driver is loaded by then); null entry points
// when the machine has no NVML.
const NvmlApi& nvml() {
  static const NvmlApi api = [] {
    NvmlApi a;
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return a;
    a.init = reinterpret_cast<int (*)()>(dlsym(h, "nvmlInit_v2"));
    a.count = reinterpret_cast<int (*)(unsigned*)>(dlsym(h, "nvmlDeviceGetCount_v2"));
    a.byIndex = reinterpret_cast<int (*)(unsigned, NvmlApi::Device*)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
    a.uuid = reinterpret_cast<int (*)(NvmlApi::Device, char*, unsigned)>(dlsym(h, "nvmlDeviceGetUUID"));
    a.p2p = reinterpret_cast<int (*)(NvmlApi::Device, NvmlApi::Device, int, int*)>(dlsym(h, "nvmlDeviceGetP2PStatus"));
    a.ok = a.init && a.count && a.byIndex && a.uuid && a.p2p && a.init() == NvmlApi::kSuccess;
    return a;  // the handle stays: NVML is not shut down while the process may ask again
  }();
  return api;
}

// Every GPU of the machine and whether `self` reads and writes it by peer access, from NVML;
// empty when NVML cannot say (no library, or `self` is not among its GPUs).
std::vector<MachineGpu> machineGpus(const GpuIdentity& self) {
  const NvmlApi& n = nvml();
  if (!n.ok) return {};
  unsigned count = 0;
  if (n.count(&count) != NvmlApi::kSuccess) return {};
  std::vector<NvmlApi::Device> devs;
  std::vector<MachineGpu> gpus;
  NvmlApi::Device mine = nullptr;
  for (unsigned i = 0; i < count; ++i) {
    NvmlApi::Device d = nullptr;
    char text[96] = {0};
    MachineGpu g;
    if (n.byIndex(i, &d) != NvmlApi::kSuccess || n.uuid(d, text, sizeof(text)) != NvmlApi::kSuccess ||
        !parseGpuUuid(text, g.uuid)) {
      continue;
    }
    if (g.uuid[0] == self.uuid[0] && g.uuid[1] == self.uuid[1]) mine = d;
    devs.push_back(d);
    gpus.push_back(g);
  }
  if (!mine) return {};
  for (size_t i = 0; i < gpus.size(); ++i) {
    int read = -1;
    int write = -1;
    gpus[i].peerReadWrite = devs[i] != mine && n.p2p(mine, devs[i], NvmlApi::kCapsRead, &read) == NvmlApi::kSuccess &&
                            n.p2p(mine, devs[i], NvmlApi::kCapsWrite, &write) == NvmlApi::kSuccess &&
                            read == NvmlApi::kP2pOk && write == NvmlApi::kP2pOk;
  }
  return gpus;
}

}  // namespace

Result<std::vector<GpuIdentity>> reachableGpus(int device) {
  std::vector<GpuIdentity> out;
  CHORUS_ASSIGN_OR_RETURN(GpuIdentity self, gpuIdentity(device));
  out.push_back(self);
  // NVML first: it sees the GPUs CUDA_VISIBLE_DEVICES hides from this process (gpu_reach.h).
  if (const std::vector<MachineGpu> machine = machineGpus(self); !machine.empty()) {
    const auto reach = reachFromMachine(self.uuid, machine);
    for (size_t i = 1; i < reach.size(); ++i) {
      GpuIdentity g;  // no bus id: a GPU this process may not see has no number here
      g.uuid[0] = reach[i][0];
      g.uuid[1] = reach[i][1];
      out.push_back(g);
    }
    return out;
  }
  CHORUS_ASSIGN_OR_RETURN(int n, deviceCount());
  for (int d = 0; d < n; ++d) {
    if (d == device || !canAccessPeer(device, d)) continue;
    CHORUS_ASSIGN_OR_RETURN(GpuIdentity id, gpuIdentity(d));
    out.push_back(id);
  }
  return out;
}

Status freeShareable(void* p) {
  if (!p) return Status::ok();
  RelaxedCapture relaxed;  // a free must not break another stream's capture
  const auto at = reinterpret_cast<uintptr_t>(p);
  size_t size = 0;
  {
    std::lock_guard<std::mutex> g(vmmAllocations().mu);
    auto it = vmmAllocations().at.find(at);
    if (it != vmmAllocations().at.end()) size = it->second.size;
  }
  if (!size) return runtimeStatus(cudaFree(p), "cudaFree");
  // Kernels still using it would fault: the caller synchronised (as with cudaFree's implicit one).
  // The record goes only once the memory is gone, so a failed free can be tried again (and is
  // never taken for cudaMalloc memory).
  CHORUS_TRY(runtimeStatus(cudaDeviceSynchronize(), "synchronising before freeing device memory"));
  const auto ptr = static_cast<CUdeviceptr>(at);
  CHORUS_TRY(driverStatus(vmm().unmap(ptr, size), "cuMemUnmap"));
  {
    std::lock_guard<std::mutex> g(vmmAllocations().mu);
    vmmAllocations().at.erase(at);
  }
  return driverStatus(vmm().addressFree(ptr, size), "cuMemAddressFree");
}

Status streamSynchronize(void* stream) {
  return runtimeStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

bool streamDone(void* stream) {
  RelaxedCapture relaxed;  // a watching thread must not break another thread's capture
  const cudaError_t rc = cudaStreamQuery(static_cast<cudaStream_t>(stream));
  if (rc == cudaErrorNotReady) return false;
  if (rc != cudaSuccess) (void)cudaGetLastError();
  return true;
}

DeviceGuard::DeviceGuard(int device) {
  status_ = runtimeStatus(cudaGetDevice(&prev_), "cudaGetDevice");
  if (status_.isOk() && prev_ != device) {
    status_ = runtimeStatus(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (prev_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev_) (void)cudaSetDevice(prev_);
}

Result<void*> deviceAlloc(size_t bytes, void* stream) {
  RelaxedCapture relaxed;
  void* p = nullptr;
  CHORUS_TRY(runtimeStatus(cudaMalloc(&p, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes"));
  const auto s = static_cast<cudaStream_t>(stream);
  Status st = runtimeStatus(cudaMemsetAsync(p, 0, bytes, s), "cudaMemsetAsync");
  if (st.isOk()) st = runtimeStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (!st.isOk()) {
    (void)cudaFree(p);
    return st;
  }
  return p;
}

void deviceFree(void* p) {
  if (!p) return;
  RelaxedCapture relaxed;
  (void)cudaFree(p);
  (void)cudaGetLastError();
}

Result<void*> hostAllocMapped(size_t bytes) {
  RelaxedCapture relaxed;
  void* p = nullptr;
  CHORUS_TRY(runtimeStatus(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                           "cudaHostAlloc of " + std::to_string(bytes) + " mapped bytes"));
  std::memset(p, 0, bytes);
  return p;
}

void hostFreeMapped(void* p) {
  if (!p) return;
  RelaxedCapture relaxed;
  (void)cudaFreeHost(p);
  (void)cudaGetLastError();
}

Status enablePeerAccess(int peer) {
  const cudaError_t rc = cudaDeviceEnablePeerAccess(peer, 0);
  if (rc == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return Status::ok();
  }
  return runtimeStatus(rc, "cudaDeviceEnablePeerAccess(" + std::to_string(peer) + ")");
}

void* legacyDefaultStream() { return static_cast<void*>(cudaStreamLegacy); }

Result<void*> streamCreate() {
  cudaStream_t s = nullptr;
  CHORUS_TRY(runtimeStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  return static_cast<void*>(s);
}

void streamDestroy(void* stream) {
  if (stream) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

Result<bool> streamCapturing(void* stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CHORUS_TRY(runtimeStatus(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &st), "cudaStreamIsCapturing"));
  return st != cudaStreamCaptureStatusNone;
}

Result<void*> eventCreate() {
  cudaEvent_t e = nullptr;
  CHORUS_TRY(runtimeStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
  return static_cast<void*>(e);
}

void eventDestroy(void* event) {
  if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

Status eventRecord(void* event, void* stream) {
  return runtimeStatus(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
                       "cudaEventRecord");
}

Status streamWaitEvent(void* stream, void* event) {
  return runtimeStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
                       "cudaStreamWaitEvent");
}

bool eventDone(void* event) {
  RelaxedCapture relaxed;  // a watching thread must not break another thread's capture
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (rc == cudaErrorNotReady) return false;
  if (rc != cudaSuccess) (void)cudaGetLastError();
  return true;
}

Status copyToDevice(void* dst, const void* src, size_t bytes, void* stream) {
  RelaxedCapture relaxed;
  const auto s = static_cast<cudaStream_t>(stream);
  CHORUS_TRY(runtimeStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync"));
  return runtimeStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

Status loadKernels() {
  CHORUS_TRY(runtimeStatus(static_cast<cudaError_t>(device::loadKernels()), "loading the collective kernel"));
  return runtimeStatus(static_cast<cudaError_t>(device::loadConvertKernels()), "loading the conversion kernels");
}

// cuLaunchKernel, found through the runtime like the virtual memory functions (null: not found).
decltype(&::cuLaunchKernel) driverLaunch() {
  static const auto fn = [] {
    decltype(&::cuLaunchKernel) f = nullptr;
    return entry("cuLaunchKernel", &f) ? f : nullptr;
  }();
  return fn;
}

Status launch(const device::LaunchParams& p, void* stream) {
  if (p.nblocks == 0) return Status::ok();
  // Only the bytes the kernel reads go into the launch (launchParamsBytes), through the driver as
  // NCCL launches; the runtime's launch would copy the whole 27 KB struct every time. The
  // function is asked for each launch (it is the current device's), as NCCL does.
  const auto cuLaunch = driverLaunch();
  cudaFunction_t fn = nullptr;
  if (!cuLaunch || cudaGetFuncBySymbol(&fn, device::kernelSymbol(p)) != cudaSuccess) {
    (void)cudaGetLastError();
    const int rc = device::launchLanes(p, device::kLaunchThreads, stream);
    return runtimeStatus(static_cast<cudaError_t>(rc), "launching the collective kernel");
  }
  size_t bytes = device::launchParamsBytes(p);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<device::LaunchParams*>(&p), CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &bytes, CU_LAUNCH_PARAM_END};
  const CUresult rc = cuLaunch(reinterpret_cast<CUfunction>(fn), p.nblocks, 1, 1, device::kLaunchThreads, 1, 1, 0,
                               static_cast<CUstream>(stream), nullptr, extra);
  if (rc == CUDA_SUCCESS) return Status::ok();
  return driverStatus(rc, "launching the collective kernel (" + std::to_string(bytes) + " bytes of parameters)");
}

Status memsetAsync(void* p, size_t bytes, void* stream) {
  return runtimeStatus(cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(stream)), "cudaMemsetAsync");
}

Status copyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return runtimeStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
                       "cudaMemcpyAsync");
}

Status convertAsync(const void* src, void* dst, size_t n, int wide, int low, bool narrow, void* stream) {
  const int rc = device::launchConvert(src, dst, n, wide, low, narrow, stream);
  return runtimeStatus(static_cast<cudaError_t>(rc), "launching the conversion kernel");
}

Result<void*> timingEventCreate() {
  cudaEvent_t e = nullptr;
  CHORUS_TRY(runtimeStatus(cudaEventCreate(&e), "cudaEventCreate"));
  return static_cast<void*>(e);
}

Result<double> elapsedSeconds(void* start, void* end) {
  CHORUS_TRY(runtimeStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(start)), "cudaEventSynchronize"));
  CHORUS_TRY(runtimeStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(end)), "cudaEventSynchronize"));
  float ms = 0;
  CHORUS_TRY(runtimeStatus(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)),
                           "cudaEventElapsedTime"));
  return ms * 1e-3;
}

std::string runtimeErrorText(int code) {
  const auto rc = static_cast<cudaError_t>(code);
  return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
}

}  // namespace chorus::cuda
