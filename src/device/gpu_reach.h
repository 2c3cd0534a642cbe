// Which GPUs a GPU reaches by peer access, from what NVML says about every GPU of the machine.
//
// CUDA answers only for the devices CUDA_VISIBLE_DEVICES leaves to the process: a job that gives
// each process its own GPU (CUDA_VISIBLE_DEVICES=<local rank>) sees one device per process, so
// cudaDeviceCanAccessPeer would say that no GPU reaches another, and ranks whose GPUs are linked by
// NVLink would move device buffers through host memory. NVML sees every GPU whatever that variable
// says, as NCCL's topology does, and the driver maps memory of a GPU the process cannot see
// (cuMem descriptors, legacy IPC handles) for a GPU it can. The pure parts are here, for tests;
// cuda_runtime.cc asks NVML (libnvidia-ml.so.1, opened at run time in a process whose device path
// runs: the driver is loaded by then).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace chorus::cuda {

// A GPU's UUID as NVML and nvidia-smi print it ("GPU-8f6dd5f3-1b2c-4e5d-9a0b-123456789abc") in
// the byte order of cudaDeviceProp::uuid; false for anything else (MIG instances: "MIG-...").
bool parseGpuUuid(const std::string& text, uint64_t out[2]);

// One GPU of the machine as NVML lists it: its UUID and whether the GPU in question reads and
// writes its memory by peer access.
struct MachineGpu {
  uint64_t uuid[2] = {0, 0};
  bool peerReadWrite = false;
};

// The UUIDs `self` reaches: itself first, then every other GPU of `machine` it reads and writes
// by peer access, each once, in the machine's order.
std::vector<std::vector<uint64_t>> reachFromMachine(const uint64_t self[2], const std::vector<MachineGpu>& machine);

// The devices (of the `count` this process sees) that get read and write access to memory of
// `owner` mapped here: the owner, then every device `canAccessPeer(device, owner)` says reaches
// it, as NCCL's ncclMemAlloc grants them, so peers' kernels in this process may use the memory.
std::vector<int> devicesGranted(int owner, int count, const std::function<bool(int, int)>& canAccessPeer);

}  // namespace chorus::cuda
