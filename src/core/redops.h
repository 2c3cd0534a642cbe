// A communicator's reduction operators: the built-in ones, and the pre-multiplied sums made by
// chorusRedOpCreatePreMulSum, numbered from chorusNumOps on. Thread-safe: a launch reads an
// operator's scalar while another thread may create or destroy others.
#pragma once

#include <mutex>
#include <vector>

#include "include/chorus/chorus.h"
#include "kernels/reduce.h"
#include "src/common/status.h"

namespace chorus {

class RedOpTable {
 public:
  explicit RedOpTable(int nranks = 1) : nranks_(nranks) {}
  RedOpTable(const RedOpTable&) = delete;
  RedOpTable& operator=(const RedOpTable&) = delete;

  void reset(int nranks) {
    std::lock_guard<std::mutex> g(mu_);
    nranks_ = nranks;
    ops_.clear();
  }
  Result<chorusRedOp_t> createPreMulSum(const void* scalar, chorusDataType_t type, chorusScalarResidence_t residence);
  Status destroy(chorusRedOp_t op);
  // Whether `op` can reduce `type` here: built in, or a live operator of this table made for it.
  Status check(chorusRedOp_t op, chorusDataType_t type) const;
  // What a call with `op` (checked) on `type` computes, resolved when the call is made: a
  // pre-multiplied sum's scalar is read now, but a chorusScalarDevice one of a call on device
  // buffers (`onDevice`) only by the kernel (ReduceSpec::scalePtr).
  ReduceSpec spec(chorusRedOp_t op, chorusDataType_t type, bool onDevice = false) const;

 private:
  struct PreMulOp {
    bool live = false;
    chorusDataType_t type = chorusFloat32;
    chorusScalarResidence_t residence = chorusScalarHostImmediate;
    unsigned char value[8] = {0};
    const void* ptr = nullptr;
  };
  mutable std::mutex mu_;
  int nranks_;                 // set before the communicator is used (avg divides by it)
  std::vector<PreMulOp> ops_;  // guarded by mu_
};

}  // namespace chorus
