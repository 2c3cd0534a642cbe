// Where a reducer keeps its gradients, and the work it orders on them (src/ddp/reducer.h).
//
// Host memory (GradStore::host): buckets from chorusMemAlloc, one Chorus host stream for the
// bucket collectives and everything else, conversions as host functions on it, the framework's
// streams ordered by chorusEvent_t. Device memory (GradStore::device): buckets from the device
// layer's shareable allocation on the communicator's GPU (what chorusCudaMemAlloc gives, so
// one-copy and CUDA IPC apply), a non-blocking CUDA stream of the reducer's own wrapped as a
// chorusStream_t for the bucket collectives and hooks, zeroing, copies and conversions enqueued
// on it, the framework's CUDA streams ordered by CUDA events, and a host stream beside it for the
// host-memory collectives of the reducer's bookkeeping (the agreement check, the rebuild order,
// the join word, the used map), which never wait for the GPU.
//
// "In stream order" below: on the device, enqueued on the reducer's stream. On host memory zero
// and copy happen at once: the reducer calls them only while its stream does not touch that
// memory (between iterations, or on a bucket not yet launched).
#pragma once

#include <cstddef>
#include <memory>

#include "include/chorus/chorus.h"
#include "src/common/status.h"

namespace chorus::ddp {

// One conversion of a bucket, kept alive by its owner while the stream may run it.
struct Conversion {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t count = 0;
  chorusDataType_t wide = chorusFloat32;  // float32 or float64
  chorusDataType_t low = chorusFloat16;   // float16 or bfloat16
  bool narrow = true;                     // wide -> low; false: low -> wide
};

class GradStore {
 public:
  static Result<std::unique_ptr<GradStore>> host();
  // `device`: the CUDA device of the gradients (the communicator's).
  static Result<std::unique_ptr<GradStore>> device(int device);
  virtual ~GradStore() = default;

  bool onDevice() const { return device_ >= 0; }
  int cudaDevice() const { return device_; }
  // The bucket collectives and hooks go on stream(); host-memory collectives on hostStream()
  // (the same stream on host memory).
  chorusStream_t stream() const { return stream_; }
  chorusStream_t hostStream() const { return hostStream_; }
  // What kind of memory, for messages ("host memory", "device memory on GPU 0").
  virtual std::string describe() const = 0;

  // Zeroed storage of at least one byte, ready when this returns.
  virtual Result<void*> alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  // In stream order (see above).
  virtual Status zero(void* p, size_t bytes) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // In stream order on both: the stream runs it when the work before it is done.
  virtual Status convert(const Conversion* c) = 0;

  // Ordering with the framework's streams. A fence captures what a stream has enqueued so far
  // (a NULL stream: nothing, its work is complete); waitFence makes the reducer's stream wait for
  // it; signal makes `consumer` wait for what the reducer's stream has enqueued so far. A stream of
  // the other kind (a CUDA stream for host gradients, a host stream for device ones) is refused
  // with a sentence naming `what`.
  virtual Result<void*> fenceCreate() = 0;
  virtual void fenceDestroy(void* fence) = 0;
  virtual Status fenceRecord(void* fence, chorusStream_t on, const char* what) = 0;
  virtual Status waitFence(void* fence) = 0;
  virtual Status signal(chorusStream_t consumer, const char* what) = 0;

  // Time marks in stream order (on `on`, or the reducer's stream when null): seconds(a, b) waits
  // for both and is the time from a to b.
  virtual Result<void*> timerCreate() = 0;
  virtual void timerDestroy(void* timer) = 0;
  virtual Status markTime(void* timer, chorusStream_t on) = 0;
  virtual Result<double> seconds(void* a, void* b) = 0;
  // Whether the stream has passed the timer's last mark (without waiting).
  virtual bool reached(void* timer) = 0;

  // Whether `s` is of this store's kind (see the fences); `what` names it in the error.
  Status checkStream(chorusStream_t s, const char* what) const;

  // Waits on the host for both streams; the first error either met.
  Status synchronize(const std::string& what);
  // Waits for the host stream only (on host memory: the one stream).
  Status synchronizeHost(const std::string& what);

 protected:
  GradStore() = default;
  int device_ = -1;
  chorusStream_t stream_ = nullptr;
  chorusStream_t hostStream_ = nullptr;
};

}  // namespace chorus::ddp
