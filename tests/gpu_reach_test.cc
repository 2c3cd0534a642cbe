// Which GPUs a GPU reaches, from NVML's view of the machine (src/device/gpu_reach.h), and what that
// means for the choice of a device transport between two processes that each see only their own
// GPU (CUDA_VISIBLE_DEVICES=<local rank>). No GPU needed: the machine's GPUs are made up here.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "src/device/gpu_reach.h"
#include "src/transport/transport.h"

using namespace chorus;
using chorus::cuda::MachineGpu;

namespace {

// cudaDeviceProp::uuid's 16 bytes for "GPU-00112233-4455-6677-8899-aabbccddeeff", as DevicePath::ensure
// copies them into the two words of a GpuIdentity.
void uuidOfBytes(const unsigned char (&bytes)[16], uint64_t out[2]) { std::memcpy(out, bytes, 16); }

GpuInfo infoOf(const std::vector<std::vector<uint64_t>>& reach) {
  GpuInfo g;
  g.uuid[0] = reach[0][0];
  g.uuid[1] = reach[0][1];
  for (const auto& u : reach) {
    g.reach[g.nreach][0] = u[0];
    g.reach[g.nreach][1] = u[1];
    ++g.nreach;
  }
  return g;
}

}  // namespace

TEST_CASE("an NVML UUID reads as the bytes of cudaDeviceProp::uuid", "[gpu_reach]") {
  uint64_t got[2] = {0, 0};
  REQUIRE(cuda::parseGpuUuid("GPU-00112233-4455-6677-8899-aabbccddeeff", got));
  const unsigned char bytes[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                   0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
  uint64_t want[2];
  uuidOfBytes(bytes, want);
  CHECK(got[0] == want[0]);
  CHECK(got[1] == want[1]);
  CHECK(cuda::parseGpuUuid("GPU-00112233-4455-6677-8899-AABBCCDDEEFF", got));
  CHECK(got[1] == want[1]);
  CHECK_FALSE(cuda::parseGpuUuid("MIG-00112233-4455-6677-8899-aabbccddeeff", got));
  CHECK_FALSE(cuda::parseGpuUuid("GPU-00112233-4455-6677-8899-aabbccddeeff00", got));
  CHECK_FALSE(cuda::parseGpuUuid("GPU-00112233-4455-6677-8899-aabbccddee", got));
  CHECK_FALSE(cuda::parseGpuUuid("GPU-0011223g-4455-6677-8899-aabbccddeeff", got));
  CHECK_FALSE(cuda::parseGpuUuid("", got));
}

TEST_CASE("a GPU reaches itself and the machine's GPUs it reads and writes by peer access", "[gpu_reach]") {
  const uint64_t a[2] = {1, 10};
  std::vector<MachineGpu> machine(4);
  machine[0].uuid[0] = 1;  // itself, listed by NVML too: once, first
  machine[0].uuid[1] = 10;
  machine[1].uuid[0] = 2;
  machine[1].peerReadWrite = true;
  machine[2].uuid[0] = 3;  // no peer access (another PCIe root, no NVLink)
  machine[3].uuid[0] = 4;
  machine[3].peerReadWrite = true;
  const auto reach = cuda::reachFromMachine(a, machine);
  REQUIRE(reach.size() == 3);
  CHECK(reach[0] == std::vector<uint64_t>{1, 10});
  CHECK(reach[1] == std::vector<uint64_t>{2, 0});
  CHECK(reach[2] == std::vector<uint64_t>{4, 0});
}

// The case CUDA alone got wrong: rank 0's process sees only GPU A, rank 1's only GPU B, and the two
// are NVLink peers. From the machine's view each reaches the other, so the device transport between
// them may be cuda_ipc (gpuPeers); from CUDA's view each reached only itself.
TEST_CASE("two processes that each see only their own GPU still find their GPUs peers", "[gpu_reach]") {
  const uint64_t gpuA[2] = {0xa, 0xa};
  const uint64_t gpuB[2] = {0xb, 0xb};
  std::vector<MachineGpu> machineFromA(2), machineFromB(2);
  machineFromA[0].uuid[0] = machineFromA[0].uuid[1] = 0xa;
  machineFromA[1].uuid[0] = machineFromA[1].uuid[1] = 0xb;
  machineFromA[1].peerReadWrite = true;
  machineFromB[0] = machineFromA[0];
  machineFromB[0].peerReadWrite = true;
  machineFromB[1].uuid[0] = machineFromB[1].uuid[1] = 0xb;
  DevicePeer r0, r1;
  r0.host.hostHash = r1.host.hostHash = 42;
  r0.gpu = infoOf(cuda::reachFromMachine(gpuA, machineFromA));
  r1.gpu = infoOf(cuda::reachFromMachine(gpuB, machineFromB));
  CHECK(gpuPeers(r0, r1));
  CHECK(gpuPeers(r1, r0));
  // What CUDA alone gave each process: itself.
  DevicePeer c0 = r0, c1 = r1;
  c0.gpu = infoOf({{gpuA[0], gpuA[1]}});
  c1.gpu = infoOf({{gpuB[0], gpuB[1]}});
  CHECK_FALSE(gpuPeers(c0, c1));
  // Peer access one way only is not enough: kernels of each write the other's memory.
  machineFromB[0].peerReadWrite = false;
  r1.gpu = infoOf(cuda::reachFromMachine(gpuB, machineFromB));
  CHECK_FALSE(gpuPeers(r0, r1));
  // CHORUS_P2P_DISABLE on either side turns it off.
  machineFromB[0].peerReadWrite = true;
  r1.gpu = infoOf(cuda::reachFromMachine(gpuB, machineFromB));
  CHECK(gpuPeers(r0, r1));
  r1.host.flags |= PeerInfo::kP2pDisabled;
  CHECK_FALSE(gpuPeers(r0, r1));
}

// ncclMemAlloc's memory is mapped for every device of the process that reaches the owner (NCCL
// grants them all): the drop-in granted the owner alone, so a peer GPU's kernel faulted on it.
TEST_CASE("memory of one GPU is granted to it and every GPU that reaches it", "[gpu_reach]") {
  // Four devices: 0-1 and 2-3 are NVLink pairs, 3 also reaches 0 (PCIe peer access).
  auto can = [](int d, int owner) { return (d / 2 == owner / 2) || (d == 3 && owner == 0); };
  CHECK(chorus::cuda::devicesGranted(0, 4, can) == std::vector<int>{0, 1, 3});
  CHECK(chorus::cuda::devicesGranted(2, 4, can) == std::vector<int>{2, 3});
  CHECK(chorus::cuda::devicesGranted(3, 1, can) == std::vector<int>{3});  // the owner even if not counted
  CHECK(chorus::cuda::devicesGranted(0, 0, can) == std::vector<int>{0});  // no count: the owner alone
}
