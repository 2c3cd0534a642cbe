// The device reductions against the host's scalar path, bit for bit, for every type and op.
// Needs a CUDA device: without one it says so and exits with 77, which ctest reports as skipped.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/reduce_device.h"
#include "kernels/reduce_host.h"

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
  std::printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
