// What memory a call's buffers are, and the rules for mixing kinds (chorus_cuda.h).
#pragma once

#include "src/common/status.h"
#include "src/core/comm.h"
#include "src/core/stream.h"

namespace chorus {

// A buffer a call uses on this rank, and its argument's name for messages.
struct BufUse {
  const void* ptr;
  const char* name;
};

// True: the buffers are device memory on the communicator's device (bound to the first device
// buffer's device if the communicator has none yet), for the device path. False: host memory,
// for the host path. A call with no buffer (count 0) goes with its stream: a device operation on
// a CUDA stream wrapper, a host one otherwise. An error names the argument when the kinds mix, a
// device buffer is on another device, the stream does not fit the kind, or this build has no CUDA.
Result<bool> onDevice(Communicator& c, const BufUse* bufs, int n, const Stream* stream);

}  // namespace chorus
