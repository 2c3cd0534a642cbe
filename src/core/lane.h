// A Lane runs one rank's schedule (a list of Steps) over at most one send FIFO and one receive
// FIFO, resumably: progress() does all it can without blocking and, when it must wait, says on
// which counter and for which peer. Progress-thread-only (one lane is never progressed by two
// threads at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/reduce_host.h"
#include "src/algo/schedule.h"
#include "src/core/status.h"
#include "transports/fifo.h"

namespace chorus {

// A FIFO end with this rank's position in it; positions persist across operations.
struct SendCursor {
  FifoView fifo;
  uint32_t tail = 0;
  int peer = -1;
  bool viaProxy = false;  // slots leave through a proxy thread (socket): published is not yet sent
};
struct RecvCursor {
  FifoView fifo;
  uint32_t head = 0;
  int peer = -1;
};

// What a blocked lane waits for: *word to differ from `seen`.
struct WaitInfo {
  std::atomic<uint32_t>* word = nullptr;
  uint32_t seen = 0;
  std::atomic<uint32_t>* sleeperFlag = nullptr;  // set while sleeping so the other side wakes us
  int peer = -1;
  bool forData = false;  // true: waiting for the peer's data; false: for space in the peer's FIFO
  Prim prim = Prim::kSend;
  size_t step = 0;
  uint64_t seq = 0;
};

struct LaneArgs {
  const char* input = nullptr;
  char* output = nullptr;
  size_t elemSize = 1;
  int type = 1;  // chorusDataType_t
  ReduceSpec spec;
  const HostKernels* kernels = nullptr;
  uint64_t commId = 0;
  uint64_t seq = 0;
  size_t slotBytes = 0;
};

class Lane {
 public:
  Lane(const LaneArgs& args, std::vector<Step> steps, SendCursor* send, RecvCursor* recv);

  // ok: finished. inProgress: blocked (see *wait). Anything else: failed.
  Status progress(WaitInfo* wait, bool* moved);
  bool done() const { return stepIdx_ >= steps_.size(); }

 private:
  Status recvCheck(const SlotHeader& h, size_t bytes) const;

  LaneArgs a_;
  std::vector<Step> steps_;
  SendCursor* send_;
  RecvCursor* recv_;
  size_t slotElems_;
  size_t stepIdx_ = 0;
  size_t piece_ = 0;
};

}  // namespace chorus
