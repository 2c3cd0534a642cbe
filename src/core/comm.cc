#include "src/core/comm.h"

#include <shared_mutex>
#include <unordered_set>

#include <algorithm>
#include <cstring>

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
  if (config->size >= sizeof(chorusConfig_t) && config->timeoutSeconds != CHORUS_CONFIG_UNDEF_INT) {
    if (config->timeoutSeconds <= 0) {
      return invalidArgument("config->timeoutSeconds must be positive, not " + std::to_string(config->timeoutSeconds));
    }
    o.timeoutNs = int64_t(config->timeoutSeconds) * 1000000000;
  }
  if (config->commName) o.name = config->commName;
  return o;
}

namespace {

// Everything each rank tells the others at init.
struct InitRecord {
  PeerInfo peer;
  uint32_t version = 0;
  uint32_t slotBytes = 0;
  int32_t slots = 0;
  int32_t nChannels = 0;
  char algo[16] = {0};
  char proto[16] = {0};
  uint64_t directMaxBytes = 0;
  uint64_t peerSlotBytes = 0;
  uint32_t check = 0;
  topo::TopoRecord topo;  // where this rank runs; its machine's description follows (comm_topo.cc)
};

// How long the failure notices may take, and how often a stalled wait polls the peers' pidfds.
constexpr int64_t kNoticeNs = int64_t(2) * 1000000000;
constexpr int64_t kPeerCheckEveryNs = int64_t(50) * 1000000;

uint64_t mix(uint64_t a, uint64_t b) {
  a ^= b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2);
  return a * 0xff51afd7ed558ccdull;
}

}  // namespace

Communicator::~Communicator() {
  // A finished send over a socket may still sit in its FIFO: let the proxy put it on the wire
  // before it stops (unless aborted, or the connection failed, or the timeout passes).
  if (!aborted()) {
    const int64_t deadline = nowNs() + config_.timeoutNs;
    auto unsent = [](const SendCursor& c) {
      return c.viaProxy && !c.fifo.closed() && c.fifo.ctrl->head.load(std::memory_order_acquire) != c.tail;
    };
    while (nowNs() < deadline && conns_.anySend(unsent)) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (bootstrap_) bootstrap_->setNoticeHandler(nullptr);
  stopFlight();
  // Order matters: transports' threads move bytes of connections; the connections' FIFOs belong
  // to lanes that are all done by now; the bootstrap serves descriptors for connections and memory.
  transports_.clear();
  connections_.clear();
  memShare_.reset();
  bootstrap_.reset();
}

Result<std::unique_ptr<Communicator>> Communicator::create(const BootstrapId& id, int rank, int nranks,
                                                           const CommOptions& options, std::shared_ptr<Engine> engine) {
  std::unique_ptr<Communicator> c(new Communicator());
  CHORUS_ASSIGN_OR_RETURN(c->config_, Config::fromEnv());
  CHORUS_ASSIGN_OR_RETURN(c->forcedAlgo_, parseAlgoSetting(c->config_.algo));
  if (options.timeoutNs > 0) c->config_.timeoutNs = options.timeoutNs;
  c->blocking_ = options.blocking;
  c->name_ = options.name;
  c->rank_ = rank;
  c->nranks_ = nranks;
  c->log_ = Logger(c->config_.logLevel, c->config_.logSubsys, rank);
  c->logEnvironment();
  c->commId_ = id.cliqueId;
  const Bootstrap::JoinTiming timing{c->config_.initTimeout(), c->config_.initWarnNs()};
  CHORUS_ASSIGN_OR_RETURN(auto boot, Bootstrap::join(id, rank, nranks, c->config_.socketIfname, c->config_.timeoutNs,
                                                     timing, c->log_, &c->abort_, options.cancelJoin));
  Status s = c->initCommon(std::move(boot), std::move(engine));
  if (!s.isOk()) {
    // The others may be waiting for this rank inside init: tell them why it stops, unless it
    // stops because of what they told it.
    if (c->bootstrap_ && c->nranks_ > 1 && c->bootstrap_->earlyNotice().empty() && !c->failed_.load()) {
      c->tellFailure(s);
    }
    return s;
  }
  return c;
}

Status Communicator::initCommon(std::unique_ptr<Bootstrap> bootstrap, std::shared_ptr<Engine> engine) {
  bootstrap_ = std::move(bootstrap);
  bootstrap_->setStallWarn(config_.stallWarnNs());
  std::vector<InitRecord> all(nranks_);
  InitRecord& me = all[rank_];
  me.peer = PeerInfo::local(config_);
  me.version = CHORUS_VERSION_CODE;
  me.slotBytes = static_cast<uint32_t>(config_.slotBytes);
  me.slots = config_.slots;
  me.nChannels = config_.nChannels;
  std::snprintf(me.algo, sizeof(me.algo), "%s", config_.algo.c_str());
  std::snprintf(me.proto, sizeof(me.proto), "%s", config_.proto.c_str());
  me.directMaxBytes = config_.directMaxBytes;
  me.peerSlotBytes = config_.peerSlotBytes;
  me.check = config_.check ? 1 : 0;
  std::string machine;
  CHORUS_TRY(detectMachine(&machine, &me.topo));
  InitRecord mine = me;
  CHORUS_TRY(bootstrap_->allGather(all.data(), sizeof(InitRecord)));
  all[rank_] = mine;
  for (InitRecord& r : all) {  // text from other processes: terminated here, whatever was sent
    r.algo[sizeof(r.algo) - 1] = 0;
    r.proto[sizeof(r.proto) - 1] = 0;
    r.peer.host[sizeof(r.peer.host) - 1] = 0;
  }

  // Settings that change the plan must agree, or the ranks would cut data differently.
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
    if (a.slotBytes != b.slotBytes) {
      return differ("CHORUS_SLOT_BYTES", std::to_string(a.slotBytes), std::to_string(b.slotBytes));
    }
    if (a.slots != b.slots) return differ("CHORUS_SLOTS", std::to_string(a.slots), std::to_string(b.slots));
    if (a.nChannels != b.nChannels) {
      return differ("CHORUS_NCHANNELS", std::to_string(a.nChannels), std::to_string(b.nChannels));
    }
    if (std::strncmp(a.algo, b.algo, sizeof(a.algo)) != 0) return differ("CHORUS_ALGO", a.algo, b.algo);
    if (std::strncmp(a.proto, b.proto, sizeof(a.proto)) != 0) return differ("CHORUS_PROTO", a.proto, b.proto);
    if (a.peerSlotBytes != b.peerSlotBytes) {
      return differ("CHORUS_P2P_SLOT_BYTES", std::to_string(a.peerSlotBytes), std::to_string(b.peerSlotBytes));
    }
    if (a.directMaxBytes != b.directMaxBytes) {
      return differ("CHORUS_DIRECT_MAX_BYTES", std::to_string(a.directMaxBytes), std::to_string(b.directMaxBytes));
    }
    if (a.check != b.check) return differ("CHORUS_CHECK", std::to_string(a.check), std::to_string(b.check));
  }
  peers_.resize(nranks_);
  for (int r = 0; r < nranks_; ++r) peers_[r] = all[r].peer;
  watchPeers();

  const CpuIsa isa = config_.cpuIsa ? *config_.cpuIsa : bestCpuIsa();
  kernels_ = *hostKernelsFor(isa);

  // The first transport of the registry that can connect a pair does, on both sides alike.
  TransportEnv env;
  env.log = &log_;
  env.socketThreads = config_.socketThreads;
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
    // Memory is shared as the FIFOs are: by pointer between threads, by mapping on one host,
    // and the settings that turn those off for FIFOs turn them off here too.
    std::vector<MemShare::Reach> reach(nranks_, MemShare::Reach::kNone);
    oneProcess_ = true;
    const PeerInfo& me = peers_[rank_];
    for (int r = 0; r < nranks_; ++r) {
      const uint32_t flags = me.flags | peers_[r].flags;
      if (sameProcess(me, peers_[r]) && !(flags & PeerInfo::kP2pDisabled)) {
        reach[r] = MemShare::Reach::kAddressSpace;
      } else if (sameHost(me, peers_[r]) && !(flags & PeerInfo::kShmDisabled)) {
        reach[r] = MemShare::Reach::kSharedMapping;
      }
      oneProcess_ = oneProcess_ && peers_[r].processNonce == me.processNonce;
    }
    memShare_ = std::make_unique<MemShare>(bootstrap_.get(), rank_, std::move(reach));
  }
  singleHost_ = true;
  for (int r = 0; r < nranks_; ++r) singleHost_ = singleHost_ && peers_[r].hostHash == peers_[rank_].hostHash;
  std::vector<topo::TopoRecord> topoRecords(nranks_);
  for (int r = 0; r < nranks_; ++r) topoRecords[r] = all[r].topo;
  CHORUS_TRY(buildTopology(machine, topoRecords));
  conns_.init(nranks_, config_.nChannels);
  channelStatus_ = std::make_unique<ChannelStatus[]>(config_.nChannels + 1);
  p2pSendSeq_.assign(nranks_, 0);
  p2pRecvSeq_.assign(nranks_, 0);
  startFlight();
  redOps_.clear();

  engine_ = engine ? std::move(engine) : std::make_shared<Engine>(config_);
  log_.info(kSubsysInit,
            "comm {:#x} rank {} nranks {} pid {} host {} cpu-isa {} slots {}x{} channels {} - Init COMPLETE", commId_,
            rank_, nranks_, peers_[rank_].pid, peers_[rank_].host, cpuIsaName(kernels_.isa), config_.slots,
            config_.slotBytes, config_.nChannels);
  if (log_.enabled(LogLevel::kInfo, kSubsysInit)) {
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      log_.info(kSubsysInit, "peer rank {} ({} pid {}) via {}", r, peers_[r].host, peers_[r].pid,
                peerTransport_[r]->name());
    }
  }
  setState(State::kReady);
  return Status::ok();
}

Result<std::unique_ptr<Communicator>> Communicator::child(Communicator& parent, const CommOptions& options,
                                                          uint64_t commId, int rank, std::vector<SockAddr> peers,
                                                          UniqueFd listener) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->config_ = parent.config_;
  c->forcedAlgo_ = parent.forcedAlgo_;
  if (options.timeoutNs > 0) c->config_.timeoutNs = options.timeoutNs;
  c->blocking_ = options.blocking;
  c->name_ = options.name;
  c->rank_ = rank;
  c->nranks_ = static_cast<int>(peers.size());
  c->log_ = Logger(c->config_.logLevel, c->config_.logSubsys, rank);
  c->commId_ = commId;
  CHORUS_ASSIGN_OR_RETURN(auto boot,
                          Bootstrap::fromTable(c->commId_, parent.bootstrap_->secret(), rank, std::move(peers),
                                               std::move(listener), c->config_.timeoutNs, c->log_, &c->abort_));
  CHORUS_TRY(c->initCommon(std::move(boot), parent.engine_));
  return c;
}

Result<std::unique_ptr<Communicator>> Communicator::split(Communicator& parent, int color, int key,
                                                          const CommOptions& options) {
  if (color < 0 && color != CHORUS_SPLIT_NOCOLOR) {
    return invalidArgument("color must be non-negative or CHORUS_SPLIT_NOCOLOR, not " + std::to_string(color));
  }
  struct SplitRecord {
    int32_t color;
    int32_t key;
    SockAddr addr;
  };
  SplitRecord mine{color, key, SockAddr()};
  UniqueFd listener;
  if (color != CHORUS_SPLIT_NOCOLOR) {
    // On the parent's interface: the one its ranks already reach this rank at.
    SockAddr local = parent.bootstrap_->address(parent.rank_);
    local.setPort(0);
    CHORUS_ASSIGN_OR_RETURN(listener, listenOn(local, &mine.addr));
  }
  std::vector<SplitRecord> all(parent.nranks_);
  all[parent.rank_] = mine;
  CHORUS_TRY(parent.bootstrap_->allGather(all.data(), sizeof(SplitRecord)));
  const uint64_t seq = ++parent.splitSeq_;
  if (color == CHORUS_SPLIT_NOCOLOR) return std::unique_ptr<Communicator>();

  std::vector<int> members;
  for (int r = 0; r < parent.nranks_; ++r) {
    if (all[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[a].key != all[b].key ? all[a].key < all[b].key : a < b; });
  std::vector<SockAddr> addrs;
  int newRank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    addrs.push_back(all[members[i]].addr);
    if (members[i] == parent.rank_) newRank = static_cast<int>(i);
  }
  CHORUS_ASSIGN_OR_RETURN(auto c, child(parent, options, mix(mix(parent.commId_, seq), static_cast<uint64_t>(color)),
                                        newRank, std::move(addrs), std::move(listener)));
  parent.log_.info(kSubsysInit, "split color {} key {}: new rank {} of {}", color, key, newRank, c->nranks_);
  return c;
}

namespace {

// What each survivor of a shrink tells every other rank of the parent: the call it makes (its
// exclude list, by hash and count, with the first entries for messages) and where its new
// communicator listens.
struct ShrinkRecord {
  static constexpr uint64_t kMagic = 0x4348534852494e4bull;  // "CHSHRINK"
  static constexpr int kShown = 16;
  uint64_t magic;
  uint64_t seq;
  uint64_t listHash;
  int32_t count;
  int32_t shown[kShown];
  SockAddr addr;
};

std::string listText(const int32_t* r, int count, int shown) {
  std::string s = "[";
  for (int i = 0; i < std::min(count, shown); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  if (count > shown) s += ", ... (" + std::to_string(count) + " ranks)";
  return s + "]";
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::shrink(Communicator& parent, const std::vector<int>& exclude,
                                                           bool abortParent, const CommOptions& options) {
  const int n = parent.nranks_;
  std::vector<int> list = exclude;
  std::sort(list.begin(), list.end());
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] < 0 || list[i] >= n) {
      return invalidArgument("excludeRanksList holds rank " + std::to_string(list[i]) + ", outside [0, " +
                             std::to_string(n) + ")");
    }
    if (i > 0 && list[i] == list[i - 1]) {
      return invalidArgument("excludeRanksList names rank " + std::to_string(list[i]) + " twice");
    }
  }
  if (std::binary_search(list.begin(), list.end(), parent.rank_)) {
    return invalidArgument("rank " + std::to_string(parent.rank_) +
                           " is in its own excludeRanksList: an excluded rank must not call chorusCommShrink");
  }
  // The parent's operations: stopped (they fail at once) or waited for.
  if (abortParent) {
    parent.fail(remoteError("chorusCommShrink with CHORUS_SHRINK_ABORT stopped this communicator's operations"), false);
  }
  (void)parent.waitIdle();

  ShrinkRecord mine{};
  mine.magic = ShrinkRecord::kMagic;
  mine.seq = ++parent.shrinkSeq_;
  mine.count = static_cast<int32_t>(list.size());
  mine.listHash = fnv1a(list.data(), list.size() * sizeof(int));
  for (size_t i = 0; i < list.size() && i < static_cast<size_t>(ShrinkRecord::kShown); ++i) mine.shown[i] = list[i];
  SockAddr local = parent.bootstrap_->address(parent.rank_);
  local.setPort(0);
  CHORUS_ASSIGN_OR_RETURN(UniqueFd listener, listenOn(local, &mine.addr));

  // To every other rank of the parent at once, the excluded ones too (best effort): a rank left
  // out by mistake then hears of it at once instead of at its timeout. Survivors must be reached.
  const uint64_t tag = makeTag(TagSpace::kShrink, mine.seq);
  std::vector<int> others;
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r) {
    if (r == parent.rank_) continue;
    others.push_back(r);
    if (!std::binary_search(list.begin(), list.end(), r)) survivors.push_back(r);
  }
  const int64_t reachBy = nowNs() + std::min<int64_t>(parent.config_.timeoutNs, int64_t(10) * 1000000000);
  const auto told = parent.bootstrap_->sendAllAtOnce(
      others, tag, std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)), reachBy);
  for (size_t i = 0; i < others.size(); ++i) {
    if (!told[i] && !std::binary_search(list.begin(), list.end(), others[i])) {
      return systemError("chorusCommShrink could not reach " + parent.describePeer(others[i]) +
                         ", which is not in excludeRanksList: if it failed, exclude it");
    }
  }
  std::vector<SockAddr> addrs;
  int newRank = -1;
  for (int r = 0; r < n; ++r) {
    if (std::binary_search(list.begin(), list.end(), r)) continue;
    if (r == parent.rank_) {
      newRank = static_cast<int>(addrs.size());
      addrs.push_back(mine.addr);
      continue;
    }
    CHORUS_ASSIGN_OR_RETURN(std::vector<char> m, parent.bootstrap_->recv(r, tag));
    ShrinkRecord theirs{};
    if (m.size() != sizeof(theirs))
      return systemError("chorusCommShrink got a malformed record from rank " + std::to_string(r));
    std::memcpy(&theirs, m.data(), sizeof(theirs));
    if (theirs.magic != ShrinkRecord::kMagic || theirs.seq != mine.seq || !theirs.addr.valid() || theirs.count < 0 ||
        theirs.count > n) {
      return systemError("chorusCommShrink got a malformed record from rank " + std::to_string(r));
    }
    if (theirs.count != mine.count || theirs.listHash != mine.listHash) {
      return invalidUsage("chorusCommShrink: rank " + std::to_string(r) + " passed excludeRanksList " +
                          listText(theirs.shown, theirs.count, ShrinkRecord::kShown) + " but rank " +
                          std::to_string(parent.rank_) + " passed " +
                          listText(mine.shown, mine.count, ShrinkRecord::kShown) +
                          "; every surviving rank must pass the same list");
    }
    addrs.push_back(theirs.addr);
  }

  CHORUS_ASSIGN_OR_RETURN(
      auto c, child(parent, options, mix(mix(parent.commId_, 0x5348524b00000000ull + mine.seq), mine.listHash), newRank,
                    std::move(addrs), std::move(listener)));
  parent.log_.info(kSubsysInit, "shrink without {}: new rank {} of {}",
                   listText(mine.shown, mine.count, ShrinkRecord::kShown), newRank, c->nranks_);
  return c;
}

namespace {
struct HandleRegistry {
  std::shared_mutex mu;
  std::unordered_set<const chorusComm*> live;
};
HandleRegistry& handles() {
  static HandleRegistry* r = new HandleRegistry();  // outlives every handle, also at exit
  return *r;
}
}  // namespace

void registerHandle(const chorusComm* h) {
  std::unique_lock<std::shared_mutex> g(handles().mu);
  handles().live.insert(h);
}

void unregisterHandle(const chorusComm* h) {
  std::unique_lock<std::shared_mutex> g(handles().mu);
  handles().live.erase(h);
}

bool isLiveHandle(const chorusComm* h) {
  std::shared_lock<std::shared_mutex> g(handles().mu);
  return handles().live.count(h) != 0;
}

Status Communicator::asyncError() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::ok();  // every call asks: keep it lock-free
  std::lock_guard<std::mutex> g(errMu_);
  return asyncError_;
}

void Communicator::fail(const Status& s, bool tellPeers) {
  {
    std::lock_guard<std::mutex> g(errMu_);
    if (!asyncError_.isOk()) return;
    asyncError_ = s;
    failed_.store(true, std::memory_order_release);
  }
  log_.warn(kSubsysAll, "communicator failed: {}", s.message());
  if (flight_ && flight_->enabled() && log_.enabled(LogLevel::kWarn, kSubsysAll)) {
    const auto entries = flight_->snapshot();
    if (!entries.empty()) {
      log_.warn(kSubsysAll, "its last operations (oldest first):\n{}", FlightRecorder::text(entries, 8));
    }
  }
  (void)writeDump("failure: " + s.message());
  // The notice goes before the connections close: a peer that sees a connection to this rank
  // close then finds the reason already told, instead of blaming this rank for the closing. On
  // the failing thread itself: one poll over every rank's connection, over at once where the
  // ranks are up or gone, and never longer than kNoticeNs (a host that does not answer at all).
  if (tellPeers && bootstrap_ && nranks_ > 1 && !aborted()) tellFailure(s);
  {
    // A peer waiting on this rank over shared memory sees its connection close at once.
    std::lock_guard<std::mutex> g(connMu_);
    for (auto& c : connections_) c->fifo().close();
  }
  stopTraffic();
}

void Communicator::logEnvironment() const {
  if (config_.printVersion && rank_ == 0) {
    // Not through the level filter: CHORUS_DEBUG=VERSION prints this line and nothing else.
    Logger(LogLevel::kInfo, kSubsysAll, rank_)
        .info(kSubsysAll, "Chorus version {}.{}.{}", CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH);
  }
  for (const std::string& w : config_.envWarnings) log_.warn(kSubsysEnv, "{}", w);
  for (const std::string& line : config_.envSettings) log_.info(kSubsysEnv, "{}", line);
}

void Communicator::tellFailure(const Status& s) {
  // A failure about another rank (waited for in vain, found dead) leads with that rank: this
  // rank only noticed it, and every rank it tells should name the same culprit.
  const bool aboutOther = s.subject() >= 0 && s.subject() != rank_;
  const std::string text = aboutOther ? s.message() + " (noticed by " + describePeer(rank_) + ")"
                                      : describePeer(rank_) + " failed: " + s.message();
  const int told = bootstrap_->noticeAll(text, nowNs() + kNoticeNs);
  log_.info(kSubsysAll, "failure notice sent to {} of {} other ranks", told, nranks_ - 1);
}

void Communicator::watchPeers() {
  // Only processes this process can see by pid (same boot and pid namespace), and only when the
  // pid still names the process that joined (its start time matches).
  peerPidfd_.clear();
  peerPidfd_.resize(nranks_);
  const PeerInfo& me = peers_[rank_];
  for (int r = 0; r < nranks_; ++r) {
    const PeerInfo& p = peers_[r];
    if (r == rank_ || p.processNonce == me.processNonce || p.pidSpace != me.pidSpace || p.startTicks == 0) continue;
    UniqueFd fd = openPidfd(p.pid);
    if (fd.valid() && processStartTicks(p.pid) == p.startTicks) peerPidfd_[r] = std::move(fd);
  }
  bootstrap_->setNoticeHandler([this](int src, const std::string& text) {
    fail(remoteError(text + " (reported by rank " + std::to_string(src) + ")"), false);
  });
  // A notice that came while init ran (before the handler): this communicator is failed already.
  if (std::string early = bootstrap_->earlyNotice(); !early.empty()) fail(remoteError(early), false);
}

Status Communicator::checkPeers(int64_t now, bool force) {
  if (!force && now - lastPeerCheckNs_.load(std::memory_order_relaxed) < kPeerCheckEveryNs) return Status::ok();
  lastPeerCheckNs_.store(now, std::memory_order_relaxed);
  for (int r = 0; r < static_cast<int>(peerPidfd_.size()); ++r) {
    if (peerPidfd_[r].valid() && pidfdExited(peerPidfd_[r].get())) {
      // A rank that failed on its own tells the others before its process ends, but the notice
      // may still sit unread on this rank's listener: give it a moment to say more than this.
      for (int i = 0; i < 20 && !failed_.load(std::memory_order_acquire); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      Status told = asyncError();
      if (!told.isOk()) return told;
      return remoteError(describePeer(r) + " is gone: its process exited or was killed").about(r);
    }
  }
  return Status::ok();
}

void Communicator::stopTraffic() {
  // A transport's threads may send from and receive into the caller's buffers (by reference):
  // once an operation has failed or been aborted, they stop, so the caller may free its buffers
  // when the failed call returns.
  for (auto& t : transports_) t->stopTraffic();
}

std::string Communicator::describePeer(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return "rank " + std::to_string(peer);
  return "rank " + std::to_string(peer) + " (host " + peers_[peer].host + ", pid " + std::to_string(peers_[peer].pid) +
         ")";
}

std::string Communicator::stoppedPeers() const {
  std::string s;
  for (int r = 0; r < static_cast<int>(peerPidfd_.size()); ++r) {
    if (!peerPidfd_[r].valid()) continue;  // only processes this rank watches: same host, same pid space
    const char state = processState(peers_[r].pid);
    if (state == 'T' || state == 't') s += (s.empty() ? "" : ", ") + describePeer(r);
  }
  return s;
}

int64_t Communicator::timeoutGraceNs(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(peerPidfd_.size()) || !peerPidfd_[peer].valid()) return 0;
  if (pidfdExited(peerPidfd_[peer].get())) return 0;
  const char state = processState(peers_[peer].pid);
  if (state == 'T' || state == 't' || state == 'Z' || state == 'X') return 0;
  return std::min<int64_t>(2000000000, config_.timeoutNs / 4);
}

std::string Communicator::describeChannels() const {
  std::string s;
  for (int c = 0; c <= config_.nChannels; ++c) {
    if (!s.empty()) s += "; ";
    s += (c < config_.nChannels ? "channel " + std::to_string(c) : std::string("p2p")) + ": " +
         channelStatus_[c].describe();
  }
  return s;
}

Result<chorusRedOp_t> Communicator::createPreMulSum(const void* scalar, chorusDataType_t type,
                                                    chorusScalarResidence_t residence) {
  PreMulOp op;
  op.live = true;
  op.type = type;
  op.residence = residence;
  if (residence == chorusScalarHostImmediate) {
    std::memcpy(op.value, scalar, typeSize(type));
  } else {
    op.ptr = scalar;
  }
  std::lock_guard<std::mutex> g(redOpMu_);
  for (size_t i = 0; i < redOps_.size(); ++i) {
    if (!redOps_[i].live) {
      redOps_[i] = op;
      return static_cast<chorusRedOp_t>(chorusNumOps + static_cast<int>(i));
    }
  }
  if (redOps_.size() >= 1u << 20) return invalidUsage("too many live custom reduction operators; destroy some");
  redOps_.push_back(op);
  return static_cast<chorusRedOp_t>(chorusNumOps + static_cast<int>(redOps_.size() - 1));
}

Status Communicator::destroyRedOp(chorusRedOp_t op) {
  std::lock_guard<std::mutex> g(redOpMu_);
  const int idx = static_cast<int>(op) - chorusNumOps;
  if (op < chorusNumOps) {
    return invalidArgument("operator " + std::to_string(op) +
                           " is built in; only operators made by "
                           "chorusRedOpCreatePreMulSum can be destroyed");
  }
  if (idx >= static_cast<int>(redOps_.size()) || !redOps_[idx].live) {
    return invalidArgument("operator " + std::to_string(op) +
                           " was not created on this communicator or was already "
                           "destroyed");
  }
  redOps_[idx].live = false;
  return Status::ok();
}

Status Communicator::checkRedOp(chorusRedOp_t op, chorusDataType_t type) const {
  if (op >= 0 && op < chorusNumOps) return Status::ok();
  std::lock_guard<std::mutex> g(redOpMu_);
  const int idx = static_cast<int>(op) - chorusNumOps;
  if (op < 0 || idx >= static_cast<int>(redOps_.size()) || !redOps_[idx].live) {
    return invalidArgument("reduction operator " + std::to_string(op) +
                           " is neither built in (sum, prod, max, min, avg) nor a live operator of this communicator "
                           "(destroyed, or created on another communicator?)");
  }
  if (redOps_[idx].type != type) {
    return invalidArgument(std::string("reduction operator ") + std::to_string(op) + " was created for " +
                           typeName(redOps_[idx].type) + " but is used with " + typeName(type));
  }
  return Status::ok();
}

ReduceSpec Communicator::reduceSpec(chorusRedOp_t op, chorusDataType_t type) const {
  ReduceSpec s;
  const bool isFloat = type == chorusFloat16 || type == chorusFloat32 || type == chorusFloat64 ||
                       type == chorusBfloat16 || type == chorusFloat8e4m3 || type == chorusFloat8e5m2;
  switch (op) {
    case chorusSum:
      s.kind = RedKind::kSum;
      return s;
    case chorusProd:
      s.kind = RedKind::kProd;
      return s;
    case chorusMax:
      s.kind = RedKind::kMax;
      return s;
    case chorusMin:
      s.kind = RedKind::kMin;
      return s;
    case chorusAvg:
      s.kind = RedKind::kSum;
      if (isFloat) {
        s.hasPre = true;
        s.scaleF = 1.0 / nranks_;
      } else {
        s.hasPostDiv = true;
        s.divisor = static_cast<uint64_t>(nranks_);
      }
      return s;
    default:
      break;
  }
  // Pre-multiplied sum: the scalar is read now (at launch), in its own type.
  PreMulOp p;
  {
    std::lock_guard<std::mutex> g(redOpMu_);
    p = redOps_[static_cast<int>(op) - chorusNumOps];
  }
  unsigned char v[8] = {0};
  std::memcpy(v, p.residence == chorusScalarHostImmediate ? p.value : p.ptr, typeSize(type));
  s.kind = RedKind::kSum;
  s.hasPre = true;
  switch (type) {
    case chorusInt8: {
      int8_t x;
      std::memcpy(&x, v, 1);
      s.scaleI = static_cast<uint64_t>(static_cast<int64_t>(x));
      break;
    }
    case chorusUint8:
      s.scaleI = v[0];
      break;
    case chorusInt32: {
      int32_t x;
      std::memcpy(&x, v, 4);
      s.scaleI = static_cast<uint64_t>(static_cast<int64_t>(x));
      break;
    }
    case chorusUint32: {
      uint32_t x;
      std::memcpy(&x, v, 4);
      s.scaleI = x;
      break;
    }
    case chorusInt64:
    case chorusUint64:
      std::memcpy(&s.scaleI, v, 8);
      break;
    case chorusFloat16:
      s.scaleF = toFloat(Half{static_cast<uint16_t>(v[0] | (v[1] << 8))});
      break;
    case chorusBfloat16:
      s.scaleF = toFloat(BFloat16{static_cast<uint16_t>(v[0] | (v[1] << 8))});
      break;
    case chorusFloat8e4m3:
      s.scaleF = toFloat(Fp8E4M3{v[0]});
      break;
    case chorusFloat8e5m2:
      s.scaleF = toFloat(Fp8E5M2{v[0]});
      break;
    case chorusFloat32: {
      float x;
      std::memcpy(&x, v, 4);
      s.scaleF = x;
      break;
    }
    default: {
      double x;
      std::memcpy(&x, v, 8);
      s.scaleF = x;
      break;
    }
  }
  return s;
}

void Communicator::taskStarted() { outstanding_.fetch_add(1, std::memory_order_relaxed); }

void Communicator::taskFinished() {
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last one: wake waitIdle (the lock orders this with its check-then-sleep).
  std::lock_guard<std::mutex> g(workMu_);
  workCv_.notify_all();
}

Status Communicator::waitIdle() {
  std::unique_lock<std::mutex> lk(workMu_);
  // Tasks end by themselves: by completing, by the timeout, or at once after an abort.
  workCv_.wait(lk, [&] { return outstanding_.load(std::memory_order_acquire) == 0; });
  return asyncError();
}

void Communicator::abort() {
  if (!abort_.exchange(true, std::memory_order_acq_rel)) (void)writeDump("chorusCommAbort");
  // Wake anything that waits on a FIFO of this communicator so it sees the flag.
  {
    std::lock_guard<std::mutex> g(connMu_);
    for (auto& c : connections_) c->fifo().close();
  }
  stopTraffic();
}

}  // namespace chorus
