// The ibverbs network's ports, found once per process (per verbs table): its settings, each
// active port's device and protection domain, registration cache, adaptive routing and what
// memory it registers. The network (ib_net.cc) connects queue pairs over them.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "include/chorus/net.h"
#include "src/common/status.h"
#include "transports/ib/ib_select.h"
#include "transports/ib/verbs.h"
#include "transports/net/reg_cache.h"

namespace chorus {
namespace ib {

constexpr int kMaxQps = 16;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// CHORUS_IB_*, read once per process (ib_ports.cc).
struct Settings {
  HcaList hcas;
  GidRule gid;
  bool disabled = false;
  int qps = 1;
  bool split = false;
  int timeout = 20;
  int retry = 7;
  int ar = -1;  // -1: on for InfiniBand ports
  int64_t arThreshold = 8192;
  int sl = 0;
  int tc = 0;
  int pkey = 0;
};

struct Hca {
  PortInfo port;
  std::string name;  // "mlx5_0:1"
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::unique_ptr<RegCache> cache;
  bool ar = false;
  int ptrSupport = CHORUS_NET_PTR_HOST;
};

// The ports of the process, and why there are none.
struct Net {
  const Verbs* verbs = nullptr;
  Settings settings;
  Status settingsStatus;
  std::vector<std::unique_ptr<Hca>> hcas;
  std::string why;  // no port: why
};

// The process's ports, found on the first call.
Net& net();
// Port `dev` of net(), or null.
Hca* hcaOf(int dev);
std::string gidText(const Gid& gid);
// "mlx5_0:1 (RoCE v2, GID 3 10.0.0.1, adaptive routing)".
std::string describeHca(const Hca& h);

}  // namespace ib
}  // namespace chorus
