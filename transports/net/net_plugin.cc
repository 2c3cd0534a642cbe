#include "transports/net/net_plugin.h"

#include <dlfcn.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "src/common/os.h"
#include "src/common/settings.h"
#include "transports/net/nccl_net.h"

namespace chorus {
namespace {

using namespace ncclnet;

chorusResult_t asResult(NcclResult rc) {
  return rc >= chorusSuccess && rc < chorusNumResults ? static_cast<chorusResult_t>(rc) : chorusInternalError;
}

// What a plugin's profiler events go to: nothing (Chorus has no profiler plugin interface).
NcclResult noProfiler(void** eHandle, int, void*, int64_t, void*) {
  if (eHandle) *eHandle = nullptr;
  return chorusSuccess;
}

template <int V>
struct Traits;
template <>
struct Traits<8> {
  using Net = Net_v8;
  using Props = Properties_v8;
};
template <>
struct Traits<9> {
  using Net = Net_v9;
  using Props = Properties_v9;
};
template <>
struct Traits<10> {
  using Net = Net_v10;
  using Props = Properties_v10;
};
template <>
struct Traits<11> {
  using Net = Net_v11;
  using Props = Properties_v11;
};
template <>
struct Traits<12> {
  using Net = Net_v12;
  using Props = Properties_v12;
};

// A send or receive comm of the plugin's, wrapped with the requests made on it: each remembers how
// many sizes its test reports (NCCL's test does not say). The requests live in the comm, so those
// never tested are freed with it.
struct AdComm;
struct Req {
  AdComm* comm = nullptr;
  void* inner = nullptr;
  int n = 0;
  bool inUse = false;
};
struct AdComm {
  void* inner = nullptr;
  Req reqs[CHORUS_NET_MAX_REQUESTS];
  Req* take() {
    for (Req& r : reqs) {
      if (!r.inUse) {
        r.comm = this;
        r.inUse = true;
        return &r;
      }
    }
    return nullptr;
  }
};
void* innerOf(void* comm) { return static_cast<AdComm*>(comm)->inner; }
void* wrapComm(void* inner) { return inner ? new AdComm{inner, {}} : nullptr; }

// chorusNet_v1_t over NCCL's ncclNet_vV_t: the table's functions are plain function pointers, so
// each plugin served gets an instance of its own (slot S), up to kSlots plugins per version.
constexpr int kSlots = 4;
template <int V, int S>
struct Adapter {
  using Net = typename Traits<V>::Net;
  using Props = typename Traits<V>::Props;
  static inline const Net* p = nullptr;
  // Before v11 init is process-wide: once per plugin this slot serves (bind starts again).
  static inline std::mutex initMu;
  static inline bool initDone = false;
  static inline NcclResult initRc = chorusSuccess;
  static inline chorusNet_v1_t table{};

  struct Ctx {
    void* inner = nullptr;  // v11 on: the plugin's context
  };

  static chorusResult_t init(void** ctx, uint64_t commId, const chorusNetCommConfig_v1_t* config,
                             chorusNetLogger_t logger) {
    if (!ctx) return chorusInvalidArgument;
    auto* c = new Ctx();
    if constexpr (V >= 11) {
      CommConfig cc{config ? config->trafficClass : -1};
      const NcclResult rc = p->init(&c->inner, commId, &cc, logger, noProfiler);
      if (rc != chorusSuccess) {
        delete c;
        return asResult(rc);
      }
    } else {
      {
        std::lock_guard<std::mutex> g(initMu);
        if (!initDone) {
          if constexpr (V == 10) {
            initRc = p->init(logger, noProfiler);
          } else {
            initRc = p->init(logger);
          }
          initDone = true;
        }
      }
      if (initRc != chorusSuccess) {
        delete c;
        return asResult(initRc);
      }
    }
    *ctx = c;
    return chorusSuccess;
  }

  static chorusResult_t finalize(void* ctx) {
    auto* c = static_cast<Ctx*>(ctx);
    if (!c) return chorusInvalidArgument;
    NcclResult rc = chorusSuccess;
    if constexpr (V >= 11) rc = p->finalize(c->inner);
    delete c;
    return asResult(rc);
  }

  static chorusResult_t devices(int* ndev) { return asResult(p->devices(ndev)); }

  static chorusResult_t getProperties(int dev, chorusNetProperties_v1_t* out) {
    if (!out) return chorusInvalidArgument;
    Props q{};
    const NcclResult rc = p->getProperties(dev, &q);
    if (rc != chorusSuccess) return asResult(rc);
    *out = chorusNetProperties_v1_t{};
    out->name = q.name;
    out->pciPath = q.pciPath;
    out->guid = q.guid;
    out->ptrSupport = q.ptrSupport;
    out->regIsGlobal = q.regIsGlobal;
    out->speed = q.speed;
    out->port = q.port;
    out->latency = q.latency;
    out->maxComms = q.maxComms;
    out->maxRecvs = q.maxRecvs;
    if constexpr (V >= 9) {
      out->forceFlush = q.forceFlush;
      out->maxP2pBytes = q.maxP2pBytes;
      out->maxCollBytes = q.maxCollBytes;
    } else {
      out->maxP2pBytes = INT_MAX;
      out->maxCollBytes = INT_MAX;
    }
    return chorusSuccess;
  }

  static chorusResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
    if constexpr (V >= 11) {
      return asResult(p->listen(static_cast<Ctx*>(ctx)->inner, dev, handle, listenComm));
    } else {
      return asResult(p->listen(dev, handle, listenComm));
    }
  }

  static chorusResult_t connect(void* ctx, int dev, void* handle, void** sendComm) {
    if (!sendComm) return chorusInvalidArgument;
    DeviceHandle* none = nullptr;  // no device offload
    void* inner = nullptr;
    NcclResult rc;
    if constexpr (V >= 11) {
      rc = p->connect(static_cast<Ctx*>(ctx)->inner, dev, handle, &inner, &none);
    } else if constexpr (V == 10) {
      CommConfig cc{-1};
      rc = p->connect(dev, &cc, handle, &inner, &none);
    } else {
      rc = p->connect(dev, handle, &inner, &none);
    }
    *sendComm = rc == chorusSuccess ? wrapComm(inner) : nullptr;
    return asResult(rc);
  }

  static chorusResult_t accept(void* listenComm, void** recvComm) {
    if (!recvComm) return chorusInvalidArgument;
    DeviceHandle* none = nullptr;
    void* inner = nullptr;
    const NcclResult rc = p->accept(listenComm, &inner, &none);
    *recvComm = rc == chorusSuccess ? wrapComm(inner) : nullptr;
    return asResult(rc);
  }

  static chorusResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    return asResult(p->regMr(innerOf(comm), data, size, type, mhandle));
  }
  static chorusResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                    void** mhandle) {
    return asResult(p->regMrDmaBuf(innerOf(comm), data, size, type, offset, fd, mhandle));
  }
  static chorusResult_t deregMr(void* comm, void* mhandle) { return asResult(p->deregMr(innerOf(comm), mhandle)); }

  // A request slot of the comm for the call f(&inner), kept when the plugin made a request.
  template <typename F>
  static chorusResult_t issue(void* comm, int n, void** request, F&& f) {
    *request = nullptr;
    Req* r = static_cast<AdComm*>(comm)->take();
    if (!r) return chorusSuccess;  // every slot in flight: call again
    void* inner = nullptr;
    const NcclResult rc = f(&inner);
    if (rc != chorusSuccess || !inner) {
      r->inUse = false;
      return asResult(rc);
    }
    r->inner = inner;
    r->n = n;
    *request = r;
    return chorusSuccess;
  }

  static chorusResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
    if (!request || !sendComm) return chorusInvalidArgument;
    if (V == 8 && size > size_t(INT_MAX)) return chorusInvalidArgument;  // the v8 interface carries int sizes
    void* c = innerOf(sendComm);
    return issue(sendComm, 1, request, [&](void** inner) -> NcclResult {
      if constexpr (V == 8) {
        return p->isend(c, data, static_cast<int>(size), tag, mhandle, inner);
      } else if constexpr (V == 9) {
        return p->isend(c, data, size, tag, mhandle, inner);
      } else {
        return p->isend(c, data, size, tag, mhandle, nullptr, inner);
      }
    });
  }

  static chorusResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                              void** request) {
    if (!request || !recvComm || n < 1 || !sizes) return chorusInvalidArgument;
    void* c = innerOf(recvComm);
    if constexpr (V == 8) {
      std::vector<int> isz(n);
      for (int i = 0; i < n; ++i) {
        if (sizes[i] > size_t(INT_MAX)) return chorusInvalidArgument;
        isz[i] = static_cast<int>(sizes[i]);
      }
      return issue(recvComm, n, request,
                   [&](void** inner) { return p->irecv(c, n, data, isz.data(), tags, mhandles, inner); });
    } else if constexpr (V == 9) {
      return issue(recvComm, n, request,
                   [&](void** inner) { return p->irecv(c, n, data, sizes, tags, mhandles, inner); });
    } else {
      std::vector<void*> phandles(n, nullptr);
      return issue(recvComm, n, request,
                   [&](void** inner) { return p->irecv(c, n, data, sizes, tags, mhandles, phandles.data(), inner); });
    }
  }

  static chorusResult_t iflush(void* recvComm, int n, void** data, size_t* sizes, void** mhandles, void** request) {
    if (!request || !recvComm || n < 0) return chorusInvalidArgument;
    std::vector<int> isz(n);
    for (int i = 0; i < n; ++i) isz[i] = sizes[i] > size_t(INT_MAX) ? INT_MAX : static_cast<int>(sizes[i]);
    void* c = innerOf(recvComm);
    return issue(recvComm, n, request,
                 [&](void** inner) { return p->iflush(c, n, data, isz.data(), mhandles, inner); });
  }

  static chorusResult_t test(void* request, int* done, size_t* sizes) {
    auto* r = static_cast<Req*>(request);
    if (!r || !done || !r->inUse) return chorusInvalidArgument;
    std::vector<int> isz(r->n, 0);
    const NcclResult rc = p->test(r->inner, done, isz.data());
    if (rc != chorusSuccess) return asResult(rc);
    if (*done) {
      if (sizes) {
        for (int i = 0; i < r->n; ++i) sizes[i] = static_cast<size_t>(isz[i] < 0 ? 0 : isz[i]);
      }
      r->inUse = false;
    }
    return chorusSuccess;
  }

  static chorusResult_t closeComm(void* comm, NcclResult (*close)(void*)) {
    auto* c = static_cast<AdComm*>(comm);
    if (!c) return chorusInvalidArgument;
    const NcclResult rc = close(c->inner);
    delete c;  // with the requests never tested
    return asResult(rc);
  }
  static chorusResult_t closeSend(void* c) { return closeComm(c, p->closeSend); }
  static chorusResult_t closeRecv(void* c) { return closeComm(c, p->closeRecv); }
  static chorusResult_t closeListen(void* c) { return asResult(p->closeListen(c)); }

  static const chorusNet_v1_t* bind(const Net* net) {
    p = net;
    {
      std::lock_guard<std::mutex> g(initMu);
      initDone = false;
    }
    table = chorusNet_v1_t{net->name, init,      finalize,  devices,     getProperties, listen, connect,
                           accept,    regMr,     nullptr,   deregMr,     isend,         irecv,  iflush,
                           test,      closeSend, closeRecv, closeListen, nullptr};
    if (net->regMrDmaBuf) table.regMrDmaBuf = regMrDmaBuf;
    return &table;
  }
};

// The functions a network needs that `n` (chorusNet_v1_t or an NCCL ncclNet_vN_t: the members have
// the same names) lacks, by name, or empty. `withFinalize`: its interface has finalize.
template <typename Net>
std::string missing(const Net& n, bool withFinalize) {
  std::string m;
  auto need = [&](const void* f, const char* name) {
    if (!f) m += std::string(m.empty() ? "" : ", ") + name;
  };
  need(n.name, "name");
  need(reinterpret_cast<const void*>(n.init), "init");
  if constexpr (requires { n.finalize; }) {
    if (withFinalize) need(reinterpret_cast<const void*>(n.finalize), "finalize");
  }
  need(reinterpret_cast<const void*>(n.devices), "devices");
  need(reinterpret_cast<const void*>(n.getProperties), "getProperties");
  need(reinterpret_cast<const void*>(n.listen), "listen");
  need(reinterpret_cast<const void*>(n.connect), "connect");
  need(reinterpret_cast<const void*>(n.accept), "accept");
  need(reinterpret_cast<const void*>(n.regMr), "regMr");
  need(reinterpret_cast<const void*>(n.deregMr), "deregMr");
  need(reinterpret_cast<const void*>(n.isend), "isend");
  need(reinterpret_cast<const void*>(n.irecv), "irecv");
  need(reinterpret_cast<const void*>(n.iflush), "iflush");
  need(reinterpret_cast<const void*>(n.test), "test");
  need(reinterpret_cast<const void*>(n.closeSend), "closeSend");
  need(reinterpret_cast<const void*>(n.closeRecv), "closeRecv");
  need(reinterpret_cast<const void*>(n.closeListen), "closeListen");
  return m;
}

// The adapter slots of each version: which plugin's symbol each serves (null: free).
const void* slotOwner[13][kSlots] = {};

template <int V, int... S>
const chorusNet_v1_t* bindSlot(int slot, const void* sym, std::integer_sequence<int, S...>) {
  const chorusNet_v1_t* t = nullptr;
  ((slot == S ? (t = Adapter<V, S>::bind(static_cast<const typename Adapter<V, S>::Net*>(sym))) : t), ...);
  return t;
}

// Adapts an NCCL plugin's ncclNetPlugin_vV; *slotTaken: the slot it took (freed on a later failure).
template <int V>
Result<const chorusNet_v1_t*> adaptNccl(void* sym, const std::string& path, const void*** slotTaken) {
  const auto* net = static_cast<const typename Adapter<V, 0>::Net*>(sym);
  const std::string m = missing(*net, V >= 11);
  if (!m.empty()) {
    return invalidUsage("the net plugin " + path + " exports ncclNetPlugin_v" + std::to_string(V) + " without " + m);
  }
  for (int k = 0; k < kSlots; ++k) {
    if (slotOwner[V][k]) continue;
    slotOwner[V][k] = sym;
    *slotTaken = &slotOwner[V][k];
    return bindSlot<V>(k, sym, std::make_integer_sequence<int, kSlots>{});
  }
  return invalidUsage("the net plugin " + path + " would be NCCL plugin number " + std::to_string(kSlots + 1) +
                      " of interface v" + std::to_string(V) + " in this process; at most " + std::to_string(kSlots) +
                      " can be used");
}

// The self-test: a connection of device 0 to itself, and one message over it, each step within
// the deadline. Returns what went wrong, or an empty string.
std::string selfTest(const chorusNet_v1_t& net, void* ctx, int64_t timeoutNs) {
  const int64_t deadline = nowNs() + timeoutNs;
  const std::string late = "did not complete within " + std::to_string(timeoutNs / 1000000) + " ms";
  // Between tries that found nothing done: a plugin that takes its time gets it without a spinning core.
  const auto nap = [] { std::this_thread::sleep_for(std::chrono::microseconds(50)); };
  auto rcText = [](const char* call, chorusResult_t rc) {
    return std::string(call) + " failed (" + chorusGetErrorString(rc) + ")";
  };
  char handle[CHORUS_NET_HANDLE_MAXSIZE] = {};
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  void* smr = nullptr;
  void* rmr = nullptr;
  std::string why;
  char out[64];
  char in[64] = {};
  for (size_t i = 0; i < sizeof(out); ++i) out[i] = static_cast<char>(i * 7 + 1);
  chorusResult_t rc = net.listen(ctx, 0, handle, &listen);
  if (rc != chorusSuccess || !listen) {
    why = rcText("listen", rc);
  } else {
    // Both ends in turn, as two ranks would, until both are made.
    while (why.empty() && (!send || !recv)) {
      if (!send && (rc = net.connect(ctx, 0, handle, &send)) != chorusSuccess) why = rcText("connect", rc);
      if (why.empty() && !recv && (rc = net.accept(listen, &recv)) != chorusSuccess) why = rcText("accept", rc);
      if (why.empty() && (!send || !recv) && nowNs() > deadline) {
        why = std::string(!send ? "connect" : "accept") + " " + late;
      }
      if (why.empty() && (!send || !recv)) nap();
    }
  }
  if (why.empty() && (rc = net.regMr(send, out, sizeof(out), CHORUS_NET_PTR_HOST, &smr)) != chorusSuccess) {
    smr = nullptr;
    why = rcText("regMr", rc);
  }
  if (why.empty() && (rc = net.regMr(recv, in, sizeof(in), CHORUS_NET_PTR_HOST, &rmr)) != chorusSuccess) {
    rmr = nullptr;
    why = rcText("regMr", rc);
  }
  void* rreq = nullptr;
  void* sreq = nullptr;
  while (why.empty() && (!rreq || !sreq)) {
    void* data = in;
    size_t size = sizeof(in);
    int tag = 7;
    if (!rreq && (rc = net.irecv(recv, 1, &data, &size, &tag, &rmr, &rreq)) != chorusSuccess) why = rcText("irecv", rc);
    if (why.empty() && !sreq && (rc = net.isend(send, out, sizeof(out), 7, smr, &sreq)) != chorusSuccess) {
      why = rcText("isend", rc);
    }
    if (why.empty() && (!rreq || !sreq) && nowNs() > deadline) why = "posting a message " + late;
    if (why.empty() && (!rreq || !sreq)) nap();
  }
  for (bool rdone = false, sdone = false; why.empty() && (!rdone || !sdone);) {
    int done = 0;
    size_t got = 0;
    if (!sdone && (rc = net.test(sreq, &done, nullptr)) != chorusSuccess) why = rcText("test of a send", rc);
    sdone = sdone || done;
    done = 0;
    if (why.empty() && !rdone && (rc = net.test(rreq, &done, &got)) != chorusSuccess) {
      why = rcText("test of a receive", rc);
    }
    if (why.empty() && done && !rdone) {
      rdone = true;
      if (got != sizeof(out) || std::memcmp(in, out, sizeof(out)) != 0) {
        why = "a 64-byte message arrived as " + std::to_string(got) + " bytes, or with other bytes";
      }
    }
    if (why.empty() && (!rdone || !sdone) && nowNs() > deadline) why = "a 64-byte message " + late;
    if (why.empty() && (!rdone || !sdone)) nap();
  }
  if (smr) (void)net.deregMr(send, smr);
  if (rmr) (void)net.deregMr(recv, rmr);
  if (send) (void)net.closeSend(send);
  if (recv) (void)net.closeRecv(recv);
  if (listen) (void)net.closeListen(listen);
  return why;
}

// Read by the OFI network, a plugin library of its own (transports/net/ofi_net.cc, which cannot see
// this registry): declared here, where plugins are loaded, so that the name is known.
const TextSetting kOfiProvider{"CHORUS_OFI_PROVIDER", SettingScope::kProcess,
                               "the libfabric provider the OFI network uses"};

}  // namespace

Result<LoadedNetwork> loadNetPlugin(const std::string& path, chorusNetLogger_t logger, int64_t probeTimeoutNs) {
  static std::mutex mu;
  static std::map<std::string, LoadedNetwork> loaded;
  std::lock_guard<std::mutex> g(mu);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = ::dlerror();
    return invalidUsage("cannot load the net plugin " + path + ": " + (e ? e : "dlopen failed"));
  }
  LoadedNetwork n;
  n.path = path;
  // On any failure below the library goes again, and the adapter slot it took is free.
  struct Unload {
    void* lib;
    const void** slot = nullptr;
    bool keep = false;
    ~Unload() {
      if (keep) return;
      if (slot) *slot = nullptr;
      ::dlclose(lib);
    }
  } unload{lib};
  if (void* s = ::dlsym(lib, "chorusNetPlugin_v1")) {
    const auto* net = static_cast<const chorusNet_v1_t*>(s);
    const std::string m = missing(*net, true);
    if (!m.empty()) return invalidUsage("the net plugin " + path + " exports chorusNetPlugin_v1 without " + m);
    n.net = net;
    n.symbol = "chorusNetPlugin_v1";
  } else {
    struct Candidate {
      int version;
      Result<const chorusNet_v1_t*> (*adapt)(void*, const std::string&, const void***);
    };
    const Candidate candidates[] = {
        {12, adaptNccl<12>}, {11, adaptNccl<11>}, {10, adaptNccl<10>}, {9, adaptNccl<9>}, {8, adaptNccl<8>}};
    for (const Candidate& c : candidates) {
      const std::string name = "ncclNetPlugin_v" + std::to_string(c.version);
      void* s = ::dlsym(lib, name.c_str());
      if (!s) continue;
      CHORUS_ASSIGN_OR_RETURN(n.net, c.adapt(s, path, &unload.slot));
      n.symbol = name;
      n.adapted = true;
      break;
    }
    if (!n.net) {
      return invalidUsage("the net plugin " + path +
                          " exports none of chorusNetPlugin_v1 and ncclNetPlugin_v12 to ncclNetPlugin_v8: it is not a "
                          "network plugin this build of Chorus can use");
    }
  }
  // One try: a context, its devices, and the context closed again.
  void* ctx = nullptr;
  chorusResult_t rc = n.net->init(&ctx, 0, nullptr, logger);
  if (rc != chorusSuccess) {
    return Status(rc, "the net plugin " + path + " (" + n.symbol + ", \"" + n.net->name + "\") failed to initialise");
  }
  int ndev = 0;
  rc = n.net->devices(&ndev);
  const std::string failed = rc == chorusSuccess && ndev >= 1 ? selfTest(*n.net, ctx, probeTimeoutNs) : "";
  (void)n.net->finalize(ctx);
  if (rc != chorusSuccess) {
    return Status(rc, "the net plugin " + path + " (\"" + std::string(n.net->name) + "\") could not count its devices");
  }
  if (ndev < 1)
    return invalidUsage("the net plugin " + path + " (\"" + std::string(n.net->name) + "\") has no devices");
  if (!failed.empty()) {
    return remoteError("the net plugin " + path + " (\"" + std::string(n.net->name) +
                       "\") failed its self-test, a connection of device 0 to itself: " + failed);
  }
  unload.keep = true;
  loaded[path] = n;
  return n;
}

}  // namespace chorus
