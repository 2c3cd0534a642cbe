#include "src/ddp/reducer.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/numeric.h"
#include "src/common/os.h"
#include "src/common/types.h"

namespace chorus::ddp {

struct Reducer::BucketStore {
  GradStore* store = nullptr;
  size_t index = 0;
  chorusDataType_t type = chorusFloat32;
  size_t count = 0;
  std::vector<int> params;
  std::vector<size_t> offsets;
  void* data = nullptr;  // the store's: peers on the host can map it
  void* wire = nullptr;  // the compressed copy of the fp16/bf16 hooks
  chorusDataType_t wireType = chorusFloat16;
  Conversion compress, decompress;  // data -> wire, wire -> data
  size_t pending = 0;               // parameters not yet ready this iteration
  // One fence per stream that produced a gradient of this bucket (chorusDdpMarkReadyOn); `live`:
  // recorded this iteration, so the launch waits for it.
  struct Fence {
    chorusStream_t on = nullptr;
    void* fence = nullptr;
    bool live = false;
  };
  std::vector<Fence> fences;
  void* start = nullptr;  // time marks around the bucket's reduction on the stream
  void* end = nullptr;

  ~BucketStore() {
    for (Fence& f : fences) store->fenceDestroy(f.fence);
    if (start) store->timerDestroy(start);
    if (end) store->timerDestroy(end);
    if (data) store->free(data);
    if (wire) store->free(wire);
  }
  size_t bytes() const { return count * typeSize(type); }
};

namespace {

constexpr size_t kMaxNamed = 16;  // parameters named in one message

}  // namespace

Result<Options> optionsFromConfig(const chorusDdpConfig_t* config) {
  Options o;
  if (!config) return o;
  if (config->magic != CHORUS_DDP_CONFIG_MAGIC) {
    return invalidArgument("config was not initialised with CHORUS_DDP_CONFIG_INITIALIZER (magic is wrong)");
  }
  // Version 1 of the struct ended before gradientMemory.
  constexpr size_t kV1Size = offsetof(chorusDdpConfig_t, gradientMemory);
  const bool v1 = config->size == kV1Size;
  if (config->size != sizeof(chorusDdpConfig_t) && !v1) {
    return invalidArgument("config->size is " + std::to_string(config->size) +
                           ", this library's chorusDdpConfig_t has " + std::to_string(sizeof(chorusDdpConfig_t)) +
                           " bytes (or " + std::to_string(kV1Size) +
                           " without gradientMemory): rebuild against this ddp.h");
  }
  if (config->bucketCapBytes != CHORUS_DDP_UNDEF_SIZE) o.bucketCapBytes = config->bucketCapBytes;
  if (config->firstBucketCapBytes != CHORUS_DDP_UNDEF_SIZE) o.firstBucketCapBytes = config->firstBucketCapBytes;
  auto flag = [](int v, const char* name, bool* out) -> Status {
    if (v == CHORUS_DDP_UNDEF_INT) return Status::ok();
    if (v != 0 && v != 1) return invalidArgument(std::string(name) + " is " + std::to_string(v) + "; use 0 or 1");
    *out = v == 1;
    return Status::ok();
  };
  CHORUS_TRY(flag(config->findUnusedParameters, "findUnusedParameters", &o.findUnused));
  CHORUS_TRY(flag(config->staticGraph, "staticGraph", &o.staticGraph));
  CHORUS_TRY(flag(config->unevenInputs, "unevenInputs", &o.unevenInputs));
  if (config->hook != CHORUS_DDP_UNDEF_INT) {
    if (config->hook < chorusDdpHookAllReduce || config->hook > chorusDdpHookBf16) {
      return invalidArgument("hook is " + std::to_string(config->hook) +
                             "; use chorusDdpHookAllReduce (0), chorusDdpHookFp16 (1) or chorusDdpHookBf16 (2)");
    }
    o.hook = static_cast<chorusDdpHook_t>(config->hook);
  }
  if (config->broadcastChunkBytes != CHORUS_DDP_UNDEF_SIZE) {
    if (config->broadcastChunkBytes == 0) return invalidArgument("broadcastChunkBytes is 0; it must be at least 1");
    o.broadcastChunkBytes = config->broadcastChunkBytes;
  }
  if (!v1 && config->gradientMemory != CHORUS_DDP_UNDEF_INT) {
    if (config->gradientMemory != chorusDdpMemoryHost && config->gradientMemory != chorusDdpMemoryDevice) {
      return invalidArgument("gradientMemory is " + std::to_string(config->gradientMemory) +
                             "; use chorusDdpMemoryHost (0) or chorusDdpMemoryDevice (1)");
    }
    o.gradientMemory = config->gradientMemory;
  }
  return o;
}

Reducer::Reducer(chorusComm_t comm, std::vector<ParamInfo> params, std::vector<std::string> names,
                 const Options& options)
    : comm_(comm), params_(std::move(params)), names_(std::move(names)), opt_(options) {}

Reducer::~Reducer() {
  if (!store_) return;
  (void)store_->synchronize("destroying the reducer");
  buckets_.clear();
  if (consumerFence_) store_->fenceDestroy(consumerFence_);
  if (backwardEnd_) store_->timerDestroy(backwardEnd_);
}

Status Reducer::fail(chorusResult_t rc, const std::string& what) {
  return Status(rc, what + ": " + chorusGetLastError(nullptr));
}

Result<std::unique_ptr<Reducer>> Reducer::create(chorusComm_t comm, std::vector<ParamInfo> params,
                                                 std::vector<std::string> names, const Options& options) {
  std::unique_ptr<Reducer> r(new Reducer(comm, std::move(params), std::move(names), options));
  CHORUS_TRY(r->init());
  return r;
}

Status Reducer::init() {
  chorusResult_t rc = chorusCommCount(comm_, &nranks_);
  if (rc != chorusSuccess) return fail(rc, "reading the communicator's size");
  rc = chorusCommUserRank(comm_, &rank_);
  if (rc != chorusSuccess) return fail(rc, "reading the communicator's rank");
  int device = -1;
  rc = chorusCommCuDevice(comm_, &device);
  if (rc != chorusSuccess) return fail(rc, "reading the communicator's CUDA device");
  const bool onDevice = opt_.gradientMemory == chorusDdpMemoryDevice || (opt_.gradientMemory < 0 && device >= 0);
  if (onDevice && device < 0) {
    return invalidUsage(
        "gradientMemory = chorusDdpMemoryDevice but the communicator has no CUDA device: make it with "
        "chorusConfig_t.cudaDevice set (or with the device current on the initialising thread), or keep the "
        "gradients in host memory (chorusDdpMemoryHost)");
  }
  if (onDevice) {
    CHORUS_ASSIGN_OR_RETURN(store_, GradStore::device(device));
  } else {
    CHORUS_ASSIGN_OR_RETURN(store_, GradStore::host());
  }
  stream_ = store_->stream();
  hostStream_ = store_->hostStream();
  CHORUS_ASSIGN_OR_RETURN(consumerFence_, store_->fenceCreate());
  CHORUS_ASSIGN_OR_RETURN(backwardEnd_, store_->timerCreate());
  CHORUS_TRY(checkAgreement());
  const size_t n = params_.size();
  ready_.assign(n, 0);
  usedLocal_.assign(n, 0);
  usedMap_.assign(n, 0);
  usedGlobal_.assign(n, 1);
  staticUnused_.assign(n, 0);
  return layOut(initialBuckets(params_, opt_.firstBucketCapBytes, opt_.bucketCapBytes));
}

// Every rank must hold the same parameters and options, or their collectives would not match:
// a fingerprint is allgathered, and on a difference the lists themselves, to name it.
Status Reducer::checkAgreement() {
  uint64_t h = fnv1a(nullptr, 0);
  for (const ParamInfo& p : params_) {
    const uint64_t rec[2] = {p.count, static_cast<uint64_t>(p.type)};
    h = fnv1a(rec, sizeof(rec), h);
  }
  constexpr int kWords = 10;
  const uint64_t mine[kWords] = {
      params_.size(),           h,
      opt_.bucketCapBytes,      opt_.firstBucketCapBytes,
      opt_.findUnused,          opt_.staticGraph,
      opt_.unevenInputs,        static_cast<uint64_t>(opt_.hook),
      opt_.broadcastChunkBytes, store_->onDevice() ? uint64_t{chorusDdpMemoryDevice} : uint64_t{chorusDdpMemoryHost}};
  std::vector<uint64_t> all(size_t(kWords) * nranks_);
  chorusResult_t rc = chorusAllGather(mine, all.data(), kWords, chorusUint64, comm_, hostStream_);
  if (rc != chorusSuccess) return fail(rc, "checking the parameter lists across ranks");
  CHORUS_TRY(waitLocked("checking the parameter lists across ranks"));
  static const char* const kOption[kWords] = {"",
                                              "",
                                              "bucketCapBytes",
                                              "firstBucketCapBytes",
                                              "findUnusedParameters",
                                              "staticGraph",
                                              "unevenInputs",
                                              "hook",
                                              "broadcastChunkBytes",
                                              "gradientMemory"};
  bool listsDiffer = false;
  for (int r = 1; r < nranks_; ++r) {
    const uint64_t* theirs = &all[size_t(r) * kWords];
    for (int w = 2; w < kWords; ++w) {
      if (theirs[w] != all[w]) {
        return invalidUsage("rank " + std::to_string(r) + "'s reducer has " + kOption[w] + " = " +
                            std::to_string(theirs[w]) + " where rank 0's has " + std::to_string(all[w]) +
                            ": the options must be equal on every rank");
      }
    }
    if (theirs[0] != all[0]) {
      return invalidUsage("rank " + std::to_string(r) + " made its reducer with " + std::to_string(theirs[0]) +
                          " parameters and rank 0 with " + std::to_string(all[0]) +
                          ": every rank must pass the same parameter list");
    }
    listsDiffer = listsDiffer || theirs[1] != all[1];
  }
  if (!listsDiffer) return Status::ok();
  // Same lengths, different lists: gather them to name the first difference.
  const size_t n = params_.size();
  std::vector<uint64_t> list(2 * n), lists(2 * n * nranks_);
  for (size_t i = 0; i < n; ++i) {
    list[2 * i] = params_[i].count;
    list[2 * i + 1] = static_cast<uint64_t>(params_[i].type);
  }
  rc = chorusAllGather(list.data(), lists.data(), 2 * n, chorusUint64, comm_, hostStream_);
  if (rc != chorusSuccess) return fail(rc, "comparing the parameter lists across ranks");
  CHORUS_TRY(waitLocked("comparing the parameter lists across ranks"));
  for (int r = 1; r < nranks_; ++r) {
    for (size_t i = 0; i < n; ++i) {
      const uint64_t* a = &lists[2 * i];
      const uint64_t* b = &lists[2 * (size_t(r) * n + i)];
      if (a[0] != b[0] || a[1] != b[1]) {
        auto describe = [](const uint64_t* e) {
          return std::to_string(e[0]) + " x " + typeName(static_cast<chorusDataType_t>(e[1]));
        };
        return invalidUsage("parameter " + paramName(i) + " is " + describe(b) + " on rank " + std::to_string(r) +
                            " and " + describe(a) + " on rank 0: every rank must pass the same parameter list");
      }
    }
  }
  return Status::ok();
}

Status Reducer::layOut(const std::vector<Bucket>& buckets) {
  std::vector<std::unique_ptr<BucketStore>> stores;
  bucketOf_.assign(params_.size(), 0);
  offsetOf_.assign(params_.size(), 0);
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    auto b = std::make_unique<BucketStore>();
    b->store = store_.get();
    b->index = bi;
    b->type = buckets[bi].type;
    for (size_t p : buckets[bi].params) {
      b->params.push_back(static_cast<int>(p));
      b->offsets.push_back(b->count);
      bucketOf_[p] = bi;
      offsetOf_[p] = b->count;
      b->count += params_[p].count;
    }
    // Every bucket gets storage, an empty one too, so every gradient has an address.
    const std::string which =
        "bucket " + std::to_string(bi) + " (" + std::to_string(b->bytes()) + " bytes of " + store_->describe() + ")";
    Result<void*> data = store_->alloc(b->bytes());
    if (!data.isOk()) return Status(data.status().code(), "allocating " + which + ": " + data.status().message());
    b->data = data.value();
    CHORUS_ASSIGN_OR_RETURN(b->start, store_->timerCreate());
    CHORUS_ASSIGN_OR_RETURN(b->end, store_->timerCreate());
    const bool compressible = b->type == chorusFloat32 || b->type == chorusFloat64;
    if (compressible && (opt_.hook == chorusDdpHookFp16 || opt_.hook == chorusDdpHookBf16)) {
      b->wireType = opt_.hook == chorusDdpHookFp16 ? chorusFloat16 : chorusBfloat16;
      Result<void*> wire = store_->alloc(b->count * 2);
      if (!wire.isOk()) {
        return Status(wire.status().code(),
                      "allocating the compressed copy of " + which + ": " + wire.status().message());
      }
      b->wire = wire.value();
      b->compress = {b->data, b->wire, b->count, b->type, b->wireType, true};
      b->decompress = {b->wire, b->data, b->count, b->type, b->wireType, false};
    }
    stores.push_back(std::move(b));
  }
  buckets_ = std::move(stores);
  return Status::ok();
}

std::string Reducer::paramName(size_t i) const {
  std::string s = std::to_string(i);
  if (!names_[i].empty()) s += " (" + names_[i] + ")";
  return s;
}

std::string Reducer::listParams(const std::vector<size_t>& idx) const {
  std::string s;
  for (size_t k = 0; k < idx.size() && k < kMaxNamed; ++k) {
    if (k) s += ", ";
    s += paramName(idx[k]);
  }
  if (idx.size() > kMaxNamed) s += " and " + std::to_string(idx.size() - kMaxNamed) + " more";
  return s;
}

Status Reducer::checkIndex(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= params_.size()) {
    return invalidArgument("parameter index " + std::to_string(index) + " is out of range [0, " +
                           std::to_string(params_.size()) + ")");
  }
  return Status::ok();
}

Status Reducer::waitLocked(const char* what) { return store_->synchronize(what); }

// Host memory: the host waits for the stream of the last chorusDdpFinalizeOn before the reducer
// touches the gradients again, without the reducer's lock (that stream's work may well call the
// reducer: chorusDdpGradient). Device memory: nothing here; orderAfterConsumerLocked has the
// reducer's stream wait for it instead.
Status Reducer::waitForConsumer() {
  if (store_->onDevice()) return Status::ok();
  chorusStream_t c = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    c = consumer_;
    consumer_ = nullptr;
  }
  if (!c) return Status::ok();
  chorusResult_t rc = chorusStreamSynchronize(c);
  if (rc != chorusSuccess) return fail(rc, "waiting for the stream of the last chorusDdpFinalizeOn");
  return Status::ok();
}

// The framework's work after the last chorusDdpFinalizeOn (an optimizer step reading the
// gradients) comes before what the reducer does to them next: on the device its stream waits for
// that work; on the host the host did (waitForConsumer), unless another chorusDdpFinalizeOn came
// in between (calls that race an iteration), which is then waited for here.
Status Reducer::orderAfterConsumerLocked() {
  if (!consumer_) return Status::ok();
  const chorusStream_t c = consumer_;
  consumer_ = nullptr;
  if (!store_->onDevice()) {
    chorusResult_t rc = chorusStreamSynchronize(c);
    if (rc != chorusSuccess) return fail(rc, "waiting for the stream of the last chorusDdpFinalizeOn");
    return Status::ok();
  }
  Status s = store_->fenceRecord(consumerFence_, c, "the stream of the last chorusDdpFinalizeOn");
  if (!s.isOk()) {
    return Status(s.code(), s.message() + " (keep that stream alive until the reducer's next call)");
  }
  return store_->waitFence(consumerFence_);
}

// The statistics of the last synchronised iteration from its time marks; without `wait`, only once
// the marks have been reached.
Status Reducer::resolveStatsLocked(bool wait) {
  if (!statsPending_ || buckets_.empty()) {
    statsPending_ = false;
    return Status::ok();
  }
  void* lastEnd = buckets_.back()->end;
  if (!wait && (!store_->reached(lastEnd) || (backwardMarked_ && !store_->reached(backwardEnd_)))) {
    return Status::ok();
  }
  statsPending_ = false;
  double comm = 0;
  for (auto& b : buckets_) {
    CHORUS_ASSIGN_OR_RETURN(double t, store_->seconds(b->start, b->end));
    if (t > 0) comm += t;
  }
  double exposed = hostWait_;
  if (backwardMarked_) {
    // A host stream is waited for only once it has passed the mark (this may run on a thread of
    // that stream); until then its wait counts as none.
    exposed = 0;
    if (store_->onDevice() || store_->reached(backwardEnd_)) {
      CHORUS_ASSIGN_OR_RETURN(exposed, store_->seconds(backwardEnd_, lastEnd));
    }
    backwardMarked_ = false;
  }
  lastComm_ = comm;
  lastExposed_ = std::clamp(exposed, 0.0, comm);
  totalComm_ += lastComm_;
  totalExposed_ += lastExposed_;
  return Status::ok();
}

Result<void*> Reducer::gradient(int index) {
  CHORUS_TRY(checkIndex(index));
  std::lock_guard<std::mutex> g(mu_);
  const BucketStore& b = *buckets_[bucketOf_[index]];
  return static_cast<void*>(static_cast<char*>(b.data) + offsetOf_[index] * typeSize(b.type));
}

Status Reducer::zeroGrad() {
  CHORUS_TRY(waitForConsumer());
  std::lock_guard<std::mutex> g(mu_);
  if (phase_ == Phase::kBackward && marked_ > 0) {
    return invalidUsage(
        "chorusDdpZeroGrad during an iteration (gradients are being reduced); call it after chorusDdpFinalize");
  }
  CHORUS_TRY(orderAfterConsumerLocked());
  if (!store_->onDevice()) CHORUS_TRY(waitLocked("waiting for the reducer's stream"));
  for (auto& b : buckets_) CHORUS_TRY(store_->zero(b->data, b->bytes()));
  if (store_->onDevice()) CHORUS_TRY(waitLocked("zeroing the gradients"));
  return Status::ok();
}

Status Reducer::setSync(bool enabled) {
  std::lock_guard<std::mutex> g(mu_);
  if (phase_ == Phase::kBackward && marked_ > 0) {
    return invalidUsage("chorusDdpSetSync during an iteration; call it before chorusDdpPrepareForBackward");
  }
  sync_ = enabled;
  return Status::ok();
}

bool Reducer::usedMapThisIterationLocked() const { return opt_.staticGraph ? !staticKnown_ : opt_.findUnused; }

// As PyTorch: once, after the first synchronised iteration, unless unused parameters may change
// from one iteration to the next.
bool Reducer::shouldRebuildLocked() const {
  return !rebuilt_ && syncedIterations_ >= 1 && (opt_.staticGraph || !opt_.findUnused);
}

void Reducer::beginIterationLocked() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (auto& b : buckets_) b->pending = b->params.size();
  nextBucket_ = 0;
  marked_ = 0;
  launchError_ = Status::ok();
  for (auto& b : buckets_) {
    for (BucketStore::Fence& f : b->fences) f.live = false;
  }
  recording_ = iterationSync_ && !haveOrder_ && !rebuilt_;
  if (recording_) readyOrder_.clear();
}

Status Reducer::prepareForBackward(bool* rebuilt) {
  *rebuilt = false;
  CHORUS_TRY(waitForConsumer());
  std::lock_guard<std::mutex> g(mu_);
  if (phase_ == Phase::kBackward && iterationSync_ && marked_ > 0) {
    std::vector<size_t> missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing.push_back(i);
    }
    return invalidUsage(
        "the previous iteration did not finish: its gradients were being reduced when a new one started. "
        "Parameters never marked ready: " +
        listParams(missing) +
        ". Mark every gradient produced (chorusDdpMarkReady), set findUnusedParameters if some parameters "
        "take no part in the loss, and call chorusDdpFinalize at the end of each backward pass");
  }
  if (phase_ == Phase::kBackward && !iterationSync_) ++iterations_;  // a no_sync iteration without finalize
  // On host memory the stream is idle between iterations but for a join word still in flight (or
  // the buckets of a chorusDdpFinalizeOn). On the device the host does not wait for the GPU here,
  // only for its host stream (the join word).
  if (store_->onDevice()) {
    CHORUS_TRY(store_->synchronizeHost("the join all-reduce"));
  } else {
    CHORUS_TRY(waitLocked("a previous reduction failed"));
  }
  CHORUS_TRY(orderAfterConsumerLocked());
  CHORUS_TRY(resolveStatsLocked(false));
  iterationSync_ = sync_;
  if (opt_.unevenInputs) {
    joinWord_[0] = 1;
    joinWord_[1] = iterationSync_ ? 1 : 0;
    chorusResult_t rc = chorusAllReduce(joinWord_, joinWord_, 2, chorusInt32, chorusSum, comm_, hostStream_);
    if (rc != chorusSuccess) return fail(rc, "the join all-reduce");
  }
  if (iterationSync_ && shouldRebuildLocked()) {
    CHORUS_TRY(resolveStatsLocked(true));  // the rebuild frees the marks
    CHORUS_TRY(rebuildLocked(rebuilt));
  }
  beginIterationLocked();
  phase_ = Phase::kBackward;
  if (iterationSync_ && staticKnown_) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (staticUnused_[i]) CHORUS_TRY(markLocked(i, false));
    }
    marked_ = 0;  // counts the framework's marks: a forward with no backward may start again
  }
  return Status::ok();
}

Status Reducer::markReady(int index, bool used, chorusStream_t producer) {
  CHORUS_TRY(checkIndex(index));
  CHORUS_TRY(store_->checkStream(producer, "producer"));
  std::lock_guard<std::mutex> g(mu_);
  if (!used && !opt_.findUnused && !opt_.staticGraph) {
    return invalidUsage("chorusDdpMarkUnused needs findUnusedParameters or staticGraph in the reducer's config");
  }
  return markLocked(static_cast<size_t>(index), used, producer);
}

Status Reducer::markLocked(size_t i, bool used, chorusStream_t producer) {
  if (phase_ != Phase::kBackward) {
    return invalidUsage("parameter " + paramName(i) +
                        " was marked outside an iteration: call chorusDdpPrepareForBackward before the backward pass");
  }
  if (ready_[i]) {
    return invalidUsage("parameter " + paramName(i) +
                        " was marked twice in one iteration; a gradient is marked once, when it is complete");
  }
  BucketStore& b = *buckets_[bucketOf_[i]];
  if (producer) {
    // The launch waits for what `producer` has enqueued so far; a later mark from the same stream
    // records the same fence again, which covers the earlier one.
    auto f =
        std::find_if(b.fences.begin(), b.fences.end(), [&](const BucketStore::Fence& x) { return x.on == producer; });
    if (f == b.fences.end()) {
      CHORUS_ASSIGN_OR_RETURN(void* fence, store_->fenceCreate());
      b.fences.push_back({producer, fence, false});
      f = b.fences.end() - 1;
    }
    CHORUS_TRY(store_->fenceRecord(f->fence, producer, "producer"));
    f->live = true;
  }
  ready_[i] = 1;
  ++marked_;
  if (used) {
    usedLocal_[i] = 1;
  } else if (!usedLocal_[i]) {
    // Contributes zeros, unless it was used in a no_sync iteration since the last reduction.
    CHORUS_TRY(store_->zero(static_cast<char*>(b.data) + offsetOf_[i] * typeSize(b.type),
                            params_[i].count * typeSize(b.type)));
  }
  if (recording_) readyOrder_.push_back(i);
  if (!iterationSync_) return Status::ok();
  if (--b.pending == 0) launchCompleteLocked();
  return Status::ok();
}

// Launches every complete bucket from the next one in order, so launches follow bucket order
// whatever order the gradients come in.
void Reducer::launchCompleteLocked() {
  if (statsPending_ && nextBucket_ < buckets_.size() && buckets_[nextBucket_]->pending == 0) {
    // The previous iteration's marks are read before they are set again.
    Status s = resolveStatsLocked(true);
    if (!s.isOk() && launchError_.isOk()) launchError_ = s;
  }
  while (nextBucket_ < buckets_.size() && buckets_[nextBucket_]->pending == 0) {
    launchLocked(*buckets_[nextBucket_++]);
  }
}

void Reducer::launchLocked(BucketStore& b) {
  const std::string of = " of bucket " + std::to_string(b.index);
  auto note = [&](chorusResult_t rc, const char* what) {
    if (rc != chorusSuccess && launchError_.isOk()) launchError_ = fail(rc, what + of);
  };
  auto noteStatus = [&](const Status& s, const char* what) {
    if (!s.isOk() && launchError_.isOk()) launchError_ = Status(s.code(), what + of + ": " + s.message());
  };
  for (BucketStore::Fence& f : b.fences) {
    if (f.live) noteStatus(store_->waitFence(f.fence), "waiting for the stream that produced a gradient");
  }
  noteStatus(store_->markTime(b.start, nullptr), "marking the start");
  if (b.count > 0) {
    if (userHook_) {
      const chorusDdpBucket_t view = viewLocked(b);
      note(userHook_(userHookState_, &view, comm_, stream_), "the communication hook");
    } else if (b.wire) {
      noteStatus(store_->convert(&b.compress), "compressing");
      note(chorusAllReduce(b.wire, b.wire, b.count, b.wireType, chorusAvg, comm_, stream_), "the all-reduce");
      noteStatus(store_->convert(&b.decompress), "decompressing");
    } else {
      note(chorusAllReduce(b.data, b.data, b.count, b.type, chorusAvg, comm_, stream_), "the all-reduce");
    }
  }
  noteStatus(store_->markTime(b.end, nullptr), "marking the end");
}

Status Reducer::enqueueUsedMapLocked() {
  std::copy(usedLocal_.begin(), usedLocal_.end(), usedMap_.begin());
  chorusResult_t rc =
      chorusAllReduce(usedMap_.data(), usedMap_.data(), usedMap_.size(), chorusInt32, chorusMax, comm_, hostStream_);
  if (rc != chorusSuccess) return fail(rc, "the all-reduce of the used-parameter map");
  usedMapPending_ = true;
  return Status::ok();
}

void Reducer::afterSyncedIterationLocked() {
  if (usedMapPending_) {
    for (size_t i = 0; i < params_.size(); ++i) usedGlobal_[i] = usedMap_[i] != 0;
    if (opt_.staticGraph && !staticKnown_) {
      for (size_t i = 0; i < params_.size(); ++i) staticUnused_[i] = !usedGlobal_[i];
      staticKnown_ = true;
    }
    usedMapPending_ = false;
  }
  // The buckets' time marks are read later (resolveStatsLocked), without waiting when they can.
  statsPending_ = true;
  if (recording_ && readyOrder_.size() == params_.size()) {
    haveOrder_ = true;
    recording_ = false;
  }
  std::fill(usedLocal_.begin(), usedLocal_.end(), 0);
  ++syncedIterations_;
  ++iterations_;
}

Status Reducer::finalize(chorusStream_t consumer) {
  CHORUS_TRY(store_->checkStream(consumer, "stream"));
  std::lock_guard<std::mutex> g(mu_);
  if (phase_ != Phase::kBackward) {
    return invalidUsage("no iteration in progress: chorusDdpFinalize ends what chorusDdpPrepareForBackward started");
  }
  const int64_t t0 = nowNs();
  if (!iterationSync_) {
    CHORUS_TRY(store_->synchronizeHost("the join all-reduce"));
    phase_ = Phase::kIdle;
    ++iterations_;
    return Status::ok();
  }
  const bool mayBeUnused = opt_.findUnused || (opt_.staticGraph && !staticKnown_);
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (mayBeUnused) {
      CHORUS_TRY(markLocked(i, false));
    } else {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {
    std::string why = opt_.staticGraph ? "; with staticGraph, the parameters used must be those of the first iteration"
                                       : "; set findUnusedParameters if some parameters take no part in the loss";
    return invalidUsage("parameters never marked ready in this iteration: " + listParams(missing) +
                        ". Mark each gradient with chorusDdpMarkReady (or chorusDdpMarkUnused)" + why);
  }
  launchCompleteLocked();
  if (nextBucket_ != buckets_.size())
    return internalError("finalize: buckets remain unlaunched with every gradient ready");
  if (usedMapThisIterationLocked()) CHORUS_TRY(enqueueUsedMapLocked());
  Status s = launchError_;
  if (s.isOk() && consumer) {
    // The consumer waits instead of the host; the time it reaches this point ends the backward
    // pass for the statistics. The used map is host memory: the host waits for it.
    s = store_->markTime(backwardEnd_, consumer);
    if (s.isOk()) s = store_->signal(consumer, "stream");
    if (s.isOk() && usedMapPending_) s = store_->synchronizeHost("the all-reduce of the used-parameter map");
    backwardMarked_ = s.isOk();
    hostWait_ = 0;
  } else {
    // (A failed launch waits too: nothing of the iteration is left running.)
    s = waitLocked("reducing the gradients");
    if (s.isOk()) s = launchError_;
    hostWait_ = (nowNs() - t0) * 1e-9;
  }
  phase_ = Phase::kIdle;
  if (!s.isOk()) return s;
  if (consumer) consumer_ = consumer;
  afterSyncedIterationLocked();
  if (!consumer) CHORUS_TRY(resolveStatsLocked(true));
  return Status::ok();
}

Result<bool> Reducer::paramUsed(int index) {
  CHORUS_TRY(checkIndex(index));
  std::lock_guard<std::mutex> g(mu_);
  return usedGlobal_[index] != 0;
}

// Rank 0 broadcasts the order its gradients became ready in (or that it has none, when it joined
// before finishing an iteration); every rank computes the same buckets from it and carries its
// gradients over.
Status Reducer::rebuildLocked(bool* changed) {
  const size_t n = params_.size();
  std::vector<int64_t> msg(n + 1, 0);
  if (rank_ == 0 && haveOrder_) {
    msg[0] = 1;
    for (size_t k = 0; k < n; ++k) msg[k + 1] = static_cast<int64_t>(readyOrder_[k]);
  }
  chorusResult_t rc = chorusBroadcast(msg.data(), msg.data(), n + 1, chorusInt64, 0, comm_, hostStream_);
  if (rc != chorusSuccess) return fail(rc, "broadcasting rank 0's bucket order");
  CHORUS_TRY(store_->synchronizeHost("broadcasting rank 0's bucket order"));
  rebuilt_ = true;
  if (msg[0] == 0) return Status::ok();
  std::vector<size_t> order(n);
  std::vector<uint8_t> seen(n, 0);
  for (size_t k = 0; k < n; ++k) {
    const int64_t p = msg[k + 1];
    if (p < 0 || static_cast<size_t>(p) >= n || seen[p]) {
      return internalError("rank 0's gradient order is not a permutation of the parameters (entry " +
                           std::to_string(k) + " is " + std::to_string(p) + ")");
    }
    seen[p] = 1;
    order[k] = static_cast<size_t>(p);
  }
  orderedLayout_ = true;
  std::vector<Bucket> next = rebuiltBuckets(params_, order, opt_.firstBucketCapBytes, opt_.bucketCapBytes);
  bool same = next.size() == buckets_.size();
  for (size_t b = 0; same && b < next.size(); ++b) {
    same = next[b].params.size() == buckets_[b]->params.size() &&
           std::equal(next[b].params.begin(), next[b].params.end(), buckets_[b]->params.begin());
  }
  if (same) return Status::ok();
  std::vector<std::unique_ptr<BucketStore>> old = std::move(buckets_);
  const std::vector<size_t> oldBucket = bucketOf_, oldOffset = offsetOf_;
  CHORUS_TRY(layOut(next));
  // The old storage is freed (with `old`) once its gradients are copied over: on the device the
  // copies are on the reducer's stream, after the framework's last use (orderAfterConsumerLocked).
  for (size_t i = 0; i < n; ++i) {
    const size_t ts = typeSize(params_[i].type);
    CHORUS_TRY(store_->copy(static_cast<char*>(buckets_[bucketOf_[i]]->data) + offsetOf_[i] * ts,
                            static_cast<const char*>(old[oldBucket[i]]->data) + oldOffset[i] * ts,
                            params_[i].count * ts));
  }
  if (store_->onDevice()) CHORUS_TRY(waitLocked("copying the gradients into the rebuilt buckets"));
  old.clear();
  CHORUS_TRY(freedTogetherLocked("waiting for every rank to free its old buckets"));
  *changed = true;
  return Status::ok();
}

// Freeing device memory synchronises the whole device (cuda::freeShareable, as cudaFree does).
// Ranks that are threads of one process share it: a rank that went on to launch its next
// collective would leave a rank still freeing waiting for that kernel, which itself waits for the
// freeing rank's kernel, never launched. So no rank leaves before every rank has freed. Ranks
// in other processes wait here too, briefly.
Status Reducer::freedTogetherLocked(const char* what) {
  if (!store_->onDevice()) return Status::ok();
  int32_t word = 1;
  const chorusResult_t rc = chorusAllReduce(&word, &word, 1, chorusInt32, chorusSum, comm_, hostStream_);
  if (rc != chorusSuccess) return fail(rc, what);
  return store_->synchronizeHost(what);
}

Status Reducer::registerHook(chorusDdpCommHook_t fn, void* state) {
  std::lock_guard<std::mutex> g(mu_);
  if (phase_ == Phase::kBackward && marked_ > 0) {
    return invalidUsage("chorusDdpRegisterCommHook during an iteration; call it between iterations");
  }
  userHook_ = fn;
  userHookState_ = fn ? state : nullptr;
  return Status::ok();
}

// Matches the active ranks' iterations with zero gradients until every rank has joined: each
// round all-reduces the join word ({active ranks, synchronising ranks}); when others synchronise,
// it issues what their iteration issues, in the same order (rebuild broadcast, every bucket, the
// used map).
Status Reducer::join(void* const* params) {
  CHORUS_TRY(waitForConsumer());
  std::lock_guard<std::mutex> g(mu_);
  if (!opt_.unevenInputs) {
    return invalidUsage("chorusDdpJoin needs unevenInputs = 1 in the reducer's config on every rank");
  }
  if (phase_ == Phase::kBackward && iterationSync_ && marked_ > 0) {
    return invalidUsage("chorusDdpJoin during an iteration; call chorusDdpFinalize first");
  }
  phase_ = Phase::kIdle;
  CHORUS_TRY(orderAfterConsumerLocked());
  int64_t rounds = 0;
  for (;;) {
    CHORUS_TRY(waitLocked("a previous reduction failed"));
    joinWord_[0] = 0;
    joinWord_[1] = 0;
    chorusResult_t rc = chorusAllReduce(joinWord_, joinWord_, 2, chorusInt32, chorusSum, comm_, hostStream_);
    if (rc != chorusSuccess) return fail(rc, "the join all-reduce");
    CHORUS_TRY(store_->synchronizeHost("the join all-reduce"));
    if (joinWord_[0] == 0) break;
    ++rounds;
    if (joinWord_[1] == 0) continue;  // the others accumulate without synchronising
    iterationSync_ = true;
    bool changed = false;
    if (shouldRebuildLocked()) CHORUS_TRY(rebuildLocked(&changed));
    beginIterationLocked();
    recording_ = false;
    for (auto& b : buckets_) {
      CHORUS_TRY(store_->zero(b->data, b->bytes()));
      b->pending = 0;
    }
    std::fill(usedLocal_.begin(), usedLocal_.end(), 0);
    launchCompleteLocked();
    if (usedMapThisIterationLocked()) CHORUS_TRY(enqueueUsedMapLocked());
    CHORUS_TRY(waitLocked("matching the other ranks' gradient reduction"));
    CHORUS_TRY(launchError_);
    hostWait_ = 0;
    afterSyncedIterationLocked();
    CHORUS_TRY(resolveStatsLocked(true));
  }
  if (!params) return Status::ok();
  // The model of the last rank to join (the highest rank among them) goes to everyone.
  int32_t last = rounds == 0 ? rank_ : -1;
  chorusResult_t rc = chorusAllReduce(&last, &last, 1, chorusInt32, chorusMax, comm_, hostStream_);
  if (rc != chorusSuccess) return fail(rc, "agreeing on the last rank to join");
  CHORUS_TRY(store_->synchronizeHost("agreeing on the last rank to join"));
  if (last < 0 || last >= nranks_) return internalError("no rank joined last");
  return broadcastLocked(params, last);
}

chorusDdpStats_t Reducer::stats() {
  std::lock_guard<std::mutex> g(mu_);
  (void)resolveStatsLocked(true);  // a failed reduction shows at the reducer's next waiting call
  chorusDdpStats_t s{};
  s.nbuckets = static_cast<int>(buckets_.size());
  s.rebuilt = orderedLayout_ ? 1 : 0;
  s.iterations = iterations_;
  s.syncedIterations = syncedIterations_;
  for (auto& b : buckets_) s.largestBucketBytes = std::max(s.largestBucketBytes, b->bytes());
  s.lastCommSeconds = lastComm_;
  s.lastExposedSeconds = lastExposed_;
  s.lastHiddenFraction = lastComm_ > 0 ? 1.0 - lastExposed_ / lastComm_ : 0.0;
  s.totalCommSeconds = totalComm_;
  s.totalExposedSeconds = totalExposed_;
  return s;
}

Result<chorusDdpBucket_t> Reducer::bucket(int index) {
  std::lock_guard<std::mutex> g(mu_);
  if (index < 0 || static_cast<size_t>(index) >= buckets_.size()) {
    return invalidArgument("bucket index " + std::to_string(index) + " is out of range [0, " +
                           std::to_string(buckets_.size()) + ")");
  }
  return viewLocked(*buckets_[index]);
}

chorusDdpBucket_t Reducer::viewLocked(const BucketStore& b) const {
  chorusDdpBucket_t view{};
  view.index = static_cast<int>(b.index);
  view.nbuckets = static_cast<int>(buckets_.size());
  view.data = b.data;
  view.count = b.count;
  view.type = b.type;
  view.nparams = static_cast<int>(b.params.size());
  view.params = b.params.data();
  view.offsets = b.offsets.data();
  return view;
}

}  // namespace chorus::ddp
