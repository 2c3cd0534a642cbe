// The Communicator: one rank's membership in a clique, and the owner of everything it uses
// (configuration, logger, bootstrap, topology and tuner, transports, a share of a progress
// engine) and of its parts: the host path and the device path (operations on each memory kind
// once planned), Health (failure handling) and Diagnostics (flight recorder, dumps). It is what
// the C API holds; it inits, splits, connects and ends; the planner is a function over it
// (planCalls).
//
// Thread-compatible for the calls a user makes on one communicator (as NCCL: one thread issues a
// communicator's calls at a time); its failure handling (Health: abort flag, async error) is
// thread-safe because engine threads use it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "src/algo/coll.h"
#include "src/algo/tuner.h"
#include "src/bootstrap/bootstrap.h"
#include "src/common/config.h"
#include "src/common/log.h"
#include "src/common/types.h"
#include "src/core/device_path.h"
#include "src/core/diagnostics.h"
#include "src/core/engine.h"
#include "src/core/health.h"
#include "src/core/host_path.h"
#include "src/core/memshare.h"
#include "src/core/redops.h"
#include "src/core/work_count.h"
#include "src/topo/topo.h"
#include "src/transport/transport.h"

namespace chorus {

class Communicator;
class Stream;

// One call, as recorded when it is issued (validated already).
struct OpInfo {
  CollType coll;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  chorusDataType_t type;
  chorusRedOp_t op;
  int root;  // root, or peer for send/recv
  Communicator* comm;
  std::shared_ptr<Stream> stream;  // null: the NULL stream
  bool device = false;             // the buffers are device memory (the device path)
  ReduceSpec spec;                 // a reduction's operator, resolved when the call was made
  // A v-collective's blocks (Collective::perRankCounts), copied when the call was made; `count`
  // is this rank's own block.
  std::shared_ptr<const BlockLayout> blocks = nullptr;
  // A device collective's tuner choice, made once when the call was made (chosen): connecting,
  // the one-copy offer and planning read it (DevicePath::choice).
  bool chosen = false;
  Tuner::Choice choice{};
};

// The count every rank's plan and choice read alike: a v-collective's longest block.
inline size_t agreedCount(const OpInfo& op) { return op.blocks ? op.blocks->longest() : op.count; }

// Reads the plan-changing fields of a user config (blocking, timeout) on top of the environment.
// The inits of one clique (chorusCommInitAll), threads of one process: the first to fail ends
// the others' whole init at once, every wait in it, through their abort flags. A rank that fails
// for want of descriptors cannot tell the others over a socket, and they would otherwise wait for
// it until the timeout.
class InitCancel {
 public:
  // A communicator under construction; set at once if the clique is already cancelled.
  void enroll(std::atomic<bool>* abortFlag);
  void leave(std::atomic<bool>* abortFlag);
  void cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // For the clique's bootstrap root in this process, which outlives the clique's init: set with
  // the rest, so the root lets go of its listener and connections at once.
  std::shared_ptr<const std::atomic<bool>> rootStop() const { return rootStop_; }

 private:
  std::mutex mu_;
  std::vector<std::atomic<bool>*> flags_;  // guarded by mu_
  std::atomic<bool> cancelled_{false};
  std::shared_ptr<std::atomic<bool>> rootStop_ = std::make_shared<std::atomic<bool>>(false);
};

struct CommOptions {
  bool blocking = true;
  int64_t timeoutNs = 0;  // 0: from the environment
  std::string name;
  int cudaDevice = -1;            // -1: the current device when CUDA is loaded, else the first device buffer's
  bool deviceFromCurrent = true;  // false: -1 leaves it to the first device buffer
  // The ranks of one clique's (chorusCommInitAll), else the handle's own (chorusCommAbort of a
  // non-blocking init in progress); see InitCancel.
  InitCancel* cancel = nullptr;
};
Result<CommOptions> readUserConfig(const chorusConfig_t* config);

class Communicator {
 public:
  enum class State { kInitializing, kReady, kFailed, kFinalized };

  ~Communicator();

  // Joins the clique of `id`. `engine` may be shared (InitAll, split); null makes a new one.
  static Result<std::unique_ptr<Communicator>> create(const BootstrapId& id, int rank, int nranks,
                                                      const CommOptions& options, std::shared_ptr<Engine> engine);
  // Collective over `parent`: the new communicator of this rank's color (null for NOCOLOR).
  static Result<std::unique_ptr<Communicator>> split(Communicator& parent, int color, int key,
                                                     const CommOptions& options);
  // chorusCommShrink: the parent's ranks but `exclude`, renumbered in order, without a root and
  // without the excluded ranks' help (the survivors meet through their parent listeners). Every
  // survivor must pass the same list; a survivor whose list differs fails, naming both lists.
  // `abortParent`: stop the parent's operations first (they fail), else wait for them to end.
  static Result<std::unique_ptr<Communicator>> shrink(Communicator& parent, const std::vector<int>& exclude,
                                                      bool abortParent, const CommOptions& options);
  // What split and shrink end with: a communicator of `peers` (new listeners, in new rank
  // order) sharing the parent's secret and progress engine.
  static Result<std::unique_ptr<Communicator>> child(Communicator& parent, const CommOptions& options, uint64_t commId,
                                                     int rank, std::vector<SockAddr> peers, UniqueFd listener);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  uint64_t commId() const { return commId_; }
  const Config& config() const { return config_; }
  const Logger& log() const { return log_; }
  State state() const { return state_.load(std::memory_order_acquire); }
  void setState(State s) { state_.store(s, std::memory_order_release); }
  bool blocking() const { return blocking_; }

  // "rank 3 (host h, pid 42)" for messages.
  std::string describePeer(int peer) const;

  // Custom reduction operators.
  RedOpTable& redOps() { return redOps_; }

  // Launch support: connections a set of ops still needs (comm_connect.cc); the planner is
  // planCalls (src/core/call_plan.h), over what follows.
  using ConnNeed = ConnKey;
  const Tuner& tuner() const { return tuner_; }
  // What the algorithms plan from (src/algo/algorithm.h); set once the topology is built.
  AlgoContext algoContext() const;
  // Device ops (OpInfo::device) need device connections (ConnKey::device); a launch holds one kind.
  std::vector<ConnNeed> connectionsNeeded(const std::vector<OpInfo>& ops) const;
  // Runs the three connection phases for the needs of several communicators together.
  static Status connect(std::vector<std::pair<Communicator*, std::vector<ConnNeed>>>& work);
  // CHORUS_CHECK=1: every collective among `ops` (not sends and receives) is compared with the
  // other ranks' (one bootstrap allgather each, in issue order); a difference is an error on
  // every rank that names the ranks and their calls. Blocks until every rank has issued it.
  Status checkAgreement(const std::vector<OpInfo>& ops);
  // What this rank learnt of every rank at init (rank order), its bootstrap, and its registered
  // buffers (chorusCommRegister): for the communicator's parts and the API.
  const std::vector<PeerInfo>& peers() const { return peers_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  MemShare& memShare() { return *memShare_; }
  Engine& engine() { return *engine_; }

  // Work accounting so destroy/finalize wait for what was launched.
  WorkCount& work() { return work_; }
  // Until every launch has finished; then the communicator's error, if any.
  Status waitIdle() {
    work_.waitNone();
    return health_.asyncError();
  }

  // Its failure handling, what its tasks answer to (src/core/health.h): the error that broke it,
  // the abort flag, notices, the watch on its peers.
  Health& health() { return health_; }
  const Health& health() const { return health_; }
  // What it tells about itself: flight recorder, stall warnings, dumps (src/core/diagnostics.h).
  const Diagnostics& diagnostics() const { return diag_; }
  // Everything about its operations on host memory once planned (src/core/host_path.h), and on
  // device memory (src/core/device_path.h).
  HostPath& hostPath() { return host_; }
  DevicePath& devicePath() { return device_; }
  const DevicePath& devicePath() const { return device_; }

  // Ends the communicator's life: stop (abort) or wait (destroy), then free.
  void abort();
  // chorusCommRevoke: fails the communicator without telling peers and waits until no operation
  // of it runs.
  void revoke();

 private:
  // The parts of the communicator: each reads its identity, configuration, topology and
  // transports, and reaches the others through it (a failure through Health::fail).
  friend class DevicePath;
  friend class Diagnostics;
  friend class Health;
  friend class HostPath;
  Communicator() = default;
  // create's work on a communicator already made (and enrolled with its clique's InitCancel).
  Status build(const BootstrapId& id, int rank, int nranks, const CommOptions& options, std::shared_ptr<Engine> engine);
  Status initCommon(std::unique_ptr<Bootstrap> bootstrap, std::shared_ptr<Engine> engine);
  // This rank's machine (hwloc or CHORUS_TOPO_FILE) as text, and the record that goes with it in
  // the init allgather; then, with every rank's record, allgathers the descriptions and builds
  // the rings (one per channel) and trees (comm_topo.cc).
  Status detectMachine(std::string* description, topo::TopoRecord* record);
  Status buildTopology(const std::string& mine, const std::vector<topo::TopoRecord>& records);
  Config config_;
  // First: made before, and gone after, everything that holds its abort flag or reports to it.
  Health health_{*this};
  Logger log_;
  bool blocking_ = true;
  std::string name_;
  int rank_ = -1;
  int nranks_ = 0;
  uint64_t commId_ = 0;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::vector<PeerInfo> peers_;
  std::shared_ptr<Engine> engine_;
  // One of each transport (they own their threads), and the one that reaches each peer.
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<Transport*> peerTransport_;

  // Per channel: the ring order of ranks (src/topo buildRing) and this rank's index in it.
  std::vector<std::vector<int>> rings_;
  std::vector<int> ringPos_;
  std::vector<topo::ChannelPlan> channels_;
  topo::DoubleTree trees_;
  std::optional<Algo> forcedAlgo_;        // CHORUS_ALGO, parsed when the communicator is created
  std::optional<ProtoKind> forcedProto_;  // CHORUS_PROTO, likewise
  Tuner tuner_;                           // which algorithm each call runs (built with the topology)
  std::unique_ptr<MemShare> memShare_;
  bool singleHost_ = false;  // every rank on this rank's host
  bool oneProcess_ = false;  // every rank a thread of this process
  std::mutex planMu_;        // plan() may run on several streams' workers
  // Per peer, whether its point-to-point connections (every channel, both directions) all exist:
  // bit 0 on host memory, bit 1 on device memory; connectionsNeeded skips such peers.
  mutable std::vector<std::atomic<uint8_t>> p2pConnected_;
  // Exchange counters, advanced alike on every rank: they number the bootstrap exchanges of split,
  // shrink and CHORUS_CHECK (operations are numbered on each path's OpCounters).
  struct Sequences {
    uint64_t split = 0;
    uint64_t shrink = 0;
    uint64_t check = 0;  // collectives compared under CHORUS_CHECK
  } seq_;

  RedOpTable redOps_;

  std::atomic<State> state_{State::kInitializing};

  WorkCount work_;
  // Last: made after everything they read, gone before.
  Diagnostics diag_{*this};
  HostPath host_{*this};
  DevicePath device_{*this};
};

}  // namespace chorus

namespace chorus {
// What a chorusComm_t stands for (the value itself is a handle, src/common/handles.h): the
// communicator, and its init when that runs in the background.
struct CommHandle {
  std::unique_ptr<Communicator> impl;
  // Non-blocking init runs here; joined before the handle is used or freed.
  std::thread initThread;
  // Ends this handle's init in progress, every wait in it (chorusCommAbort of a communicator
  // whose non-blocking init runs); an init of a clique (chorusCommInitAll) uses the clique's.
  InitCancel initCancel;
  std::atomic<bool> initDone{false};
  std::mutex initMu;
  // Written once under initMu, before initDone is set; read without the lock once initDone is.
  Status initStatus;
  // API calls inside this handle now (src/api); destroy and abort wait for them to leave.
  std::atomic<int> calls{0};
};
}  // namespace chorus
