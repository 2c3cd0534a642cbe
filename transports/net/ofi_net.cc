// Chorus's OFI network: the network ABI (include/chorus/net.h) over libfabric, as a plugin
// (libchorus-net-ofi.so, CHORUS_NET_PLUGIN=ofi) so that libchorus itself needs no libfabric.
//
// Data moves by the RDMA protocol of transports/net/rdma_proto.h: the receiver writes a
// clear-to-send entry into the sender's FIFO, the sender writes the bytes straight into the
// receiver's buffer with fi_writedata, whose immediate data completes the receive. Endpoints are
// reliable datagram ones (FI_EP_RDM), one per comm, with a completion queue and an address vector
// of their own; the provider is the first libfabric offers for RDMA writes with remote CQ data
// between hosts, or the one CHORUS_OFI_PROVIDER names ("tcp", "tcp;ofi_rxm", "verbs;ofi_rxm",
// "efa", ...). A device is one domain of that provider (an interface, a NIC), loopback last.
//
// Connecting: listen makes an endpoint and writes its address and a random nonce into the handle;
// connect makes the send comm's endpoint and sends the listener a connect message (the nonce, the
// endpoint's address, where its ProtoMem is and its key); accept answers each connect message with
// a receive comm whose endpoint sends back the same for its side. Both calls return at once and
// finish on later calls (connect keeps its comm in the handle, as NCCL's networks keep their
// progress there).
//
// Registrations go through a RegCache per domain (transports/net/reg_cache.h). Unused ones are kept
// only where the provider reaches memory by virtual address through the kernel (no FI_MR_LOCAL or
// FI_MR_ALLOCATED in its mr_mode, as libfabric's tcp provider): there a registration stays right
// after the memory is freed. Host memory only (ptrSupport CHORUS_NET_PTR_HOST). Progress is the
// caller's: every call drains the comm's completion queue (libfabric's manual progress).
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "include/chorus/net.h"
#include "transports/net/rdma_calls.h"
#include "transports/net/rdma_proto.h"
#include "transports/net/reg_cache.h"

namespace {

using chorus::RegCache;
namespace rdma = chorus::rdma;

constexpr uint64_t kHandleMagic = 0x31494f46524f4843ull;   // "CHOROFI1"
constexpr uint64_t kConnectMagic = 0x746e6e6f432d464full;  // "OF-Connt"
constexpr uint64_t kAckMagic = 0x6b63416b2d464f00ull;
constexpr unsigned long kNetFlag = 0x10;  // NCCL_NET
constexpr int kListenBufs = 8;
constexpr size_t kNameMax = 80;
constexpr size_t kKeepUnused = 64;
constexpr size_t kMaxWrite = size_t(1) << 30;
constexpr uint64_t kAccess = FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE | FI_READ | FI_REMOTE_READ;

struct Comm;
using Context = rdma::Context<Comm>;

#define OFI_LOG(logger, level, ...)                                         \
  do {                                                                      \
    if (logger) (logger)(level, kNetFlag, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

std::string fiError(const char* call, long rc) {
  return std::string(call) + ": " + fi_strerror(int(rc < 0 ? -rc : rc));
}

// ---- the provider and its devices, found once per process ----

struct Device {
  fi_info* info = nullptr;  // this domain's fi_info (owned by Fabric::all)
  std::string name;         // the domain's name (an interface for tcp)
  std::mutex mu;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  std::unique_ptr<RegCache> cache;
  bool virtAddr = true;
  bool provKey = false;
  std::atomic<uint64_t> nextKey{1};
  size_t maxMsg = 0;
  int users = 0;  // endpoints open on the domain (guarded by mu): the last one closes it
};

struct Fabric {
  fi_info* all = nullptr;
  std::vector<std::unique_ptr<Device>> devices;
  std::string provider;
  std::string why;  // no device: why
};

Fabric& fabric() {
  static Fabric* f = [] {
    auto* fab = new Fabric();
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_LOCAL_COMM | FI_REMOTE_COMM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    const char* prov = std::getenv("CHORUS_OFI_PROVIDER");
    if (prov && *prov) hints->fabric_attr->prov_name = strdup(prov);
    const int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, &fab->all);
    fi_freeinfo(hints);
    if (rc != 0) {
      fab->all = nullptr;
      fab->why = fiError("fi_getinfo", rc) + (prov && *prov ? std::string(" (CHORUS_OFI_PROVIDER=") + prov + ")" : "") +
                 ": no libfabric provider offers reliable datagram endpoints with RDMA writes and remote CQ data";
      return fab;
    }
    // The first provider offered, or the one CHORUS_OFI_PROVIDER names exactly ("tcp;ofi_rxm") or by
    // one layer of it ("tcp"); one device per domain: IPv4 addresses first, loopback last.
    fab->provider = fab->all->fabric_attr->prov_name;
    if (prov && *prov) {
      const std::string want = prov;
      for (fi_info* i = fab->all; i; i = i->next) {
        if (want == i->fabric_attr->prov_name) fab->provider = want;
      }
    }
    std::vector<fi_info*> picked;
    for (int pass = 0; pass < 2; ++pass) {
      for (fi_info* i = fab->all; i; i = i->next) {
        if (fab->provider != i->fabric_attr->prov_name) continue;
        if (i->domain_attr->cq_data_size < 4) continue;
        if (i->mode & FI_RX_CQ_DATA) continue;  // remote CQ data would need posted receives
        if (pass == 0 && i->addr_format != FI_SOCKADDR_IN) continue;
        bool seen = false;
        for (fi_info* p : picked) seen = seen || std::strcmp(p->domain_attr->name, i->domain_attr->name) == 0;
        if (!seen) picked.push_back(i);
      }
    }
    std::stable_partition(picked.begin(), picked.end(),
                          [](fi_info* i) { return std::strcmp(i->domain_attr->name, "lo") != 0; });
    for (fi_info* i : picked) {
      auto d = std::make_unique<Device>();
      d->info = i;
      d->name = i->domain_attr->name;
      const int mr = i->domain_attr->mr_mode;
      // Without FI_MR_VIRT_ADDR (mr_mode 0 included) a remote address is an offset into the registration.
      d->virtAddr = mr == FI_MR_BASIC || (mr & FI_MR_VIRT_ADDR);
      d->provKey = mr == FI_MR_BASIC || (mr & FI_MR_PROV_KEY);
      d->maxMsg = i->ep_attr->max_msg_size;
      fab->devices.push_back(std::move(d));
    }
    if (fab->devices.empty()) {
      std::string offered;
      for (fi_info* i = fab->all; i; i = i->next) {
        const std::string name = i->fabric_attr->prov_name;
        if (offered.find(name + ",") == std::string::npos) offered += name + ", ";
      }
      fab->why = "provider " + fab->provider +
                 " offers no domain with reliable datagram endpoints, RDMA writes and 4 bytes of remote CQ data "
                 "(offered: " +
                 offered.substr(0, offered.size() - 2) + ")";
    }
    return fab;
  }();
  return *f;
}

// Opens a device's fabric and domain, or takes them as they are, for one more endpoint
// (releaseDevice when it closes).
Device* openDevice(int dev, std::string* why) {
  Fabric& fab = fabric();
  if (dev < 0 || size_t(dev) >= fab.devices.size()) {
    *why = "no OFI device " + std::to_string(dev);
    return nullptr;
  }
  Device& d = *fab.devices[size_t(dev)];
  std::lock_guard<std::mutex> g(d.mu);
  if (d.domain) {
    ++d.users;
    return &d;
  }
  int rc = fi_fabric(d.info->fabric_attr, &d.fabric, nullptr);
  if (rc == 0) rc = fi_domain(d.fabric, d.info, &d.domain, nullptr);
  if (rc != 0) {
    *why = fiError(d.fabric ? "fi_domain" : "fi_fabric", rc) + " on " + d.name;
    if (d.fabric) (void)fi_close(&d.fabric->fid);
    d.fabric = nullptr;
    d.domain = nullptr;
    return nullptr;
  }
  d.users = 1;
  const int mr = d.info->domain_attr->mr_mode;
  const bool pins = mr != FI_MR_UNSPEC && mr != FI_MR_BASIC && (mr & (FI_MR_LOCAL | FI_MR_ALLOCATED));
  Device* dp = &d;
  RegCache::Ops ops;
  ops.reg = [dp](void* base, size_t len, void** handle) {
    fid_mr* m = nullptr;
    const uint64_t key = dp->provKey ? 0 : dp->nextKey.fetch_add(1);
    const int r = fi_mr_reg(dp->domain, base, len, kAccess, 0, key, 0, &m, nullptr);
    if (r != 0) return chorusSystemError;
    *handle = m;
    return chorusSuccess;
  };
  ops.dereg = [](void* handle) { (void)fi_close(&static_cast<fid_mr*>(handle)->fid); };
  d.cache = std::make_unique<RegCache>(std::move(ops), pins ? 0 : kKeepUnused);
  return &d;
}

void acquireDevice(Device* d) {
  std::lock_guard<std::mutex> g(d->mu);
  ++d->users;
}

// The last endpoint gone: the registrations, the domain and the fabric go too, so a process whose
// communicators are gone holds nothing of libfabric's but the provider list.
void releaseDevice(Device* d) {
  std::lock_guard<std::mutex> g(d->mu);
  if (--d->users > 0) return;
  d->cache.reset();
  (void)fi_close(&d->domain->fid);
  (void)fi_close(&d->fabric->fid);
  d->domain = nullptr;
  d->fabric = nullptr;
}

// ---- endpoints ----

enum class OpKind : uint8_t { kWrite, kSend, kRecv };
struct Op {
  fi_context2 fctx;  // first: libfabric hands back its address
  OpKind kind = OpKind::kWrite;
  void* user = nullptr;
  int index = 0;
};

struct SetupMsg {
  uint64_t magic = 0;
  uint64_t nonce = 0;
  uint32_t nameLen = 0;
  uint32_t reserved = 0;
  char name[kNameMax] = {};
  uint64_t memAddr = 0;  // the sender's or receiver's ProtoMem, as the peer addresses it
  uint64_t memKey = 0;
};

struct Handle {
  uint64_t magic = 0;
  uint64_t nonce = 0;
  uint32_t nameLen = 0;
  uint32_t dev = 0;
  char name[kNameMax] = {};
  void* pending = nullptr;  // connect's comm while it waits for the receiver's answer
};
static_assert(sizeof(Handle) <= CHORUS_NET_HANDLE_MAXSIZE, "a handle must fit NCCL's 128 bytes");

// A registered block of this side's protocol memory and setup messages.
struct Ctrl {
  rdma::ProtoMem proto;
  SetupMsg msgs[kListenBufs];
};

struct Endpoint {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_mr* ctrlMr = nullptr;
  Ctrl* ctrl = nullptr;
  rdma::MemRef ctrlRef;
  SetupMsg self;  // name filled
  std::deque<Op> ops;
  std::vector<Op*> freeOps;

  Device* held = nullptr;  // the device this endpoint keeps open

  ~Endpoint() {
    if (ep) (void)fi_close(&ep->fid);
    if (av) (void)fi_close(&av->fid);
    if (cq) (void)fi_close(&cq->fid);
    if (ctrlMr) (void)fi_close(&ctrlMr->fid);
    std::free(ctrl);
    if (held) releaseDevice(held);
  }
  Op* op(OpKind kind, void* user, int index = 0) {
    Op* o;
    if (freeOps.empty()) {
      ops.emplace_back();
      o = &ops.back();
    } else {
      o = freeOps.back();
      freeOps.pop_back();
    }
    o->kind = kind;
    o->user = user;
    o->index = index;
    return o;
  }
  void done(Op* o) { freeOps.push_back(o); }
  void* ctrlDesc() const { return ctrlMr ? fi_mr_desc(ctrlMr) : nullptr; }

  // Takes over one use of `d` (openDevice or acquireDevice), released with the endpoint.
  bool open(Device& d, std::string* why) {
    held = &d;
    fi_cq_attr cqa{};
    cqa.format = FI_CQ_FORMAT_DATA;
    cqa.size = 4096;
    // No wait object: the CQ's descriptor would not cover all that needs reading (rxm makes its
    // connections inside fi_cq_read, with events of its own), so the caller polls (waitFd NULL).
    cqa.wait_obj = FI_WAIT_NONE;
    fi_av_attr ava{};
    ava.type = FI_AV_TABLE;
    ava.count = 4;
    int rc = fi_cq_open(d.domain, &cqa, &cq, nullptr);
    if (rc == 0) rc = fi_av_open(d.domain, &ava, &av, nullptr);
    if (rc == 0) rc = fi_endpoint(d.domain, d.info, &ep, nullptr);
    if (rc == 0) rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc == 0) rc = fi_ep_bind(ep, &av->fid, 0);
    if (rc == 0) rc = fi_enable(ep);
    if (rc != 0) {
      *why = fiError("opening an endpoint", rc) + " on " + d.name;
      return false;
    }
    size_t len = kNameMax;
    rc = fi_getname(&ep->fid, self.name, &len);
    if (rc != 0) {
      *why = fiError("fi_getname", rc);
      return false;
    }
    self.nameLen = uint32_t(len);
    ctrl = static_cast<Ctrl*>(std::aligned_alloc(4096, (sizeof(Ctrl) + 4095) / 4096 * 4096));
    std::memset(static_cast<void*>(ctrl), 0, sizeof(Ctrl));
    const uint64_t key = d.provKey ? 0 : d.nextKey.fetch_add(1);
    rc = fi_mr_reg(d.domain, ctrl, sizeof(Ctrl), kAccess, 0, key, 0, &ctrlMr, nullptr);
    if (rc != 0) {
      *why = fiError("fi_mr_reg", rc);
      return false;
    }
    ctrlRef.desc = fi_mr_desc(ctrlMr);
    ctrlRef.key = fi_mr_key(ctrlMr);
    ctrlRef.base = reinterpret_cast<uintptr_t>(ctrl);
    ctrlRef.virtAddr = d.virtAddr;
    return true;
  }
  bool insert(const SetupMsg& m, fi_addr_t* addr, std::string* why) {
    if (fi_av_insert(av, m.name, 1, addr, 0, nullptr) != 1) {
      *why = "fi_av_insert of the peer's address failed";
      return false;
    }
    return true;
  }
  long recv(int index, void* user) {
    Op* o = op(OpKind::kRecv, user, index);
    const long rc = fi_recv(ep, &ctrl->msgs[index], sizeof(SetupMsg), ctrlDesc(), FI_ADDR_UNSPEC, &o->fctx);
    if (rc != 0) done(o);
    return rc;
  }
  long send(int index, fi_addr_t to) {
    Op* o = op(OpKind::kSend, nullptr, index);
    const long rc = fi_send(ep, &ctrl->msgs[index], sizeof(SetupMsg), ctrlDesc(), to, &o->fctx);
    if (rc != 0) done(o);
    return rc;
  }
  // The peer's address as the provider writes it ("fi_sockaddr_in://198.18.0.2:41000").
  std::string addrText(const SetupMsg& m) const {
    char buf[128] = {};
    size_t len = sizeof buf;
    const char* t = fi_av_straddr(av, m.name, buf, &len);
    return t ? std::string(t) : std::string("?");
  }
  std::string cqError() {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(cq, &err, 0) < 0) return "a completion failed";
    char buf[256];
    const char* text = fi_cq_strerror(cq, err.prov_errno, err.err_data, buf, sizeof buf);
    std::string why = std::string(fi_strerror(err.err)) + (text ? std::string(" (") + text + ")" : "");
    if (err.op_context) done(reinterpret_cast<Op*>(err.op_context));
    return why;
  }
};

// ---- comms ----

struct Comm final : rdma::Wire {
  Context* ctx = nullptr;
  Device* dev = nullptr;
  bool isSend = false;
  Endpoint ep;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  fi_addr_t listener = FI_ADDR_UNSPEC;
  uint64_t nonce = 0;
  std::unique_ptr<rdma::Proto> proto;
  // setup: a send comm's connect message and the receiver's answer; a receive comm's answer
  bool setupSendPending = false;  // the setup message (msgs[1]) is still to be posted
  bool answered = false;          // a send comm: the receiver's answer is in
  bool setupSent = false;         // the setup message has left (its send completed)
  std::string peerText;           // a receive comm: the sender's address, for logs
  std::string failure;
  struct Waiting {
    const void* buf;
    size_t len;
    void* desc;
    uint64_t raddr;
    uint64_t rkey;
    uint32_t imm;
    Op* op;
  };
  std::deque<Waiting> waiting;

  std::string peerName() const { return isSend ? "the receiver" : "the sender"; }

  chorusResult_t write(const void* buf, size_t len, void* desc, uint64_t raddr, uint64_t rkey, uint32_t imm,
                       void* uctx) override {
    Op* o = ep.op(OpKind::kWrite, uctx);
    waiting.push_back({buf, len, desc, raddr, rkey, imm, o});
    return flush() ? chorusSuccess : chorusRemoteError;
  }
  bool flush() {
    while (!waiting.empty()) {
      const Waiting& w = waiting.front();
      const long rc = fi_writedata(ep.ep, w.buf, w.len, w.desc, w.imm, peer, w.raddr, w.rkey, &w.op->fctx);
      if (rc == -FI_EAGAIN) return true;
      if (rc != 0) {
        failure = fiError("fi_writedata", rc);
        return false;
      }
      waiting.pop_front();
    }
    if (setupSendPending) {
      const long rc = ep.send(1, isSend ? listener : peer);
      if (rc == 0) setupSendPending = false;
      if (rc != 0 && rc != -FI_EAGAIN) {
        failure = fiError("fi_send", rc);
        return false;
      }
    }
    return true;
  }
  chorusResult_t poll(Sink& sink) override {
    if (!flush()) return chorusRemoteError;
    fi_cq_data_entry ent[16];
    for (;;) {
      const ssize_t n = fi_cq_read(ep.cq, ent, 16);
      if (n == -FI_EAGAIN) break;
      if (n == -FI_EAVAIL) {
        failure = "a transfer with " + peerName() + " failed: " + ep.cqError();
        return chorusRemoteError;
      }
      if (n < 0) {
        failure = fiError("fi_cq_read", long(n));
        return chorusRemoteError;
      }
      for (ssize_t i = 0; i < n; ++i) {
        // A write of the peer's (FI_REMOTE_CQ_DATA alone does not say so: some providers set it on the
        // writer's own completion of fi_writedata).
        if (ent[i].flags & FI_REMOTE_WRITE) {
          sink.remoteWrite(uint32_t(ent[i].data));
          continue;
        }
        Op* o = reinterpret_cast<Op*>(ent[i].op_context);
        if (o->kind == OpKind::kWrite) {
          sink.localDone(o->user);
        } else if (o->kind == OpKind::kRecv) {
          const SetupMsg& m = ep.ctrl->msgs[o->index];
          if (m.magic != kAckMagic || m.nonce != nonce) {
            failure = "the receiver's answer to connect does not belong to this connection";
            ep.done(o);
            return chorusRemoteError;
          }
          if (!ep.insert(m, &peer, &failure)) {
            ep.done(o);
            return chorusRemoteError;
          }
          proto->setPeer(m.memAddr, m.memKey);
          answered = true;
        } else if (o->kind == OpKind::kSend) {
          setupSent = true;
        }
        ep.done(o);
      }
      if (n < 16) break;
    }
    return flush() ? chorusSuccess : chorusRemoteError;
  }
  size_t maxWrite() const override { return dev->maxMsg < kMaxWrite ? dev->maxMsg : kMaxWrite; }
  std::string why() const override { return failure.empty() ? "the OFI connection failed" : failure; }
};

struct ListenComm {
  Context* ctx = nullptr;
  Device* dev = nullptr;
  Endpoint ep;
  uint64_t nonce = 0;
  std::deque<SetupMsg> arrived;
  // The comm being accepted: returned once its answer has left (libfabric moves it only while
  // someone reads the comm's completions, and no one else does until accept returns it).
  std::unique_ptr<Comm> accepting;
};

struct MrHandle {
  Device* dev = nullptr;
  RegCache::Entry* entry = nullptr;
  rdma::MemRef ref;
};

uint64_t randomNonce() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

std::unique_ptr<Comm> makeComm(Context* c, Device* d, bool isSend, uint64_t nonce, std::string* why) {
  auto comm = std::make_unique<Comm>();
  comm->ctx = c;
  comm->dev = d;
  comm->isSend = isSend;
  comm->nonce = nonce;
  if (!comm->ep.open(*d, why)) return nullptr;
  comm->proto = std::make_unique<rdma::Proto>(comm.get(), &comm->ep.ctrl->proto, comm->ep.ctrlRef, isSend);
  comm->proto->user = comm.get();
  SetupMsg& m = comm->ep.ctrl->msgs[1];
  m = comm->ep.self;
  m.magic = isSend ? kConnectMagic : kAckMagic;
  m.nonce = nonce;
  m.memAddr = comm->ep.ctrlRef.remoteAddr(&comm->ep.ctrl->proto);
  m.memKey = comm->ep.ctrlRef.key;
  return comm;
}

// ---- the ABI ----

chorusResult_t ofiInit(void** ctx, uint64_t commId, const chorusNetCommConfig_v1_t*, chorusNetLogger_t logger) {
  if (!ctx) return chorusInvalidArgument;
  Fabric& fab = fabric();
  if (fab.devices.empty()) {
    OFI_LOG(logger, chorusNetLogWarn, "OFI network: %s", fab.why.c_str());
    return chorusSystemError;
  }
  auto* c = new Context();
  c->commId = commId;
  c->logger = logger;
  // Said for every context (each communicator's), as each one's log should say it.
  std::string devs;
  for (const auto& d : fab.devices) devs += (devs.empty() ? "" : ", ") + d->name;
  OFI_LOG(logger, chorusNetLogInfo, "OFI network: provider %s (libfabric %u.%u), devices %s", fab.provider.c_str(),
          FI_MAJOR(fi_version()), FI_MINOR(fi_version()), devs.c_str());
  *ctx = c;
  return chorusSuccess;
}

chorusResult_t ofiFinalize(void* ctx) { return rdma::finalizeContext<Comm>(ctx, "OFI network"); }

chorusResult_t ofiDevices(int* ndev) {
  if (!ndev) return chorusInvalidArgument;
  *ndev = int(fabric().devices.size());
  return chorusSuccess;
}

chorusResult_t ofiGetProperties(int dev, chorusNetProperties_v1_t* props) {
  Fabric& fab = fabric();
  if (!props || dev < 0 || size_t(dev) >= fab.devices.size()) return chorusInvalidArgument;
  const Device& d = *fab.devices[size_t(dev)];
  *props = chorusNetProperties_v1_t{};
  props->name = const_cast<char*>(d.name.c_str());
  props->pciPath = nullptr;
  props->guid = uint64_t(dev);
  props->ptrSupport = CHORUS_NET_PTR_HOST;
  props->regIsGlobal = 1;
  props->speed = 10000;
  if (d.info->nic && d.info->nic->link_attr && d.info->nic->link_attr->speed > 0) {
    props->speed = int(d.info->nic->link_attr->speed / 1000000);
  }
  props->port = 1;
  props->maxComms = 65536;
  props->maxRecvs = rdma::kMaxRecvs;
  props->maxP2pBytes = d.maxMsg;
  props->maxCollBytes = d.maxMsg;
  return chorusSuccess;
}

chorusResult_t ofiListen(void* ctx, int dev, void* handle, void** listenComm) {
  auto* c = static_cast<Context*>(ctx);
  if (!c || !handle || !listenComm) return chorusInvalidArgument;
  *listenComm = nullptr;
  std::string why;
  auto l = std::make_unique<ListenComm>();
  Device* d = openDevice(dev, &why);
  if (!d || !l->ep.open(*d, &why)) {
    OFI_LOG(c->logger, chorusNetLogWarn, "OFI network: cannot listen: %s", why.c_str());
    return chorusSystemError;
  }
  l->ctx = c;
  l->dev = d;
  l->nonce = randomNonce();
  for (int i = 0; i < kListenBufs; ++i) {
    const long rc = l->ep.recv(i, nullptr);
    if (rc != 0) {
      OFI_LOG(c->logger, chorusNetLogWarn, "OFI network: %s", fiError("fi_recv", rc).c_str());
      return chorusSystemError;
    }
  }
  auto* h = static_cast<Handle*>(handle);
  *h = Handle{};
  h->magic = kHandleMagic;
  h->nonce = l->nonce;
  h->dev = uint32_t(dev);
  h->nameLen = l->ep.self.nameLen;
  std::memcpy(h->name, l->ep.self.name, kNameMax);
  ++c->comms;
  *listenComm = l.release();
  return chorusSuccess;
}

chorusResult_t ofiConnect(void* ctx, int dev, void* handle, void** sendComm) {
  auto* c = static_cast<Context*>(ctx);
  auto* h = static_cast<Handle*>(handle);
  if (!c || !h || !sendComm) return chorusInvalidArgument;
  *sendComm = nullptr;
  if (h->magic != kHandleMagic || h->nameLen > kNameMax) {
    OFI_LOG(c->logger, chorusNetLogWarn, "OFI network: connect: the handle is not an OFI network's");
    return chorusInvalidArgument;
  }
  Comm* comm = static_cast<Comm*>(h->pending);
  if (!comm) {
    std::string why;
    Device* d = openDevice(dev, &why);
    std::unique_ptr<Comm> made = d ? makeComm(c, d, true, h->nonce, &why) : nullptr;
    SetupMsg to;
    to.nameLen = h->nameLen;
    std::memcpy(to.name, h->name, kNameMax);
    if (made && !made->ep.insert(to, &made->listener, &why)) made.reset();
    if (made && made->ep.recv(0, nullptr) != 0) {
      why = "cannot post the receive of the receiver's answer";
      made.reset();
    }
    if (!made) {
      OFI_LOG(c->logger, chorusNetLogWarn, "OFI network: cannot connect: %s", why.c_str());
      return chorusSystemError;
    }
    made->setupSendPending = true;
    comm = made.release();
    ++c->comms;
    h->pending = comm;
    std::lock_guard<std::mutex> g(c->mu);
    c->connecting.insert(comm);
  }
  const auto done = [&] {
    h->pending = nullptr;
    std::lock_guard<std::mutex> g(c->mu);
    c->connecting.erase(comm);
  };
  if (comm->proto->progress() != chorusSuccess) {
    OFI_LOG(c->logger, chorusNetLogWarn, "OFI network: connect: %s", comm->proto->failure().c_str());
    done();
    --c->comms;
    delete comm;
    return chorusRemoteError;
  }
  if (!comm->answered || comm->setupSendPending) return chorusSuccess;
  done();
  OFI_LOG(c->logger, chorusNetLogInfo, "OFI network: connected to %s on %s through provider %s",
          comm->ep.addrText(comm->ep.ctrl->msgs[0]).c_str(), comm->dev->name.c_str(), fabric().provider.c_str());
  *sendComm = comm;
  return chorusSuccess;
}

chorusResult_t ofiAccept(void* listenComm, void** recvComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (!l || !recvComm) return chorusInvalidArgument;
  *recvComm = nullptr;
  fi_cq_data_entry ent[8];
  for (;;) {
    const ssize_t n = fi_cq_read(l->ep.cq, ent, 8);
    if (n == -FI_EAGAIN) break;
    if (n < 0) {
      const std::string why = n == -FI_EAVAIL ? l->ep.cqError() : fiError("fi_cq_read", long(n));
      OFI_LOG(l->ctx->logger, chorusNetLogWarn, "OFI network: accept: %s", why.c_str());
      return chorusRemoteError;
    }
    for (ssize_t i = 0; i < n; ++i) {
      Op* o = reinterpret_cast<Op*>(ent[i].op_context);
      if (o->kind == OpKind::kRecv) {
        const SetupMsg& m = l->ep.ctrl->msgs[o->index];
        if (m.magic == kConnectMagic && m.nonce == l->nonce && m.nameLen <= kNameMax) {
          l->arrived.push_back(m);
        } else {
          OFI_LOG(l->ctx->logger, chorusNetLogWarn,
                  "OFI network: accept: ignored a message that is not a connect to this listener");
        }
        const int index = o->index;
        l->ep.done(o);
        if (l->ep.recv(index, nullptr) != 0) return chorusRemoteError;
        continue;
      }
      l->ep.done(o);
    }
    if (n < 8) break;
  }
  if (!l->accepting && !l->arrived.empty()) {
    const SetupMsg m = l->arrived.front();
    l->arrived.pop_front();
    std::string why;
    acquireDevice(l->dev);
    std::unique_ptr<Comm> comm = makeComm(l->ctx, l->dev, false, m.nonce, &why);
    if (comm && !comm->ep.insert(m, &comm->peer, &why)) comm.reset();
    if (!comm) {
      OFI_LOG(l->ctx->logger, chorusNetLogWarn, "OFI network: accept: %s", why.c_str());
      return chorusSystemError;
    }
    comm->proto->setPeer(m.memAddr, m.memKey);
    comm->setupSendPending = true;
    comm->peerText = comm->ep.addrText(m);
    l->accepting = std::move(comm);
  }
  if (!l->accepting) return chorusSuccess;
  if (l->accepting->proto->progress() != chorusSuccess) {
    OFI_LOG(l->ctx->logger, chorusNetLogWarn, "OFI network: accept: %s", l->accepting->proto->failure().c_str());
    l->accepting.reset();
    return chorusRemoteError;
  }
  if (!l->accepting->setupSent) return chorusSuccess;
  std::unique_ptr<Comm> comm = std::move(l->accepting);
  OFI_LOG(l->ctx->logger, chorusNetLogInfo, "OFI network: accepted %s on %s through provider %s",
          comm->peerText.c_str(), l->dev->name.c_str(), fabric().provider.c_str());
  ++l->ctx->comms;
  *recvComm = comm.release();
  return chorusSuccess;
}

chorusResult_t ofiRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  auto* c = static_cast<Comm*>(comm);
  if (!c || !mhandle) return chorusInvalidArgument;
  if (type != CHORUS_NET_PTR_HOST) return chorusInvalidUsage;
  auto mh = std::make_unique<MrHandle>();
  mh->dev = c->dev;
  acquireDevice(c->dev);  // a registration keeps the domain and its cache, even past its comm
  const chorusResult_t rc = c->dev->cache->acquire(data, size, &mh->entry);
  if (rc != chorusSuccess) {
    releaseDevice(c->dev);
    OFI_LOG(c->ctx->logger, chorusNetLogWarn, "OFI network: registering %zu bytes at %p failed", size, data);
    return rc;
  }
  auto* mr = static_cast<fid_mr*>(mh->entry->handle);
  mh->ref.desc = fi_mr_desc(mr);
  mh->ref.key = fi_mr_key(mr);
  mh->ref.base = mh->entry->begin;
  mh->ref.virtAddr = c->dev->virtAddr;
  *mhandle = mh.release();
  return chorusSuccess;
}

chorusResult_t ofiDeregMr(void*, void* mhandle) {
  auto* mh = static_cast<MrHandle*>(mhandle);
  if (!mh) return chorusInvalidArgument;
  mh->dev->cache->release(mh->entry);
  releaseDevice(mh->dev);
  delete mh;
  return chorusSuccess;
}

chorusResult_t ofiIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return rdma::isend<Comm, MrHandle>(sendComm, data, size, tag, mhandle, request, "OFI network");
}

chorusResult_t ofiIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return rdma::irecv<Comm, MrHandle>(recvComm, n, data, sizes, tags, mhandles, request, "OFI network");
}

chorusResult_t ofiIflush(void*, int, void**, size_t*, void**, void** request) {
  if (request) *request = nullptr;
  return chorusSuccess;
}

chorusResult_t ofiTest(void* request, int* done, size_t* sizes) {
  return rdma::test<Comm>(request, done, sizes, "OFI network");
}

chorusResult_t ofiCloseComm(void* comm) { return rdma::closeComm<Comm>(comm); }

chorusResult_t ofiCloseListen(void* listenComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (!l) return chorusInvalidArgument;
  --l->ctx->comms;
  delete l;
  return chorusSuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const chorusNet_v1_t chorusNetPlugin_v1 = {
    "OFI",     ofiInit,      ofiFinalize,  ofiDevices,     ofiGetProperties, ofiListen, ofiConnect,
    ofiAccept, ofiRegMr,     nullptr,      ofiDeregMr,     ofiIsend,         ofiIrecv,  ofiIflush,
    ofiTest,   ofiCloseComm, ofiCloseComm, ofiCloseListen, nullptr};
