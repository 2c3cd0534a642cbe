// The device reductions against the host's scalar path, bit for bit, for every type and op, and
// a two-rank ring all-reduce run by the primitives' kernel (src/device/prims_device.cuh): two
// channels per rank, one thread block each.
// Needs a CUDA device: without one it says so and exits with 77, which ctest reports as skipped.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "include/chorus/chorus.h"
#include "kernels/reduce_device.h"
#include "kernels/reduce_host.h"
#include "src/algo/fifo.h"
#include "src/algo/schedule.h"
#include "src/device/prims_device.h"

using namespace chorus;

int main() {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (%s); the device reductions were compiled but not run\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
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
          std::printf("FAIL: type %d op %d variant %d differs from the host\n", type, kind, variant);
          ++failures;
        }
      }
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
  }
  // Two ranks, each a kernel of two channels (one block per channel) on its own stream, run a
  // ring all-reduce of floats through FIFOs in mapped host memory: channel c of each rank takes
  // its half of the elements.
  {
    const size_t count = 50001;
    const int kChannels = 2;
    const uint32_t nslots = 8;
    const uint32_t slotBytes = 4096;
    const size_t fifoBytesEach = fifoBytes(nslots, slotBytes);
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
    uint32_t* result;
    cudaMallocManaged(&result, 2 * kChannels * 4 * sizeof(uint32_t));
    device::DeviceChannel* channels[2];
    cudaStream_t streams[2];
    for (int r = 0; r < 2; ++r) {
      cudaMallocManaged(&in[r], count * sizeof(float));
      cudaMallocManaged(&out[r], count * sizeof(float));
      for (size_t i = 0; i < count; ++i) in[r][i] = float((i + r) % 7);
      cudaMallocManaged(&channels[r], kChannels * sizeof(device::DeviceChannel));
      for (int c = 0; c < kChannels; ++c) {
        const Block part = partition(count, kChannels, c);
        std::vector<Step> steps = ringAllReduce(2, r, part.count, ringLoopChunk(slotBytes, nslots, sizeof(float)));
        Step* dsteps = nullptr;
        cudaMalloc(&dsteps, steps.size() * sizeof(Step));
        cudaMemcpy(dsteps, steps.data(), steps.size() * sizeof(Step), cudaMemcpyHostToDevice);
        device::DeviceChannel& ch = channels[r][c];
        ch = device::DeviceChannel{};
        ch.steps = dsteps;
        ch.nsteps = static_cast<uint32_t>(steps.size());
        ch.input = reinterpret_cast<const char*>(in[r] + part.offset);
        ch.output = reinterpret_cast<char*>(out[r] + part.offset);
        ch.commId = 1;
        ch.seq = 1;
        ch.send[0] = device::deviceFifo(fifo[c][r]);
        ch.recv[0] = device::deviceFifo(fifo[c][1 - r]);
        ch.result = result + 4 * (kChannels * r + c);
      }
      cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
    }
    for (int r = 0; r < 2; ++r) {
      const int e = device::launchPrims(chorusFloat32, channels[r], kChannels, 256, streams[r]);
      if (e != 0) {
        std::printf("FAIL: launching rank %d's kernel: %s\n", r, cudaGetErrorString(static_cast<cudaError_t>(e)));
        ++failures;
      }
    }
    cudaDeviceSynchronize();
    for (int r = 0; r < 2; ++r) {
      bool ok = true;
      for (int c = 0; c < kChannels; ++c) {
        const uint32_t* res = result + 4 * (kChannels * r + c);
        if (res[0] != 0) {
          std::printf("FAIL: rank %d channel %d stopped with result %u at step %u\n", r, c, res[0], res[1]);
          ++failures;
          ok = false;
        }
      }
      if (!ok) continue;
      for (size_t i = 0; i < count; ++i) {
        if (out[r][i] != in[0][i] + in[1][i]) {
          std::printf("FAIL: device ring all-reduce, rank %d element %zu: %g, not %g\n", r, i, double(out[r][i]),
                      double(in[0][i] + in[1][i]));
          ++failures;
          break;
        }
      }
    }
  }
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
