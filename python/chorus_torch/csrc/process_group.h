// A torch.distributed backend on the Chorus C API: a c10d::Backend for PyTorch 2.x, registered with
// torch.distributed.Backend.register_backend (python/chorus_torch/__init__.py).
//
// One communicator and one Chorus host stream per process group. Every operation is enqueued on
// the stream and returns at once; a host function queued after it finishes the Work (copying
// results out of staging buffers first), which wakes wait() and completes the Work's future,
// running its .then() callbacks on that Chorus thread. Errors, including the communicator's own
// timeout (set from the process group's), finish the Work with an exception that says what
// happened.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

static_assert(TORCH_VERSION_MAJOR >= 2, "chorus_torch needs PyTorch 2.x (c10d::Backend)");

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace chorus_torch {

class WorkChorus : public c10d::Work {
 public:
  // `lists`: outputs that are lists of lists (gloo's allgather of several inputs), the future's
  // value then a list of lists.
  WorkChorus(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
             std::vector<at::Tensor> keepAlive, std::vector<std::vector<at::Tensor>> lists = {});
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // On the Chorus thread, once the operation is over.
  void complete(std::exception_ptr error);
  // recvAnysource: where chorusRecvAny writes the sender's rank, read by sourceRank() after wait().
  int* sourceSlot() { return &source_; }
  int sourceRank() const override;

 private:
  int source_ = -1;
  std::vector<at::Tensor> outputs_;
  std::vector<std::vector<at::Tensor>> lists_;
  std::vector<at::Tensor> keepAlive_;  // inputs and staging the operation reads or writes
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupChorus : public c10d::Backend {
 public:
  // Collective over the group: rank 0 makes the unique id and publishes it in the store.
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;

  const std::string getBackendName() const override { return "chorus"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  // Sparse COO tensors (allreduce takes them too), as gloo's: SUM only; every rank's indices and
  // values all-gathered, padded to the largest count, and summed by coalescing into the input.
  // Synchronous (the counts size the second gather): the Work returned is complete.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  // outputs[i] = every rank's inputs[i], one after another: one Chorus group of all-gathers.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  // outputs[i] = this rank's share of inputs[i] reduced: one Chorus group of reduce-scatters.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  // dist.recv without a source: chorusRecvAny; the Work's sourceRank() names the sender.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  // As gloo's: rank 0 waits for every other rank within opts.timeout and names those that did not
  // come (all of them with waitAllRanks); the others wait for rank 0's word. Through the store.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;

  // torch's _coalescing_manager (batch_isend_irecv): the operations between these two calls
  // form one Chorus group, launched at endCoalescing; their Works complete after it, and so does
  // the Work endCoalescing returns, which torch waits on for the whole group.
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  bool supportsCoalescing() const override { return true; }

  // destroy_process_group: what is queued runs to its end first, so that no completion frees
  // tensors (which takes the GIL) after the interpreter has begun to exit.
  void shutdown() override;

  // As gloo's and NCCL's: every rank starts at 0 and counts its collectives (not sends and
  // receives); PyTorch's debug wrapper (TORCH_DISTRIBUTED_DEBUG=DETAIL) compares them across ranks.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  chorusComm_t comm() const { return comm_; }

 private:
  // Enqueues `issue` (Chorus calls on comm_ and stream_) and, after it, the host function that
  // runs `after` and finishes the Work. Serialised, so every rank's operations keep their order.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                        std::vector<at::Tensor> keepAlive, const std::function<chorusResult_t()>& issue,
                                        std::function<void()> after = nullptr, chorusRedOp_t customOp = chorusNumOps,
                                        int** source = nullptr, std::vector<std::vector<at::Tensor>> lists = {});

  c10::intrusive_ptr<c10d::Work> allreduceSparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> allgatherMany(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs);
  c10::intrusive_ptr<c10d::Work> allreduceMany(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  // Enqueues `issue` in the launch order and waits for the stream: for what needs a result at once.
  void runNow(const char* name, const std::function<chorusResult_t()>& issue);

  // A Chorus operator for a torch one on tensors of this type; PREMUL_SUM makes a custom one.
  chorusRedOp_t redOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* collective);

  c10::intrusive_ptr<c10d::Store> store_;
  chorusComm_t comm_ = nullptr;
  chorusStream_t stream_ = nullptr;
  std::mutex launchMu_;
  bool coalescing_ = false;         // guarded by launchMu_
  std::vector<void*> coalesced_;    // guarded by launchMu_: completions held until the group ends
  std::atomic<uint64_t> seq_{0};    // collectives launched so far
  uint64_t monitoredBarriers_ = 0;  // monitoredBarrier calls so far (the store keys' sequence)
};

}  // namespace chorus_torch
