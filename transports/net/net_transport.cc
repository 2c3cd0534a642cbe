// The net transport: FIFOs between ranks on different hosts (or wherever shm is disabled), moved by
// proxy threads over a network (include/chorus/net.h), as NCCL's net transport sits over ncclNet:
// the one a plugin library provides (CHORUS_NET_PLUGIN; one that cannot be loaded or fails its
// self-test leaves a warning), else a built-in one: the ibverbs network where it offers a port,
// else sockets (CHORUS_NET forces either).
//
// Both sides keep their FIFO in local memory, registered on the connection's comm; the
// transport's proxy threads (transports/net/net_proxy.h) move its slots. Setting up a direction:
// the receiver listens on the network and sends the handle to the sender (phase 1); the sender
// starts connecting to it (phase 2; a connect that does not complete at once goes on in the proxy,
// so a network whose connect needs the peer's accept cannot deadlock the phases); the receiver
// accepts (phase 3), waiting up to the init timeout.
//
// A FIFO for kernels (device buffers between hosts) is the same FIFO in pinned host memory
// mapped for the rank's GPU: the sender's kernel fills slots there and the proxy, polling the
// tail (a kernel rings no eventfd), sends them; on the other side the proxy fills the receiver's
// slots and the receiver's kernel polls them. Such FIFOs carry the Simple protocol only (the
// tuner keeps LL off where a device connection crosses the network), and never by reference: the
// slot is the staging buffer.
#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "src/common/os.h"
#include "src/transport/transport.h"
#include "transports/ib/ib_net.h"
#include "transports/net/net_plugin.h"
#include "transports/net/net_proxy.h"
#include "transports/net/socket_net.h"
#include "transports/registry.h"

namespace chorus {
namespace {

// libchorus-net-<name>.so in the folder libchorus was loaded from, when there is one and the name
// is a bare word ("ofi"), else "".
std::string ownPluginPath(const std::string& name) {
  if (name.empty() || name.find_first_of("/.") != std::string::npos) return "";
  Dl_info info{};
  if (!::dladdr(reinterpret_cast<void*>(&ownPluginPath), &info) || !info.dli_fname) return "";
  std::string dir = info.dli_fname;
  const size_t slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : dir.substr(0, slash);
  const std::string path = dir + "/libchorus-net-" + name + ".so";
  return ::access(path.c_str(), R_OK) == 0 ? path : "";
}

// One name of CHORUS_NET_PLUGIN loaded: Chorus's own plugin of that name first
// (libchorus-net-<name>.so beside libchorus: CHORUS_NET_PLUGIN=ofi), else the library as named,
// else libnccl-net-<name>.so, as NCCL reads NCCL_NET_PLUGIN.
Result<LoadedNetwork> loadNamed(const std::string& plugin, int64_t probeTimeoutNs) {
  const std::string own = ownPluginPath(plugin);
  Result<LoadedNetwork> n = loadNetPlugin(own.empty() ? plugin : own, netLogger, probeTimeoutNs);
  const bool notFound = !n.isOk() && n.status().message().find("cannot load the net plugin") != std::string::npos;
  if (!own.empty() || !notFound || plugin.find('/') != std::string::npos) return n;
  Result<LoadedNetwork> named = loadNetPlugin("libnccl-net-" + plugin + ".so", netLogger, probeTimeoutNs);
  if (named.isOk() || named.status().message().find("cannot load the net plugin") == std::string::npos) return named;
  return Status(n.status().code(), n.status().message() + "; nor libnccl-net-" + plugin + ".so");
}

// The built-in network: the one CHORUS_NET names ("IB", "Socket"; any case), else the ibverbs
// network where it offers a port, else sockets (as NCCL chooses among its own). A wrong CHORUS_NET or
// CHORUS_IB_* setting is an error that names it.
Result<const chorusNet_v1_t*> builtinNetwork(const std::string& netName, const Logger& log) {
  if (::strcasecmp(netName.c_str(), "socket") == 0) return &socketNetwork();
  std::string why;
  CHORUS_ASSIGN_OR_RETURN(const bool offered, ib::ibOffered(&why));
  if (offered) return &ib::ibNetwork();
  if (::strcasecmp(netName.c_str(), "ib") == 0) {
    return Status(chorusSystemError, "CHORUS_NET=" + netName + " asks for the IB network, which is not offered here: " +
                                         why + ". Unset CHORUS_NET (or set it to Socket) to use sockets");
  }
  log.info(kSubsysNet | kSubsysInit, "NET/IB: not offered ({}); using the socket network", why);
  return &socketNetwork();
}

// The network CHORUS_NET_PLUGIN names, chosen once per process: as NCCL reads NCCL_NET_PLUGIN, a
// comma-separated list tried in order (the first that loads and passes its self-test), "none"
// for none; the built-in network when none can be used (with one warning saying why each could not).
Result<const chorusNet_v1_t*> chooseNetwork(const std::string& plugin, const std::string& netName,
                                            int64_t probeTimeoutNs, const Logger& log) {
  if (plugin.empty()) return builtinNetwork(netName, log);
  static std::mutex mu;
  static std::map<std::string, const chorusNet_v1_t*> chosen;  // null: no plugin, the built-in network
  std::lock_guard<std::mutex> g(mu);
  if (auto it = chosen.find(plugin); it != chosen.end()) {
    if (it->second) return it->second;
    return builtinNetwork(netName, log);
  }
  if (::strcasecmp(plugin.c_str(), "none") == 0) {
    log.info(kSubsysNet | kSubsysInit, "NET/Plugin: CHORUS_NET_PLUGIN=none, using the built-in network");
    chosen[plugin] = nullptr;
    return builtinNetwork(netName, log);
  }
  std::string why;
  size_t at = 0;
  while (at <= plugin.size()) {
    const size_t comma = std::min(plugin.find(',', at), plugin.size());
    const std::string name = plugin.substr(at, comma - at);
    at = comma + 1;
    if (name.empty()) continue;
    Result<LoadedNetwork> n = loadNamed(name, probeTimeoutNs);
    if (!n.isOk()) {
      why += (why.empty() ? "" : "; ") + n.status().message();
      continue;
    }
    log.info(kSubsysNet | kSubsysInit, "NET/Plugin: using {} ({}{}), network \"{}\"", n.value().path, n.value().symbol,
             n.value().adapted ? ", NCCL's interface through the adapter" : "", n.value().net->name);
    return chosen[plugin] = n.value().net;
  }
  log.warn(kSubsysNet, "CHORUS_NET_PLUGIN={}: {}; using the built-in network instead", plugin,
           why.empty() ? std::string("no plugin named") : why);
  chosen[plugin] = nullptr;  // tried once per process
  return builtinNetwork(netName, log);
}

class NetConnection : public Connection {
 public:
  NetConnection(int peer, Mapping mem, FifoView fifo, NetProxy* proxy)
      : Connection(peer), mem_(std::move(mem)), proxy_(proxy) {
    fifo_ = fifo;
    kernel_ = fifo;
  }
  ~NetConnection() override {
    fifo_.close();
    if (mappedFor_ != kNotMapped) unmapForKernels(mem_.data(), mappedFor_);
  }
  FifoView kernelFifo() const override { return kernel_; }
  ProxyLink proxyLink() const override { return link_; }
  bool polled() const { return mappedFor_ != kNotMapped; }
  // A FIFO for kernels of `device` (-1: host threads standing in for them).
  Status mapForKernels(int device) {
    CHORUS_ASSIGN_OR_RETURN(kernel_, chorus::mapForKernels(fifo_, mem_.data(), mem_.size(), device));
    mappedFor_ = device;
    return Status::ok();
  }

  // The proxy's copy of each slot arrives whole, after its header: the tail decides.
  bool headerPublishes() const override { return false; }
  bool viaProxy() const override { return true; }
  NetProxy* proxy() const { return proxy_; }
  char* mem() const { return static_cast<char*>(mem_.data()); }
  size_t memBytes() const { return mem_.size(); }

  // A host FIFO: its lane rings the proxy, and shares with it per slot where payloads are
  // (a send: the proxy sends them from the lane's buffers) or go (a receive: straight there).
  void linkHost(bool isSend) {
    link_.wakeFd = proxy_->notifyFd();
    if (isSend) {
      refs_.assign(fifo_.nslots, nullptr);
      link_.refs = refs_.data();
      return;
    }
    dests_ = std::make_unique<std::atomic<uintptr_t>[]>(fifo_.nslots);
    destBytes_.assign(fifo_.nslots, 0);
    for (uint32_t i = 0; i < fifo_.nslots; ++i) dests_[i].store(0);
    link_.dests = dests_.get();
    link_.destBytes = destBytes_.data();
  }
  const ProxyLink& link() const { return link_; }

  void* listenComm = nullptr;  // the receiver's, from setupRecv to finishRecv
  std::array<char, CHORUS_NET_HANDLE_MAXSIZE> handle{};

 private:
  static constexpr int kNotMapped = -2;
  Mapping mem_;
  NetProxy* proxy_;  // the transport's thread that moves this FIFO's slots
  FifoView kernel_;
  int mappedFor_ = kNotMapped;
  ProxyLink link_;
  std::vector<const char*> refs_;
  std::unique_ptr<std::atomic<uintptr_t>[]> dests_;
  std::vector<uint32_t> destBytes_;
};

// The communicator's net transport: its network's context, its proxy threads
// (CHORUS_SOCKET_NTHREADS, started with the first connection) and the FIFOs they serve.
class NetTransport : public Transport {
 public:
  explicit NetTransport(const TransportEnv& env)
      : log_(env.log),
        nthreads_(std::max(1, env.socketThreads)),
        timeoutNs_(env.connectTimeoutNs),
        checksum_(env.netChecksum),
        net_(&socketNetwork()) {
    Result<const chorusNet_v1_t*> net = chooseNetwork(
        env.netPlugin, env.netName, std::min<int64_t>(env.connectTimeoutNs, int64_t(10) * 1000000000), *env.log);
    if (net.isOk()) {
      net_ = net.value();
    } else {
      netStatus_ = net.status();  // said by the first connection that needs the network
    }
    name_ = std::string("NET/") + net_->name;
  }
  // The proxies first (their threads report into this transport until they end, and they close
  // the comms they serve), then listeners no one accepted on, then the context.
  ~NetTransport() override {
    proxies_.clear();
    for (void* l : listens_) (void)net_->closeListen(l);
    if (ctx_) (void)net_->finalize(ctx_);
  }

  const char* name() const override { return name_.c_str(); }
  bool canConnect(const PeerInfo&, const PeerInfo&) const override { return true; }
  bool canConnectDevice(const DevicePeer&, const DevicePeer&) const override { return true; }

  Result<std::unique_ptr<Connection>> setupRecv(ConnectContext& ctx, int peer, uint64_t tag,
                                                std::vector<char>* handle) override {
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<NetConnection> conn, makeLocalFifo(ctx, peer, false, tag));
    void* listen = nullptr;
    (void)takeNetMessage();
    const chorusResult_t rc = net_->listen(ctx_, 0, conn->handle.data(), &listen);
    if (rc != chorusSuccess || !listen) return Status(rc ? rc : chorusInternalError, failed("listen", rc, peer));
    {
      std::lock_guard<std::mutex> g(mu_);
      listens_.insert(listen);
    }
    conn->listenComm = listen;
    handle->assign(conn->handle.begin(), conn->handle.end());
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Result<std::unique_ptr<Connection>> connectSend(ConnectContext& ctx, int peer, uint64_t tag,
                                                  const std::vector<char>& handle) override {
    if (handle.size() != CHORUS_NET_HANDLE_MAXSIZE) {
      return internalError("the network handle from rank " + std::to_string(peer) + " has " +
                           std::to_string(handle.size()) + " bytes, not " + std::to_string(CHORUS_NET_HANDLE_MAXSIZE));
    }
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<NetConnection> conn, makeLocalFifo(ctx, peer, true, tag));
    NetProxy::Link l = link(*conn, true, peer, ctx.oob->peerAddress(peer));
    std::memcpy(l.handle.data(), handle.data(), handle.size());
    // The first try here; the proxy goes on with one that needs more.
    (void)takeNetMessage();
    const chorusResult_t rc = net_->connect(ctx_, 0, l.handle.data(), &l.comm);
    if (rc == chorusInvalidArgument) {
      // The handle is not this network's: most often the peer's host chose another one.
      return Status(rc, failed("connect", rc, peer) +
                            "; the peer may use another network (each host takes IB where it has an RDMA port, else "
                            "sockets): set CHORUS_NET or CHORUS_NET_PLUGIN alike on every host");
    }
    if (rc != chorusSuccess) return Status(rc, failed("connect", rc, peer));
    serve(*conn, std::move(l));
    return std::unique_ptr<Connection>(std::move(conn));
  }

  Status finishRecv(ConnectContext& ctx, Connection& c, int peer, uint64_t) override {
    auto& conn = static_cast<NetConnection&>(c);
    NetProxy::Link l = link(conn, false, peer, ctx.oob->peerAddress(peer));
    // Waited for as the bootstrap waits for a peer: within the init timeout, ended by an abort, a
    // failure notice, or the peer's process going.
    (void)takeNetMessage();
    CHORUS_TRY(ctx.oob->awaitPeer(
        peer, "a network connection",
        [&]() -> Result<bool> {
          const chorusResult_t rc = net_->accept(conn.listenComm, &l.comm);
          if (rc != chorusSuccess) return Status(rc, failed("accept", rc, peer));
          return l.comm != nullptr;
        },
        timeoutNs_));
    {
      std::lock_guard<std::mutex> g(mu_);
      listens_.erase(conn.listenComm);
    }
    (void)net_->closeListen(conn.listenComm);
    conn.listenComm = nullptr;
    serve(conn, std::move(l));
    return Status::ok();
  }

  // Proxies may send from and receive into the caller's buffers (by reference): close their
  // FIFOs and wait until the proxies are past any call in flight.
  void stopTraffic() override {
    std::lock_guard<std::mutex> g(mu_);
    for (const FifoView& f : served_) f.close();
    for (auto& p : proxies_) p->quiesce(int64_t(1000) * 1000000);
  }

  std::vector<Status> kernelFifoErrors() const override {
    std::lock_guard<std::mutex> g(failMu_);
    return kernelFailures_;
  }

  std::vector<Status> dataErrors() const override {
    std::lock_guard<std::mutex> g(failMu_);
    return dataFailures_;
  }

 private:
  std::string failed(const char* call, chorusResult_t rc, int peer) const {
    std::string why = name_ + ": " + call + " for the connection with rank " + std::to_string(peer) + " failed (" +
                      chorusGetErrorString(rc) + ")";
    const std::string said = takeNetMessage();
    return said.empty() ? why : why + ": " + said;
  }

  // A FIFO in this process's memory, served by one of the proxies: connections spread over them
  // by peer, direction and family/channel (the tag), so the two directions of a pair and the
  // channels to one peer land on different threads where there are enough.
  Result<std::unique_ptr<NetConnection>> makeLocalFifo(ConnectContext& ctx, int peer, bool isSend, uint64_t tag) {
    CHORUS_TRY(netStatus_);
    std::lock_guard<std::mutex> g(mu_);
    if (!ctx_) {
      (void)takeNetMessage();
      const chorusResult_t rc = net_->init(&ctx_, 0, nullptr, netLogger);
      if (rc != chorusSuccess) {
        ctx_ = nullptr;
        return Status(rc, failed("init", rc, peer));
      }
    }
    if (proxies_.empty()) {
      std::vector<std::unique_ptr<NetProxy>> started;
      for (int t = 0; t < nthreads_; ++t) {
        started.push_back(std::make_unique<NetProxy>(
            *log_, net_, ctx_,
            [this](int p, const std::string& name, const std::string& why, bool corrupt) {
              connectionFailed(p, name, why, corrupt);
            },
            checksum_));
        CHORUS_TRY(started.back()->start());
      }
      proxies_ = std::move(started);  // all of them, or none (the next connection tries again)
    }
    const uint64_t slot = static_cast<uint64_t>(peer) * 2 + (isSend ? 1 : 0) + (tag ^ (tag >> 40));
    NetProxy* proxy = proxies_[slot % proxies_.size()].get();
    const size_t bytes =
        ctx.forKernels ? deviceFifoBytes(ctx.nslots, ctx.slotBytes) : fifoBytes(ctx.nslots, ctx.slotBytes);
    CHORUS_ASSIGN_OR_RETURN(Mapping m, Mapping::map(-1, bytes));
    FifoView fifo = FifoView::layout(m.data(), ctx.nslots, ctx.slotBytes);
    auto conn = std::make_unique<NetConnection>(peer, std::move(m), fifo, proxy);
    if (ctx.forKernels) {
      CHORUS_TRY(conn->mapForKernels(ctx.cudaDevice));
    } else {
      conn->linkHost(isSend);
    }
    return conn;
  }

  NetProxy::Link link(const NetConnection& conn, bool isSend, int peer, std::string peerName) const {
    NetProxy::Link l;
    l.isSend = isSend;
    l.peer = peer;
    l.peerName = std::move(peerName);
    l.fifo = conn.fifo();
    l.lane = conn.link();
    l.polled = conn.polled();
    l.mem = conn.mem();
    l.memBytes = conn.memBytes();
    l.deadlineNs = nowNs() + timeoutNs_;
    return l;
  }

  // A proxy's FIFO for kernels broke (on the proxy's thread): the first such failure about each
  // peer, for the communicator's watchdog, which counts it only while kernels wait on that peer.
  // A peer's other connections (channels, directions) ending after it add nothing.
  void connectionFailed(int peer, const std::string& name, const std::string& why, bool corrupt) {
    std::lock_guard<std::mutex> g(failMu_);
    std::vector<Status>& list = corrupt ? dataFailures_ : kernelFailures_;
    for (const Status& s : list) {
      if (s.subject() == peer) return;
    }
    list.push_back(corrupt ? remoteError(why).about(peer)
                           : remoteError("the network connection to rank " + std::to_string(peer) + " (" + name +
                                         "), which this communicator's kernels use, ended: " + why)
                                 .about(peer));
  }

  // Hands the connection's FIFO and comm to its proxy. Only from here on may stopTraffic touch the
  // FIFO: the connection is the communicator's by then and outlives this transport (a connection
  // whose setup failed earlier was freed with nothing of it kept here).
  void serve(NetConnection& conn, NetProxy::Link l) {
    conn.proxy()->add(std::move(l));
    std::lock_guard<std::mutex> g(mu_);
    served_.push_back(conn.fifo());
  }

  const Logger* log_;
  int nthreads_;
  int64_t timeoutNs_;
  bool checksum_;  // CHORUS_NET_CHECKSUM
  const chorusNet_v1_t* net_;
  Status netStatus_;  // the network could not be chosen: why
  std::string name_;
  void* ctx_ = nullptr;  // the network's context, made with the first connection
  std::mutex mu_;        // ctx_, proxies_, served_ and listens_, against stopTraffic from a failing thread
  std::vector<std::unique_ptr<NetProxy>> proxies_;
  std::vector<FifoView> served_;  // the FIFOs handed to a proxy, for stopTraffic
  std::set<void*> listens_;       // listening comms not accepted on yet
  mutable std::mutex failMu_;
  std::vector<Status> kernelFailures_;  // guarded by failMu_: one per peer at most, in the order they came
  std::vector<Status> dataFailures_;    // guarded by failMu_: corrupted data, one per peer at most
};

}  // namespace

std::unique_ptr<Transport> makeNetTransport(const TransportEnv& env) { return std::make_unique<NetTransport>(env); }

}  // namespace chorus
