#include "transports/net/ib_verbs.h"

#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <fstream>

namespace chorus {
namespace ib {
namespace {

// The functions used, by their IBVERBS_1.1 versions.
struct Verbs {
  ibv_device** (*getDeviceList)(int*) = nullptr;
  void (*freeDeviceList)(ibv_device**) = nullptr;
  const char* (*getDeviceName)(ibv_device*) = nullptr;
  ibv_context* (*openDevice)(ibv_device*) = nullptr;
  int (*closeDevice)(ibv_context*) = nullptr;
  int (*queryDevice)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*queryPort)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
  int (*queryGid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  std::string why;  // not loaded: why
};

template <typename F>
bool bind(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(::dlvsym(lib, name, "IBVERBS_1.1"));
  return *f != nullptr;
}

const Verbs& verbs() {
  static const Verbs v = [] {
    Verbs x;
    void* lib = ::dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = ::dlerror();
      x.why = std::string("libibverbs.so.1 cannot be loaded (") + (e ? e : "dlopen failed") + ")";
      return x;
    }
    const bool ok = bind(lib, "ibv_get_device_list", &x.getDeviceList) &&
                    bind(lib, "ibv_free_device_list", &x.freeDeviceList) &&
                    bind(lib, "ibv_get_device_name", &x.getDeviceName) && bind(lib, "ibv_open_device", &x.openDevice) &&
                    bind(lib, "ibv_close_device", &x.closeDevice) && bind(lib, "ibv_query_device", &x.queryDevice) &&
                    bind(lib, "ibv_query_port", &x.queryPort) && bind(lib, "ibv_query_gid", &x.queryGid);
    if (!ok) {
      x.getDeviceList = nullptr;
      x.why = "libibverbs.so.1 lacks a function of IBVERBS_1.1 that Chorus calls";
    }
    return x;
  }();
  return v;
}

}  // namespace

int roceVersion(const std::string& root, const std::string& device, int port, int index) {
  std::ifstream f(root + "/" + device + "/ports/" + std::to_string(port) + "/gid_attrs/types/" + std::to_string(index));
  std::string type;
  if (!std::getline(f, type)) return 0;
  if (type.rfind("IB/RoCE v1", 0) == 0 || type.rfind("RoCE v1", 0) == 0) return 1;
  if (type.rfind("RoCE v2", 0) == 0) return 2;
  return 0;
}

std::vector<PortInfo> discoverPorts(const HcaList& hcas, const GidRule& rule, std::string* why) {
  std::vector<PortInfo> ports;
  const Verbs& v = verbs();
  if (!v.getDeviceList) {
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
        std::vector<Gid> table(size_t(pattr.gid_tbl_len > 0 ? pattr.gid_tbl_len : 0));
        for (int i = 0; i < pattr.gid_tbl_len; ++i) {
          ibv_gid g{};
          if (v.queryGid(ctx, uint8_t(p), i, &g) == 0) std::memcpy(table[size_t(i)].raw.data(), g.raw, 16);
          if (!info.infiniband) table[size_t(i)].roceVersion = roceVersion("/sys/class/infiniband", name, p, i);
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
