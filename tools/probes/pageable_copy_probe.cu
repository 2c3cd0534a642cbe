// Whether CUDA serialises copies through pageable host memory across a process's threads, as ranks
// that are threads of one process meet it (docs/records/2026-11-29-gpu-runs.md, run 8). Thread A
// reads 1 MiB back into pageable memory on its stream, behind a kernel that spins for a second; 100
// ms later the main thread uploads 1 MiB on a stream of its own, first from pinned memory, then
// from pageable memory, and prints how long each took beside how long A's read-back waited. It
// measures; it passes whatever it finds. Build: nvcc -std=c++17 -arch=sm_90 -o pageable_copy_probe
// tools/probes/pageable_copy_probe.cu
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::printf("%s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

}  // namespace

int main() {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing to probe\n");
    return 77;
  }
  constexpr size_t kBytes = 1 << 20;
  int khz = 0;
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0), "cudaDeviceGetAttribute");
  cudaStream_t a = nullptr, b = nullptr;
  check(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  void *da = nullptr, *db = nullptr, *pinned = nullptr;
  check(cudaMalloc(&da, kBytes), "cudaMalloc");
  check(cudaMalloc(&db, kBytes), "cudaMalloc");
  check(cudaMallocHost(&pinned, kBytes), "cudaMallocHost");
  std::vector<char> backA(kBytes), upB(kBytes, 1);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  const auto start = std::chrono::steady_clock::now();
  spin<<<1, 1, 0, a>>>(static_cast<long long>(khz) * 1000);  // about a second
  double readBackMs = 0;
  std::thread reader([&] {
    const auto t = std::chrono::steady_clock::now();
    check(cudaMemcpyAsync(backA.data(), da, kBytes, cudaMemcpyDeviceToHost, a), "cudaMemcpyAsync (A)");
    readBackMs = msSince(t);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto t = std::chrono::steady_clock::now();
  check(cudaMemcpyAsync(db, pinned, kBytes, cudaMemcpyHostToDevice, b), "cudaMemcpyAsync (pinned)");
  check(cudaStreamSynchronize(b), "cudaStreamSynchronize");
  const double pinnedMs = msSince(t);
  t = std::chrono::steady_clock::now();
  check(cudaMemcpyAsync(db, upB.data(), kBytes, cudaMemcpyHostToDevice, b), "cudaMemcpyAsync (pageable)");
  check(cudaStreamSynchronize(b), "cudaStreamSynchronize");
  const double pageableMs = msSince(t);
  reader.join();
  std::printf(
      "MEASURED: A's pageable read-back behind a 1 s kernel returned after %.1f ms; meanwhile, from %.1f ms, "
      "a 1 MiB upload on another stream took %.2f ms from pinned memory and %.1f ms from pageable memory\n",
      readBackMs, 100.0, pinnedMs, pageableMs);
  std::printf("total %.1f ms\n", msSince(start));
  return 0;
}
