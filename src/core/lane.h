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

// What one channel of a communicator is doing, published for a watchdog and for hang reports.
// Written by the progress thread with relaxed stores (a snapshot may mix two moments, which is
// fine for diagnostics); read by any thread.
struct ChannelStatus {
  std::atomic<uint64_t> seq{0};      // operation sequence number
  std::atomic<uint32_t> step{0};     // step of the schedule
  std::atomic<int32_t> peer{-1};     // the peer waited on
  std::atomic<uint32_t> waiting{0};  // 0: running or idle, 1: waiting for data, 2: waiting for space
  std::atomic<int64_t> sinceNs{0};   // when the current wait began

  void blocked(const struct WaitInfo& w, int64_t now);
  void running() { waiting.store(0, std::memory_order_relaxed); }
  std::string describe() const;
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
  ChannelStatus* status = nullptr;  // this lane's channel record, if any
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
