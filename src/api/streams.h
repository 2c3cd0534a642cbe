// chorusStream_t and chorusEvent_t: host streams and events behind never-reused handles
// (handles.h); the C functions are in streams.cc.
#pragma once

#include <memory>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "src/common/status.h"
#include "src/core/stream.h"

namespace chorus {

// The stream behind a handle; null for the NULL stream; an error for a handle that is not live.
Result<std::shared_ptr<Stream>> lookupStream(chorusStream_t s);

}  // namespace chorus
