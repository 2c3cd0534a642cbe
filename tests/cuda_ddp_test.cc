// The DDP layer on device gradients (include/chorus/ddp.h), ranks as threads of one process on one
// GPU: buckets in device memory, each gradient written by a copy enqueued behind a 20 ms host
// function on the rank's CUDA stream and marked with chorusDdpMarkReadyOn at once, chorusDdpFinalizeOn on the
// same stream, the result read back on it. Gradients are multiples of 1/8 below 16, so every
// average of 2 or 4 ranks is exact in float32, float64 and (with the fp16 hook) float16: each
// element must equal the average computed here, and every rank must hold the same bits. Also:
// unused parameters (zeros), zeroGrad, the parameter broadcast from device memory, the statistics,
// a host stream refused as a producer, and uneven inputs (ranks that join early, then the last
// joiner's parameters for all).
// Needs a CUDA device: without one it says so and exits with 77 (ctest: skipped).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "include/chorus/ddp.h"
#include "tests/grid/cuda_ranks.h"

namespace {

std::mutex failMu;
int failures = 0;
void fail(const std::string& s) {
  std::lock_guard<std::mutex> g(failMu);
  if (++failures <= 20) std::printf("FAIL %s\n", s.c_str());
}
#define DDP_OK(call)                                                                                      \
  do {                                                                                                    \
    chorusResult_t rc_ = (call);                                                                          \
    if (rc_ != chorusSuccess) {                                                                           \
      fail(std::string(#call) + " -> " + chorusGetErrorString(rc_) + ": " + chorusGetLastError(nullptr)); \
      return;                                                                                             \
    }                                                                                                     \
  } while (0)

// Pinned host bytes for the gradients' copies. With the same copies through pageable memory the
// ranks (threads of this process) stalled each other on an H200 until the deadline, 32 hardware
// queues or not; through pinned memory they pass (docs/records/2026-11-29-gpu-runs.md, run 8).
// Which driver resource the pageable copies shared was not found: one pageable upload beside
// another thread's waiting pageable read-back is not held up (tools/probes/pageable_copy_probe.cu).
class Pinned {
 public:
  explicit Pinned(size_t bytes) {
    if (cudaMallocHost(&p_, bytes ? bytes : 1) != cudaSuccess) {
      std::printf("cudaMallocHost of %zu bytes failed\n", bytes);
      std::exit(1);
    }
  }
  ~Pinned() { cudaFreeHost(p_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
};

// A host function that holds a CUDA stream back for 20 ms.
void CUDART_CB hold(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// Gradient element e of parameter p on rank r in iteration it: a multiple of 1/8 in [-15.875, 15.875].
double value(int r, int it, size_t p, size_t e) {
  uint64_t h = (uint64_t(r) * 1000003u + uint64_t(it)) * 998244353u + p * 1315423911u + e * 2654435761u;
  h ^= h >> 29;
  return (static_cast<int>(h % 255) - 127) / 8.0;
}

struct Param {
  size_t count;
  chorusDataType_t type;
};
size_t bytesOf(const Param& p) { return p.count * (p.type == chorusFloat64 ? 8 : 4); }

// Rank r's parameter pi (of shape p) in iteration it, as bytes.
void fill(std::vector<char>& out, size_t pi, const Param& p, int r, int it) {
  out.resize(bytesOf(p));
  for (size_t e = 0; e < p.count; ++e) {
    const double v = value(r, it, pi, e);
    if (p.type == chorusFloat64) {
      std::memcpy(&out[e * 8], &v, 8);
    } else {
      const float f = static_cast<float>(v);
      std::memcpy(&out[e * 4], &f, 4);
    }
  }
}

// Where each parameter's bytes begin when all of them are packed in order; the last entry is the
// total.
std::vector<size_t> packed(const std::vector<Param>& params) {
  std::vector<size_t> at(params.size() + 1, 0);
  for (size_t p = 0; p < params.size(); ++p) at[p + 1] = at[p] + bytesOf(params[p]);
  return at;
}

double elem(const std::vector<char>& b, const Param& p, size_t e) {
  if (p.type == chorusFloat64) {
    double v;
    std::memcpy(&v, &b[e * 8], 8);
    return v;
  }
  float f;
  std::memcpy(&f, &b[e * 4], 4);
  return f;
}

// One configuration: n ranks, `iters` iterations; with `unused`, rank 0 leaves parameter 1 out of
// every iteration (it contributes zeros).
void train(int n, int hook, bool unused, int iters) {
  using chorus::test::CudaRanks;
  CudaRanks k(n);
  std::mt19937 rng(7);
  std::vector<Param> params;
  for (int i = 0; i < 14; ++i) params.push_back({size_t(1 + rng() % 20000), i == 5 ? chorusFloat64 : chorusFloat32});
  std::vector<chorusDdpParam_t> cparams;
  for (const Param& p : params) cparams.push_back({p.count, p.type, nullptr});
  chorusDdpConfig_t cfg = CHORUS_DDP_CONFIG_INITIALIZER;
  cfg.firstBucketCapBytes = 16 << 10;
  cfg.bucketCapBytes = 64 << 10;
  cfg.hook = hook;
  cfg.findUnusedParameters = unused ? 1 : 0;
  std::vector<std::vector<std::vector<char>>> got(n);  // [rank][param] of the last iteration
  std::vector<int> rebuiltAt(n, -1);
  std::mutex agreeMu;
  const std::string what = std::to_string(n) + " ranks, hook " + std::to_string(hook) + (unused ? ", unused" : "");
  std::printf("%s: %d iterations\n", what.c_str(), iters);
  auto rank = [&](int r) {
    CUDA_OK(cudaSetDevice(0));
    chorusDdpReducer_t red = nullptr;
    DDP_OK(chorusDdpReducerCreate(&red, k.comms[r], cparams.data(), static_cast<int>(cparams.size()), &cfg));
    void* g0 = nullptr;
    DDP_OK(chorusDdpGradient(red, 0, &g0));
    int dev = -2;
    DDP_OK(chorusPointerGetDevice(g0, &dev));
    if (dev != 0)
      fail(what + ": rank " + std::to_string(r) + "'s gradients are not on GPU 0 (" + std::to_string(dev) + ")");
    std::vector<std::vector<char>> host(params.size());
    const std::vector<size_t> at = packed(params);
    Pinned up(at.back()), down(at.back());
    std::mt19937 order(100 + r);
    for (int it = 0; it < iters; ++it) {
      int rebuilt = 0;
      DDP_OK(chorusDdpPrepareForBackward(red, &rebuilt));
      if (rebuilt) rebuiltAt[r] = it;
      std::vector<size_t> idx(params.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      std::shuffle(idx.begin(), idx.end(), order);
      // The gradients' copies wait 20 ms behind a host function on the stream: a reduction that did
      // not wait for the stream would read zeros (or the last iteration's result) instead.
      CUDA_OK(cudaLaunchHostFunc(k.cuda[r], hold, nullptr));
      for (size_t p : idx) {
        if (unused && r == 0 && p == 1) continue;
        void* g = nullptr;
        DDP_OK(chorusDdpGradient(red, static_cast<int>(p), &g));
        fill(host[p], p, params[p], r, it);
        std::memcpy(up.get() + at[p], host[p].data(), host[p].size());
        CUDA_OK(cudaMemcpyAsync(g, up.get() + at[p], host[p].size(), cudaMemcpyHostToDevice, k.cuda[r]));
        // The copy from pinned memory returns at once; the marks below must not wait for the GPU.
        DDP_OK(chorusDdpMarkReadyOn(red, static_cast<int>(p), k.streams[r]));
      }
      if (r == 0 && it == 0) {
        // A host stream cannot produce device gradients.
        chorusStream_t hs = nullptr;
        DDP_OK(chorusStreamCreate(&hs));
        if (chorusDdpMarkReadyOn(red, unused ? 1 : 0, hs) != chorusInvalidUsage ||
            !std::strstr(chorusGetLastError(nullptr),
                         "is a host stream but the reducer's gradients are device memory")) {
          fail(what + ": a host producer stream was not refused as it should be: " + chorusGetLastError(nullptr));
        }
        DDP_OK(chorusStreamDestroy(hs));
      }
      DDP_OK(chorusDdpFinalizeOn(red, k.streams[r]));
      std::vector<std::vector<char>> out(params.size());
      for (size_t p = 0; p < params.size(); ++p) {
        void* g = nullptr;
        DDP_OK(chorusDdpGradient(red, static_cast<int>(p), &g));
        CUDA_OK(cudaMemcpyAsync(down.get() + at[p], g, bytesOf(params[p]), cudaMemcpyDeviceToHost, k.cuda[r]));
      }
      CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
      for (size_t p = 0; p < params.size(); ++p)
        out[p].assign(down.get() + at[p], down.get() + at[p] + bytesOf(params[p]));
      for (size_t p = 0; p < params.size(); ++p) {
        for (size_t e = 0; e < params[p].count; ++e) {
          double sum = 0;
          for (int q = 0; q < n; ++q) {
            if (!(unused && q == 0 && p == 1)) sum += static_cast<float>(value(q, it, p, e));
          }
          const double want = sum / n, have = elem(out[p], params[p], e);
          if (have != want) {
            fail(what + ": rank " + std::to_string(r) + " iteration " + std::to_string(it) + " parameter " +
                 std::to_string(p) + " element " + std::to_string(e) + ": " + std::to_string(have) + ", want " +
                 std::to_string(want));
            break;
          }
        }
      }
      if (it + 1 == iters) {
        std::lock_guard<std::mutex> g(agreeMu);
        got[r] = out;
      }
      if (unused) {
        int used = -1;
        DDP_OK(chorusDdpParamUsed(red, 1, &used));
        if (used != (n > 1 ? 1 : 0)) fail(what + ": parameter 1 counts as unused by all");
      }
    }
    chorusDdpStats_t s{};
    DDP_OK(chorusDdpGetStats(red, &s));
    if (s.syncedIterations != iters || s.totalCommSeconds <= 0 || s.lastExposedSeconds < 0 ||
        s.lastExposedSeconds > s.lastCommSeconds) {
      fail(what + ": rank " + std::to_string(r) + " statistics: synced " + std::to_string(s.syncedIterations) +
           ", comm " + std::to_string(s.totalCommSeconds) + " s, exposed " + std::to_string(s.lastExposedSeconds));
    }
    if (r == 0) {
      std::printf("%s: %d buckets, last iteration %.3f ms of communication, %.3f ms exposed\n", what.c_str(),
                  s.nbuckets, s.lastCommSeconds * 1e3, s.lastExposedSeconds * 1e3);
    }
    // zeroGrad: every gradient reads zero after it.
    DDP_OK(chorusDdpZeroGrad(red));
    for (size_t p = 0; p < params.size(); ++p) {
      void* g = nullptr;
      DDP_OK(chorusDdpGradient(red, static_cast<int>(p), &g));
      std::vector<char> z(bytesOf(params[p]), 1);
      CUDA_OK(cudaMemcpy(z.data(), g, z.size(), cudaMemcpyDeviceToHost));
      if (std::any_of(z.begin(), z.end(), [](char c) { return c != 0; })) {
        fail(what + ": parameter " + std::to_string(p) + " is not zero after chorusDdpZeroGrad");
        break;
      }
    }
    // The parameters from rank n - 1, in device memory, in chunks smaller than some parameters.
    std::vector<void*> w(params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      CUDA_OK(cudaMalloc(&w[p], bytesOf(params[p])));
      std::vector<char> v;
      fill(v, p, params[p], r, 1000);
      CUDA_OK(cudaMemcpy(w[p], v.data(), v.size(), cudaMemcpyHostToDevice));
    }
    DDP_OK(chorusDdpBroadcastParameters(red, w.data(), n - 1));
    for (size_t p = 0; p < params.size(); ++p) {
      std::vector<char> want, have(bytesOf(params[p]));
      fill(want, p, params[p], n - 1, 1000);
      CUDA_OK(cudaMemcpy(have.data(), w[p], have.size(), cudaMemcpyDeviceToHost));
      if (have != want)
        fail(what + ": rank " + std::to_string(r) + " parameter " + std::to_string(p) + " not broadcast");
      CUDA_OK(cudaFree(w[p]));
    }
    DDP_OK(chorusDdpReducerDestroy(red));
  };
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back(rank, r);
  for (auto& x : t) x.join();
  for (int r = 1; r < n; ++r) {
    if (got[r] != got[0]) fail(what + ": rank " + std::to_string(r) + " holds other bits than rank 0");
  }
  if (iters > 1 && rebuiltAt != std::vector<int>(n, unused ? -1 : 1))
    fail(what + ": the buckets were not rebuilt once, at iteration 1");
}

// Uneven inputs on device gradients: rank r trains 2 + r iterations, then joins; each iteration's
// average is over the ranks still training, divided by n (PyTorch's default), and after the join
// every rank holds rank n - 1's parameters (the last to join).
void uneven(int n) {
  using chorus::test::CudaRanks;
  CudaRanks k(n);
  const std::vector<Param> params = {{3000, chorusFloat32}, {17, chorusFloat32}, {40000, chorusFloat32}};
  std::vector<chorusDdpParam_t> cparams;
  for (const Param& p : params) cparams.push_back({p.count, p.type, nullptr});
  chorusDdpConfig_t cfg = CHORUS_DDP_CONFIG_INITIALIZER;
  cfg.firstBucketCapBytes = 8 << 10;
  cfg.bucketCapBytes = 64 << 10;
  cfg.unevenInputs = 1;
  const std::string what = std::to_string(n) + " ranks, uneven inputs";
  std::printf("%s: starts\n", what.c_str());
  auto rank = [&](int r) {
    CUDA_OK(cudaSetDevice(0));
    chorusDdpReducer_t red = nullptr;
    DDP_OK(chorusDdpReducerCreate(&red, k.comms[r], cparams.data(), static_cast<int>(cparams.size()), &cfg));
    std::vector<char> host;
    const std::vector<size_t> at = packed(params);
    Pinned up(at.back()), down(at.back());
    for (int it = 0; it < 2 + r; ++it) {
      int rebuilt = 0;
      DDP_OK(chorusDdpPrepareForBackward(red, &rebuilt));
      for (size_t p = params.size(); p-- > 0;) {
        void* g = nullptr;
        DDP_OK(chorusDdpGradient(red, static_cast<int>(p), &g));
        fill(host, p, params[p], r, it);
        std::memcpy(up.get() + at[p], host.data(), host.size());
        CUDA_OK(cudaMemcpyAsync(g, up.get() + at[p], host.size(), cudaMemcpyHostToDevice, k.cuda[r]));
        DDP_OK(chorusDdpMarkReadyOn(red, static_cast<int>(p), k.streams[r]));
      }
      DDP_OK(chorusDdpFinalizeOn(red, k.streams[r]));
      for (size_t p = 0; p < params.size(); ++p) {
        void* g = nullptr;
        DDP_OK(chorusDdpGradient(red, static_cast<int>(p), &g));
        CUDA_OK(cudaMemcpyAsync(down.get() + at[p], g, bytesOf(params[p]), cudaMemcpyDeviceToHost, k.cuda[r]));
        CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
        const std::vector<char> out(down.get() + at[p], down.get() + at[p] + bytesOf(params[p]));
        for (size_t e = 0; e < params[p].count; ++e) {
          double sum = 0;
          for (int q = 0; q < n; ++q) {
            if (it < 2 + q) sum += static_cast<float>(value(q, it, p, e));
          }
          if (elem(out, params[p], e) != sum / n) {
            fail(what + ": rank " + std::to_string(r) + " iteration " + std::to_string(it) + " parameter " +
                 std::to_string(p) + " element " + std::to_string(e) + ": " + std::to_string(elem(out, params[p], e)) +
                 ", want " + std::to_string(sum / n));
            break;
          }
        }
      }
    }
    std::vector<void*> w(params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      CUDA_OK(cudaMalloc(&w[p], bytesOf(params[p])));
      fill(host, p, params[p], r, 2000);
      CUDA_OK(cudaMemcpy(w[p], host.data(), host.size(), cudaMemcpyHostToDevice));
    }
    DDP_OK(chorusDdpJoin(red, w.data()));
    for (size_t p = 0; p < params.size(); ++p) {
      std::vector<char> want, have(bytesOf(params[p]));
      fill(want, p, params[p], n - 1, 2000);
      CUDA_OK(cudaMemcpy(have.data(), w[p], have.size(), cudaMemcpyDeviceToHost));
      if (have != want)
        fail(what + ": rank " + std::to_string(r) + " does not hold the last joiner's parameter " + std::to_string(p));
      CUDA_OK(cudaFree(w[p]));
    }
    DDP_OK(chorusDdpReducerDestroy(red));
  };
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back(rank, r);
  for (auto& x : t) x.join();
  std::printf("%s: checked\n", what.c_str());
}

}  // namespace

int main() {
  // A log file gets every line as it is printed, so a run stopped by its time limit still shows
  // how far it came; a collective that stalls warns after 5 s and fails after 20 (not the default
  // 30 minutes), naming what it waits for.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  setenv("CHORUS_TIMEOUT", "20", 0);
  setenv("CHORUS_WARN_AFTER_MS", "5000", 0);
  chorus::test::useAllCudaQueues();
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: %s; the DDP layer on device gradients was not checked\n",
                chorus::test::cudaSkipReason(e, devices).c_str());
    return 77;
  }
  CUDA_OK(cudaSetDevice(0));
  for (int n : {2, 4}) {
    train(n, chorusDdpHookAllReduce, false, 4);
    train(n, chorusDdpHookFp16, false, 3);
    train(n, chorusDdpHookAllReduce, true, 3);
    uneven(n);
  }
  std::printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
