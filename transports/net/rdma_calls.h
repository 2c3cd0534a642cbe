// The network ABI's calls that are the same in every network over the RDMA protocol
// (transports/net/rdma_proto.h): the context and its finalize, isend, irecv, test and close.
// A network's comm type has `ctx` (a Context<Comm>*), `proto` (a std::unique_ptr<Proto>) and
// `isSend`; its registration handle type has `ref` (a MemRef). `net` names the network in logs
// ("OFI network").
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>

#include "include/chorus/net.h"
#include "transports/net/rdma_proto.h"

namespace chorus {
namespace rdma {

constexpr unsigned long kNetLogFlag = 0x10;  // NCCL_NET

template <typename Comm>
struct Context {
  uint64_t commId = 0;
  chorusNetLogger_t logger = nullptr;
  std::atomic<int> comms{0};  // listening, send and receive comms open
  std::mutex mu;
  std::set<Comm*> connecting;  // send comms whose connect has not returned them yet
};

// Ends a context: connects the caller gave up on (their connection failed before the peer
// answered) are freed; comms still open are refused.
template <typename Comm>
chorusResult_t finalizeContext(void* ctx, const char* net) {
  auto* c = static_cast<Context<Comm>*>(ctx);
  if (!c) return chorusInvalidArgument;
  {
    std::lock_guard<std::mutex> g(c->mu);
    for (Comm* comm : c->connecting) {
      --c->comms;
      delete comm;
    }
    c->connecting.clear();
  }
  if (c->comms.load() != 0) {
    if (c->logger) {
      c->logger(chorusNetLogWarn, kNetLogFlag, __FILE__, __LINE__,
                "%s: finalize with %d comms still open; close them first", net, c->comms.load());
    }
    return chorusInvalidUsage;
  }
  delete c;
  return chorusSuccess;
}

// `rc`, after the comm's failure (once) went to the log: at INFO when it is the peer's goodbye.
inline chorusResult_t reported(Proto* p, chorusNetLogger_t logger, const char* net, chorusResult_t rc) {
  if (p->firstReport() && logger) {
    logger(p->closedByPeer() ? chorusNetLogInfo : chorusNetLogWarn, kNetLogFlag, __FILE__, __LINE__, "%s: %s", net,
           p->failure().c_str());
  }
  return rc;
}

template <typename Comm, typename MrHandle>
chorusResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request, const char* net) {
  auto* c = static_cast<Comm*>(sendComm);
  if (!c || !request || !c->isSend) return chorusInvalidArgument;
  const MemRef* ref = mhandle ? &static_cast<MrHandle*>(mhandle)->ref : nullptr;
  return reported(c->proto.get(), c->ctx->logger, net, c->proto->isend(data, size, tag, ref, request));
}

template <typename Comm, typename MrHandle>
chorusResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request,
                     const char* net) {
  auto* c = static_cast<Comm*>(recvComm);
  if (!c || !request || c->isSend || n < 1 || n > kMaxRecvs) return chorusInvalidArgument;
  MemRef* refs[kMaxRecvs];
  for (int i = 0; i < n; ++i) refs[i] = mhandles && mhandles[i] ? &static_cast<MrHandle*>(mhandles[i])->ref : nullptr;
  return reported(c->proto.get(), c->ctx->logger, net, c->proto->irecv(n, data, sizes, tags, refs, request));
}

template <typename Comm>
chorusResult_t test(void* request, int* done, size_t* sizes, const char* net) {
  if (!request || !done) return chorusInvalidArgument;
  Proto* p = Proto::owner(request);
  const chorusResult_t rc = Proto::testRequest(request, done, sizes);
  return reported(p, static_cast<Comm*>(p->user)->ctx->logger, net, rc);
}

// Closes a send or receive comm; the peer learns of it from a goodbye (for at most 50 ms of trying).
template <typename Comm>
chorusResult_t closeComm(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  if (!c) return chorusInvalidArgument;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (!c->proto->sayGoodbye() && std::chrono::steady_clock::now() < until) {
  }
  --c->ctx->comms;
  delete c;
  return chorusSuccess;
}

}  // namespace rdma
}  // namespace chorus
