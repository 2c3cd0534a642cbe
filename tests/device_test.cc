// The device reductions against the host's scalar path, bit for bit, for every type and op (inputs
// random bits with special values among them: subnormals, signed zeros, infinities, NaN payloads), and
// a two-rank ring all-reduce run by the launch kernel (src/device/prims_device.cuh): two channels
// per rank, one thread block each, three launches in a row (Simple, LL, Simple on the same FIFOs),
// and a wait that ends at its deadline.
// Needs a CUDA device: without one it says so and exits with 77, which ctest reports as skipped.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "include/chorus/chorus.h"
#include "kernels/reduce_device.h"
#include "kernels/reduce_host.h"
#include "src/algo/fifo.h"
#include "src/algo/schedule.h"
#include "src/device/prims_device.h"
#include "tests/grid/cuda_ranks.h"
#include "tests/special_floats.h"

using namespace chorus;

namespace {

// An element's bits in hex, as the type stores them (little-endian, most significant first).
std::string hex(const unsigned char* p, size_t bytes) {
  std::string s = "0x";
  char d[3];
  for (size_t i = bytes; i-- > 0;) {
    std::snprintf(d, sizeof(d), "%02x", p[i]);
    s += d;
  }
  return s;
}

}  // namespace

int main() {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: %s; the device reductions were compiled but not run\n",
                chorus::test::cudaSkipReason(e, devices).c_str());
    return 77;
  }
  const size_t n = 100003;
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  auto host = *hostKernelsFor(CpuIsa::kScalar);
  std::mt19937 rng(3);
  int failures = 0;
  for (int type = 0; type < 12; ++type) {
    const size_t bytes = n * sizes[type];
    std::vector<unsigned char> a(bytes), b(bytes), want(bytes), got(bytes);
    for (auto& x : a) x = static_cast<unsigned char>(rng());
    for (auto& x : b) x = static_cast<unsigned char>(rng());
    // Random bits already hold NaNs and subnormals; a quarter of the elements become special
    // values (subnormals, signed zeros, infinities, NaNs with payloads), so pairs of them meet.
    test::sprinkleSpecials(type, a.data(), n, rng);
    test::sprinkleSpecials(type, b.data(), n, rng);
    void *da, *db, *dout;
    cudaMalloc(&da, bytes);
    cudaMalloc(&db, bytes);
    cudaMalloc(&dout, bytes);
    cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice);
    for (int kind = 0; kind < 4; ++kind) {
      for (int variant = 0; variant < 2; ++variant) {
        ReduceSpec s;
        s.kind = static_cast<RedKind>(kind);
        s.hasPre = variant == 1;
        s.scaleF = 0.5;
        s.scaleI = 3;
        s.hasPostDiv = variant == 1 && type <= 5;
        s.divisor = 3;
        host.reduce(s, type, want.data(), a.data(), b.data(), n, true);
        device::launchReduce(s, type, dout, da, db, n, true, nullptr);
        cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost);
        if (std::memcmp(want.data(), got.data(), bytes) != 0) {
          size_t i = 0;
          while (std::memcmp(want.data() + i * sizes[type], got.data() + i * sizes[type], sizes[type]) == 0) ++i;
          std::printf(
              "FAIL: type %d op %d variant %d differs from the host at element %zu of %zu: received %s, local %s "
              "give %s on the device, %s on the host\n",
              type, kind, variant, i, n, hex(a.data() + i * sizes[type], sizes[type]).c_str(),
              hex(b.data() + i * sizes[type], sizes[type]).c_str(),
              hex(got.data() + i * sizes[type], sizes[type]).c_str(),
              hex(want.data() + i * sizes[type], sizes[type]).c_str());
          ++failures;
        }
      }
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
  }
  // Two ranks, each a launch of two channels (one block per channel) on its own stream, run a
  // ring all-reduce of floats through FIFOs in mapped host memory: channel c of each rank takes
  // its half of the elements. Three times (Simple, LL, Simple), each launch starting from the
  // positions and sequence numbers the one before left. Then rank 0 alone: its wait for rank 1
  // ends at the deadline, and the error record names the peer.
  {
    const size_t count = 50001;
    const int kChannels = 2;
    const uint32_t nslots = 8;
    const uint32_t slotBytes = 4096;
    const size_t fifoBytesEach = deviceFifoBytes(nslots, slotBytes);
    char* fifoMem = nullptr;
    cudaHostAlloc(reinterpret_cast<void**>(&fifoMem), 2 * kChannels * fifoBytesEach, cudaHostAllocMapped);
    std::memset(fifoMem, 0, 2 * kChannels * fifoBytesEach);
    // fifo[c][r]: rank r -> rank 1-r on channel c.
    FifoView fifo[kChannels][2];
    for (int c = 0; c < kChannels; ++c) {
      for (int r = 0; r < 2; ++r) {
        fifo[c][r] = FifoView::layout(fifoMem + (2 * c + r) * fifoBytesEach, nslots, slotBytes);
      }
    }
    float *in[2], *out[2];
    device::DeviceConnector* conns[2];
    device::DeviceCommState* state[2];
    uint64_t* p2pSeq[2];
    device::DeviceError* errors = nullptr;
    uint32_t* abortWord = nullptr;
    cudaHostAlloc(reinterpret_cast<void**>(&errors), 2 * sizeof(device::DeviceError), cudaHostAllocMapped);
    cudaHostAlloc(reinterpret_cast<void**>(&abortWord), sizeof(uint32_t), cudaHostAllocMapped);
    *abortWord = 0;
    std::vector<device::LaunchParams> params(2);
    Step* laneSteps[2][kChannels][2] = {};  // rank, channel, Simple / LL
    uint32_t laneNsteps[2][kChannels][2] = {};
    cudaStream_t streams[2];
    for (int r = 0; r < 2; ++r) {
      cudaMallocManaged(&in[r], count * sizeof(float));
      cudaMallocManaged(&out[r], count * sizeof(float));
      for (size_t i = 0; i < count; ++i) in[r][i] = float((i + r) % 7);
      cudaMallocManaged(&conns[r], 2 * kChannels * sizeof(device::DeviceConnector));
      cudaMallocManaged(&state[r], sizeof(device::DeviceCommState));
      cudaMallocManaged(&p2pSeq[r], 4 * sizeof(uint64_t));
      std::memset(state[r], 0, sizeof(device::DeviceCommState));
      std::memset(p2pSeq[r], 0, 4 * sizeof(uint64_t));
      state[r]->p2pSendSeq = p2pSeq[r];
      state[r]->p2pRecvSeq = p2pSeq[r] + 2;
      device::LaunchParams& p = params[r];
      p.connectors = conns[r];
      p.state = state[r];
      p.error = errors + r;
      p.abortFlag = abortWord;
      p.commId = 1;
      p.timeoutNs = 10'000'000'000ull;
      p.nblocks = kChannels;
      for (int c = 0; c < kChannels; ++c) {
        conns[r][2 * c] = device::deviceConnector(fifo[c][r], 1 - r);
        conns[r][2 * c + 1] = device::deviceConnector(fifo[c][1 - r], 1 - r);
        const Block part = partition(count, kChannels, c);
        // A ring step's chunk fits the FIFO (ringLoopChunk), and an LL slot holds less than a
        // Simple one: each protocol has its own schedule.
        for (int proto = 0; proto < 2; ++proto) {
          const uint32_t pieceBytes = proto ? device::lineSlotDataBytes(slotBytes) : slotBytes;
          std::vector<Step> steps = ringAllReduce(2, r, part.count, ringLoopChunk(pieceBytes, nslots, sizeof(float)));
          cudaMalloc(&laneSteps[r][c][proto], steps.size() * sizeof(Step));
          cudaMemcpy(laneSteps[r][c][proto], steps.data(), steps.size() * sizeof(Step), cudaMemcpyHostToDevice);
          laneNsteps[r][c][proto] = static_cast<uint32_t>(steps.size());
        }
        device::DeviceLane& lane = p.lanes[c];
        lane = device::DeviceLane{};
        lane.type = chorusFloat32;
        lane.seqIndex = c;
        lane.slotBytes = slotBytes;
        lane.input = reinterpret_cast<const char*>(in[r] + part.offset);
        lane.output = reinterpret_cast<char*>(out[r] + part.offset);
        lane.send[0] = static_cast<uint16_t>(2 * c);
        lane.recv[0] = static_cast<uint16_t>(2 * c + 1);
        p.laneBegin[c] = static_cast<uint16_t>(c);
      }
      p.laneBegin[kChannels] = kChannels;
      cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
    }
    // Simple, then LL, then Simple again on the same FIFOs: positions carry over between protocols.
    for (int round = 0; round < 3; ++round) {
      std::memset(errors, 0, 2 * sizeof(device::DeviceError));
      for (int r = 0; r < 2; ++r) {
        // New inputs and a NaN-filled output each round: a round that writes nothing, or leaves a
        // piece's last word out, cannot pass on the last round's result.
        for (size_t i = 0; i < count; ++i) {
          in[r][i] = float((i + r + 3 * round) % 7);
          out[r][i] = std::nanf("");
        }
        for (int c = 0; c < kChannels; ++c) {
          device::DeviceLane& lane = params[r].lanes[c];
          const int proto = round == 1 ? 1 : 0;
          lane.proto = proto ? ProtoKind::kLL : ProtoKind::kSimple;
          lane.slotBytes = proto ? device::lineSlotDataBytes(slotBytes) : slotBytes;
          lane.steps = laneSteps[r][c][proto];
          lane.nsteps = laneNsteps[r][c][proto];
        }
      }
      for (int r = 0; r < 2; ++r) {
        const int e = device::launchLanes(params[r], device::kLaunchThreads, streams[r]);
        if (e != 0) {
          std::printf("FAIL: launching rank %d's kernel: %s\n", r, cudaGetErrorString(static_cast<cudaError_t>(e)));
          ++failures;
        }
      }
      cudaDeviceSynchronize();
      for (int r = 0; r < 2; ++r) {
        if (errors[r].status != 0) {
          std::printf("FAIL: round %d rank %d stopped: fault %u block %u step %u peer %d\n", round, r, errors[r].status,
                      errors[r].block, errors[r].step, errors[r].peer);
          ++failures;
          continue;
        }
        if (state[r]->collSeq[0] != uint64_t(round + 1)) {
          std::printf("FAIL: round %d rank %d: channel 0's sequence is %llu\n", round, r,
                      static_cast<unsigned long long>(state[r]->collSeq[0]));
          ++failures;
        }
        for (size_t i = 0; i < count; ++i) {
          if (out[r][i] != in[0][i] + in[1][i]) {
            std::printf("FAIL: device ring all-reduce (%s), round %d rank %d element %zu: %g, not %g\n",
                        round == 1 ? "LL" : "Simple", round, r, i, double(out[r][i]), double(in[0][i] + in[1][i]));
            ++failures;
            break;
          }
        }
      }
    }
    // Rank 0 alone, with a deadline of 100 ms.
    std::memset(errors, 0, 2 * sizeof(device::DeviceError));
    params[0].timeoutNs = 100'000'000ull;
    device::launchLanes(params[0], device::kLaunchThreads, streams[0]);
    cudaDeviceSynchronize();
    if (errors[0].status != static_cast<uint32_t>(device::DeviceFault::kTimeout) || errors[0].peer != 1) {
      std::printf("FAIL: a wait on an absent rank ended with fault %u naming peer %d (want %u, peer 1)\n",
                  errors[0].status, errors[0].peer, static_cast<uint32_t>(device::DeviceFault::kTimeout));
      ++failures;
    }
  }
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
