// The C API. Every function runs its body through guard() (guard.h).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>

#include "include/chorus/chorus.h"
#include "src/api/buffers.h"
#include "src/api/streams.h"
#include "src/bootstrap/bootstrap.h"
#include "src/common/guard.h"
#include "src/common/handles.h"
#include "src/common/os.h"
#include "src/core/clique.h"
#include "src/core/comm.h"
#include "src/core/group.h"
#include "src/core/init_env.h"
#include "src/core/memshare.h"
#include "src/core/stream.h"
#include "src/device/cuda.h"

namespace chorus {

// How long chorusCommAbort waits for calls in flight on other threads to leave.
constexpr int64_t kAbortWaitNs = 5'000'000'000;

namespace {

HandleTable<CommHandle>& comms() {
  static auto* t = new HandleTable<CommHandle>();  // outlives every handle, also at exit
  return *t;
}

chorusComm_t publish(std::shared_ptr<CommHandle> h) { return handleOf<chorusComm_t>(comms().add(std::move(h))); }

// One API call inside a communicator handle: keeps the handle alive and counted in `calls`
// (destroy and abort wait for them), and gives the communicator.
class CommRef {
 public:
  explicit CommRef(std::shared_ptr<CommHandle> h) : h_(std::move(h)) {
    h_->calls.fetch_add(1, std::memory_order_acq_rel);
  }
  CommRef(CommRef&& o) noexcept : h_(std::move(o.h_)) {}
  CommRef(const CommRef&) = delete;
  CommRef& operator=(const CommRef&) = delete;
  CommRef& operator=(CommRef&&) = delete;
  ~CommRef() {
    if (h_) h_->calls.fetch_sub(1, std::memory_order_acq_rel);
  }
  CommHandle& handle() const { return *h_; }
  Communicator* get() const { return h_->impl.get(); }
  Communicator* operator->() const { return get(); }
  Communicator& operator*() const { return *get(); }

 private:
  std::shared_ptr<CommHandle> h_;
};

const char* const kNotLive = "comm is not a live communicator (destroyed, or never initialised)";

Result<CommRef> lookupComm(chorusComm_t comm) {
  if (!comm) return invalidArgument("comm is NULL");
  std::shared_ptr<CommHandle> h = comms().find(handleValue(comm));
  if (!h) return invalidArgument(kNotLive);
  return CommRef(std::move(h));
}

// The live communicator behind a handle, or why it cannot be used.
Result<CommRef> liveComm(chorusComm_t handle) {
  CHORUS_ASSIGN_OR_RETURN(CommRef ref, lookupComm(handle));
  CommHandle* comm = &ref.handle();
  if (!comm->initDone.load(std::memory_order_acquire)) {
    // Not "in progress": nothing was accepted, and the caller must not think the call was queued.
    return invalidUsage(
        "the communicator is still initialising (non-blocking init); poll "
        "chorusCommGetAsyncError until it stops returning chorusInProgress");
  }
  // Written once, before initDone (runInit, failInits, split and shrink): no lock to read it.
  if (!comm->initStatus.isOk()) {
    return Status(comm->initStatus.code(), "the communicator's init failed: " + comm->initStatus.message());
  }
  return ref;
}

Result<CommRef> usableComm(chorusComm_t comm) {
  // The usual case on one path, without the layers below: live, initialised, neither finalized
  // nor failed. Anything else goes the long way, which says what is wrong.
  if (comm) {
    std::shared_ptr<CommHandle> h = comms().find(handleValue(comm));
    if (h && h->initDone.load(std::memory_order_acquire) && h->initStatus.isOk()) {
      CommRef ref(std::move(h));
      const Communicator* c = ref.get();
      if (c->state() != Communicator::State::kFinalized && c->health().asyncError().isOk()) return ref;
    }
  }
  CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
  if (c->state() == Communicator::State::kFinalized) {
    return invalidUsage("the communicator was finalized; only chorusCommDestroy may follow");
  }
  Status e = c->health().asyncError();
  if (!e.isOk()) return Status(e.code(), "the communicator failed earlier: " + e.message());
  return c;
}

Status checkType(chorusDataType_t t) {
  if (t < 0 || t >= chorusNumTypes) {
    return invalidArgument("datatype " + std::to_string(static_cast<int>(t)) + " is not a chorusDataType_t (0 to " +
                           std::to_string(chorusNumTypes - 1) + ")");
  }
  return Status::ok();
}

Status checkBytes(size_t count, size_t factor, chorusDataType_t t) {
  const size_t ts = typeSize(t);
  if (factor != 0 && count > SIZE_MAX / ts / factor) {
    return invalidArgument("count " + std::to_string(count) + " of " + typeName(t) + " overflows a byte size");
  }
  return Status::ok();
}

Status checkPtr(const void* p, size_t count, const char* name) {
  if (count > 0 && !p) return invalidArgument(std::string(name) + " is NULL but count is " + std::to_string(count));
  return Status::ok();
}

Status checkRank(int r, int n, const char* what) {
  if (r < 0 || r >= n) {
    return invalidArgument(std::string(what) + " " + std::to_string(r) + " is out of range [0, " + std::to_string(n) +
                           ")");
  }
  return Status::ok();
}

// Waits until no API call is inside the handle but the caller's own, at most until `deadlineNs`:
// a call that outlives it keeps the handle alive and frees it when it leaves.
void waitForCalls(const CommHandle& h, int64_t deadlineNs) {
  while (h.calls.load(std::memory_order_acquire) > 1 && nowNs() < deadlineNs) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// A v-collective's blocks from the caller's arrays (counts: one per rank; displs: NULL for blocks
// packed in rank order), checked: this rank's count is its own block's, nothing overflows, and
// blocks this rank receives into do not overlap.
Result<std::shared_ptr<const BlockLayout>> blockLayout(const Collective& what, const size_t* counts,
                                                       const size_t* displs, int n, int me, size_t count,
                                                       chorusDataType_t type) {
  const char* countsName = what.recv.perRank ? "recvcounts" : "sendcounts";
  const char* ownName = what.recv.perRank ? "sendcount" : "recvcount";
  if (!counts) return invalidArgument(std::string(countsName) + " is NULL: it needs one count per rank");
  auto l = std::make_shared<BlockLayout>();
  l->counts.assign(counts, counts + n);
  if (l->counts[me] != count) {
    return invalidArgument(std::string(ownName) + " " + std::to_string(count) + " differs from " + countsName + "[" +
                           std::to_string(me) + "] = " + std::to_string(l->counts[me]) +
                           " (this rank's own block): every rank passes the same " + countsName);
  }
  l->displs.resize(n);
  size_t next = 0;
  for (int r = 0; r < n; ++r) {
    l->displs[r] = displs ? displs[r] : next;
    if (l->counts[r] > SIZE_MAX - l->displs[r]) {
      return invalidArgument("block " + std::to_string(r) + " (displs " + std::to_string(l->displs[r]) + ", count " +
                             std::to_string(l->counts[r]) + ") overflows a size");
    }
    next = l->displs[r] + l->counts[r];
  }
  CHORUS_TRY(checkBytes(l->extent(), 1, type));
  if (what.recv.perRank) {
    std::vector<int> order;
    for (int r = 0; r < n; ++r) {
      if (l->counts[r] > 0) order.push_back(r);
    }
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l->displs[a] < l->displs[b]; });
    for (size_t i = 1; i < order.size(); ++i) {
      const int a = order[i - 1], b = order[i];
      if (l->displs[a] + l->counts[a] > l->displs[b]) {
        return invalidArgument("the blocks of ranks " + std::to_string(a) + " and " + std::to_string(b) +
                               " overlap in recvbuff (displs " + std::to_string(l->displs[a]) + " count " +
                               std::to_string(l->counts[a]) + ", displs " + std::to_string(l->displs[b]) +
                               "): each rank's block needs its own elements");
      }
    }
  }
  return std::shared_ptr<const BlockLayout>(std::move(l));
}

// Validates and submits one operation (a v-collective's blocks: counts and displs, as the caller
// passed them).
Status enqueue(CollType coll, const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t type,
               chorusRedOp_t op, int root, chorusComm_t comm, chorusStream_t stream, const size_t* counts = nullptr,
               const size_t* displs = nullptr) {
  CHORUS_ASSIGN_OR_RETURN(CommRef c, usableComm(comm));
  CHORUS_TRY(checkType(type));
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
  const int n = c->nranks();
  const int me = c->rank();
  if (reduces(coll)) CHORUS_TRY(c->redOps().check(op, type));
  const Collective& what = collective(coll);
  if (what.root == Collective::Root::kRoot) CHORUS_TRY(checkRank(root, n, "root"));
  if (what.root == Collective::Root::kPeer) CHORUS_TRY(checkRank(root, n, "peer"));
  // The buffers this rank uses (a root-only buffer at the root), checked, for the memory-kind
  // check below; a buffer of one block per rank holds count x nranks elements (a v-collective's:
  // as far as its blocks reach).
  std::shared_ptr<const BlockLayout> blocks;
  if (what.perRankCounts) {
    CHORUS_ASSIGN_OR_RETURN(blocks, blockLayout(what, counts, displs, n, me, count, type));
  } else {
    CHORUS_TRY(checkBytes(count, what.send.perRank || what.recv.perRank ? static_cast<size_t>(n) : 1, type));
  }
  BufUse used[2] = {};
  int nused = 0;
  auto use = [&](const BufferUse& u, const void* p, const char* name, const char* rootName) -> Status {
    if (!u.usedBy(me, root)) return Status::ok();
    const char* label = u.at == BufferUse::At::kRoot ? rootName : name;
    const size_t elems = u.perRank && blocks ? blocks->extent() : count;
    CHORUS_TRY(checkPtr(p, elems, label));
    if (elems > 0) used[nused++] = BufUse{p, label};
    return Status::ok();
  };
  CHORUS_TRY(use(what.send, sendbuff, "sendbuff", "sendbuff (at the root)"));
  CHORUS_TRY(use(what.recv, recvbuff, "recvbuff", "recvbuff (at the root)"));
  if (c->config().logLevel >= LogLevel::kInfo) {
    c->log().info(kSubsysColl, "{}: sendbuff {} recvbuff {} count {} datatype {} op {} root {} stream {}",
                  collName(coll), sendbuff, static_cast<void*>(recvbuff), count, typeName(type), static_cast<int>(op),
                  root, static_cast<void*>(stream));
  }
  CHORUS_ASSIGN_OR_RETURN(bool device, onDevice(*c, used, nused, s.get()));
  OpInfo info{coll, sendbuff, recvbuff, count, type, op, root, c.get(), std::move(s), false, ReduceSpec{}};
  info.device = device;
  info.blocks = std::move(blocks);
  if (reduces(coll)) info.spec = c->redOps().spec(op, type, device);
  c->devicePath().choose(info);
  return submitOp(info);
}

Status initRank(chorusComm_t* comm, int nranks, const chorusUniqueId& commId, int rank, chorusConfig_t* config) {
  if (!comm) return invalidArgument("comm (the output pointer) is NULL");
  *comm = nullptr;
  if (nranks < 1) return invalidArgument("nranks must be at least 1, not " + std::to_string(nranks));
  CHORUS_TRY(checkRank(rank, nranks, "rank"));
  CHORUS_ASSIGN_OR_RETURN(BootstrapId id, BootstrapId::fromUniqueId(commId));
  CHORUS_ASSIGN_OR_RETURN(CommOptions options, readUserConfig(config));
  // The device current on the calling thread, taken here: a group's or a non-blocking init runs on
  // a thread of its own, whose current device is always 0 (NCCL records the caller's too).
  if (options.cudaDevice < 0 && options.deviceFromCurrent && cuda::built() && cuda::driverLoaded()) {
    Result<int> d = cuda::currentDevice();
    if (d.isOk()) options.cudaDevice = d.value();
  }
  auto handle = std::make_shared<CommHandle>();
  InitJob job{handle, id, rank, nranks, options, nullptr};
  if (deferInit(job)) {
    *comm = publish(handle);
    return Status::ok();
  }
  if (!options.blocking) {
    handle->initThread = std::thread([job] { (void)runInit(job); });
    *comm = publish(handle);
    return Status(chorusInProgress, "");
  }
  Status s = runInit(job);
  if (s.isOk()) *comm = publish(handle);
  return s;
}

void joinInit(CommHandle& h) {
  if (h.initThread.joinable()) h.initThread.join();
}

}  // namespace
}  // namespace chorus

using namespace chorus;

extern "C" {

chorusResult_t chorusGetVersion(int* version) {
  return guard("chorusGetVersion", [&]() -> Status {
    if (!version) return invalidArgument("version is NULL");
    *version = CHORUS_VERSION_CODE;
    return Status::ok();
  });
}

const char* chorusGetErrorString(chorusResult_t result) {
  switch (result) {
    case chorusSuccess:
      return "no error";
    case chorusUnhandledCudaError:
      return "unhandled cuda error (chorusGetLastError says which call failed)";
    case chorusSystemError:
      return "unhandled system error (chorusGetLastError says which call failed and why)";
    case chorusInternalError:
      return "internal error - please report this issue to the Chorus developers";
    case chorusInvalidArgument:
      return "invalid argument (chorusGetLastError says which one and why)";
    case chorusInvalidUsage:
      return "invalid usage (chorusGetLastError says what and why)";
    case chorusRemoteError:
      return "remote process exited or there was a network error";
    case chorusInProgress:
      return "Chorus operation in progress";
    default:
      return "unknown result code";
  }
}

const char* chorusGetLastError(chorusComm_t comm) {
  (void)comm;
  return lastError().c_str();
}

chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId) {
  return guard("chorusGetUniqueId", [&]() -> Status {
    if (!uniqueId) return invalidArgument("uniqueId is NULL");
    CHORUS_ASSIGN_OR_RETURN(Config cfg, Config::fromEnv());
    CHORUS_ASSIGN_OR_RETURN(BootstrapId id, makeBootstrapId(cfg.socketIfname, cfg.initTimeout(), cfg.initWarnNs(),
                                                            Logger(cfg.logLevel, cfg.logSubsys, -1)));
    *uniqueId = id.toUniqueId();
    return Status::ok();
  });
}

chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank) {
  return guard("chorusCommInitRank", [&] { return initRank(comm, nranks, commId, rank, nullptr); });
}

chorusResult_t chorusCommInitRankConfig(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank,
                                        chorusConfig_t* config) {
  return guard("chorusCommInitRankConfig", [&] { return initRank(comm, nranks, commId, rank, config); });
}

chorusResult_t chorusCommInitRankScalable(chorusComm_t* newcomm, int nranks, int myrank, int nId,
                                          chorusUniqueId* commIds, chorusConfig_t* config) {
  return guard("chorusCommInitRankScalable", [&]() -> Status {
    if (nId < 1) return invalidArgument("nId is " + std::to_string(nId) + "; pass at least one id");
    if (!commIds) return invalidArgument("commIds is NULL");
    std::vector<BootstrapId> others;
    for (int i = 1; i < nId; ++i) {
      auto id = BootstrapId::fromUniqueId(commIds[i]);
      if (!id.isOk())
        return invalidArgument("commIds[" + std::to_string(i) + "] is not an id: " + id.status().message());
      others.push_back(id.value());
    }
    // The first id carries the bootstrap; no rank joins the others, so the roots this process runs
    // for them end now instead of waiting out the init timeout.
    const auto first = BootstrapId::fromUniqueId(commIds[0]);
    for (const BootstrapId& id : others) {
      if (!first.isOk() || id.cliqueId != first.value().cliqueId) stopLocalRoot(id);
    }
    return initRank(newcomm, nranks, commIds[0], myrank, config);
  });
}

chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm, chorusConfig_t* config) {
  return guard("chorusCommInitFromEnv", [&]() -> Status {
    if (!comm) return invalidArgument("comm (the output pointer) is NULL");
    CHORUS_ASSIGN_OR_RETURN(EnvLaunch l, readLaunchEnv());
    if (l.rank >= l.nranks) {
      return invalidArgument("the launcher's rank " + std::to_string(l.rank) + " is not below its size " +
                             std::to_string(l.nranks));
    }
    if (l.alone) {
      // Started by hand: one rank with a root of its own, never on a CHORUS_COMM_ID a job may use.
      CHORUS_ASSIGN_OR_RETURN(Config cfg, Config::fromEnv());
      CHORUS_ASSIGN_OR_RETURN(BootstrapId id, makePrivateBootstrapId(cfg));
      return initRank(comm, 1, id.toUniqueId(), 0, config);
    }
    CHORUS_ASSIGN_OR_RETURN(BootstrapId id, fixedBootstrapId(l.rootHostPort));
    // The GPU from the local rank, unless the config names one or the program chose the current
    // device; only in a program that has loaded CUDA (a host-only program never initialises it).
    chorusConfig_t withDevice = CHORUS_CONFIG_INITIALIZER;
    if (config) std::memcpy(&withDevice, config, std::min(sizeof(withDevice), config->size));
    const bool named = config && config->size >= offsetof(chorusConfig_t, cudaDevice) + sizeof(int) &&
                       config->cudaDevice != CHORUS_CONFIG_UNDEF_INT;
    if (!named && l.localRank >= 0 && cuda::built() && cuda::driverLoaded()) {
      CHORUS_ASSIGN_OR_RETURN(int visible, cuda::deviceCount());
      if (visible > 0) {
        CHORUS_ASSIGN_OR_RETURN(const bool chosen, cuda::currentDeviceChosen());
        if (chosen) return initRank(comm, l.nranks, id.toUniqueId(), l.rank, config);
      }
      if (const int d = deviceForLocalRank(l.localRank, visible); d >= 0) {
        withDevice.size = sizeof(withDevice);
        withDevice.cudaDevice = d;
        return initRank(comm, l.nranks, id.toUniqueId(), l.rank, &withDevice);
      }
    }
    return initRank(comm, l.nranks, id.toUniqueId(), l.rank, config);
  });
}

chorusResult_t chorusCommInitAll(chorusComm_t* comms, int ndev, const int* devlist) {
  return guard("chorusCommInitAll", [&]() -> Status {
    if (!comms) return invalidArgument("comms is NULL");
    if (ndev < 1) return invalidArgument("ndev must be at least 1, not " + std::to_string(ndev));
    for (int r = 0; devlist && r < ndev; ++r) {
      if (devlist[r] < 0) {
        return invalidArgument("devlist[" + std::to_string(r) + "] is " + std::to_string(devlist[r]) +
                               ": a CUDA device number (0 or more), or pass devlist NULL for host buffers");
      }
    }
    if (inGroup()) return invalidUsage("chorusCommInitAll cannot be called inside a group");
    std::vector<std::shared_ptr<CommHandle>> handles;
    Status s = initClique(&handles, ndev, devlist);
    if (!s.isOk()) {
      for (int r = 0; r < ndev; ++r) comms[r] = nullptr;
      return s;
    }
    for (int r = 0; r < ndev; ++r) comms[r] = publish(handles[r]);
    return Status::ok();
  });
}

chorusResult_t chorusCommFinalize(chorusComm_t comm) {
  return guard("chorusCommFinalize", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    if (c->state() == Communicator::State::kFinalized) {
      return invalidArgument("the communicator was finalized already; only chorusCommDestroy may follow");
    }
    c->setState(Communicator::State::kFinalized);
    Status s = c->waitIdle();
    // Kernels already enqueued on the caller's streams are part of what finalize waits for, as
    // NCCL's synchronises the stream its launches join.
    if (c->devicePath().deviceComm()) {
      Status d = DevicePath::wait({c.get()}, true);
      if (s.isOk()) s = d;
    }
    return s;
  });
}

chorusResult_t chorusCommDestroy(chorusComm_t comm) {
  return guard("chorusCommDestroy", [&]() -> Status {
    if (!comm) return Status::ok();  // as NCCL: destroying NULL is a no-op
    std::shared_ptr<CommHandle> h = comms().take(handleValue(comm));
    if (!h) return invalidArgument("comm is not a live communicator (destroyed twice, or never initialised)");
    CommRef self(h);
    joinInit(*h);
    if (h->impl) {
      (void)h->impl->waitIdle();
      // A call on another thread (a misuse, but not a crash): it ends by itself, by completing or
      // at the timeout.
      waitForCalls(*h, nowNs() + h->impl->config().timeoutNs);
    }
    return Status::ok();
  });
}

chorusResult_t chorusCommAbort(chorusComm_t comm) {
  return guard("chorusCommAbort", [&]() -> Status {
    if (!comm) return Status::ok();
    // Unpublished first: a call that starts from now on is refused, and calls in flight keep
    // the handle alive (the watchdog pattern: abort from a monitor thread while a collective
    // blocks).
    std::shared_ptr<CommHandle> h = comms().take(handleValue(comm));
    if (!h) return invalidArgument("comm is not a live communicator (destroyed twice, or never initialised)");
    CommRef self(h);
    {
      std::lock_guard<std::mutex> g(h->initMu);
      if (h->impl) h->impl->abort();
    }
    // An init still running (non-blocking) stops in its current wait instead of at its timeout.
    h->initCancel.cancel();
    joinInit(*h);
    if (h->impl) {
      h->impl->abort();
      (void)h->impl->waitIdle();
      // Calls in flight saw the abort in their waits and are on their way out; one that is not
      // gone within the bound frees the communicator itself when it leaves.
      waitForCalls(*h, nowNs() + kAbortWaitNs);
    }
    return Status::ok();
  });
}

chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t* newcomm, chorusConfig_t* config) {
  return guard("chorusCommSplit", [&]() -> Status {
    if (!newcomm) return invalidArgument("newcomm is NULL");
    *newcomm = nullptr;
    CHORUS_ASSIGN_OR_RETURN(CommRef parent, usableComm(comm));
    CHORUS_ASSIGN_OR_RETURN(CommOptions options, readUserConfig(config));
    if (!config) options.blocking = parent->blocking();
    if (color < 0 && color != CHORUS_SPLIT_NOCOLOR) {
      return invalidArgument("color must be non-negative or CHORUS_SPLIT_NOCOLOR, not " + std::to_string(color));
    }
    if (inGroup()) {
      // As NCCL: a split inside a group runs at the outermost chorusGroupEnd, at once with the
      // group's other inits and splits, so that one thread may split the communicators of several
      // ranks. The handle is published now (in progress until then); NOCOLOR's stays NULL.
      auto h = std::make_shared<CommHandle>();
      auto keep = std::make_shared<CommRef>(std::move(parent));
      InitJob job{h, BootstrapId(), 0, 0, options, nullptr};
      job.make = [keep, color, key, options] { return Communicator::split(**keep, color, key, options); };
      deferInit(job);
      if (color != CHORUS_SPLIT_NOCOLOR) *newcomm = publish(std::move(h));
      return Status::ok();
    }
    auto r = Communicator::split(*parent, color, key, options);
    if (!r.isOk()) return r.status();
    std::unique_ptr<Communicator> child = r.take();
    if (!child) return Status::ok();
    auto h = std::make_shared<CommHandle>();
    h->impl = std::move(child);
    h->initStatus = Status::ok();
    h->initDone.store(true, std::memory_order_release);
    *newcomm = publish(std::move(h));
    return Status::ok();
  });
}

chorusResult_t chorusCommShrink(chorusComm_t comm, int* excludeRanksList, int excludeRanksCount, chorusComm_t* newcomm,
                                chorusConfig_t* config, int shrinkFlags) {
  return guard("chorusCommShrink", [&]() -> Status {
    if (!newcomm) return invalidArgument("newcomm is NULL");
    *newcomm = nullptr;
    // The parent may have failed (a peer died): that is what shrinking is for.
    CHORUS_ASSIGN_OR_RETURN(CommRef parent, liveComm(comm));
    if (parent->state() == Communicator::State::kFinalized) {
      return invalidUsage("the communicator was finalized; only chorusCommDestroy may follow");
    }
    if (excludeRanksCount < 0) {
      return invalidArgument("excludeRanksCount is " + std::to_string(excludeRanksCount) + "; it cannot be negative");
    }
    if (excludeRanksCount > 0 && !excludeRanksList) {
      return invalidArgument("excludeRanksList is NULL but excludeRanksCount is " + std::to_string(excludeRanksCount));
    }
    if (excludeRanksCount >= parent->nranks()) {
      return invalidArgument("excludeRanksCount " + std::to_string(excludeRanksCount) + " leaves none of the " +
                             std::to_string(parent->nranks()) + " ranks");
    }
    if (shrinkFlags != CHORUS_SHRINK_DEFAULT && shrinkFlags != CHORUS_SHRINK_ABORT) {
      return invalidArgument("shrinkFlags is " + std::to_string(shrinkFlags) +
                             "; pass CHORUS_SHRINK_DEFAULT or CHORUS_SHRINK_ABORT");
    }
    CHORUS_ASSIGN_OR_RETURN(CommOptions options, readUserConfig(config));
    if (!config) options.blocking = parent->blocking();
    std::vector<int> exclude(excludeRanksList, excludeRanksList + excludeRanksCount);
    auto r = Communicator::shrink(*parent, exclude, shrinkFlags == CHORUS_SHRINK_ABORT, options);
    if (!r.isOk()) return r.status();
    auto h = std::make_shared<CommHandle>();
    h->impl = r.take();
    h->initStatus = Status::ok();
    h->initDone.store(true, std::memory_order_release);
    *newcomm = publish(std::move(h));
    return Status::ok();
  });
}

chorusResult_t chorusCommRevoke(chorusComm_t comm, int revokeFlags) {
  return guard("chorusCommRevoke", [&]() -> Status {
    if (revokeFlags != CHORUS_REVOKE_DEFAULT) {
      return invalidArgument("revokeFlags is " + std::to_string(revokeFlags) + "; pass CHORUS_REVOKE_DEFAULT (0)");
    }
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    if (c->state() == Communicator::State::kFinalized) {
      return invalidUsage("the communicator was finalized; only chorusCommDestroy may follow");
    }
    c->revoke();
    return Status::ok();
  });
}

chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t* asyncError) {
  return guard("chorusCommGetAsyncError", [&]() -> Status {
    if (!asyncError) return invalidArgument("asyncError is NULL");
    CHORUS_ASSIGN_OR_RETURN(CommRef ref, lookupComm(comm));
    const CommHandle* h = &ref.handle();
    if (!h->initDone.load(std::memory_order_acquire)) {
      *asyncError = chorusInProgress;
      return Status::ok();
    }
    std::lock_guard<std::mutex> g(ref.handle().initMu);
    if (!h->initStatus.isOk()) {
      *asyncError = h->initStatus.code();
      lastError() = "init failed: " + userMessage(h->initStatus.message());
      return Status::ok();
    }
    Status e = ref->health().asyncError();
    *asyncError = e.code();
    if (!e.isOk()) lastError() = userMessage(e.message());
    return Status::ok();
  });
}

chorusResult_t chorusCommDumpState(chorusComm_t comm, const char* path) {
  return guard("chorusCommDumpState", [&]() -> Status {
    // A failed communicator can still be dumped: that is when a dump is wanted most.
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    const std::string text = c->diagnostics().state();
    if (!path) {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
      return Status::ok();
    }
    FILE* f = std::fopen(path, "a");
    if (!f)
      return systemError(std::string("cannot open ") + path + " to append the state dump: " + std::strerror(errno));
    const bool ok = std::fputs(text.c_str(), f) >= 0;
    if (std::fclose(f) != 0 || !ok) return systemError(std::string("cannot write the state dump to ") + path);
    return Status::ok();
  });
}

chorusResult_t chorusCommCount(const chorusComm_t comm, int* count) {
  return guard("chorusCommCount", [&]() -> Status {
    if (!count) return invalidArgument("count is NULL");
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    *count = c->nranks();
    return Status::ok();
  });
}

chorusResult_t chorusCommCuDevice(const chorusComm_t comm, int* device) {
  return guard("chorusCommCuDevice", [&]() -> Status {
    if (!device) return invalidArgument("device is NULL");
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    *device = c->devicePath().cudaDevice();
    return Status::ok();
  });
}

chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank) {
  return guard("chorusCommUserRank", [&]() -> Status {
    if (!rank) return invalidArgument("rank is NULL");
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    *rank = c->rank();
    return Status::ok();
  });
}

chorusResult_t chorusMemAlloc(void** ptr, size_t size) {
  return guard("chorusMemAlloc", [&]() -> Status {
    if (!ptr) return invalidArgument("ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return invalidArgument("size is 0");
    CHORUS_ASSIGN_OR_RETURN(*ptr, sharedAlloc(size));
    return Status::ok();
  });
}

chorusResult_t chorusMemFree(void* ptr) {
  return guard("chorusMemFree", [&]() -> Status {
    if (!ptr) return Status::ok();
    return sharedFree(ptr);
  });
}

chorusResult_t chorusCommRegister(const chorusComm_t comm, void* buff, size_t size, void** handle) {
  return guard("chorusCommRegister", [&]() -> Status {
    if (!handle) return invalidArgument("handle (the output pointer) is NULL");
    *handle = nullptr;
    if (!buff) return invalidArgument("buff is NULL");
    if (size == 0) return invalidArgument("size is 0");
    if (reinterpret_cast<uintptr_t>(buff) + size < reinterpret_cast<uintptr_t>(buff)) {
      return invalidArgument("buff + size wraps around the address space");
    }
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    CHORUS_ASSIGN_OR_RETURN(*handle, c->memShare().registerRange(buff, size));
    return Status::ok();
  });
}

chorusResult_t chorusCommDeregister(const chorusComm_t comm, void* handle) {
  return guard("chorusCommDeregister", [&]() -> Status {
    if (!handle) return invalidArgument("handle is NULL");
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    return c->memShare().deregister(handle);
  });
}

chorusResult_t chorusCommWindowRegister(chorusComm_t comm, void* buff, size_t size, chorusWindow_t* win, int winFlags) {
  return guard("chorusCommWindowRegister", [&]() -> Status {
    if (!win) return invalidArgument("win (the output pointer) is NULL");
    *win = nullptr;
    if (winFlags != CHORUS_WIN_DEFAULT && winFlags != CHORUS_WIN_COLL_SYMMETRIC) {
      return invalidArgument("winFlags is " + std::to_string(winFlags) +
                             "; pass CHORUS_WIN_DEFAULT or CHORUS_WIN_COLL_SYMMETRIC");
    }
    if (!buff) return invalidArgument("buff is NULL");
    if (size == 0) return invalidArgument("size is 0");
    if (reinterpret_cast<uintptr_t>(buff) + size < reinterpret_cast<uintptr_t>(buff)) {
      return invalidArgument("buff + size wraps around the address space");
    }
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    CHORUS_ASSIGN_OR_RETURN(void* handle, c->memShare().registerRange(buff, size));
    *win = static_cast<chorusWindow_t>(handle);
    return Status::ok();
  });
}

chorusResult_t chorusCommWindowDeregister(chorusComm_t comm, chorusWindow_t win) {
  return guard("chorusCommWindowDeregister", [&]() -> Status {
    if (!win) return invalidArgument("win is NULL");
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    return c->memShare().deregister(win);
  });
}

chorusResult_t chorusRedOpCreatePreMulSum(chorusRedOp_t* op, void* scalar, chorusDataType_t datatype,
                                          chorusScalarResidence_t residence, chorusComm_t comm) {
  return guard("chorusRedOpCreatePreMulSum", [&]() -> Status {
    if (!op) return invalidArgument("op is NULL");
    if (!scalar) return invalidArgument("scalar is NULL");
    CHORUS_TRY(checkType(datatype));
    if (residence != chorusScalarDevice && residence != chorusScalarHostImmediate) {
      return invalidArgument("residence must be chorusScalarDevice or chorusScalarHostImmediate");
    }
    CHORUS_ASSIGN_OR_RETURN(CommRef c, usableComm(comm));
    CHORUS_ASSIGN_OR_RETURN(*op, c->redOps().createPreMulSum(scalar, datatype, residence));
    return Status::ok();
  });
}

chorusResult_t chorusRedOpDestroy(chorusRedOp_t op, chorusComm_t comm) {
  return guard("chorusRedOpDestroy", [&]() -> Status {
    CHORUS_ASSIGN_OR_RETURN(CommRef c, liveComm(comm));
    return c->redOps().destroy(op);
  });
}

chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                            chorusRedOp_t op, int root, chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusReduce",
               [&] { return enqueue(CollType::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream); });
}

chorusResult_t chorusBcast(void* buff, size_t count, chorusDataType_t datatype, int root, chorusComm_t comm,
                           chorusStream_t stream) {
  return guard("chorusBcast", [&] {
    return enqueue(CollType::kBroadcast, buff, buff, count, datatype, chorusSum, root, comm, stream);
  });
}

chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                               chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusBroadcast", [&] {
    return enqueue(CollType::kBroadcast, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream);
  });
}

chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                               chorusRedOp_t op, chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusAllReduce",
               [&] { return enqueue(CollType::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream); });
}

chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, chorusDataType_t datatype,
                                   chorusRedOp_t op, chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusReduceScatter", [&] {
    return enqueue(CollType::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
  });
}

chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, chorusDataType_t datatype,
                               chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusAllGather", [&] {
    return enqueue(CollType::kAllGather, sendbuff, recvbuff, sendcount, datatype, chorusSum, 0, comm, stream);
  });
}

chorusResult_t chorusAlltoAll(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                              chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusAlltoAll", [&] {
    return enqueue(CollType::kAlltoAll, sendbuff, recvbuff, count, datatype, chorusSum, 0, comm, stream);
  });
}

chorusResult_t chorusAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                                const size_t* displs, chorusDataType_t datatype, chorusComm_t comm,
                                chorusStream_t stream) {
  return guard("chorusAllGatherV", [&] {
    return enqueue(CollType::kAllGatherV, sendbuff, recvbuff, sendcount, datatype, chorusSum, 0, comm, stream,
                   recvcounts, displs);
  });
}

chorusResult_t chorusReduceScatterV(const void* sendbuff, const size_t* sendcounts, const size_t* displs,
                                    void* recvbuff, size_t recvcount, chorusDataType_t datatype, chorusRedOp_t op,
                                    chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusReduceScatterV", [&] {
    return enqueue(CollType::kReduceScatterV, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream, sendcounts,
                   displs);
  });
}

chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                            chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusGather", [&] {
    return enqueue(CollType::kGather, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream);
  });
}

chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                             chorusComm_t comm, chorusStream_t stream) {
  return guard("chorusScatter", [&] {
    return enqueue(CollType::kScatter, sendbuff, recvbuff, count, datatype, chorusSum, root, comm, stream);
  });
}

chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer, chorusComm_t comm,
                          chorusStream_t stream) {
  return guard("chorusSend", [&] {
    return enqueue(CollType::kSend, sendbuff, nullptr, count, datatype, chorusSum, peer, comm, stream);
  });
}

chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer, chorusComm_t comm,
                          chorusStream_t stream) {
  return guard("chorusRecv", [&] {
    return enqueue(CollType::kRecv, nullptr, recvbuff, count, datatype, chorusSum, peer, comm, stream);
  });
}

chorusResult_t chorusRecvAny(void* recvbuff, size_t count, chorusDataType_t datatype, int* source, chorusComm_t comm,
                             chorusStream_t stream) {
  return guard("chorusRecvAny", [&]() -> Status {
    if (!source) return invalidArgument("source (where the sender's rank is written) is NULL");
    CHORUS_ASSIGN_OR_RETURN(CommRef c, usableComm(comm));
    CHORUS_TRY(checkType(datatype));
    CHORUS_TRY(checkBytes(count, 1, datatype));
    CHORUS_TRY(checkPtr(recvbuff, count, "recvbuff"));
    CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Stream> s, lookupStream(stream));
    if (c->nranks() == 1) return invalidUsage("chorusRecvAny on a communicator of one rank: no other rank can send");
    const BufUse buf{recvbuff, "recvbuff"};
    CHORUS_ASSIGN_OR_RETURN(bool device, onDevice(*c, &buf, count > 0 ? 1 : 0, s.get()));
    if (device || (s && s->isCuda())) {
      return invalidUsage(
          "chorusRecvAny takes host buffers on a host stream: its source is chosen by a host thread "
          "when it runs; receive device buffers with chorusRecv from a known peer");
    }
    if (inGroup()) {
      return invalidUsage(
          "chorusRecvAny cannot be part of a group: its source is chosen when it runs, and a group plans every "
          "receive before any runs; call it outside the group, or chorusRecv with the peer inside");
    }
    if (c->config().logLevel >= LogLevel::kInfo) {
      c->log().info(kSubsysColl, "RecvAny: recvbuff {} count {} datatype {} stream {}", recvbuff, count,
                    typeName(datatype), static_cast<void*>(stream));
    }
    // Chooses the source, then receives from it as chorusRecv does, on the calling thread.
    auto run = [comm = c.get(), recvbuff, count, datatype, source]() -> Status {
      CHORUS_ASSIGN_OR_RETURN(int peer, comm->hostPath().firstSender());
      CHORUS_TRY(submitOp(OpInfo{CollType::kRecv, nullptr, recvbuff, count, datatype, chorusSum, peer, comm, nullptr,
                                 false, ReduceSpec{}}));
      *source = peer;
      return Status::ok();
    };
    if (!s) return run();
    s->enqueue(run);
    return Status::ok();
  });
}

chorusResult_t chorusGroupStart(void) {
  return guard("chorusGroupStart", []() -> Status {
    groupStart();
    return Status::ok();
  });
}

chorusResult_t chorusGroupEnd(void) {
  return guard("chorusGroupEnd", [] { return groupEnd(); });
}

chorusResult_t chorusGroupSimulateEnd(chorusSimInfo_t* simInfo) {
  return guard("chorusGroupSimulateEnd", [&]() -> Status {
    if (!simInfo) return invalidArgument("simInfo is NULL");
    if (simInfo->magic != CHORUS_SIM_INFO_MAGIC || simInfo->size < sizeof(chorusSimInfo_t)) {
      return invalidArgument("simInfo was not set from CHORUS_SIM_INFO_INITIALIZER (magic or size wrong)");
    }
    CHORUS_ASSIGN_OR_RETURN(const double us, groupSimulateEnd());
    simInfo->estimatedTime = static_cast<float>(us);
    return Status::ok();
  });
}

void chorusResetDebugInit(void) { resetLogSink(); }

}  // extern "C"
