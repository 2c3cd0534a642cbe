#include "src/ddp/grad_store.h"

#include <atomic>
#include <cstring>

#include "include/chorus/chorus_cuda.h"
#include "kernels/numeric.h"
#include "src/common/guard.h"
#include "src/common/os.h"
#include "src/device/cuda.h"

namespace chorus::ddp {
namespace {

Status apiStatus(chorusResult_t rc, const std::string& what) {
  if (rc == chorusSuccess) return Status::ok();
  return Status(rc, what + ": " + chorusGetLastError(nullptr));
}

// Whether a chorusStream_t wraps a CUDA stream, and which (*cs; null is the legacy default
// stream). Asking leaves the thread's last error as it was: a host stream is an answer here, not
// a mistake.
bool wrapsCuda(chorusStream_t s, void** cs) {
  *cs = nullptr;
  if (!s) return false;
  const std::string saved = lastError();
  struct CUstream_st* c = nullptr;
  const bool isCuda = chorusStreamGetCuda(s, &c) == chorusSuccess;
  lastError() = saved;
  *cs = c;
  return isCuda;
}

template <typename Low>
void convertOnHost(const Conversion& c) {
  if (c.narrow) {
    uint16_t* out = static_cast<uint16_t*>(c.dst);
    if (c.wide == chorusFloat32) {
      const float* in = static_cast<const float*>(c.src);
      for (size_t i = 0; i < c.count; ++i) out[i] = fromFloat<Low>(in[i]).bits;
    } else {
      const double* in = static_cast<const double*>(c.src);
      for (size_t i = 0; i < c.count; ++i) out[i] = fromFloat<Low>(static_cast<float>(in[i])).bits;
    }
    return;
  }
  const uint16_t* in = static_cast<const uint16_t*>(c.src);
  if (c.wide == chorusFloat32) {
    float* out = static_cast<float*>(c.dst);
    for (size_t i = 0; i < c.count; ++i) out[i] = toFloat(Low{in[i]});
  } else {
    double* out = static_cast<double*>(c.dst);
    for (size_t i = 0; i < c.count; ++i) out[i] = toFloat(Low{in[i]});
  }
}

// A host function on the reducer's stream.
void runConversion(void* p) {
  const auto& c = *static_cast<const Conversion*>(p);
  if (c.low == chorusFloat16) {
    convertOnHost<Half>(c);
  } else {
    convertOnHost<BFloat16>(c);
  }
}

std::string wrongKind(const char* what, bool deviceStore) {
  if (deviceStore) {
    return std::string(what) +
           " is a host stream but the reducer's gradients are device memory: pass the CUDA stream that produces "
           "(or consumes) them, wrapped with chorusStreamFromCuda, or NULL when that work is already complete";
  }
  return std::string(what) +
         " wraps a CUDA stream (chorusStreamFromCuda) but the reducer's gradients are host memory: pass a host "
         "stream (chorusStreamCreate) or NULL, or make the reducer with gradientMemory = chorusDdpMemoryDevice";
}

class HostStore final : public GradStore {
 public:
  static Result<std::unique_ptr<GradStore>> make() {
    std::unique_ptr<HostStore> s(new HostStore());
    CHORUS_TRY(apiStatus(chorusStreamCreate(&s->stream_), "creating the reducer's stream"));
    s->hostStream_ = s->stream_;
    return std::unique_ptr<GradStore>(std::move(s));
  }
  ~HostStore() override {
    if (stream_) (void)chorusStreamDestroy(stream_);
    if (signal_) (void)chorusEventDestroy(signal_);
  }
  std::string describe() const override { return "host memory"; }

  Result<void*> alloc(size_t bytes) override {
    void* p = nullptr;
    CHORUS_TRY(apiStatus(chorusMemAlloc(&p, bytes ? bytes : 1), "allocating gradient storage"));
    std::memset(p, 0, bytes ? bytes : 1);
    return p;
  }
  void free(void* p) override { (void)chorusMemFree(p); }
  Status zero(void* p, size_t bytes) override {
    std::memset(p, 0, bytes);
    return Status::ok();
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  Status convert(const Conversion* c) override {
    return apiStatus(chorusLaunchHostFunc(stream_, runConversion, const_cast<Conversion*>(c)),
                     "enqueueing a conversion");
  }

  Result<void*> fenceCreate() override {
    chorusEvent_t e = nullptr;
    CHORUS_TRY(apiStatus(chorusEventCreate(&e), "creating an event"));
    return static_cast<void*>(e);
  }
  void fenceDestroy(void* fence) override { (void)chorusEventDestroy(static_cast<chorusEvent_t>(fence)); }
  Status fenceRecord(void* fence, chorusStream_t on, const char* what) override {
    void* cs = nullptr;
    if (wrapsCuda(on, &cs)) return invalidUsage(wrongKind(what, false));
    return apiStatus(chorusEventRecord(static_cast<chorusEvent_t>(fence), on), std::string("recording ") + what);
  }
  Status waitFence(void* fence) override {
    return apiStatus(chorusStreamWaitEvent(stream_, static_cast<chorusEvent_t>(fence)),
                     "ordering the reducer's stream");
  }
  Status signal(chorusStream_t consumer, const char* what) override {
    void* cs = nullptr;
    if (wrapsCuda(consumer, &cs)) return invalidUsage(wrongKind(what, false));
    if (!consumer) return synchronize("waiting for the reducer's stream");
    if (!signal_) CHORUS_TRY(apiStatus(chorusEventCreate(&signal_), "creating an event"));
    CHORUS_TRY(apiStatus(chorusEventRecord(signal_, stream_), "recording an event"));
    return apiStatus(chorusStreamWaitEvent(consumer, signal_), std::string("ordering ") + what);
  }

  Result<void*> timerCreate() override { return static_cast<void*>(new Timer()); }
  void timerDestroy(void* timer) override { delete static_cast<Timer*>(timer); }
  Status markTime(void* timer, chorusStream_t on) override {
    auto* t = static_cast<Timer*>(timer);
    t->on = on ? on : stream_;
    t->ns.store(0);
    return apiStatus(chorusLaunchHostFunc(t->on, &Timer::stamp, t), "enqueueing a time mark");
  }
  Result<double> seconds(void* a, void* b) override {
    auto* ta = static_cast<Timer*>(a);
    auto* tb = static_cast<Timer*>(b);
    for (Timer* t : {ta, tb}) {
      if (t->on && t->ns.load() == 0) {
        CHORUS_TRY(apiStatus(chorusStreamSynchronize(t->on), "waiting for a time mark"));
      }
    }
    return (tb->ns.load() - ta->ns.load()) * 1e-9;
  }
  bool reached(void* timer) override { return static_cast<Timer*>(timer)->ns.load() != 0; }

 private:
  struct Timer {
    std::atomic<int64_t> ns{0};
    chorusStream_t on = nullptr;
    static void stamp(void* p) { static_cast<Timer*>(p)->ns.store(nowNs()); }
  };
  HostStore() = default;
  chorusEvent_t signal_ = nullptr;
};

// A fence on the device: a CUDA event, armed once recorded on a stream.
struct DeviceFence {
  void* event = nullptr;
  bool armed = false;
};

class DeviceStore final : public GradStore {
 public:
  static Result<std::unique_ptr<GradStore>> make(int device) {
    CHORUS_TRY(cuda::checkDevice(device, "the reducer's CUDA device"));
    std::unique_ptr<DeviceStore> s(new DeviceStore());
    s->device_ = device;
    cuda::DeviceGuard g(device);
    CHORUS_TRY(g.status());
    // The hooks' conversions run before a bucket's first collective, maybe before the
    // communicator's device side (which loads them too) exists.
    CHORUS_TRY(cuda::loadKernels());
    CHORUS_ASSIGN_OR_RETURN(s->cuda_, cuda::streamCreate());
    CHORUS_TRY(apiStatus(chorusStreamFromCuda(static_cast<struct CUstream_st*>(s->cuda_), &s->stream_),
                         "wrapping the reducer's CUDA stream"));
    CHORUS_TRY(apiStatus(chorusStreamCreate(&s->hostStream_), "creating the reducer's host stream"));
    CHORUS_ASSIGN_OR_RETURN(s->signal_, cuda::eventCreate());
    return std::unique_ptr<GradStore>(std::move(s));
  }
  ~DeviceStore() override {
    if (cuda_) (void)cuda::streamSynchronize(cuda_);
    if (stream_) (void)chorusStreamDestroy(stream_);
    if (hostStream_) (void)chorusStreamDestroy(hostStream_);
    cuda::eventDestroy(signal_);
    if (cuda_) cuda::streamDestroy(cuda_);
  }
  std::string describe() const override { return "device memory on GPU " + std::to_string(device_); }

  Result<void*> alloc(size_t bytes) override {
    cuda::DeviceGuard g(device_);
    CHORUS_TRY(g.status());
    if (!bytes) bytes = 1;
    CHORUS_ASSIGN_OR_RETURN(void* p, cuda::allocShareable(bytes, device_));
    Status z = cuda::zeroDevice(p, bytes);
    if (!z.isOk()) {
      (void)cuda::freeShareable(p);
      return z;
    }
    return p;
  }
  void free(void* p) override {
    if (p) (void)cuda::freeShareable(p);
  }
  // The calling thread's current device may be another GPU: the work is enqueued with the
  // reducer's current.
  Status zero(void* p, size_t bytes) override {
    cuda::DeviceGuard g(device_);
    CHORUS_TRY(g.status());
    return cuda::memsetAsync(p, bytes, cuda_);
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    cuda::DeviceGuard g(device_);
    CHORUS_TRY(g.status());
    return cuda::copyAsync(dst, src, bytes, cuda_);
  }
  Status convert(const Conversion* c) override {
    cuda::DeviceGuard g(device_);
    CHORUS_TRY(g.status());
    return cuda::convertAsync(c->src, c->dst, c->count, c->wide, c->low, c->narrow, cuda_);
  }

  Result<void*> fenceCreate() override {
    cuda::DeviceGuard g(device_);
    CHORUS_TRY(g.status());
    CHORUS_ASSIGN_OR_RETURN(void* e, cuda::eventCreate());
    return static_cast<void*>(new DeviceFence{e, false});
  }
  void fenceDestroy(void* fence) override {
    auto* f = static_cast<DeviceFence*>(fence);
    cuda::eventDestroy(f->event);
    delete f;
  }
  Status fenceRecord(void* fence, chorusStream_t on, const char* what) override {
    auto* f = static_cast<DeviceFence*>(fence);
    void* cs = nullptr;
    if (!on) {
      f->armed = false;  // the work is complete
      return Status::ok();
    }
    if (!wrapsCuda(on, &cs)) return invalidUsage(wrongKind(what, true));
    CHORUS_TRY(cuda::eventRecord(f->event, cs));
    f->armed = true;
    return Status::ok();
  }
  Status waitFence(void* fence) override {
    auto* f = static_cast<DeviceFence*>(fence);
    return f->armed ? cuda::streamWaitEvent(cuda_, f->event) : Status::ok();
  }
  Status signal(chorusStream_t consumer, const char* what) override {
    void* cs = nullptr;
    if (!consumer) return synchronize("waiting for the reducer's stream");
    if (!wrapsCuda(consumer, &cs)) return invalidUsage(wrongKind(what, true));
    CHORUS_TRY(cuda::eventRecord(signal_, cuda_));
    return cuda::streamWaitEvent(cs, signal_);
  }

  Result<void*> timerCreate() override {
    cuda::DeviceGuard g(device_);
    CHORUS_TRY(g.status());
    return cuda::timingEventCreate();
  }
  void timerDestroy(void* timer) override { cuda::eventDestroy(timer); }
  Status markTime(void* timer, chorusStream_t on) override {
    void* cs = cuda_;
    if (on && !wrapsCuda(on, &cs)) return invalidUsage(wrongKind("the stream of a time mark", true));
    return cuda::eventRecord(timer, cs);
  }
  Result<double> seconds(void* a, void* b) override { return cuda::elapsedSeconds(a, b); }
  bool reached(void* timer) override { return cuda::eventDone(timer); }

 private:
  DeviceStore() = default;
  void* cuda_ = nullptr;    // the reducer's CUDA stream (stream_ wraps it)
  void* signal_ = nullptr;  // recorded on it for signal()
};

}  // namespace

Result<std::unique_ptr<GradStore>> GradStore::host() { return HostStore::make(); }

Result<std::unique_ptr<GradStore>> GradStore::device(int device) {
  if (!cuda::built()) {
    return invalidUsage(
        "gradientMemory = chorusDdpMemoryDevice: this build of Chorus has no CUDA (rebuild it with the CUDA toolkit), "
        "or keep the gradients in host memory");
  }
  return DeviceStore::make(device);
}

Status GradStore::checkStream(chorusStream_t s, const char* what) const {
  void* cs = nullptr;
  if (!s || wrapsCuda(s, &cs) == onDevice()) return Status::ok();
  return invalidUsage(wrongKind(what, onDevice()));
}

Status GradStore::synchronize(const std::string& what) {
  Status s = apiStatus(chorusStreamSynchronize(stream_), what);
  if (hostStream_ != stream_) {
    Status h = apiStatus(chorusStreamSynchronize(hostStream_), what);
    if (s.isOk()) s = h;
  }
  return s;
}

Status GradStore::synchronizeHost(const std::string& what) {
  return apiStatus(chorusStreamSynchronize(hostStream_), what);
}

}  // namespace chorus::ddp
