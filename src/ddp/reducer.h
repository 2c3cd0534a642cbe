// The data-parallel reducer behind include/chorus/ddp.h: gradient storage in buckets, the
// per-iteration ready bookkeeping, and the bucket all-reduces in bucket order on its own stream.
// Its collectives, streams and events are the public C API's, as a framework would use them; the
// storage and the work ordered on it (zeroing, copies, conversions, fences with the framework's
// streams, time marks) are a GradStore's (src/ddp/grad_store.h), host or device memory.
//
// One lock guards the iteration state; chorusDdpMarkReady may come from any thread. Launching a
// bucket only enqueues on the stream, so it is done under the lock, which is what keeps the
// launch order equal to the bucket order. A bucket's launch first makes the stream wait for the
// fences of the streams that produce its gradients (chorusDdpMarkReadyOn), and time marks around
// each bucket give the statistics.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "include/chorus/ddp.h"
#include "src/common/status.h"
#include "src/ddp/buckets.h"
#include "src/ddp/grad_store.h"

namespace chorus::ddp {

struct Options {
  size_t bucketCapBytes = size_t(25) << 20;
  size_t firstBucketCapBytes = size_t(1) << 20;
  bool findUnused = false;
  bool staticGraph = false;
  bool unevenInputs = false;
  chorusDdpHook_t hook = chorusDdpHookAllReduce;
  size_t broadcastChunkBytes = size_t(250) << 20;
  int gradientMemory = -1;  // chorusDdpMemory_t; -1: by the communicator's device
};

// Options from a chorusDdpConfig_t (NULL: defaults), or why it is not valid.
Result<Options> optionsFromConfig(const chorusDdpConfig_t* config);

class Reducer {
 public:
  // Collective: checks that every rank has the same parameters and options.
  static Result<std::unique_ptr<Reducer>> create(chorusComm_t comm, std::vector<ParamInfo> params,
                                                 std::vector<std::string> names, const Options& options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  Result<void*> gradient(int index);
  Status zeroGrad();
  Status setSync(bool enabled);
  Status prepareForBackward(bool* rebuilt);
  // `producer`: the stream whose work writes the gradient (null: written already).
  Status markReady(int index, bool used, chorusStream_t producer = nullptr);
  // `consumer`: the stream that waits for the buckets instead of the host (null: the host waits).
  Status finalize(chorusStream_t consumer = nullptr);
  Result<bool> paramUsed(int index);
  Status broadcastParameters(void* const* params, int root);
  Status registerHook(chorusDdpCommHook_t fn, void* state);
  Status join(void* const* params);
  chorusDdpStats_t stats();
  Result<chorusDdpBucket_t> bucket(int index);

  struct BucketStore;  // one bucket's storage and launch state (reducer.cc)

 private:
  enum class Phase { kIdle, kBackward };

  Reducer(chorusComm_t comm, std::vector<ParamInfo> params, std::vector<std::string> names, const Options& options);
  Status init();
  Status checkAgreement();
  Status layOut(const std::vector<Bucket>& buckets);
  std::string paramName(size_t i) const;
  std::string listParams(const std::vector<size_t>& idx) const;
  Status checkIndex(int index) const;

  // With mu_ held.
  Status markLocked(size_t index, bool used, chorusStream_t producer = nullptr);
  void launchCompleteLocked();
  void launchLocked(BucketStore& b);
  chorusDdpBucket_t viewLocked(const BucketStore& b) const;
  bool usedMapThisIterationLocked() const;
  bool shouldRebuildLocked() const;
  Status rebuildLocked(bool* changed);
  Status enqueueUsedMapLocked();
  Status waitLocked(const char* what);
  // After freeing device memory: every rank waits on the host until all have freed (below).
  Status freedTogetherLocked(const char* what);
  Status waitForConsumer();  // without mu_ held
  Status orderAfterConsumerLocked();
  Status resolveStatsLocked(bool wait);
  void afterSyncedIterationLocked();
  void beginIterationLocked();
  Status broadcastLocked(void* const* params, int root);
  Status fail(chorusResult_t rc, const std::string& what);

  const chorusComm_t comm_;
  const std::vector<ParamInfo> params_;
  const std::vector<std::string> names_;
  const Options opt_;
  int nranks_ = 0;
  int rank_ = 0;
  std::unique_ptr<GradStore> store_;
  chorusStream_t stream_ = nullptr;      // the buckets' (store_->stream())
  chorusStream_t hostStream_ = nullptr;  // host-memory collectives (store_->hostStream())

  std::mutex mu_;
  std::vector<std::unique_ptr<BucketStore>> buckets_;
  std::vector<size_t> bucketOf_;  // parameter -> bucket
  std::vector<size_t> offsetOf_;  // parameter -> first element in its bucket

  chorusDdpCommHook_t userHook_ = nullptr;
  void* userHookState_ = nullptr;

  Phase phase_ = Phase::kIdle;
  bool sync_ = true;           // for the iterations to come
  bool iterationSync_ = true;  // of the iteration in progress
  size_t nextBucket_ = 0;      // the next bucket to launch
  size_t marked_ = 0;          // parameters the framework marked this iteration
  std::vector<uint8_t> ready_;
  std::vector<int32_t> usedLocal_;     // since the last synchronised iteration
  std::vector<int32_t> usedMap_;       // all-reduced; stays put while the stream reads it
  std::vector<uint8_t> usedGlobal_;    // of the last synchronised iteration
  std::vector<uint8_t> staticUnused_;  // staticGraph: unused in the first synchronised iteration
  bool staticKnown_ = false;
  bool usedMapPending_ = false;
  int32_t joinWord_[2] = {0, 0};  // active ranks, synchronising ranks

  bool recording_ = false;  // recording the order gradients become ready
  std::vector<size_t> readyOrder_;
  bool haveOrder_ = false;
  bool rebuilt_ = false;        // the rebuild has been done (or given up: rank 0 had no order)
  bool orderedLayout_ = false;  // the buckets follow rank 0's order

  // The stream of the last chorusDdpFinalizeOn, until the reducer's stream has been ordered after
  // the work the framework enqueued there since (its optimizer step reads the gradients).
  chorusStream_t consumer_ = nullptr;
  void* consumerFence_ = nullptr;
  // Statistics: marks of the last synchronised iteration not yet read (the buckets' timers, and
  // `backwardEnd_` on the stream that waits for them when it is not the host).
  bool statsPending_ = false;
  bool backwardMarked_ = false;
  double hostWait_ = 0;  // the time chorusDdpFinalize waited, when the host waited
  void* backwardEnd_ = nullptr;

  Status launchError_;
  int64_t iterations_ = 0;
  int64_t syncedIterations_ = 0;
  double lastComm_ = 0, lastExposed_ = 0, totalComm_ = 0, totalExposed_ = 0;
};

}  // namespace chorus::ddp
