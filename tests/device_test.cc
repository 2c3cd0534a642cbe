// The device reductions against the host's scalar path, bit for bit, for every type and op, and
// a two-rank ring all-reduce run by the device step program.
// Needs a CUDA device: without one it says so and exits with 77, which ctest reports as skipped.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "include/chorus/chorus.h"
#include "kernels/reduce_device.h"
#include "kernels/reduce_host.h"
#include "kernels/step_program_device.cuh"
#include "src/algo/schedule.h"

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
  // Two ranks' step programs, one thread block each on its own stream, run a ring all-reduce of
  // floats through FIFOs in mapped host memory.
  {
    const size_t count = 50001;
    const uint32_t nslots = 8;
    const uint32_t slotBytes = 4096;
    const size_t fifoBytesEach = fifoBytes(nslots, slotBytes);
    char* fifoMem = nullptr;
    cudaHostAlloc(reinterpret_cast<void**>(&fifoMem), 2 * fifoBytesEach, cudaHostAllocMapped);
    std::memset(fifoMem, 0, 2 * fifoBytesEach);
    FifoView fifo[2] = {FifoView::layout(fifoMem, nslots, slotBytes),
                        FifoView::layout(fifoMem + fifoBytesEach, nslots, slotBytes)};  // fifo[r]: r -> 1-r
    float *in[2], *out[2];
    uint32_t* result;
    Step* steps[2];
    cudaMallocManaged(&result, 6 * sizeof(uint32_t));
    std::vector<std::vector<Step>> hostSteps(2);
    cudaStream_t streams[2];
    for (int r = 0; r < 2; ++r) {
      cudaMallocManaged(&in[r], count * sizeof(float));
      cudaMallocManaged(&out[r], count * sizeof(float));
      for (size_t i = 0; i < count; ++i) in[r][i] = float((i + r) % 7);
      hostSteps[r] = ringAllReduce(2, r, count, ringLoopChunk(slotBytes, nslots, sizeof(float)));
      cudaMalloc(&steps[r], hostSteps[r].size() * sizeof(Step));
      cudaMemcpy(steps[r], hostSteps[r].data(), hostSteps[r].size() * sizeof(Step), cudaMemcpyHostToDevice);
      cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
    }
    for (int r = 0; r < 2; ++r) {
      device::DeviceLaneArgs a;
      a.steps = steps[r];
      a.nsteps = static_cast<uint32_t>(hostSteps[r].size());
      a.input = reinterpret_cast<const char*>(in[r]);
      a.output = reinterpret_cast<char*>(out[r]);
      a.commId = 1;
      a.seq = 1;
      const FifoView& s = fifo[r];
      const FifoView& rv = fifo[1 - r];
      a.send = {reinterpret_cast<uint32_t*>(&s.ctrl->tail),
                reinterpret_cast<uint32_t*>(&s.ctrl->head),
                s.slots,
                nslots,
                slotBytes,
                0};
      a.recv = {reinterpret_cast<uint32_t*>(&rv.ctrl->tail),
                reinterpret_cast<uint32_t*>(&rv.ctrl->head),
                rv.slots,
                nslots,
                slotBytes,
                0};
      a.result = result + 3 * r;
      device::launchStepProgram(chorusFloat32, a, 256, streams[r]);
    }
    cudaDeviceSynchronize();
    for (int r = 0; r < 2; ++r) {
      if (result[3 * r] != 0) {
        std::printf("FAIL: step program of rank %d stopped with status %u\n", r, result[3 * r]);
        ++failures;
        continue;
      }
      for (size_t i = 0; i < count; ++i) {
        if (out[r][i] != in[0][i] + in[1][i]) {
          std::printf("FAIL: device ring all-reduce, rank %d element %zu\n", r, i);
          ++failures;
          break;
        }
      }
    }
  }
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
