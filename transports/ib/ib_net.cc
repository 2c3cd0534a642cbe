#include "transports/ib/ib_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "src/bootstrap/socket.h"
#include "src/common/config.h"
#include "src/common/os.h"
#include "transports/ib/ib_ports.h"
#include "transports/net/rdma_calls.h"
#include "transports/net/rdma_proto.h"
#include "transports/net/reg_cache.h"

namespace chorus {
namespace ib {
namespace {

namespace rdma = chorus::rdma;

constexpr uint64_t kHandleMagic = 0x3142494f524f4843ull;  // "CHOROIB1"
constexpr uint64_t kInfoMagic = 0x6f666e492d424943ull;
constexpr uint64_t kReadyMagic = 0x7964616552424943ull;
// The first word of a flush request: never the first word of a protocol request (a pointer).
constexpr uint64_t kFlushMagic = 0xf1f1f1f1f1f1f1f1ull;
constexpr unsigned long kNetFlag = 0x10;  // NCCL_NET
constexpr int kSendDepth = 128;           // work requests in flight per queue pair
constexpr int kRecvDepth = 256;           // receives posted per queue pair: each write with immediate takes one
constexpr size_t kMaxWrite = size_t(1) << 30;
constexpr size_t kSplitAlign = 128;  // NCCL's IB_WRITE_CHUNK_ALIGNMENT
constexpr int64_t kEofGraceNs = 100 * 1000 * 1000;
constexpr uint32_t kLivenessEvery = 256;  // polls between looks at the setup connection
constexpr size_t kMaxAccepting = 64;      // connections a listener sets up at once

#define IB_LOG(logger, level, ...)                                          \
  do {                                                                      \
    if (logger) (logger)(level, kNetFlag, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// ---- comms ----

struct Comm;
using Context = rdma::Context<Comm>;

struct Handle {
  uint64_t magic = 0;
  uint64_t nonce = 0;
  SockAddr addr;
  uint32_t dev = 0;
  uint32_t reserved = 0;
  Comm* pending = nullptr;  // connect's comm while the connection is being made
};
static_assert(sizeof(Handle) <= CHORUS_NET_HANDLE_MAXSIZE, "a handle must fit NCCL's 128 bytes");

// What each side tells the other over the setup connection.
struct ConnInfo {
  uint64_t magic = kInfoMagic;
  uint64_t nonce = 0;
  uint32_t nqps = 0;
  uint32_t qpn[kMaxQps] = {};
  uint32_t lid = 0;
  uint32_t mtu = 0;
  uint32_t infiniband = 0;
  uint32_t memKey = 0;
  uint64_t memAddr = 0;
  uint8_t gid[16] = {};
  char host[64] = {};
};

enum class Stage : uint8_t { kConnecting, kSendInfo, kRecvInfo, kSendReady, kRecvReady, kReady };

struct FlushReq {
  uint64_t magic = kFlushMagic;
  Comm* comm = nullptr;
  bool inUse = false;
  bool done = false;
};

struct Comm final : rdma::Wire {
  Context* ctx = nullptr;
  Hca* hca = nullptr;
  const Verbs* v = nullptr;
  const Settings* settings = nullptr;
  bool isSend = false;
  uint64_t nonce = 0;
  UniqueFd sock;
  Stage stage = Stage::kConnecting;
  size_t moved = 0;  // bytes of the setup message in flight
  ConnInfo local;
  ConnInfo remote;
  bool identified = false;  // the peer's information carried this connection's nonce
  uint64_t ready = 0;
  std::string peerText;

  ibv_cq* cq = nullptr;
  std::vector<ibv_qp*> qps;
  std::vector<int> inFlight;   // per queue pair: work requests not completed
  int recvDepth = kRecvDepth;  // receives kept posted per queue pair
  rdma::ProtoMem* ctrl = nullptr;
  ibv_mr* ctrlMr = nullptr;
  rdma::MemRef ctrlRef;
  std::unique_ptr<rdma::Proto> proto;

  struct Pending {
    const void* buf;
    size_t len;
    void* desc;
    uint64_t raddr;
    uint64_t rkey;
    uint32_t imm;
    void* ctx;
  };
  std::deque<Pending> backlog;  // writes no queue pair had room for yet
  struct WrSlot {
    void* ctx = nullptr;
    int qp = 0;
    int count = 0;
  };
  std::vector<WrSlot> wrs;
  std::vector<uint32_t> freeWrs;
  uint32_t nextQp = 0;
  std::string failure;
  uint32_t polls = 0;
  int64_t eofNs = 0;

  // iflush of device memory: an RDMA read through a queue pair connected to itself.
  ibv_qp* flushQp = nullptr;
  ibv_mr* flushMr = nullptr;
  char flushBuf[64] = {};
  FlushReq flushReqs[rdma::kSlots];

  ~Comm() override {
    for (ibv_qp* qp : qps) (void)v->destroyQp(qp);
    if (flushQp) (void)v->destroyQp(flushQp);
    if (cq) (void)v->destroyCq(cq);
    if (ctrlMr) (void)v->deregMr(ctrlMr);
    if (flushMr) (void)v->deregMr(flushMr);
    std::free(ctrl);
  }

  std::string name() const { return peerText.empty() ? std::string("the peer") : peerText; }

  // ---- queue pairs ----

  bool toInit(ibv_qp* qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = uint16_t(settings->pkey);
    a.port_num = uint8_t(hca->port.port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    const int rc = v->modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) failure = std::string("ibv_modify_qp to INIT: ") + std::strerror(rc);
    return rc == 0;
  }
  ibv_qp* createQp(int sendDepth, int recvDepth) {
    ibv_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = uint32_t(sendDepth);
    ia.cap.max_recv_wr = uint32_t(recvDepth);
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ibv_qp* qp = v->createQp(hca->pd, &ia);
    if (!qp) {
      failure = std::string("ibv_create_qp failed on ") + hca->name + ": " + std::strerror(errno);
      return nullptr;
    }
    if (!toInit(qp)) {
      (void)v->destroyQp(qp);
      return nullptr;
    }
    return qp;
  }
  // RTR then RTS toward queue pair `qpn` of a port described by `info`.
  bool toRts(ibv_qp* qp, uint32_t qpn, const ConnInfo& info) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = ibv_mtu(std::min<uint32_t>(uint32_t(hca->port.activeMtu), info.mtu));
    a.dest_qp_num = qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    const uint8_t* lgid = hca->port.gid.raw.data();
    const bool sameSubnet = lgid[6] == info.gid[6] && lgid[7] == info.gid[7];
    if (!hca->port.infiniband || !sameSubnet || hca->port.grhRequired) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, info.gid, 16);
      a.ah_attr.grh.sgid_index = uint8_t(hca->port.gidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = uint8_t(settings->tc);
    }
    if (hca->port.infiniband) {
      a.ah_attr.dlid = uint16_t(info.lid);
      Gid g;
      std::memcpy(g.raw.data(), info.gid, 16);
      if (!sameSubnet && gidFlid(g) != 0) a.ah_attr.dlid = gidFlid(g);  // routed across subnets by FLID
    }
    a.ah_attr.sl = uint8_t(settings->sl);
    a.ah_attr.port_num = uint8_t(hca->port.port);
    int rc = v->modifyQp(qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
      failure = std::string("ibv_modify_qp to RTR: ") + std::strerror(rc);
      return false;
    }
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.timeout = uint8_t(settings->timeout);
    r.retry_cnt = uint8_t(settings->retry);
    r.rnr_retry = 7;
    r.sq_psn = 0;
    r.max_rd_atomic = 1;
    rc = v->modifyQp(
        qp, &r,
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) failure = std::string("ibv_modify_qp to RTS: ") + std::strerror(rc);
    return rc == 0;
  }
  bool postRecv(int q) {
    ibv_recv_wr wr{};
    wr.wr_id = uint64_t(q);
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(qps[size_t(q)], &wr, &bad);
    if (rc != 0) failure = std::string("ibv_post_recv: ") + std::strerror(rc);
    return rc == 0;
  }

  // The completion queue, `nqps` queue pairs in INIT, the protocol memory and its registration,
  // and what this side tells the peer.
  bool makeResources(int nqps) {
    const bool flush = !isSend && (hca->ptrSupport & (CHORUS_NET_PTR_CUDA | CHORUS_NET_PTR_DMABUF));
    int cqe = nqps * (kSendDepth + kRecvDepth) + (flush ? int(rdma::kSlots) : 0);
    if (hca->port.maxCqe > 0 && cqe > hca->port.maxCqe) cqe = hca->port.maxCqe;
    cq = v->createCq(hca->ctx, cqe, nullptr, nullptr, 0);
    if (!cq) {
      failure = std::string("ibv_create_cq failed on ") + hca->name + ": " + std::strerror(errno);
      return false;
    }
    int sendDepth = kSendDepth;
    if (hca->port.maxQpWr > 0) {
      sendDepth = std::min(sendDepth, hca->port.maxQpWr);
      recvDepth = std::min(recvDepth, hca->port.maxQpWr);
    }
    for (int i = 0; i < nqps; ++i) {
      ibv_qp* qp = createQp(sendDepth, recvDepth);
      if (!qp) return false;
      qps.push_back(qp);
      local.qpn[i] = qp->qp_num;
    }
    inFlight.assign(size_t(nqps), 0);
    wrs.resize(size_t(nqps) * size_t(sendDepth));
    for (size_t i = wrs.size(); i > 0; --i) freeWrs.push_back(uint32_t(i - 1));
    const size_t bytes = (sizeof(rdma::ProtoMem) + 4095) / 4096 * 4096;
    ctrl = static_cast<rdma::ProtoMem*>(std::aligned_alloc(4096, bytes));
    std::memset(static_cast<void*>(ctrl), 0, bytes);
    ctrlMr = v->regMr(hca->pd, ctrl, sizeof(rdma::ProtoMem), kAccess);
    if (!ctrlMr) {
      failure = std::string("ibv_reg_mr of the protocol memory failed: ") + std::strerror(errno);
      return false;
    }
    ctrlRef.desc = ctrlMr;
    ctrlRef.key = ctrlMr->rkey;
    ctrlRef.base = reinterpret_cast<uintptr_t>(ctrl);
    ctrlRef.virtAddr = true;
    proto = std::make_unique<rdma::Proto>(this, ctrl, ctrlRef, isSend);
    proto->user = this;
    if (flush) {
      flushQp = createQp(int(rdma::kSlots), 1);
      flushMr = flushQp ? v->regMr(hca->pd, flushBuf, sizeof flushBuf, IBV_ACCESS_LOCAL_WRITE) : nullptr;
      if (!flushMr) return false;
      for (FlushReq& f : flushReqs) f.comm = this;
    }
    local.nonce = nonce;
    local.nqps = uint32_t(nqps);
    local.lid = hca->port.lid;
    local.mtu = uint32_t(hca->port.activeMtu);
    local.infiniband = hca->port.infiniband ? 1 : 0;
    local.memAddr = reinterpret_cast<uintptr_t>(ctrl);
    local.memKey = ctrlMr->rkey;
    std::memcpy(local.gid, hca->port.gid.raw.data(), 16);
    (void)::gethostname(local.host, sizeof local.host - 1);
    return true;
  }
  // Every queue pair ready to send to the peer's, receives posted, the peer's protocol memory known.
  bool connectQps() {
    for (size_t i = 0; i < qps.size(); ++i) {
      if (!toRts(qps[i], remote.qpn[i], remote)) return false;
      for (int k = 0; k < recvDepth; ++k) {
        if (!postRecv(int(i))) return false;
      }
    }
    if (flushQp && !toRts(flushQp, flushQp->qp_num, local)) return false;
    proto->setPeer(remote.memAddr, remote.memKey);
    remote.host[sizeof remote.host - 1] = 0;
    peerText = std::string(remote.host) + (peerText.empty() ? "" : " (" + peerText + ")");
    return true;
  }

  // ---- setup over TCP ----

  // Moves the rest of a setup message: 1 done, 0 not yet, -1 failed (failure says why).
  int move(bool out, void* p, size_t n) {
    while (moved < n) {
      char* at = static_cast<char*>(p) + moved;
      const ssize_t r = out ? ::send(sock.get(), at, n - moved, MSG_NOSIGNAL) : ::recv(sock.get(), at, n - moved, 0);
      if (r > 0) {
        moved += size_t(r);
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
      failure = "the setup connection with " + name() + " ended " +
                (r == 0 ? std::string("(the peer closed it)") : std::string(std::strerror(errno)));
      return -1;
    }
    moved = 0;
    return 1;
  }
  bool infoValid() {
    if (remote.magic != kInfoMagic || remote.nonce != nonce) {
      failure = "a connection to this listener came from something other than its peer (wrong nonce)";
      return false;
    }
    if (remote.nqps < 1 || remote.nqps > uint32_t(kMaxQps) || (isSend && remote.nqps != local.nqps)) {
      failure = "the peer's queue pair count " + std::to_string(remote.nqps) + " does not fit";
      return false;
    }
    return true;
  }
  // One step of connect or accept: 1 ready, 0 not yet, -1 failed.
  int advance() {
    for (;;) {
      int r = 1;
      switch (stage) {
        case Stage::kConnecting: {
          pollfd p{sock.get(), POLLOUT, 0};
          if (::poll(&p, 1, 0) <= 0) return 0;
          int err = 0;
          socklen_t len = sizeof err;
          (void)::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            failure = "cannot reach the listener at " + peerText + ": " + std::strerror(err);
            return -1;
          }
          setNoDelay(sock.get());
          stage = Stage::kSendInfo;
          continue;
        }
        case Stage::kSendInfo:
          r = move(true, &local, sizeof local);
          if (r == 1) stage = isSend ? Stage::kRecvInfo : Stage::kRecvReady;
          break;
        case Stage::kRecvInfo:
          r = move(false, &remote, sizeof remote);
          if (r != 1) break;
          if (!infoValid()) return -1;
          identified = true;
          if (!isSend && !makeResources(int(remote.nqps))) return -1;
          if (!connectQps()) return -1;
          stage = isSend ? Stage::kSendReady : Stage::kSendInfo;
          ready = kReadyMagic ^ nonce;
          break;
        case Stage::kSendReady:
          r = move(true, &ready, sizeof ready);
          if (r == 1) stage = Stage::kReady;
          break;
        case Stage::kRecvReady:
          r = move(false, &ready, sizeof ready);
          if (r == 1 && ready != (kReadyMagic ^ nonce)) {
            failure = "the peer's ready word is wrong";
            return -1;
          }
          if (r == 1) stage = Stage::kReady;
          break;
        case Stage::kReady:
          return 1;
      }
      if (r != 1) return r;
    }
  }

  // ---- the wire ----

  // Posts one write: 1 posted, 0 no room now, -1 failed.
  int post(const Pending& p) {
    const size_t q = nextQp % qps.size();
    const bool arSplit = hca->ar && int64_t(p.len) > settings->arThreshold;
    const int need = arSplit ? 2 : 1;
    if (inFlight[q] + need > int(wrs.size() / qps.size()) || freeWrs.empty()) return 0;
    if (p.len > 0 && !p.desc) {
      failure = "a buffer of " + std::to_string(p.len) + " bytes to write is not registered";
      return -1;
    }
    const uint32_t id = freeWrs.back();
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(p.buf);
    sge.length = uint32_t(p.len);
    sge.lkey = p.desc ? static_cast<ibv_mr*>(p.desc)->lkey : 0;
    ibv_send_wr wr[2]{};
    wr[0].opcode = arSplit ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[0].sg_list = p.len ? &sge : nullptr;
    wr[0].num_sge = p.len ? 1 : 0;
    wr[0].wr.rdma.remote_addr = p.raddr;
    wr[0].wr.rdma.rkey = uint32_t(p.rkey);
    ibv_send_wr& last = wr[need - 1];
    if (arSplit) {
      // Adaptive routing may reorder the packets of one write: the immediate comes in a write of
      // its own, which completes only after the data before it on the queue pair has landed.
      wr[0].next = &wr[1];
      wr[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr[1].wr.rdma.remote_addr = p.raddr;
      wr[1].wr.rdma.rkey = uint32_t(p.rkey);
    }
    last.imm_data = htonl(p.imm);
    last.send_flags = IBV_SEND_SIGNALED;
    last.wr_id = id;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(qps[q], wr, &bad);
    if (rc != 0) {
      failure = std::string("ibv_post_send to ") + name() + ": " + std::strerror(rc);
      return -1;
    }
    freeWrs.pop_back();
    wrs[id] = WrSlot{p.ctx, int(q), need};
    inFlight[q] += need;
    ++nextQp;
    return 1;
  }
  bool drainBacklog() {
    while (!backlog.empty()) {
      const int r = post(backlog.front());
      if (r < 0) return false;
      if (r == 0) break;
      backlog.pop_front();
    }
    return true;
  }
  chorusResult_t write(const void* buf, size_t len, void* desc, uint64_t raddr, uint64_t rkey, uint32_t imm,
                       void* c) override {
    if (!failure.empty()) return chorusRemoteError;
    backlog.push_back(Pending{buf, len, desc, raddr, rkey, imm, c});
    return drainBacklog() ? chorusSuccess : chorusRemoteError;
  }
  std::string wcFailure(const ibv_wc& wc) const {
    std::string s = "a transfer with " + name() + " failed: " + v->wcStatusStr(wc.status) + " (vendor error " +
                    std::to_string(wc.vendor_err) + ")";
    if (wc.status == IBV_WC_RETRY_EXC_ERR) {
      s += "; the peer did not answer within the retries (its process or host may be gone, or the fabric "
           "drops packets: CHORUS_IB_TIMEOUT, CHORUS_IB_RETRY_CNT)";
    } else if (wc.status == IBV_WC_REM_ACCESS_ERR) {
      s += "; the peer refused the write (a buffer outside its registration)";
    }
    return s;
  }
  // Whether the peer's process still holds the setup connection; a closed one fails the comm after
  // a grace (a goodbye sent before the close still arrives first).
  bool peerAlive() {
    char b;
    const ssize_t r = ::recv(sock.get(), &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return true;
    const int64_t now = nowNs();
    if (eofNs == 0) eofNs = now;
    if (now - eofNs < kEofGraceNs) return true;
    failure = name() + " closed its connection (its process ended or closed the comm without a goodbye)";
    return false;
  }
  chorusResult_t poll(Sink& sink) override {
    if (!failure.empty()) return chorusRemoteError;
    ibv_wc wc[16];
    for (;;) {
      const int n = ibv_poll_cq(cq, 16, wc);
      if (n < 0) {
        failure = "ibv_poll_cq failed on " + hca->name;
        return chorusRemoteError;
      }
      for (int i = 0; i < n; ++i) {
        const ibv_wc& w = wc[i];
        if (w.status != IBV_WC_SUCCESS) {
          failure = wcFailure(w);
          return chorusRemoteError;
        }
        if (flushQp && w.qp_num == flushQp->qp_num) {
          flushReqs[w.wr_id % rdma::kSlots].done = true;
          continue;
        }
        if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          sink.remoteWrite(ntohl(w.imm_data));
          if (!postRecv(int(w.wr_id))) return chorusRemoteError;
          continue;
        }
        WrSlot& s = wrs[w.wr_id];
        inFlight[size_t(s.qp)] -= s.count;
        freeWrs.push_back(uint32_t(w.wr_id));
        sink.localDone(s.ctx);
      }
      if (n < 16) break;
    }
    if (!drainBacklog()) return chorusRemoteError;
    if (++polls % kLivenessEvery == 0 && !peerAlive()) return chorusRemoteError;
    return chorusSuccess;
  }
  size_t maxWrite() const override {
    return hca->port.maxMsg > 0 && hca->port.maxMsg < kMaxWrite ? hca->port.maxMsg : kMaxWrite;
  }
  size_t segmentBytes(size_t size) const override {
    const size_t n = qps.size();
    if (!settings->split || n < 2 || size <= kSplitAlign * n) return maxWrite();
    const size_t part = ((size + n - 1) / n + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
    return part < maxWrite() ? part : maxWrite();
  }
  std::string why() const override { return failure.empty() ? "the IB connection failed" : failure; }
};

struct ListenComm {
  Context* ctx = nullptr;
  Hca* hca = nullptr;
  UniqueFd fd;
  uint64_t nonce = 0;
  std::vector<std::unique_ptr<Comm>> accepting;  // connections being set up, oldest first
};

struct MrHandle {
  RegCache* cache = nullptr;
  RegCache::Entry* entry = nullptr;
  ibv_mr* own = nullptr;  // a dma-buf registration (not cached)
  const Verbs* v = nullptr;
  rdma::MemRef ref;
};

std::unique_ptr<Comm> newComm(Context* c, Hca* h, bool isSend, uint64_t nonce) {
  auto comm = std::make_unique<Comm>();
  comm->ctx = c;
  comm->hca = h;
  comm->v = net().verbs;
  comm->settings = &net().settings;
  comm->isSend = isSend;
  comm->nonce = nonce;
  return comm;
}

// ---- the ABI ----

chorusResult_t ibInit(void** ctx, uint64_t commId, const chorusNetCommConfig_v1_t*, chorusNetLogger_t logger) {
  if (!ctx) return chorusInvalidArgument;
  Net& n = net();
  if (!n.settingsStatus.isOk()) {
    IB_LOG(logger, chorusNetLogWarn, "IB network: %s", n.settingsStatus.message().c_str());
    return chorusInvalidArgument;
  }
  if (n.hcas.empty()) {
    IB_LOG(logger, chorusNetLogWarn, "IB network: not offered: %s", n.why.c_str());
    return chorusSystemError;
  }
  auto* c = new Context();
  c->commId = commId;
  c->logger = logger;
  std::string devs;
  for (const auto& h : n.hcas) devs += (devs.empty() ? "" : ", ") + describeHca(*h);
  IB_LOG(logger, chorusNetLogInfo, "IB network: devices %s; %d queue pair(s) per connection%s", devs.c_str(),
         n.settings.qps, n.settings.split ? ", messages split across them" : "");
  *ctx = c;
  return chorusSuccess;
}

chorusResult_t ibFinalize(void* ctx) { return rdma::finalizeContext<Comm>(ctx, "IB network"); }

chorusResult_t ibDevices(int* ndev) {
  if (!ndev) return chorusInvalidArgument;
  *ndev = int(net().hcas.size());
  return chorusSuccess;
}

chorusResult_t ibGetProperties(int dev, chorusNetProperties_v1_t* props) {
  const Hca* h = hcaOf(dev);
  if (!props || !h) return chorusInvalidArgument;
  *props = chorusNetProperties_v1_t{};
  props->name = const_cast<char*>(h->port.device.c_str());
  props->pciPath = h->port.pciPath.empty() ? nullptr : const_cast<char*>(h->port.pciPath.c_str());
  props->guid = h->port.guid;
  props->ptrSupport = h->ptrSupport;
  props->regIsGlobal = 1;
  props->forceFlush = 0;
  props->speed = h->port.speedMbps > 0 ? h->port.speedMbps : 10000;
  props->port = h->port.port;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = rdma::kMaxRecvs;
  props->maxP2pBytes = kMaxWrite;
  props->maxCollBytes = kMaxWrite;
  return chorusSuccess;
}

chorusResult_t ibListen(void* ctx, int dev, void* handle, void** listenComm) {
  auto* c = static_cast<Context*>(ctx);
  if (!c || !handle || !listenComm) return chorusInvalidArgument;
  *listenComm = nullptr;
  Hca* h = hcaOf(dev);
  if (!h) return chorusInvalidArgument;
  std::string ifname;
  Result<SockAddr> addr = localInterfaceAddr(kSocketIfname.raw(), &ifname);
  SockAddr bound;
  Result<UniqueFd> fd = addr.isOk() ? listenOn(addr.value(), &bound) : Result<UniqueFd>(addr.status());
  if (!fd.isOk()) {
    IB_LOG(c->logger, chorusNetLogWarn, "IB network: cannot listen: %s", fd.status().message().c_str());
    return chorusSystemError;
  }
  auto l = std::make_unique<ListenComm>();
  l->ctx = c;
  l->hca = h;
  l->fd = fd.take();
  setNonBlocking(l->fd.get(), true);
  l->nonce = randomU64();
  auto* hd = static_cast<Handle*>(handle);
  *hd = Handle{};
  hd->magic = kHandleMagic;
  hd->nonce = l->nonce;
  hd->addr = bound;
  hd->dev = uint32_t(dev);
  ++c->comms;
  *listenComm = l.release();
  return chorusSuccess;
}

chorusResult_t ibConnect(void* ctx, int dev, void* handle, void** sendComm) {
  auto* c = static_cast<Context*>(ctx);
  auto* hd = static_cast<Handle*>(handle);
  if (!c || !hd || !sendComm) return chorusInvalidArgument;
  *sendComm = nullptr;
  if (hd->magic != kHandleMagic || !hd->addr.valid()) {
    IB_LOG(c->logger, chorusNetLogWarn, "IB network: connect: the handle is not an IB network's");
    return chorusInvalidArgument;
  }
  Comm* comm = hd->pending;
  if (!comm) {
    Hca* h = hcaOf(dev);
    if (!h) return chorusInvalidArgument;
    std::unique_ptr<Comm> made = newComm(c, h, true, hd->nonce);
    made->peerText = hd->addr.toString();
    const int fd = ::socket(hd->addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    made->sock.reset(fd);
    const bool started =
        fd >= 0 && (::connect(fd, reinterpret_cast<const sockaddr*>(&hd->addr.storage), hd->addr.len) == 0 ||
                    errno == EINPROGRESS);
    if (!started) {
      IB_LOG(c->logger, chorusNetLogWarn, "IB network: cannot connect to %s: %s", made->peerText.c_str(),
             std::strerror(errno));
      return chorusSystemError;
    }
    if (!made->makeResources(net().settings.qps)) {
      IB_LOG(c->logger, chorusNetLogWarn, "IB network: connect: %s", made->failure.c_str());
      return chorusSystemError;
    }
    comm = made.release();
    hd->pending = comm;
    ++c->comms;
    std::lock_guard<std::mutex> g(c->mu);
    c->connecting.insert(comm);
  }
  const int r = comm->advance();
  if (r == 0) return chorusSuccess;
  hd->pending = nullptr;
  {
    std::lock_guard<std::mutex> g(c->mu);
    c->connecting.erase(comm);
  }
  if (r < 0) {
    IB_LOG(c->logger, chorusNetLogWarn, "IB network: connect: %s", comm->failure.c_str());
    --c->comms;
    delete comm;
    return chorusRemoteError;
  }
  IB_LOG(c->logger, chorusNetLogInfo, "IB network: connected to %s through %s, %zu queue pair(s)", comm->name().c_str(),
         comm->hca->name.c_str(), comm->qps.size());
  *sendComm = comm;
  return chorusSuccess;
}

chorusResult_t ibAccept(void* listenComm, void** recvComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (!l || !recvComm) return chorusInvalidArgument;
  *recvComm = nullptr;
  // Every connection waiting in the kernel is taken, so a stranger that connects and says nothing
  // does not keep the peer's connection waiting behind it; past kMaxAccepting the oldest one that has
  // not said who it is goes.
  for (;;) {
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = ::accept4(l->fd.get(), reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) break;
      IB_LOG(l->ctx->logger, chorusNetLogWarn, "IB network: accept: %s", std::strerror(errno));
      return chorusSystemError;
    }
    std::unique_ptr<Comm> comm = newComm(l->ctx, l->hca, false, l->nonce);
    comm->sock.reset(fd);
    comm->stage = Stage::kRecvInfo;
    SockAddr peer;
    std::memcpy(&peer.storage, &from, std::min<size_t>(len, sizeof peer.storage));
    peer.len = len;
    comm->peerText = peer.toString();
    if (l->accepting.size() >= kMaxAccepting) {
      for (auto it = l->accepting.begin(); it != l->accepting.end(); ++it) {
        if (!(*it)->identified) {
          IB_LOG(l->ctx->logger, chorusNetLogInfo, "IB network: accept: dropped %s, which said nothing",
                 (*it)->peerText.c_str());
          l->accepting.erase(it);
          break;
        }
      }
    }
    l->accepting.push_back(std::move(comm));
  }
  for (auto it = l->accepting.begin(); it != l->accepting.end(); ++it) {
    Comm* comm = it->get();
    const int r = comm->advance();
    if (r == 0) continue;
    if (r < 0) {
      // A connection that never said who it is (not a sender of this listener) is dropped quietly;
      // one of this listener's sender that fails is the connection's failure.
      const bool identified = comm->identified;
      IB_LOG(l->ctx->logger, identified ? chorusNetLogWarn : chorusNetLogInfo, "IB network: accept: %s%s",
             comm->failure.c_str(), identified ? "" : "; dropped it");
      l->accepting.erase(it);
      if (identified) return chorusRemoteError;
      return chorusSuccess;  // the others go on at the next call
    }
    IB_LOG(l->ctx->logger, chorusNetLogInfo, "IB network: accepted %s through %s, %zu queue pair(s)",
           comm->name().c_str(), comm->hca->name.c_str(), comm->qps.size());
    ++l->ctx->comms;
    *recvComm = it->release();
    l->accepting.erase(it);
    return chorusSuccess;
  }
  return chorusSuccess;
}

chorusResult_t ibRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  auto* c = static_cast<Comm*>(comm);
  if (!c || !mhandle) return chorusInvalidArgument;
  if (type != CHORUS_NET_PTR_HOST && !(type == CHORUS_NET_PTR_CUDA && (c->hca->ptrSupport & CHORUS_NET_PTR_CUDA))) {
    IB_LOG(c->ctx->logger, chorusNetLogWarn, "IB network: %s cannot register memory of type %d (supports %d)",
           c->hca->name.c_str(), type, c->hca->ptrSupport);
    return chorusInvalidUsage;
  }
  auto mh = std::make_unique<MrHandle>();
  mh->cache = c->hca->cache.get();
  mh->v = c->v;
  const chorusResult_t rc = mh->cache->acquire(data, size, &mh->entry);
  if (rc != chorusSuccess) {
    IB_LOG(c->ctx->logger, chorusNetLogWarn, "IB network: ibv_reg_mr of %zu bytes at %p on %s failed: %s", size, data,
           c->hca->name.c_str(), std::strerror(errno));
    return rc;
  }
  auto* mr = static_cast<ibv_mr*>(mh->entry->handle);
  mh->ref.desc = mr;
  mh->ref.key = mr->rkey;
  mh->ref.base = mh->entry->begin;
  mh->ref.virtAddr = true;
  *mhandle = mh.release();
  return chorusSuccess;
}

chorusResult_t ibRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  auto* c = static_cast<Comm*>(comm);
  if (!c || !mhandle) return chorusInvalidArgument;
  if (!(c->hca->ptrSupport & CHORUS_NET_PTR_DMABUF) || !c->v->regDmabufMr) {
    IB_LOG(c->ctx->logger, chorusNetLogWarn, "IB network: %s cannot register dma-buf memory (type %d)",
           c->hca->name.c_str(), type);
    return chorusInvalidUsage;
  }
  ibv_mr* mr = c->v->regDmabufMr(c->hca->pd, offset, size, reinterpret_cast<uintptr_t>(data), fd, kAccess);
  if (!mr) {
    IB_LOG(c->ctx->logger, chorusNetLogWarn, "IB network: ibv_reg_dmabuf_mr of %zu bytes (fd %d) on %s failed: %s",
           size, fd, c->hca->name.c_str(), std::strerror(errno));
    return chorusSystemError;
  }
  auto* mh = new MrHandle();
  mh->own = mr;
  mh->v = c->v;
  mh->ref.desc = mr;
  mh->ref.key = mr->rkey;
  mh->ref.base = reinterpret_cast<uintptr_t>(data);
  mh->ref.virtAddr = true;
  *mhandle = mh;
  return chorusSuccess;
}

chorusResult_t ibDeregMr(void*, void* mhandle) {
  auto* mh = static_cast<MrHandle*>(mhandle);
  if (!mh) return chorusInvalidArgument;
  if (mh->own) {
    (void)mh->v->deregMr(mh->own);
  } else {
    mh->cache->release(mh->entry);
  }
  delete mh;
  return chorusSuccess;
}

chorusResult_t ibIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return rdma::isend<Comm, MrHandle>(sendComm, data, size, tag, mhandle, request, "IB network");
}

chorusResult_t ibIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return rdma::irecv<Comm, MrHandle>(recvComm, n, data, sizes, tags, mhandles, request, "IB network");
}

// As NCCL's: one RDMA read of a byte of the last non-empty receive, whose completion means the
// NIC's writes before it are visible to the GPU. Nothing to do for a comm without device memory.
chorusResult_t ibIflush(void* recvComm, int n, void** data, size_t* sizes, void** mhandles, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  if (!c || !request || c->isSend) return chorusInvalidArgument;
  *request = nullptr;
  int last = -1;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > 0) last = i;
  }
  if (!c->flushQp || last < 0 || !mhandles || !mhandles[last]) return chorusSuccess;
  FlushReq* f = nullptr;
  for (FlushReq& r : c->flushReqs) {
    if (!r.inUse) {
      f = &r;
      break;
    }
  }
  if (!f) return chorusSuccess;  // all in flight: called again
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(c->flushBuf);
  sge.length = 1;
  sge.lkey = c->flushMr->lkey;
  ibv_send_wr wr{};
  wr.wr_id = uint64_t(f - c->flushReqs);
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data[last]);
  wr.wr.rdma.rkey = uint32_t(static_cast<MrHandle*>(mhandles[last])->ref.key);
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(c->flushQp, &wr, &bad);
  if (rc != 0) {
    IB_LOG(c->ctx->logger, chorusNetLogWarn, "IB network: iflush: ibv_post_send: %s", std::strerror(rc));
    return chorusSystemError;
  }
  f->inUse = true;
  f->done = false;
  *request = f;
  return chorusSuccess;
}

chorusResult_t ibTest(void* request, int* done, size_t* sizes) {
  if (!request || !done) return chorusInvalidArgument;
  if (*static_cast<const uint64_t*>(request) != kFlushMagic)
    return rdma::test<Comm>(request, done, sizes, "IB network");
  auto* f = static_cast<FlushReq*>(request);
  Comm* c = f->comm;
  const chorusResult_t rc = rdma::reported(c->proto.get(), c->ctx->logger, "IB network", c->proto->progress());
  *done = f->done ? 1 : 0;
  if (!f->done) return rc;
  f->inUse = false;
  if (sizes) sizes[0] = 0;
  return chorusSuccess;
}

chorusResult_t ibCloseComm(void* comm) { return rdma::closeComm<Comm>(comm); }

chorusResult_t ibCloseListen(void* listenComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (!l) return chorusInvalidArgument;
  --l->ctx->comms;
  delete l;
  return chorusSuccess;
}

const chorusNet_v1_t kIbNet = {"IB",        ibInit,      ibFinalize,    ibDevices, ibGetProperties,
                               ibListen,    ibConnect,   ibAccept,      ibRegMr,   ibRegMrDmaBuf,
                               ibDeregMr,   ibIsend,     ibIrecv,       ibIflush,  ibTest,
                               ibCloseComm, ibCloseComm, ibCloseListen, nullptr};

}  // namespace

const chorusNet_v1_t& ibNetwork() { return kIbNet; }

}  // namespace ib
}  // namespace chorus
