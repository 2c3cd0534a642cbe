#include "tests/fake_verbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <set>

#include "transports/ib/ib_net.h"

namespace chorus {
namespace fakeib {
namespace {

struct FDevice {
  ibv_device dev;  // first: the table hands out its address
  DeviceSpec spec;
};
struct FContext {
  ibv_context ctx;
  FDevice* dev = nullptr;
};
struct FPd {
  ibv_pd pd;
};
struct FMr {
  ibv_mr mr;
  int access = 0;
};
struct FCq {
  ibv_cq cq;
  std::deque<ibv_wc> q;
};
struct Op {
  ibv_wr_opcode opcode;
  uint64_t wrId;
  bool signaled;
  uint64_t addr;
  uint32_t len;
  uint32_t lkey;
  uint64_t raddr;
  uint32_t rkey;
  uint32_t imm;  // as posted (network order)
};
struct FQp {
  ibv_qp qp;
  FContext* ctx = nullptr;
  FCq* scq = nullptr;
  FCq* rcq = nullptr;
  int port = 0;
  int access = 0;
  uint32_t dest = 0;
  bool global = false;
  uint16_t dlid = 0;
  uint8_t dgid[16] = {};
  int maxSend = 0;
  int maxRecv = 0;
  int sendInFlight = 0;
  std::deque<uint64_t> recvs;
  std::deque<Op> out;
  bool dead = false;
  bool broken = false;  // an error completed: the rest flush
};

struct State {
  std::mutex mu;
  std::vector<std::unique_ptr<FDevice>> devices;
  std::set<FContext*> contexts;
  std::set<FPd*> pds;
  std::map<uint32_t, FMr*> mrs;  // by key (lkey == rkey)
  std::set<FCq*> cqs;
  std::map<uint32_t, FQp*> qps;
  uint32_t nextKey = 0x100;
  uint32_t nextQpn = 0x40;
  bool reorder = false;
  std::mt19937 rng{1};
  bool swallow = false;
  bool hold = false;
  bool dmabuf = false;
  Stats stats;
};
State* gState = nullptr;

void push(FCq* cq, const ibv_wc& wc) {
  if (cq->q.size() >= size_t(cq->cq.cqe)) {
    ++gState->stats.cqOverflows;
    return;
  }
  cq->q.push_back(wc);
}

void complete(FQp* q, const Op& op, ibv_wc_status status, ibv_wc_opcode opcode) {
  if (status == IBV_WC_SUCCESS && !op.signaled) return;
  ibv_wc wc{};
  wc.wr_id = op.wrId;
  wc.status = status;
  wc.opcode = opcode;
  wc.qp_num = q->qp.qp_num;
  push(q->scq, wc);
}

// The registration of `key` in `pd` covering [addr, addr + len) with `access`, or null.
FMr* covering(ibv_pd* pd, uint32_t key, uint64_t addr, uint64_t len, int access) {
  auto it = gState->mrs.find(key);
  if (it == gState->mrs.end()) return nullptr;
  FMr* m = it->second;
  const uint64_t base = reinterpret_cast<uintptr_t>(m->mr.addr);
  if (m->mr.pd != pd || addr < base || addr + len > base + m->mr.length) return nullptr;
  if (access && !(m->access & access)) return nullptr;
  return m;
}

// Whether the path of `q` reaches the port of `to`.
bool routed(const FQp* q, const FQp* to) {
  const PortSpec& p = to->ctx->dev->spec.ports[size_t(to->port - 1)];
  if (!p.infiniband) {
    if (!q->global) return false;
    for (const ib::Gid& g : p.gids) {
      if (std::memcmp(g.raw.data(), q->dgid, 16) == 0) return true;
    }
    return false;
  }
  return q->dlid == p.lid;
}

// Delivers the head of q's send queue: false when it must wait (no receive posted).
bool deliver(FQp* q) {
  const Op op = q->out.front();
  const ibv_wc_opcode wcOp = op.opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
  auto fail = [&](ibv_wc_status st) {
    q->out.pop_front();
    --q->sendInFlight;
    q->broken = true;
    complete(q, op, st, wcOp);
    return true;
  };
  if (q->broken) return fail(IBV_WC_WR_FLUSH_ERR);
  if (gState->swallow) {
    q->out.pop_front();
    --q->sendInFlight;
    return true;
  }
  auto dit = gState->qps.find(q->dest);
  FQp* d = dit == gState->qps.end() ? nullptr : dit->second;
  if (!d || d->dead || d->qp.state < IBV_QPS_RTR || !routed(q, d)) return fail(IBV_WC_RETRY_EXC_ERR);
  if (op.len > 0 && !covering(q->qp.pd, op.lkey, op.addr, op.len, 0)) return fail(IBV_WC_LOC_PROT_ERR);
  const int remoteAccess = op.opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
  if (op.len > 0 && (!covering(d->qp.pd, op.rkey, op.raddr, op.len, remoteAccess) || !(d->access & remoteAccess))) {
    return fail(IBV_WC_REM_ACCESS_ERR);
  }
  if (op.opcode == IBV_WR_RDMA_WRITE_WITH_IMM && d->recvs.empty()) {
    ++gState->stats.rnrWaits;
    return false;
  }
  q->out.pop_front();
  --q->sendInFlight;
  if (op.opcode == IBV_WR_RDMA_READ) {
    if (op.len) std::memcpy(reinterpret_cast<void*>(op.addr), reinterpret_cast<const void*>(op.raddr), op.len);
    ++gState->stats.reads;
  } else {
    if (op.len) std::memcpy(reinterpret_cast<void*>(op.raddr), reinterpret_cast<const void*>(op.addr), op.len);
    ++gState->stats.writes;
    ++gState->stats.writesByQp[q->qp.qp_num];
    if (op.opcode == IBV_WR_RDMA_WRITE) ++gState->stats.plainWrites;
  }
  if (op.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    ibv_wc wc{};
    wc.wr_id = d->recvs.front();
    d->recvs.pop_front();
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = op.imm;
    wc.byte_len = op.len;
    wc.qp_num = d->qp.qp_num;
    push(d->rcq, wc);
  }
  complete(q, op, IBV_WC_SUCCESS, wcOp);
  return true;
}

void progress() {
  std::vector<FQp*> ready;
  for (auto& [n, q] : gState->qps) {
    if (!q->out.empty()) ready.push_back(q);
  }
  if (gState->reorder) {
    // One work request at a time from a queue pair picked at random: in order per queue pair,
    // interleaved across them.
    while (!ready.empty()) {
      const size_t i = std::uniform_int_distribution<size_t>(0, ready.size() - 1)(gState->rng);
      FQp* q = ready[i];
      if (!deliver(q) || q->out.empty()) ready.erase(ready.begin() + long(i));
    }
    return;
  }
  for (FQp* q : ready) {
    while (!q->out.empty() && deliver(q)) {
    }
  }
}

// ---- the context's ops ----

int fakePostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::lock_guard<std::mutex> g(gState->mu);
  FQp* q = reinterpret_cast<FQp*>(qp);
  for (ibv_send_wr* w = wr; w; w = w->next) {
    if (q->qp.state != IBV_QPS_RTS) {
      *bad = w;
      return EINVAL;
    }
    if (q->sendInFlight >= q->maxSend) {
      *bad = w;
      return ENOMEM;
    }
    if (w->num_sge > 1 ||
        (w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM && w->opcode != IBV_WR_RDMA_READ)) {
      *bad = w;
      return EINVAL;
    }
    Op op{};
    op.opcode = w->opcode;
    op.wrId = w->wr_id;
    op.signaled = (w->send_flags & IBV_SEND_SIGNALED) != 0;
    if (w->num_sge == 1) {
      op.addr = w->sg_list[0].addr;
      op.len = w->sg_list[0].length;
      op.lkey = w->sg_list[0].lkey;
    }
    op.raddr = w->wr.rdma.remote_addr;
    op.rkey = w->wr.rdma.rkey;
    op.imm = w->imm_data;
    q->out.push_back(op);
    ++q->sendInFlight;
    gState->stats.maxSendInFlight = std::max(gState->stats.maxSendInFlight, q->sendInFlight);
  }
  return 0;
}

int fakePostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  std::lock_guard<std::mutex> g(gState->mu);
  FQp* q = reinterpret_cast<FQp*>(qp);
  for (ibv_recv_wr* w = wr; w; w = w->next) {
    if (q->qp.state < IBV_QPS_INIT || int(q->recvs.size()) >= q->maxRecv) {
      *bad = w;
      return q->qp.state < IBV_QPS_INIT ? EINVAL : ENOMEM;
    }
    q->recvs.push_back(w->wr_id);
  }
  return 0;
}

int fakePollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  std::lock_guard<std::mutex> g(gState->mu);
  if (!gState->hold) progress();
  FCq* c = reinterpret_cast<FCq*>(cq);
  int got = 0;
  while (got < n && !c->q.empty()) {
    wc[got++] = c->q.front();
    c->q.pop_front();
  }
  return got;
}

// ---- the table ----

ibv_device** fakeGetDeviceList(int* n) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto** list = new ibv_device*[gState->devices.size() + 1];
  for (size_t i = 0; i < gState->devices.size(); ++i) list[i] = &gState->devices[i]->dev;
  list[gState->devices.size()] = nullptr;
  *n = int(gState->devices.size());
  return list;
}
void fakeFreeDeviceList(ibv_device** list) { delete[] list; }
const char* fakeGetDeviceName(ibv_device* d) { return reinterpret_cast<FDevice*>(d)->spec.name.c_str(); }

ibv_context* fakeOpenDevice(ibv_device* d) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* c = new FContext();
  c->dev = reinterpret_cast<FDevice*>(d);
  c->ctx.device = d;
  c->ctx.ops.post_send = fakePostSend;
  c->ctx.ops.post_recv = fakePostRecv;
  c->ctx.ops.poll_cq = fakePollCq;
  gState->contexts.insert(c);
  return &c->ctx;
}
int fakeCloseDevice(ibv_context* ctx) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* c = reinterpret_cast<FContext*>(ctx);
  gState->contexts.erase(c);
  delete c;
  return 0;
}
int fakeQueryDevice(ibv_context* ctx, ibv_device_attr* a) {
  const DeviceSpec& s = reinterpret_cast<FContext*>(ctx)->dev->spec;
  *a = ibv_device_attr{};
  a->phys_port_cnt = uint8_t(s.ports.size());
  a->max_qp_wr = s.maxQpWr;
  a->max_cqe = s.maxCqe;
  a->node_guid = s.guid;
  return 0;
}
int fakeQueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* a) {
  const DeviceSpec& s = reinterpret_cast<FContext*>(ctx)->dev->spec;
  if (port < 1 || port > s.ports.size()) return EINVAL;
  const PortSpec& p = s.ports[port - 1];
  *a = ibv_port_attr{};
  a->state = p.active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->link_layer = p.infiniband ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  a->lid = p.lid;
  a->gid_tbl_len = int(p.gids.size());
  a->active_mtu = ibv_mtu(p.mtu);
  a->max_msg_sz = p.maxMsg;
  a->active_speed = 32;  // EDR, 25 Gb/s a lane
  a->active_width = 2;   // 4 lanes
  a->flags = p.grhRequired ? IBV_QPF_GRH_REQUIRED : 0;
  return 0;
}
int fakeQueryGid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  const DeviceSpec& s = reinterpret_cast<FContext*>(ctx)->dev->spec;
  if (port < 1 || port > s.ports.size() || index < 0 || size_t(index) >= s.ports[port - 1].gids.size()) return EINVAL;
  std::memcpy(gid->raw, s.ports[port - 1].gids[size_t(index)].raw.data(), 16);
  return 0;
}
ibv_pd* fakeAllocPd(ibv_context* ctx) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* p = new FPd();
  p->pd.context = ctx;
  gState->pds.insert(p);
  return &p->pd;
}
int fakeDeallocPd(ibv_pd* pd) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* p = reinterpret_cast<FPd*>(pd);
  gState->pds.erase(p);
  delete p;
  return 0;
}
ibv_mr* makeMr(ibv_pd* pd, void* addr, size_t len, int access) {
  auto* m = new FMr();
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = len;
  m->mr.lkey = m->mr.rkey = gState->nextKey++;
  m->access = access;
  gState->mrs[m->mr.lkey] = m;
  return &m->mr;
}
ibv_mr* fakeRegMr(ibv_pd* pd, void* addr, size_t len, int access) {
  std::lock_guard<std::mutex> g(gState->mu);
  if (!addr || len == 0) {
    errno = EINVAL;
    return nullptr;
  }
  return makeMr(pd, addr, len, access);
}
ibv_mr* fakeRegDmabufMr(ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
  std::lock_guard<std::mutex> g(gState->mu);
  if (fd < 0 || len == 0) {  // the network's probe: an unsupported kernel would say EOPNOTSUPP
    errno = EBADF;
    return nullptr;
  }
  (void)offset;
  return makeMr(pd, reinterpret_cast<void*>(iova), len, access);
}
int fakeDeregMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* m = reinterpret_cast<FMr*>(mr);
  gState->mrs.erase(m->mr.lkey);
  delete m;
  return 0;
}
ibv_cq* fakeCreateCq(ibv_context* ctx, int cqe, void*, ibv_comp_channel*, int) {
  std::lock_guard<std::mutex> g(gState->mu);
  if (cqe < 1 || cqe > reinterpret_cast<FContext*>(ctx)->dev->spec.maxCqe) {
    errno = EINVAL;
    return nullptr;
  }
  auto* c = new FCq();
  c->cq.context = ctx;
  c->cq.cqe = cqe;
  gState->cqs.insert(c);
  return &c->cq;
}
int fakeDestroyCq(ibv_cq* cq) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* c = reinterpret_cast<FCq*>(cq);
  for (auto& [n, q] : gState->qps) {
    if (q->scq == c || q->rcq == c) return EBUSY;  // queue pairs first, as libibverbs requires
  }
  gState->cqs.erase(c);
  delete c;
  return 0;
}
ibv_qp* fakeCreateQp(ibv_pd* pd, ibv_qp_init_attr* ia) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* ctx = reinterpret_cast<FContext*>(pd->context);
  if (ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq || int(ia->cap.max_send_wr) > ctx->dev->spec.maxQpWr ||
      int(ia->cap.max_recv_wr) > ctx->dev->spec.maxQpWr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* q = new FQp();
  q->ctx = ctx;
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = ia->send_cq;
  q->qp.recv_cq = ia->recv_cq;
  q->qp.qp_num = gState->nextQpn++;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  q->scq = reinterpret_cast<FCq*>(ia->send_cq);
  q->rcq = reinterpret_cast<FCq*>(ia->recv_cq);
  q->maxSend = int(ia->cap.max_send_wr);
  q->maxRecv = int(ia->cap.max_recv_wr);
  gState->qps[q->qp.qp_num] = q;
  return &q->qp;
}
int fakeModifyQp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* q = reinterpret_cast<FQp*>(qp);
  const auto has = [mask](int bits) { return (mask & bits) == bits; };
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  const PortSpec* port = nullptr;
  switch (a->qp_state) {
    case IBV_QPS_INIT:
      if (q->qp.state != IBV_QPS_RESET || !has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return EINVAL;
      if (a->port_num < 1 || a->port_num > q->ctx->dev->spec.ports.size()) return EINVAL;
      q->port = a->port_num;
      q->access = int(a->qp_access_flags);
      break;
    case IBV_QPS_RTR:
      if (q->qp.state != IBV_QPS_INIT || !has(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        return EINVAL;
      }
      port = &q->ctx->dev->spec.ports[size_t(q->port - 1)];
      if (a->ah_attr.port_num != q->port || a->path_mtu < IBV_MTU_256 || a->path_mtu > port->mtu) return EINVAL;
      if ((!port->infiniband || port->grhRequired) && !a->ah_attr.is_global) return EINVAL;  // RoCE is routed by GID
      if (a->ah_attr.is_global && a->ah_attr.grh.sgid_index >= port->gids.size()) return EINVAL;
      q->dest = a->dest_qp_num;
      q->global = a->ah_attr.is_global != 0;
      q->dlid = a->ah_attr.dlid;
      std::memcpy(q->dgid, a->ah_attr.grh.dgid.raw, 16);
      break;
    case IBV_QPS_RTS:
      if (q->qp.state != IBV_QPS_RTR ||
          !has(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
        return EINVAL;
      }
      if (a->retry_cnt > 7 || a->rnr_retry > 7 || a->timeout > 31) return EINVAL;
      break;
    default:
      return EINVAL;
  }
  q->qp.state = a->qp_state;
  return 0;
}
int fakeDestroyQp(ibv_qp* qp) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto* q = reinterpret_cast<FQp*>(qp);
  gState->qps.erase(q->qp.qp_num);
  delete q;
  return 0;
}
const char* fakeWcStatusStr(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    default:
      return "other error";
  }
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

}  // namespace

ib::Gid roceGid(const char* ipv4, int version) {
  ib::Gid g;
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  (void)inet_pton(AF_INET, ipv4, g.raw.data() + 12);
  g.roceVersion = version;
  return g;
}

ib::Gid ibGid(uint64_t subnetPrefix, uint64_t guid) {
  ib::Gid g;
  for (int i = 0; i < 8; ++i) {
    g.raw[size_t(i)] = uint8_t(subnetPrefix >> (56 - 8 * i));
    g.raw[size_t(8 + i)] = uint8_t(guid >> (56 - 8 * i));
  }
  return g;
}

DeviceSpec roceDevice(const std::string& name, const char* ipv4, uint64_t guid) {
  DeviceSpec d;
  d.name = name;
  d.guid = guid;
  PortSpec p;
  ib::Gid linkLocal;
  linkLocal.raw[0] = 0xfe;
  linkLocal.raw[1] = 0x80;
  linkLocal.raw[15] = 1;
  linkLocal.roceVersion = 1;
  p.gids = {linkLocal, roceGid(ipv4, 1), roceGid(ipv4, 2)};
  d.ports.push_back(p);
  PortSpec down = p;
  down.active = false;
  d.ports.push_back(down);
  return d;
}

DeviceSpec ibDevice(const std::string& name, uint16_t lid, uint64_t guid) {
  DeviceSpec d;
  d.name = name;
  d.guid = guid;
  PortSpec p;
  p.infiniband = true;
  p.lid = lid;
  p.gids = {ibGid(0xfe80000000000000ull, guid)};
  d.ports.push_back(p);
  return d;
}

Installed::Installed(std::vector<DeviceSpec> devices, bool dmabuf) {
  char tmpl[] = "/tmp/chorus_fakeib_XXXXXX";
  if (!::mkdtemp(tmpl)) std::abort();
  root_ = tmpl;
  fab_ = std::make_unique<Fabric>(std::move(devices), root_);
  fab_->setDmabuf(dmabuf);
  reinstall();
}

Installed::~Installed() {
  (void)uninstall();
  fab_.reset();
  (void)std::system(("rm -rf " + root_).c_str());
}

void Installed::reinstall() {
  ib::useVerbs(&fab_->verbs());
  installed_ = true;
}

int Installed::uninstall() {
  if (installed_) ib::useVerbs(nullptr);
  installed_ = false;
  return fab_->openObjects();
}

Fabric::Fabric(std::vector<DeviceSpec> devices, const std::string& sysfsRoot) {
  gState = new State();
  for (DeviceSpec& d : devices) {
    auto fd = std::make_unique<FDevice>();
    fd->dev = ibv_device{};
    std::snprintf(fd->dev.name, sizeof fd->dev.name, "%s", d.name.c_str());
    for (size_t p = 0; p < d.ports.size(); ++p) {
      const std::string types = sysfsRoot + "/" + d.name + "/ports/" + std::to_string(p + 1) + "/gid_attrs/types";
      if (std::system(("mkdir -p " + types).c_str()) != 0) std::abort();
      for (size_t i = 0; i < d.ports[p].gids.size(); ++i) {
        const int v = d.ports[p].gids[i].roceVersion;
        writeFile(types + "/" + std::to_string(i), v == 2 ? "RoCE v2\n" : v == 1 ? "IB/RoCE v1\n" : "\n");
      }
    }
    fd->spec = std::move(d);
    gState->devices.push_back(std::move(fd));
  }
  verbs_.getDeviceList = fakeGetDeviceList;
  verbs_.freeDeviceList = fakeFreeDeviceList;
  verbs_.getDeviceName = fakeGetDeviceName;
  verbs_.openDevice = fakeOpenDevice;
  verbs_.closeDevice = fakeCloseDevice;
  verbs_.queryDevice = fakeQueryDevice;
  verbs_.queryPort = fakeQueryPort;
  verbs_.queryGid = fakeQueryGid;
  verbs_.allocPd = fakeAllocPd;
  verbs_.deallocPd = fakeDeallocPd;
  verbs_.regMr = fakeRegMr;
  verbs_.deregMr = fakeDeregMr;
  verbs_.createCq = fakeCreateCq;
  verbs_.destroyCq = fakeDestroyCq;
  verbs_.createQp = fakeCreateQp;
  verbs_.modifyQp = fakeModifyQp;
  verbs_.destroyQp = fakeDestroyQp;
  verbs_.wcStatusStr = fakeWcStatusStr;
  verbs_.sysfsRoot = sysfsRoot;
}

Fabric::~Fabric() {
  delete gState;
  gState = nullptr;
}

void Fabric::setReorder(bool on, uint32_t seed) {
  std::lock_guard<std::mutex> g(gState->mu);
  gState->reorder = on;
  gState->rng.seed(seed);
}
void Fabric::setSwallow(bool on) {
  std::lock_guard<std::mutex> g(gState->mu);
  gState->swallow = on;
}
void Fabric::setHold(bool on) {
  std::lock_guard<std::mutex> g(gState->mu);
  gState->hold = on;
}
void Fabric::kill(uint32_t qpNum) {
  std::lock_guard<std::mutex> g(gState->mu);
  auto it = gState->qps.find(qpNum);
  if (it != gState->qps.end()) it->second->dead = true;
}
void Fabric::setDmabuf(bool on) { verbs_.regDmabufMr = on ? fakeRegDmabufMr : nullptr; }

uint32_t Fabric::newestQp() const {
  std::lock_guard<std::mutex> g(gState->mu);
  return gState->qps.empty() ? 0 : gState->qps.rbegin()->first;
}

Stats Fabric::stats() const {
  std::lock_guard<std::mutex> g(gState->mu);
  return gState->stats;
}

int Fabric::openObjects() const {
  std::lock_guard<std::mutex> g(gState->mu);
  return int(gState->contexts.size() + gState->pds.size() + gState->mrs.size() + gState->cqs.size() +
             gState->qps.size());
}

}  // namespace fakeib
}  // namespace chorus
