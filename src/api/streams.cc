// The C API of host streams and events (chorus.h). Each function runs through guard() (guard.h);
// handles are never-reused values in tables that own the objects (handles.h), so a destroyed or
// made-up handle is refused without being read.
#include "src/api/streams.h"

#include <mutex>

#include "src/common/guard.h"
#include "src/common/handles.h"
#include "src/device/cuda.h"

namespace chorus {
namespace {

HandleTable<Stream>& streams() {
  static auto* t = new HandleTable<Stream>();
  return *t;
}
// What a chorusEvent_t stands for.
struct EventState {
  std::mutex mu;
  EventMark mark;  // guarded by mu
};
HandleTable<EventState>& events() {
  static auto* t = new HandleTable<EventState>();
  return *t;
}

}  // namespace

// The stream behind a handle; null for the NULL stream.
Result<std::shared_ptr<Stream>> lookupStream(chorusStream_t s) {
  if (!s) return std::shared_ptr<Stream>();
  std::shared_ptr<Stream> impl = streams().find(handleValue(s));
  if (!impl) return invalidArgument("stream is not a live chorusStream_t (destroyed, or never created)");
  return impl;
}

namespace {

// A host stream (or the NULL stream) for host work: host functions and events.
Result<std::shared_ptr<Stream>> lookupHostStream(chorusStream_t s, const char* what) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> impl, lookupStream(s));
  if (impl && impl->isCuda()) {
    return invalidArgument(std::string(what) +
                           " wraps a CUDA stream (chorusStreamFromCuda): use the CUDA runtime's "
                           "own call on that stream (cudaLaunchHostFunc, cudaEventRecord, cudaStreamWaitEvent)");
  }
  return impl;
}

Result<std::shared_ptr<EventState>> lookupEvent(chorusEvent_t e) {
  if (!e) return invalidArgument("event is NULL");
  std::shared_ptr<EventState> state = events().find(handleValue(e));
  if (!state) return invalidArgument("event is not a live chorusEvent_t (destroyed, or never created)");
  return state;
}

// What the event behind a handle recorded.
Result<EventMark> markOf(chorusEvent_t event) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<EventState> e, lookupEvent(event));
  std::lock_guard<std::mutex> g(e->mu);
  return e->mark;
}

}  // namespace
}  // namespace chorus

using namespace chorus;

extern "C" {

chorusResult_t chorusStreamCreate(chorusStream_t* stream) {
  return guard("chorusStreamCreate", [&]() -> Status {
    if (!stream) return invalidArgument("stream is NULL");
    *stream = handleOf<chorusStream_t>(streams().add(std::make_shared<Stream>()));
    return Status::ok();
  });
}

chorusResult_t chorusStreamFromCuda(struct CUstream_st* cudaStream, chorusStream_t* stream) {
  return guard("chorusStreamFromCuda", [&]() -> Status {
    if (!stream) return invalidArgument("stream (where the wrapper is written) is NULL");
    if (!cuda::built()) {
      return invalidUsage("chorusStreamFromCuda: this build of Chorus has no CUDA; rebuild it with the CUDA toolkit");
    }
    *stream = handleOf<chorusStream_t>(streams().add(std::make_shared<Stream>(static_cast<void*>(cudaStream))));
    return Status::ok();
  });
}

chorusResult_t chorusStreamGetCuda(chorusStream_t stream, struct CUstream_st** cudaStream) {
  return guard("chorusStreamGetCuda", [&]() -> Status {
    if (!cudaStream) return invalidArgument("cudaStream (where the CUDA stream is written) is NULL");
    if (!stream) return invalidArgument("stream is NULL, which is Chorus's synchronous stream, not a CUDA stream");
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
    if (!s->isCuda()) return invalidArgument("stream is a host stream (chorusStreamCreate), not a wrapped CUDA stream");
    *cudaStream = static_cast<struct CUstream_st*>(s->cudaStream());
    return Status::ok();
  });
}

chorusResult_t chorusStreamSynchronize(chorusStream_t stream) {
  return guard("chorusStreamSynchronize", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
    if (!s) return Status::ok();  // the NULL stream is always complete
    return s->synchronize();
  });
}

chorusResult_t chorusStreamQuery(chorusStream_t stream) {
  return guard("chorusStreamQuery", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
    if (!s) return Status::ok();
    return s->idle() ? Status::ok() : Status(chorusInProgress, "");
  });
}

chorusResult_t chorusStreamDestroy(chorusStream_t stream) {
  return guard("chorusStreamDestroy", [&]() -> Status {
    if (!stream) return invalidArgument("stream is NULL (the NULL stream cannot be destroyed)");
    std::shared_ptr<Stream> s = streams().take(handleValue(stream));
    if (!s) return invalidArgument("stream is not a live chorusStream_t (destroyed twice, or never created)");
    // Work already queued runs to its end; an event recorded on the stream keeps it alive. A CUDA
    // stream's work is the CUDA stream's: the wrapper goes at once.
    if (!s->isCuda()) (void)s->synchronize();
    return Status::ok();
  });
}

chorusResult_t chorusLaunchHostFunc(chorusStream_t stream, chorusHostFn_t fn, void* userData) {
  return guard("chorusLaunchHostFunc", [&]() -> Status {
    if (!fn) return invalidArgument("fn is NULL");
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupHostStream(stream, "stream"));
    if (!s) {
      fn(userData);
      return Status::ok();
    }
    s->enqueue([fn, userData]() -> Status {
      fn(userData);
      return Status::ok();
    });
    return Status::ok();
  });
}

chorusResult_t chorusEventCreate(chorusEvent_t* event) {
  return guard("chorusEventCreate", [&]() -> Status {
    if (!event) return invalidArgument("event is NULL");
    *event = handleOf<chorusEvent_t>(events().add(std::make_shared<EventState>()));
    return Status::ok();
  });
}

chorusResult_t chorusEventRecord(chorusEvent_t event, chorusStream_t stream) {
  return guard("chorusEventRecord", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<EventState> e, lookupEvent(event));
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupHostStream(stream, "stream"));
    std::lock_guard<std::mutex> g(e->mu);
    e->mark = s ? EventMark{s, s->lastEnqueued()} : EventMark();
    return Status::ok();
  });
}

chorusResult_t chorusEventQuery(chorusEvent_t event) {
  return guard("chorusEventQuery", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(EventMark m, markOf(event));
    if (!m.stream || m.stream->reached(m.seq)) return Status::ok();
    return Status(chorusInProgress, "");
  });
}

chorusResult_t chorusEventSynchronize(chorusEvent_t event) {
  return guard("chorusEventSynchronize", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(EventMark m, markOf(event));
    if (m.stream) m.stream->waitFor(m.seq);
    return Status::ok();
  });
}

chorusResult_t chorusStreamWaitEvent(chorusStream_t stream, chorusEvent_t event) {
  return guard("chorusStreamWaitEvent", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(EventMark m, markOf(event));
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupHostStream(stream, "stream"));
    if (!m.stream) return Status::ok();
    if (!s) {
      m.stream->waitFor(m.seq);
      return Status::ok();
    }
    if (m.stream == s) return Status::ok();  // stream order already implies it
    s->enqueue([m]() -> Status {
      m.stream->waitFor(m.seq);
      return Status::ok();
    });
    return Status::ok();
  });
}

chorusResult_t chorusEventDestroy(chorusEvent_t event) {
  return guard("chorusEventDestroy", [&]() -> Status {
    if (!event) return invalidArgument("event is NULL");
    if (!events().take(handleValue(event))) {
      return invalidArgument("event is not a live chorusEvent_t (destroyed twice, or never created)");
    }
    return Status::ok();
  });
}

}  // extern "C"
