#include "transports/ib/ib_ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sys/stat.h>

#include <mutex>

#include "src/common/settings.h"
#include "transports/ib/ib_net.h"

namespace chorus {
namespace ib {
namespace {

// ---- settings ----

// The ibverbs network's settings: read once per process, when the network is first made; every
// communicator's init checks them too (EnvSnapshot).
const TextSetting kHca{"CHORUS_IB_HCA", SettingScope::kProcess, "the HCAs and ports the ibverbs network uses"};
const TextSetting kGidIndex{"CHORUS_IB_GID_INDEX", SettingScope::kProcess, "the GID index of every RoCE port"};
const TextSetting kAddrFamily{"CHORUS_IB_ADDR_FAMILY", SettingScope::kProcess,
                              "the address family of the RoCE GID to choose"};
const TextSetting kAddrRange{"CHORUS_IB_ADDR_RANGE", SettingScope::kProcess, "only GIDs inside address/bits"};
const TextSetting kRoceVersion{"CHORUS_IB_ROCE_VERSION_NUM", SettingScope::kProcess,
                               "the RoCE version of the GID to choose"};
const BoolSetting kDisable{"CHORUS_IB_DISABLE", false, SettingScope::kProcess, "1: the ibverbs network is not offered"};
const IntSetting kQps{"CHORUS_IB_QPS_PER_CONNECTION",      1, 1, kMaxQps, SettingScope::kProcess,
                      "queue pairs per ibverbs connection"};
const BoolSetting kSplit{"CHORUS_IB_SPLIT_DATA_ON_QPS", false, SettingScope::kProcess,
                         "1: messages are split across the queue pairs"};
const IntSetting kTimeout{"CHORUS_IB_TIMEOUT", 20, 1, 31, SettingScope::kProcess, "the queue pairs' ack timeout"};
const IntSetting kRetry{"CHORUS_IB_RETRY_CNT", 7, 0, 7, SettingScope::kProcess, "the queue pairs' retry count"};
const IntSetting kAdaptiveRouting{
    "CHORUS_IB_ADAPTIVE_ROUTING", -1, 0, 1, SettingScope::kProcess, "adaptive routing; unset: on for InfiniBand ports"};
const IntSetting kArThreshold{"CHORUS_IB_AR_THRESHOLD",
                              8192,
                              0,
                              int64_t(1) << 40,
                              SettingScope::kProcess,
                              "bytes above which adaptive routing splits a write"};
const IntSetting kServiceLevel{"CHORUS_IB_SL", 0, 0, 15, SettingScope::kProcess, "the queue pairs' service level"};
const IntSetting kTrafficClass{"CHORUS_IB_TC", 0, 0, 255, SettingScope::kProcess, "the queue pairs' traffic class"};
const IntSetting kPkey{"CHORUS_IB_PKEY", 0, 0, 65535, SettingScope::kProcess, "the partition key index"};

Status readSettings(Settings* s) {
  Result<HcaList> hcas = parseHcaList(kHca.raw());
  if (!hcas.isOk()) return Status(chorusInvalidArgument, "CHORUS_IB_HCA: " + hcas.status().message());
  s->hcas = hcas.take();
  Result<GidRule> gid = parseGidRule(kGidIndex.raw(), kAddrFamily.raw(), kAddrRange.raw(), kRoceVersion.raw());
  if (!gid.isOk()) return gid.status();
  s->gid = gid.take();
  CHORUS_ASSIGN_OR_RETURN(int64_t disabled, kDisable.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t qps, kQps.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t split, kSplit.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t timeout, kTimeout.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t retry, kRetry.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t ar, kAdaptiveRouting.current());
  CHORUS_ASSIGN_OR_RETURN(s->arThreshold, kArThreshold.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t sl, kServiceLevel.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t tc, kTrafficClass.current());
  CHORUS_ASSIGN_OR_RETURN(int64_t pkey, kPkey.current());
  s->disabled = disabled == 1;
  s->qps = int(qps);
  s->split = split == 1;
  s->timeout = int(timeout);
  s->retry = int(retry);
  s->ar = int(ar);
  s->sl = int(sl);
  s->tc = int(tc);
  s->pkey = int(pkey);
  return Status::ok();
}

// ---- the ports, found once (per verbs table) ----

std::mutex gMu;
const Verbs* gVerbs = nullptr;  // null: systemVerbs()
Net* gNet = nullptr;

bool fileExists(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0;
}

// Opens the port's device and protection domain; false with *why when it cannot.
bool openHca(const Verbs& v, Hca& h, std::string* why) {
  int n = 0;
  ibv_device** list = v.getDeviceList(&n);
  for (int i = 0; list && i < n && !h.ctx; ++i) {
    if (h.port.device == v.getDeviceName(list[i])) h.ctx = v.openDevice(list[i]);
  }
  if (list) v.freeDeviceList(list);
  if (!h.ctx) {
    *why = "cannot open " + h.port.device;
    return false;
  }
  h.pd = v.allocPd(h.ctx);
  if (!h.pd) {
    *why = "ibv_alloc_pd failed on " + h.port.device;
    (void)v.closeDevice(h.ctx);
    h.ctx = nullptr;
    return false;
  }
  return true;
}

void closeHca(const Verbs& v, Hca& h) {
  h.cache.reset();
  if (h.pd) (void)v.deallocPd(h.pd);
  if (h.ctx) (void)v.closeDevice(h.ctx);
  h.pd = nullptr;
  h.ctx = nullptr;
}

Net* buildNet(const Verbs& v) {
  auto* n = new Net();
  n->verbs = &v;
  n->settingsStatus = readSettings(&n->settings);
  if (!n->settingsStatus.isOk()) {
    n->why = n->settingsStatus.message();
    return n;
  }
  if (n->settings.disabled) {
    n->why = "CHORUS_IB_DISABLE=1";
    return n;
  }
  const std::vector<PortInfo> ports = discoverPorts(v, n->settings.hcas, n->settings.gid, &n->why);
  // Device memory: through nvidia-peermem when the kernel has it loaded (NCCL looks at the same
  // files), and as dma-buf where libibverbs and the kernel register one (a probe with no file).
  const bool peermem = fileExists("/sys/kernel/mm/memory_peers/nv_mem/version") ||
                       fileExists("/sys/module/nvidia_peermem/version") ||
                       fileExists("/sys/kernel/mm/memory_peers/nvidia-peermem/version");
  for (const PortInfo& p : ports) {
    auto h = std::make_unique<Hca>();
    h->port = p;
    h->name = p.device + ":" + std::to_string(p.port);
    std::string why;
    if (!openHca(v, *h, &why)) {
      n->why = why;
      continue;
    }
    h->ar = n->settings.ar < 0 ? p.infiniband : n->settings.ar == 1;
    if (peermem) h->ptrSupport |= CHORUS_NET_PTR_CUDA;
    if (v.regDmabufMr) {
      errno = 0;
      ibv_mr* probe = v.regDmabufMr(h->pd, 0, 0, 0, -1, 0);
      if (probe) (void)v.deregMr(probe);
      if (errno != EOPNOTSUPP && errno != EPROTONOSUPPORT) h->ptrSupport |= CHORUS_NET_PTR_DMABUF;
    }
    Hca* hp = h.get();
    const Verbs* vp = &v;
    RegCache::Ops ops;
    ops.reg = [hp, vp](void* base, size_t len, void** handle) {
      ibv_mr* mr = vp->regMr(hp->pd, base, len, kAccess);
      if (!mr) return chorusSystemError;
      *handle = mr;
      return chorusSuccess;
    };
    ops.dereg = [vp](void* handle) { (void)vp->deregMr(static_cast<ibv_mr*>(handle)); };
    // ibverbs pins what it registers: an entry goes with its last user (memory freed and mapped
    // again at the same address must be registered again).
    h->cache = std::make_unique<RegCache>(std::move(ops), 0);
    n->hcas.push_back(std::move(h));
  }
  return n;
}

}  // namespace

Net& net() {
  std::lock_guard<std::mutex> g(gMu);
  if (!gNet) gNet = buildNet(gVerbs ? *gVerbs : systemVerbs());
  return *gNet;
}

std::string gidText(const Gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (gidFamily(gid) == AF_INET) return inet_ntop(AF_INET, gid.raw.data() + 12, buf, sizeof buf) ? buf : "?";
  return inet_ntop(AF_INET6, gid.raw.data(), buf, sizeof buf) ? buf : "?";
}

std::string describeHca(const Hca& h) {
  const PortInfo& p = h.port;
  std::string s = h.name + " (" + (p.infiniband ? "InfiniBand, LID " + std::to_string(p.lid) : "RoCE");
  if (!p.infiniband) s += " v" + std::to_string(p.gid.roceVersion);
  s += ", GID " + std::to_string(p.gidIndex) + " " + gidText(p.gid);
  if (h.ar) s += ", adaptive routing";
  return s + ")";
}

void useVerbs(const Verbs* verbs) {
  std::lock_guard<std::mutex> g(gMu);
  if (gNet) {
    for (auto& h : gNet->hcas) closeHca(*gNet->verbs, *h);
    delete gNet;
    gNet = nullptr;
  }
  gVerbs = verbs;
}

Hca* hcaOf(int dev) {
  Net& n = net();
  return dev >= 0 && size_t(dev) < n.hcas.size() ? n.hcas[size_t(dev)].get() : nullptr;
}

Result<bool> ibOffered(std::string* why) {
  Net& n = net();
  if (!n.settingsStatus.isOk()) return n.settingsStatus;
  if (n.hcas.empty()) {
    *why = n.why;
    return false;
  }
  return true;
}

}  // namespace ib
}  // namespace chorus
