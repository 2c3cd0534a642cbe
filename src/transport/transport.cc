// The transport interface (transport.h): the records every rank tells the others, and the mapping
// of host-staged FIFOs for kernels.
#include "src/transport/transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include "src/common/config.h"
#include "src/common/os.h"
#include "src/device/cuda.h"

namespace chorus {
namespace {

const BoolSetting kShmDisable{"CHORUS_SHM_DISABLE", false, SettingScope::kRank,
                              "1: processes of one host use sockets instead of shared memory"};
const BoolSetting kP2pDisable{"CHORUS_P2P_DISABLE", false, SettingScope::kRank,
                              "1: threads of one process do not use the in-process transport"};
const TextSetting kHostId{"CHORUS_HOSTID", SettingScope::kRank,
                          "overrides the host identity that decides which ranks share a host"};

std::string hostIdentity() {
  if (std::string v = kHostId.raw(); !v.empty()) return v;
  std::string id = hostName();
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  if (boot >> bootId) id += "|" + bootId;
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) == 0) id += "|netns:" + std::to_string(st.st_ino);
  return id;
}

}  // namespace

// Random per process, fixed for its lifetime: tells threads of one process from processes that
// happen to share a pid in different pid namespaces. Made again in a child after fork(), which
// would otherwise inherit its parent's.
uint64_t currentProcessNonce() {
  static std::mutex mu;
  static uint64_t nonce = 0;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> g(mu);
  if (owner != ::getpid()) {
    owner = ::getpid();
    nonce = randomU64();
  }
  return nonce;
}

PeerInfo PeerInfo::local(const Config& config) {
  PeerInfo p;
  const std::string host = hostIdentity();
  p.hostHash = fnv1a(host.data(), host.size());
  p.processNonce = currentProcessNonce();
  p.pid = static_cast<int32_t>(::getpid());
  p.pidSpace = pidSpaceId();
  p.startTicks = processStartTicks(p.pid);
  p.flags = (kShmDisable.get(config.env) ? kShmDisabled : 0) | (kP2pDisable.get(config.env) ? kP2pDisabled : 0);
  std::snprintf(p.host, sizeof(p.host), "%s", hostName().c_str());
  return p;
}

bool sameProcess(const PeerInfo& a, const PeerInfo& b) {
  return sameHost(a, b) && a.processNonce == b.processNonce && a.pid == b.pid;
}

bool sameHost(const PeerInfo& a, const PeerInfo& b) { return a.hostHash == b.hostHash; }

bool GpuInfo::reaches(const uint64_t other[2]) const {
  for (uint32_t i = 0; i < nreach && i < kMaxReach; ++i) {
    if (reach[i][0] == other[0] && reach[i][1] == other[1]) return true;
  }
  return false;
}

bool gpuPeers(const DevicePeer& a, const DevicePeer& b) {
  if ((a.host.flags | b.host.flags) & PeerInfo::kP2pDisabled) return false;
  return a.gpu.has() && b.gpu.has() && a.gpu.reaches(b.gpu.uuid) && b.gpu.reaches(a.gpu.uuid);
}

Result<FifoView> mapForKernels(const FifoView& host, void* base, size_t bytes, int device) {
  if (device < 0) return host;
  cuda::DeviceGuard on(device);
  CHORUS_TRY(on.status());
  CHORUS_ASSIGN_OR_RETURN(void* mapped, cuda::hostRegister(base, bytes));
  const auto shift = reinterpret_cast<intptr_t>(mapped) - reinterpret_cast<intptr_t>(base);
  FifoView k = host;
  k.ctrl = reinterpret_cast<FifoControl*>(reinterpret_cast<intptr_t>(host.ctrl) + shift);
  k.slots = reinterpret_cast<char*>(reinterpret_cast<intptr_t>(host.slots) + shift);
  return k;
}

void unmapForKernels(void* base, int device) {
  if (device < 0) return;
  cuda::DeviceGuard on(device);
  cuda::hostUnregister(base);
}

}  // namespace chorus
