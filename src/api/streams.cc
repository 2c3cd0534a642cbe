// The C API of host streams and events (chorus.h). Each function runs through guard() (guard.h);
// handles are never-reused values in tables that own the objects (handles.h), so a destroyed or
// made-up handle is refused without being read.
#include "src/api/streams.h"

#include <mutex>

#include "src/common/guard.h"
#include "src/common/handles.h"

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
    // Work already queued runs to its end; an event recorded on the stream keeps it alive.
    (void)s->synchronize();
    return Status::ok();
  });
}

chorusResult_t chorusLaunchHostFunc(chorusStream_t stream, chorusHostFn_t fn, void* userData) {
  return guard("chorusLaunchHostFunc", [&]() -> Status {
    if (!fn) return invalidArgument("fn is NULL");
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
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
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
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
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
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
