// The device reductions against the host's scalar path, bit for bit, for every type and op (inputs
// random bits with special values among them: subnormals, signed zeros, infinities, NaN payloads), and
// a two-rank ring all-reduce run by the launch kernel (src/device/prims_device.cuh): two channels
// per rank, one thread block each, four launches in a row (Simple, LL, LL128, Simple on the same
// FIFOs), and a wait that ends at its deadline; and the torn-line probe LL128 rests on: one block
// rewrites 128-byte lines with LL128's warp-wide stores while others read them with its warp-wide
// loads, and no read may find a line whose flag word and data words are of different writes (in
// GPU memory; the same in mapped host memory is printed, not judged: LL128 never runs there).
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
#include "src/device/line128.cuh"
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

// The torn-line probe. Block 0 waits until every reading block runs, then writes generation
// g = 1, 2, ... rounds into every one of `nlines` lines, each line by one group of eight threads
// in one warp-wide store: word w of line j is stamp(g, j, w), word 15 (the flag) g. Blocks 1.. read
// every line the same way until block 0 is done; a read whose flag is g but whose data words are
// not all stamp(g, j, w) is torn. counts: lines read with a flag, torn ones, and ones read while
// the writer was still at work (g < rounds: without them the probe saw nothing happen).
__device__ uint64_t stamp(uint64_t g, uint32_t line, unsigned w) { return g << 24 | uint64_t(line) << 4 | w; }

__global__ void tornLineProbe(FifoLine128* lines, uint32_t nlines, uint32_t rounds, unsigned* done,
                              unsigned long long* counts) {
  const unsigned part = threadIdx.x % 8;
  const unsigned group = threadIdx.x / 8;
  const unsigned groups = blockDim.x / 8;
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) {  // at most 5 s: blocks that never run leave the probe with nothing seen
      uint64_t start, now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
      do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      } while (atomicAdd(done + 1, 0u) < gridDim.x - 1 && now - start < 5'000'000'000ull);
    }
    __syncthreads();
    for (uint64_t g = 1; g <= rounds; ++g) {
      for (uint32_t j = group; j < nlines; j += groups) {
        device::storeLinePart(lines + j, part, stamp(g, j, 2 * part), part == 7 ? g : stamp(g, j, 2 * part + 1));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) atomicExch(done, 1u);
    return;
  }
  if (threadIdx.x == 0) atomicAdd(done + 1, 1u);
  unsigned long long myReads = 0;
  unsigned long long myTorn = 0;
  unsigned long long myMid = 0;
  for (unsigned pass = 0;; ++pass) {
    const bool last = atomicAdd(done, 0u) != 0;  // one more pass after the writer is done
    for (uint32_t j = group; j < nlines; j += groups) {
      const FifoLine x = device::loadLinePart(lines + j, part);
      const uint64_t g = __shfl_sync(0xffffffffu, x.word[1], (threadIdx.x % 32) / 8 * 8 + 7);
      if (g == 0) continue;
      bool bad = x.word[0] != stamp(g, j, 2 * part) || (part != 7 && x.word[1] != stamp(g, j, 2 * part + 1));
      bad = __any_sync(0xffu << ((threadIdx.x % 32) / 8 * 8), bad);
      if (part == 0) {
        ++myReads;
        myTorn += bad ? 1 : 0;
        myMid += g < rounds ? 1 : 0;
      }
    }
    if (last) break;
  }
  atomicAdd(counts, myReads);
  atomicAdd(counts + 1, myTorn);
  atomicAdd(counts + 2, myMid);
}

// One probe over `lines` (device memory, or mapped host memory when `host`; zeroed here) with 256
// threads a block (32 groups: nlines a multiple of 32, so every warp's groups read alike): the
// kernel's counts (reads, torn, read mid-write).
struct ProbeCounts {
  unsigned long long reads = 0;
  unsigned long long torn = 0;
  unsigned long long mid = 0;
};
ProbeCounts probeLines(FifoLine128* lines, bool host, uint32_t nlines, uint32_t rounds, int readers) {
  if (host) {
    std::memset(static_cast<void*>(lines), 0, nlines * sizeof(FifoLine128));
  } else {
    cudaMemset(lines, 0, nlines * sizeof(FifoLine128));
  }
  unsigned* done = nullptr;  // [0]: the writer is done; [1]: readers running
  unsigned long long* counts = nullptr;
  cudaMallocManaged(&done, 2 * sizeof(unsigned));
  cudaMallocManaged(&counts, 3 * sizeof(unsigned long long));
  done[0] = done[1] = 0;
  counts[0] = counts[1] = counts[2] = 0;
  tornLineProbe<<<1 + readers, 256>>>(lines, nlines, rounds, done, counts);
  cudaDeviceSynchronize();
  const ProbeCounts r{counts[0], counts[1], counts[2]};
  cudaFree(done);
  cudaFree(counts);
  return r;
}

}  // namespace

int main() {
  chorus::test::useAllCudaQueues();
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
    for (int kind = 0; kind < (type <= 5 ? 7 : 4); ++kind) {  // the bitwise kinds (4-6): integers only
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
    Step* laneSteps[2][kChannels][3] = {};  // rank, channel, Simple / LL / LL128
    uint32_t laneNsteps[2][kChannels][3] = {};
    const ProtoKind kProtos[3] = {ProtoKind::kSimple, ProtoKind::kLL, ProtoKind::kLL128};
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
        // A ring step's chunk fits the FIFO (ringLoopChunk), and an LL or LL128 slot holds less
        // than a Simple one: each protocol has its own schedule.
        for (int proto = 0; proto < 3; ++proto) {
          const uint32_t pieceBytes = device::protoSlotDataBytes(kProtos[proto], slotBytes);
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
    // Simple, LL, LL128, then Simple again on the same FIFOs: positions carry over between protocols.
    for (int round = 0; round < 4; ++round) {
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
          const int proto = round == 1 || round == 2 ? round : 0;
          lane.proto = kProtos[proto];
          lane.slotBytes = device::protoSlotDataBytes(kProtos[proto], slotBytes);
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
                        protoName(params[r].lanes[0].proto), round, r, i, double(out[r][i]),
                        double(in[0][i] + in[1][i]));
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
  // The torn-line probe: 64 lines (8 KiB) rewritten 200000 times under 7 reading blocks, in GPU
  // memory (judged) and in mapped host memory (printed).
  {
    const uint32_t nlines = 64;
    const uint32_t rounds = 200000;
    FifoLine128* lines = nullptr;
    cudaMalloc(&lines, nlines * sizeof(FifoLine128));
    const ProbeCounts dev = probeLines(lines, false, nlines, rounds, 7);
    cudaFree(lines);
    std::printf(
        "LL128 torn-line probe, GPU memory: %llu lines read with a flag, %llu of them while the writer "
        "wrote, %llu torn\n",
        dev.reads, dev.mid, dev.torn);
    if (dev.torn != 0 || dev.mid == 0) {
      std::printf("FAIL: LL128's warp-wide 128-byte lines %s in GPU memory\n",
                  dev.torn ? "arrived torn" : "were never read while being written (the probe saw nothing)");
      ++failures;
    }
    FifoLine128* mapped = nullptr;
    cudaHostAlloc(reinterpret_cast<void**>(&mapped), nlines * sizeof(FifoLine128), cudaHostAllocMapped);
    const ProbeCounts host = probeLines(mapped, true, nlines, rounds / 10, 7);
    cudaFreeHost(mapped);
    std::printf(
        "LL128 torn-line probe, mapped host memory (not judged): %llu lines read with a flag, %llu of them "
        "while the writer wrote, %llu torn\n",
        host.reads, host.mid, host.torn);
  }
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
