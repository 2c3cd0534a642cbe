// A net plugin for the tests, built from Chorus's socket network (transports/net/socket_net.h):
// the same source makes libraries that export what a real plugin would, and the broken ones the
// loader must refuse (tests/net_test.cc, "[net_plugin]"):
//   CHORUS_PLUGIN_V1        chorusNetPlugin_v1 (Chorus's own interface)
//   CHORUS_PLUGIN_V11       ncclNetPlugin_v11, and ncclNetPlugin_v8 beside it (the loader takes v11)
//   CHORUS_PLUGIN_V8        ncclNetPlugin_v8 only
//   CHORUS_PLUGIN_BAD_INIT  ncclNetPlugin_v11 whose init fails
//   CHORUS_PLUGIN_MISSING   ncclNetPlugin_v11 without isend
//   CHORUS_PLUGIN_HANG      ncclNetPlugin_v11 whose connect never completes
//   none of them            no network symbol at all
// NCCL's interfaces are written from their documented layout (transports/net/nccl_net.h).
#include <climits>
#include <cstddef>
#include <vector>

#include "transports/net/nccl_net.h"
#include "transports/net/socket_net.h"

using namespace chorus::ncclnet;

namespace {

const chorusNet_v1_t& sock() { return chorus::socketNetwork(); }

// NCCL's test reports int sizes, as many as the request has messages.
NcclResult test(void* request, int* done, int* sizes) {
  const int n = chorus::socketRequestParts(request);
  std::vector<size_t> s(n > 0 ? n : 1, 0);
  const chorusResult_t rc = sock().test(request, done, s.data());
  if (rc == chorusSuccess && *done && sizes) {
    for (int i = 0; i < n; ++i) sizes[i] = s[i] > size_t(INT_MAX) ? INT_MAX : int(s[i]);
  }
  return rc;
}

NcclResult iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  std::vector<size_t> s(n);
  for (int i = 0; i < n; ++i) s[i] = size_t(sizes[i]);
  return sock().iflush(recvComm, n, data, s.data(), mhandles, request);
}

NcclResult accept(void* listenComm, void** recvComm, DeviceHandle** dev) {
  if (dev && *dev) return chorusInvalidUsage;  // no device offload here
  return sock().accept(listenComm, recvComm);
}

// ---- v11 ----
NcclResult initV11(void** ctx, uint64_t commId, CommConfig* config, Logger logger, ProfilerCallback prof) {
#ifdef CHORUS_PLUGIN_BAD_INIT
  (void)ctx, (void)commId, (void)config, (void)logger, (void)prof;
  return chorusSystemError;
#else
  (void)prof;
  chorusNetCommConfig_v1_t c{config ? config->trafficClass : -1};
  return sock().init(ctx, commId, &c, logger);
#endif
}
NcclResult getPropertiesV11(int dev, Properties_v11* props) {
  chorusNetProperties_v1_t p{};
  const chorusResult_t rc = sock().getProperties(dev, &p);
  if (rc != chorusSuccess) return rc;
  *props = Properties_v11{};
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->forceFlush = p.forceFlush;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = p.maxP2pBytes;
  props->maxCollBytes = p.maxCollBytes;
  props->maxMultiRequestSize = 1;
  return chorusSuccess;
}
NcclResult listenV11(void* ctx, int dev, void* handle, void** listenComm) {
  return sock().listen(ctx, dev, handle, listenComm);
}
NcclResult connectV11(void* ctx, int dev, void* handle, void** sendComm, DeviceHandle** devComm) {
  if (devComm && *devComm) return chorusInvalidUsage;
#ifdef CHORUS_PLUGIN_HANG
  (void)ctx, (void)dev, (void)handle;
  *sendComm = nullptr;  // "not yet", for ever
  return chorusSuccess;
#else
  return sock().connect(ctx, dev, handle, sendComm);
#endif
}
NcclResult isendV11(void* sendComm, void* data, size_t size, int tag, void* mhandle, void*, void** request) {
  return sock().isend(sendComm, data, size, tag, mhandle, request);
}
NcclResult irecvV11(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void**,
                    void** request) {
  return sock().irecv(recvComm, n, data, sizes, tags, mhandles, request);
}
NcclResult makeVDevice(int*, VDeviceProps*) { return chorusInvalidUsage; }
NcclResult setNetAttr(void*, NetAttr*) { return chorusSuccess; }

// ---- v8 ----
void* v8ctx = nullptr;  // v8 has one process-wide init
NcclResult initV8(Logger logger) { return sock().init(&v8ctx, 0, nullptr, logger); }
NcclResult getPropertiesV8(int dev, Properties_v8* props) {
  chorusNetProperties_v1_t p{};
  const chorusResult_t rc = sock().getProperties(dev, &p);
  if (rc != chorusSuccess) return rc;
  *props = Properties_v8{};
  props->name = p.name;
  props->pciPath = p.pciPath;
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->regIsGlobal = p.regIsGlobal;
  props->speed = p.speed;
  props->port = p.port;
  props->latency = p.latency;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  return chorusSuccess;
}
NcclResult listenV8(int dev, void* handle, void** listenComm) { return sock().listen(v8ctx, dev, handle, listenComm); }
NcclResult connectV8(int dev, void* handle, void** sendComm, DeviceHandle** devComm) {
  if (devComm && *devComm) return chorusInvalidUsage;
  return sock().connect(v8ctx, dev, handle, sendComm);
}
NcclResult isendV8(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  return sock().isend(sendComm, data, size_t(size), tag, mhandle, request);
}
NcclResult irecvV8(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  std::vector<size_t> s(n);
  for (int i = 0; i < n; ++i) s[i] = size_t(sizes[i]);
  return sock().irecv(recvComm, n, data, s.data(), tags, mhandles, request);
}

NcclResult regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return sock().regMr(comm, data, size, type, mhandle);
}
NcclResult deregMr(void* comm, void* mhandle) { return sock().deregMr(comm, mhandle); }
NcclResult devices(int* n) { return sock().devices(n); }
NcclResult closeSend(void* c) { return sock().closeSend(c); }
NcclResult closeRecv(void* c) { return sock().closeRecv(c); }
NcclResult closeListen(void* c) { return sock().closeListen(c); }
NcclResult finalizeV11(void* ctx) { return sock().finalize(ctx); }

}  // namespace

extern "C" {

#if defined(CHORUS_PLUGIN_V1)
extern __attribute__((visibility("default"))) const chorusNet_v1_t chorusNetPlugin_v1 = chorus::socketNetwork();
#endif

#if defined(CHORUS_PLUGIN_V11) || defined(CHORUS_PLUGIN_BAD_INIT) || defined(CHORUS_PLUGIN_MISSING) || \
    defined(CHORUS_PLUGIN_HANG)
extern __attribute__((visibility("default"))) const Net_v11 ncclNetPlugin_v11 = {
    "ChorusSocketAsNccl",
    initV11,
    devices,
    getPropertiesV11,
    listenV11,
    connectV11,
    accept,
    regMr,
    nullptr,
    deregMr,
#ifdef CHORUS_PLUGIN_MISSING
    nullptr,
#else
    isendV11,
#endif
    irecvV11,
    iflush,
    test,
    closeSend,
    closeRecv,
    closeListen,
    nullptr,
    nullptr,
    makeVDevice,
    finalizeV11,
    setNetAttr,
};
#endif

#if defined(CHORUS_PLUGIN_V11) || defined(CHORUS_PLUGIN_V8)
extern __attribute__((visibility("default"))) const Net_v8 ncclNetPlugin_v8 = {
    "ChorusSocketAsNcclV8",
    initV8,
    devices,
    getPropertiesV8,
    listenV8,
    connectV8,
    accept,
    regMr,
    nullptr,
    deregMr,
    isendV8,
    irecvV8,
    iflush,
    test,
    closeSend,
    closeRecv,
    closeListen,
    nullptr,
    nullptr,
};
#endif

#if !defined(CHORUS_PLUGIN_V1) && !defined(CHORUS_PLUGIN_V11) && !defined(CHORUS_PLUGIN_V8) && \
    !defined(CHORUS_PLUGIN_BAD_INIT) && !defined(CHORUS_PLUGIN_MISSING) && !defined(CHORUS_PLUGIN_HANG)
__attribute__((visibility("default"))) int chorusTestNotANetwork = 1;
#endif

}  // extern "C"
