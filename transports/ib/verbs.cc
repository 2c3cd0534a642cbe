#include "transports/ib/verbs.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>

namespace chorus {
namespace ib {
namespace {

template <typename F>
bool bind(void* lib, const char* name, const char* version, F* f) {
  *f = reinterpret_cast<F>(::dlvsym(lib, name, version));
  return *f != nullptr;
}

int firstBitSet(int val, int max) {
  int i = 0;
  while (i < max && (val & (1 << i)) == 0) ++i;
  return i;
}

}  // namespace

const Verbs& systemVerbs() {
  static const Verbs v = [] {
    Verbs x;
    void* lib = ::dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = ::dlerror();
      x.why = std::string("libibverbs.so.1 cannot be loaded (") + (e ? e : "dlopen failed") + ")";
      return x;
    }
    const char* v11 = "IBVERBS_1.1";
    const bool ok =
        bind(lib, "ibv_get_device_list", v11, &x.getDeviceList) &&
        bind(lib, "ibv_free_device_list", v11, &x.freeDeviceList) &&
        bind(lib, "ibv_get_device_name", v11, &x.getDeviceName) && bind(lib, "ibv_open_device", v11, &x.openDevice) &&
        bind(lib, "ibv_close_device", v11, &x.closeDevice) && bind(lib, "ibv_query_device", v11, &x.queryDevice) &&
        bind(lib, "ibv_query_port", v11, &x.queryPort) && bind(lib, "ibv_query_gid", v11, &x.queryGid) &&
        bind(lib, "ibv_alloc_pd", v11, &x.allocPd) && bind(lib, "ibv_dealloc_pd", v11, &x.deallocPd) &&
        bind(lib, "ibv_reg_mr", v11, &x.regMr) && bind(lib, "ibv_dereg_mr", v11, &x.deregMr) &&
        bind(lib, "ibv_create_cq", v11, &x.createCq) && bind(lib, "ibv_destroy_cq", v11, &x.destroyCq) &&
        bind(lib, "ibv_create_qp", v11, &x.createQp) && bind(lib, "ibv_modify_qp", v11, &x.modifyQp) &&
        bind(lib, "ibv_destroy_qp", v11, &x.destroyQp) && bind(lib, "ibv_wc_status_str", v11, &x.wcStatusStr);
    if (!ok) {
      x.getDeviceList = nullptr;
      x.why = "libibverbs.so.1 lacks a function of IBVERBS_1.1 that Chorus calls";
      return x;
    }
    (void)bind(lib, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", &x.regDmabufMr);  // optional: rdma-core 34 and later
    return x;
  }();
  return v;
}

int roceVersion(const std::string& root, const std::string& device, int port, int index) {
  std::ifstream f(root + "/" + device + "/ports/" + std::to_string(port) + "/gid_attrs/types/" + std::to_string(index));
  std::string type;
  if (!std::getline(f, type)) return 0;
  if (type.rfind("IB/RoCE v1", 0) == 0 || type.rfind("RoCE v1", 0) == 0) return 1;
  if (type.rfind("RoCE v2", 0) == 0) return 2;
  return 0;
}

int portSpeedMbps(uint8_t activeSpeed, uint8_t activeWidth) {
  static const int speeds[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
  static const int widths[] = {1, 4, 8, 12, 2};
  if (activeSpeed == 0 || activeWidth == 0) return 0;
  return speeds[firstBitSet(activeSpeed, int(sizeof speeds / sizeof speeds[0]) - 1)] *
         widths[firstBitSet(activeWidth, int(sizeof widths / sizeof widths[0]) - 1)];
}

std::vector<PortInfo> discoverPorts(const Verbs& v, const HcaList& hcas, const GidRule& rule, std::string* why) {
  std::vector<PortInfo> ports;
  if (!v.loaded()) {
    *why = v.why;
    return ports;
  }
  int n = 0;
  ibv_device** list = v.getDeviceList(&n);
  if (!list || n == 0) {
    if (list) v.freeDeviceList(list);
    *why = "no RDMA device (libibverbs lists none)";
    return ports;
  }
  std::string seen;
  for (int d = 0; d < n; ++d) {
    const std::string name = v.getDeviceName(list[d]);
    seen += (seen.empty() ? "" : ", ") + name;
    ibv_context* ctx = v.openDevice(list[d]);
    if (!ctx) continue;
    ibv_device_attr dattr{};
    if (v.queryDevice(ctx, &dattr) == 0) {
      char real[PATH_MAX];
      const std::string devPath = v.sysfsRoot + "/" + name + "/device";
      const std::string pci = ::realpath(devPath.c_str(), real) ? std::string(real) : std::string();
      for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
        ibv_port_attr pattr{};
        if (!hcaSelected(hcas, name, p) || v.queryPort(ctx, uint8_t(p), &pattr) != 0) continue;
        if (pattr.state != IBV_PORT_ACTIVE) continue;
        PortInfo info;
        info.device = name;
        info.port = p;
        info.infiniband = pattr.link_layer == IBV_LINK_LAYER_INFINIBAND;
        info.lid = pattr.lid;
        info.activeMtu = pattr.active_mtu;
        info.maxMsg = pattr.max_msg_sz;
        info.speedMbps = portSpeedMbps(pattr.active_speed, pattr.active_width);
        info.guid = dattr.node_guid;
        info.grhRequired = (pattr.flags & IBV_QPF_GRH_REQUIRED) != 0;
        info.maxQpWr = dattr.max_qp_wr;
        info.maxCqe = dattr.max_cqe;
        info.pciPath = pci;
        std::vector<Gid> table(size_t(pattr.gid_tbl_len > 0 ? pattr.gid_tbl_len : 0));
        for (int i = 0; i < pattr.gid_tbl_len; ++i) {
          ibv_gid g{};
          if (v.queryGid(ctx, uint8_t(p), i, &g) == 0) std::memcpy(table[size_t(i)].raw.data(), g.raw, 16);
          if (!info.infiniband) table[size_t(i)].roceVersion = roceVersion(v.sysfsRoot, name, p, i);
        }
        info.gidIndex = chooseGidIndex(table, info.infiniband, rule);
        if (info.gidIndex < static_cast<int>(table.size())) info.gid = table[size_t(info.gidIndex)];
        ports.push_back(info);
      }
    }
    v.closeDevice(ctx);
  }
  v.freeDeviceList(list);
  if (ports.empty()) *why = "no active port of a selected RDMA device (devices: " + seen + ")";
  return ports;
}

}  // namespace ib
}  // namespace chorus
