// Ranks as threads of one process on GPU 0 (and CUDA_OK), for the device tests (cuda_coll_test,
// cuda_flight_test): one clique from chorusCommInitAll, each rank with a non-blocking CUDA stream
// and the Chorus wrapper of it. A failure to set them up ends the test program, saying why.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"

// A CUDA call that must succeed: otherwise the test program ends, naming the call and where.
#define CUDA_OK(x)                                                                                 \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

namespace chorus::test {

// Why a device test skips, from cudaGetDeviceCount: on a machine without NVIDIA's driver the
// runtime says its version is "insufficient", which reads as if an upgrade were needed.
inline std::string cudaSkipReason(cudaError_t e, int devices) {
  if (e == cudaErrorInsufficientDriver) return "no CUDA driver on this machine (or one older than this CUDA runtime)";
  if (e == cudaErrorNoDevice || (e == cudaSuccess && devices == 0)) return "no CUDA device on this machine";
  return std::string("CUDA cannot count its devices: ") + cudaGetErrorString(e);
}

// Ranks as threads on one GPU need their kernels to run at once, and CUDA feeds a process's
// streams to the GPU through CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 unless set): two ranks'
// streams in one queue can stall each other until the deadline (src/core/device_comm.h,
// sharedGpuWarning). A program of such ranks asks for CUDA's most, 32, before its first CUDA call,
// unless its environment already says how many.
inline void useAllCudaQueues() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }

struct CudaRanks {
  std::vector<chorusComm_t> comms;
  std::vector<cudaStream_t> cuda;
  std::vector<chorusStream_t> streams;

  explicit CudaRanks(int n) : comms(n), cuda(n), streams(n) {
    std::vector<int> devs(n, 0);
    if (chorusCommInitAll(comms.data(), n, devs.data()) != chorusSuccess) {
      std::printf("chorusCommInitAll failed: %s\n", chorusGetLastError(nullptr));
      std::exit(1);
    }
    for (int r = 0; r < n; ++r) {
      check(cudaStreamCreateWithFlags(&cuda[r], cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      if (chorusStreamFromCuda(cuda[r], &streams[r]) != chorusSuccess) {
        std::printf("chorusStreamFromCuda failed: %s\n", chorusGetLastError(nullptr));
        std::exit(1);
      }
    }
  }
  ~CudaRanks() {
    for (size_t r = 0; r < comms.size(); ++r) {
      chorusStreamDestroy(streams[r]);
      cudaStreamDestroy(cuda[r]);
      chorusCommDestroy(comms[r]);
    }
  }
  CudaRanks(const CudaRanks&) = delete;
  CudaRanks& operator=(const CudaRanks&) = delete;

  // Until every rank's stream is idle.
  void sync() {
    for (cudaStream_t s : cuda) check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    std::printf("CUDA error %s in %s\n", cudaGetErrorString(e), what);
    std::exit(1);
  }
};

}  // namespace chorus::test
