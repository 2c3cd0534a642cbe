#include "src/core/comm.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "src/core/device_comm.h"
#include "src/device/cuda.h"

namespace chorus {

Result<CommOptions> readUserConfig(const chorusConfig_t* config) {
  CommOptions o;
  if (!config) return o;
  if (config->magic != CHORUS_CONFIG_MAGIC) {
    return invalidArgument("config was not initialised with CHORUS_CONFIG_INITIALIZER (bad magic)");
  }
  if (config->size < offsetof(chorusConfig_t, timeoutSeconds)) {
    return invalidArgument("config->size " + std::to_string(config->size) + " is smaller than any chorusConfig_t");
  }
  if (config->blocking != CHORUS_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1) {
      return invalidArgument("config->blocking must be 0 or 1, not " + std::to_string(config->blocking));
    }
    o.blocking = config->blocking == 1;
  }
  if (config->size >= offsetof(chorusConfig_t, timeoutSeconds) + sizeof(int) &&
      config->timeoutSeconds != CHORUS_CONFIG_UNDEF_INT) {
    if (config->timeoutSeconds <= 0) {
      return invalidArgument("config->timeoutSeconds must be positive, not " + std::to_string(config->timeoutSeconds));
    }
    o.timeoutNs = int64_t(config->timeoutSeconds) * 1000000000;
  }
  if (config->commName) o.name = config->commName;
  if (config->size >= offsetof(chorusConfig_t, cudaDevice) + sizeof(int) &&
      config->cudaDevice != CHORUS_CONFIG_UNDEF_INT) {
    if (config->cudaDevice < 0) {
      return invalidArgument("config->cudaDevice must be a CUDA device number (0 or more), not " +
                             std::to_string(config->cudaDevice));
    }
    o.cudaDevice = config->cudaDevice;
  }
  return o;
}

namespace {

Status cpuIsaRule(const char* name, const std::string& v) {
  auto isa = parseCpuIsa(v);
  if (!isa) return invalidArgument(std::string(name) + "=" + v + " is not one of scalar, avx2, avx512");
  if (!cpuRuns(*isa)) {
    return invalidArgument(std::string(name) + "=" + v + " but this CPU cannot run that instruction set");
  }
  return Status::ok();
}

const TextSetting kCpuIsa{"CHORUS_CPU_ISA", SettingScope::kRank, "the host reductions' instruction set", cpuIsaRule,
                          true};

// Everything each rank tells the others at init.
struct InitRecord {
  PeerInfo peer;
  uint32_t version = 0;
  int32_t gpuSms = 0;  // this rank's GPU (0: none bound), which decides device channels
  uint64_t gpuUuid[2] = {0, 0};
  // A digest of the settings that change the plan (EnvSnapshot::planText); where two differ, the
  // ranks exchange the texts to say which setting and how.
  uint64_t planDigest = 0;
  topo::TopoRecord topo;  // where this rank runs; its machine's description follows (comm_topo.cc)
};

// A rank's plan settings as text, exchanged only when the digests differ.
struct PlanText {
  char text[2048] = {0};
};

}  // namespace

Communicator::~Communicator() {
  // A finished send over a socket may still sit in its FIFO: let the proxy put it on the wire
  // before it stops (unless aborted, or the connection failed, or the timeout passes).
  host_.flushSends();
  device_.shutdown();
  if (bootstrap_) bootstrap_->setNoticeHandler(nullptr);
  diag_.stop();
  // Order matters: transports' threads move bytes of connections; the connections' FIFOs belong
  // to lanes that are all done by now; the bootstrap serves descriptors for connections and memory.
  transports_.clear();
  device_.dropConnections();
  host_.dropConnections();
  memShare_.reset();
  bootstrap_.reset();
}

Result<std::unique_ptr<Communicator>> Communicator::create(const BootstrapId& id, int rank, int nranks,
                                                           const CommOptions& options, std::shared_ptr<Engine> engine) {
  std::unique_ptr<Communicator> c(new Communicator());
  if (options.cancel) options.cancel->enroll(c->health_.abortFlag());
  Status s = c->build(id, rank, nranks, options, std::move(engine));
  if (options.cancel) options.cancel->leave(c->health_.abortFlag());
  if (!s.isOk()) return s;
  return c;
}

Status Communicator::build(const BootstrapId& id, int rank, int nranks, const CommOptions& options,
                           std::shared_ptr<Engine> engine) {
  CHORUS_ASSIGN_OR_RETURN(config_, Config::fromEnv());
  CHORUS_ASSIGN_OR_RETURN(forcedAlgo_, parseAlgoSetting(config_.algo));
  CHORUS_ASSIGN_OR_RETURN(forcedProto_, parseProtoSetting(config_.proto));
  if (options.timeoutNs > 0) config_.timeoutNs = options.timeoutNs;
  blocking_ = options.blocking;
  name_ = options.name;
  CHORUS_TRY(device_.chooseCudaDevice(options));
  rank_ = rank;
  nranks_ = nranks;
  if (forcedAlgo_ && nranks > algorithm(*forcedAlgo_).maxRanks()) {
    return invalidArgument("CHORUS_ALGO=" + config_.algo + " runs on at most " +
                           std::to_string(algorithm(*forcedAlgo_).maxRanks()) + " ranks and this communicator has " +
                           std::to_string(nranks) + ": unset CHORUS_ALGO, or choose ring or tree");
  }
  if (forcedAlgo_ && algorithm(*forcedAlgo_).taken() == Algorithm::Taken::kIfAgreed && config_.oneCopy == 0) {
    return invalidArgument("CHORUS_ALGO=" + config_.algo +
                           " asks for the one-copy algorithm and CHORUS_ONECOPY=0 forbids it: unset one of them");
  }
  log_ = Logger(config_.logLevel, config_.logSubsys, rank);
  diag_.logEnvironment();
  commId_ = id.cliqueId;
  const Bootstrap::JoinTiming timing{config_.initTimeout(), config_.initWarnNs()};
  CHORUS_ASSIGN_OR_RETURN(auto boot, Bootstrap::join(id, rank, nranks, config_.socketIfname, config_.timeoutNs, timing,
                                                     log_, health_.abortFlag()));
  Status s = initCommon(std::move(boot), std::move(engine));
  // The others may be waiting for this rank inside init: tell them why it stops, unless it stops
  // because of what they told it, or its clique stopped it (the others are stopped too).
  if (!s.isOk() && bootstrap_ && nranks_ > 1 && bootstrap_->earlyNotice().empty() && !health_.failed() &&
      !(options.cancel && options.cancel->cancelled())) {
    health_.tellFailure(s);
  }
  return s;
}

void InitCancel::enroll(std::atomic<bool>* abortFlag) {
  std::lock_guard<std::mutex> g(mu_);
  flags_.push_back(abortFlag);
  if (cancelled()) abortFlag->store(true, std::memory_order_release);
}

void InitCancel::leave(std::atomic<bool>* abortFlag) {
  std::lock_guard<std::mutex> g(mu_);
  flags_.erase(std::remove(flags_.begin(), flags_.end(), abortFlag), flags_.end());
}

void InitCancel::cancel() {
  std::lock_guard<std::mutex> g(mu_);
  cancelled_.store(true, std::memory_order_release);
  rootStop_->store(true, std::memory_order_release);
  for (std::atomic<bool>* f : flags_) f->store(true, std::memory_order_release);
}

Status Communicator::initCommon(std::unique_ptr<Bootstrap> bootstrap, std::shared_ptr<Engine> engine) {
  bootstrap_ = std::move(bootstrap);
  bootstrap_->setStallWarn(config_.stallWarnNs());
  bootstrap_->setUnreachableAfter(config_.unreachableNs());
  p2pConnected_ = std::vector<std::atomic<uint8_t>>(static_cast<size_t>(nranks_));
  std::vector<InitRecord> all(nranks_);
  InitRecord& me = all[rank_];
  me.peer = PeerInfo::local(config_);
  me.version = CHORUS_VERSION_CODE;
  const std::string plan = config_.env.planText();
  me.planDigest = fnv1a(plan.data(), plan.size());
  if (device_.cudaDevice() >= 0 && cuda::built() && cuda::driverLoaded()) {
    // Unknown when it cannot be asked: the device side's own creation then says why.
    if (auto id = cuda::gpuIdentity(device_.cudaDevice()); id.isOk()) {
      me.gpuSms = id.value().sms;
      std::memcpy(me.gpuUuid, id.value().uuid, sizeof(me.gpuUuid));
    }
  }
  std::string machine;
  CHORUS_TRY(detectMachine(&machine, &me.topo));
  InitRecord mine = me;
  CHORUS_TRY(bootstrap_->allGather(all.data(), sizeof(InitRecord)));
  all[rank_] = mine;
  for (InitRecord& r : all) {  // text from other processes: terminated here, whatever was sent
    r.peer.host[sizeof(r.peer.host) - 1] = 0;
  }

  // Ranks of one build, and settings that change the plan, must agree, or the ranks would cut data
  // differently.
  for (int r = 0; r < nranks_; ++r) {
    const InitRecord& a = all[0];
    const InitRecord& b = all[r];
    auto differ = [&](const char* what, const std::string& va, const std::string& vb) {
      return invalidUsage(std::string(what) + " differs between ranks: rank 0 has " + va + ", rank " +
                          std::to_string(r) + " has " + vb + "; set it the same on every rank");
    };
    if (a.version != b.version) {
      return differ("the Chorus library version", std::to_string(a.version), std::to_string(b.version));
    }
  }
  // Settings that change the plan (SettingScope::kPlan) must agree too. Every rank sees the same
  // digests, so either all exchange their texts here or none does.
  bool plansDiffer = false;
  for (int r = 1; r < nranks_; ++r) plansDiffer = plansDiffer || all[r].planDigest != all[0].planDigest;
  if (plansDiffer) {
    std::vector<PlanText> texts(nranks_);
    if (plan.size() >= sizeof(PlanText::text)) return internalError("the plan settings' text outgrew its record");
    std::memcpy(texts[rank_].text, plan.data(), plan.size());
    CHORUS_TRY(bootstrap_->allGather(texts.data(), sizeof(PlanText)));
    for (PlanText& t : texts) t.text[sizeof(PlanText::text) - 1] = 0;  // from other processes
    for (int r = 1; r < nranks_; ++r) {
      const std::vector<PlanDifference> d = comparePlans(texts[0].text, texts[r].text);
      if (d.empty()) continue;
      return invalidUsage(d[0].name + " differs between ranks: rank 0 has " + d[0].first + ", rank " +
                          std::to_string(r) + " has " + d[0].second + "; set it the same on every rank");
    }
    return internalError("the plan settings' digests differ between ranks but their texts do not");
  }
  peers_.resize(nranks_);
  for (int r = 0; r < nranks_; ++r) peers_[r] = all[r].peer;
  health_.watchPeers();

  const std::optional<CpuIsa> forcedIsa = parseCpuIsa(kCpuIsa.get(config_.env));
  const CpuIsa isa = forcedIsa ? *forcedIsa : bestCpuIsa();
  const HostKernels kernels = *hostKernelsFor(isa);

  // The first transport of the registry that can connect a pair does, on both sides alike.
  TransportEnv env;
  env.log = &log_;
  env.socketThreads = config_.socketThreads;
  env.netChecksum = config_.netChecksum;
  env.netPlugin = config_.netPlugin;
  env.netName = config_.netName;
  env.connectTimeoutNs = config_.initTimeout();
  transports_ = makeTransports(env);
  peerTransport_.assign(nranks_, nullptr);
  for (int r = 0; r < nranks_; ++r) {
    for (auto& t : transports_) {
      if (t->canConnect(peers_[rank_], peers_[r])) {
        peerTransport_[r] = t.get();
        break;
      }
    }
    if (!peerTransport_[r]) return internalError("no transport can connect to " + describePeer(r));
  }

  {
    // Memory is shared as the FIFOs are: the transport to each peer says how.
    std::vector<MemShare::Reach> reach(nranks_);
    oneProcess_ = true;
    for (int r = 0; r < nranks_; ++r) {
      reach[r] = peerTransport_[r]->memoryReach();
      oneProcess_ = oneProcess_ && sameProcess(peers_[rank_], peers_[r]);
    }
    memShare_ = std::make_unique<MemShare>(bootstrap_.get(), std::move(reach));
  }
  int ranksOnHost = 0;
  for (int r = 0; r < nranks_; ++r) ranksOnHost += peers_[r].hostHash == peers_[rank_].hostHash ? 1 : 0;
  singleHost_ = ranksOnHost == nranks_;
  {
    std::vector<GpuSeat> seats(nranks_);
    for (int r = 0; r < nranks_; ++r) {
      seats[r].sms = all[r].gpuSms;
      std::memcpy(seats[r].uuid, all[r].gpuUuid, sizeof(seats[r].uuid));
    }
    device_.placeRanks(seats, singleHost_);
  }
  std::vector<topo::TopoRecord> topoRecords(nranks_);
  for (int r = 0; r < nranks_; ++r) topoRecords[r] = all[r].topo;
  CHORUS_TRY(buildTopology(machine, topoRecords));
  host_.init(kernels, ranksOnHost);
  diag_.start();
  redOps_.reset(nranks_);

  engine_ = engine ? std::move(engine) : std::make_shared<Engine>(config_);
  log_.info(kSubsysInit,
            "comm {:#x} rank {} nranks {} pid {} host {} cpu-isa {} slots {}x{} channels {} - Init COMPLETE", commId_,
            rank_, nranks_, peers_[rank_].pid, peers_[rank_].host, cpuIsaName(host_.kernels().isa), config_.slots,
            config_.slotBytes, config_.nChannels);
  if (log_.enabled(LogLevel::kInfo, kSubsysInit)) {
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      log_.info(kSubsysInit, "peer rank {} ({} pid {}) via {}", r, peers_[r].host, peers_[r].pid,
                peerTransport_[r]->name());
    }
  }
  // A communicator bound to a GPU makes its device side now, as NCCL does at init: its first
  // collective then allocates nothing and loads no kernel, either of which can wait for work
  // already queued on the device (lazy module loading waits for every running kernel), so no
  // collective call waits behind the user's stream.
  if (device_.cudaDevice() >= 0 && cuda::built() && cuda::driverLoaded()) CHORUS_TRY(device_.ensure());
  setState(State::kReady);
  return Status::ok();
}

Result<std::unique_ptr<Communicator>> Communicator::child(Communicator& parent, const CommOptions& options,
                                                          uint64_t commId, int rank, std::vector<SockAddr> peers,
                                                          UniqueFd listener) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->config_ = parent.config_;
  c->forcedAlgo_ = parent.forcedAlgo_;
  c->forcedProto_ = parent.forcedProto_;
  if (options.timeoutNs > 0) c->config_.timeoutNs = options.timeoutNs;
  c->blocking_ = options.blocking;
  c->name_ = options.name;
  // A child keeps its parent's device unless its config names one.
  if (options.cudaDevice >= 0) {
    CHORUS_TRY(c->device_.chooseCudaDevice(options));
  } else {
    c->device_.inheritCudaDevice(parent.device_.cudaDevice());
  }
  c->rank_ = rank;
  c->nranks_ = static_cast<int>(peers.size());
  c->log_ = Logger(c->config_.logLevel, c->config_.logSubsys, rank);
  c->commId_ = commId;
  CHORUS_ASSIGN_OR_RETURN(
      auto boot, Bootstrap::fromTable(c->commId_, parent.bootstrap_->secret(), rank, std::move(peers),
                                      std::move(listener), c->config_.timeoutNs, c->log_, c->health_.abortFlag()));
  CHORUS_TRY(c->initCommon(std::move(boot), parent.engine_));
  return c;
}

void Communicator::revoke() {
  // As chorusCommShrink's CHORUS_SHRINK_ABORT: the operations in flight fail at once, later ones
  // are refused, and the peers are not told (each survivor revokes its own).
  health_.fail(remoteError("the communicator was revoked (chorusCommRevoke): operations in flight were stopped and new "
                           "ones are refused; shrink or destroy it"),
               /*tellPeers=*/false, /*requested=*/true);
  (void)waitIdle();
}

std::string Communicator::describePeer(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return "rank " + std::to_string(peer);
  return "rank " + std::to_string(peer) + " (host " + peers_[peer].host + ", pid " + std::to_string(peers_[peer].pid) +
         ")";
}

void Communicator::abort() {
  if (health_.setAborted()) (void)diag_.writeDump("chorusCommAbort");
  // Wake anything that waits on a FIFO of this communicator so it sees the flag.
  host_.closeAll();
  health_.stopTraffic();
  // Kernels see the abort word at their next check: abort returns once they are gone.
  device_.stop(10'000'000'000);
}

}  // namespace chorus
