// Collectives on device memory through the public API, ranks as threads of one process on one
// GPU (several ranks per GPU), each result checked element by element:
//   - the grid: every collective and send/recv x every type x every reduction x sizes from 0 up x
//     in place and not x ring/tree/direct x Simple/LL/LL128 x 1, 2 and 4 channels, for 2, 3 and 4 ranks,
//     and the one-copy collectives (CHORUS_ALGO=one-copy: every collective on channels);
//     each result must equal the host path's for the same call on the same communicators byte for
//     byte (LL's and LL128's floating averages: to within rounding, its schedule cuts other pieces), and,
//     where the values make it exact (small integers), an independent reference;
//   - stream semantics: a call returns before the work is done, orders after a kernel of the
//     user's on its stream and before the next; one communicator from two streams; the NULL
//     stream; graph capture and replay;
//   - abort: a kernel waiting on a rank that never comes ends with chorusCommAbort, and at its
//     deadline with an error naming the channel, step and peer.
// Needs a CUDA device: without one it says so and exits with 77 (ctest: skipped). `--quick` samples
// the grid (every configuration, one in kQuickStride of its small cases, each case in some
// configuration); `--ranks N` runs the grid for N ranks alone (with N = 2, the stream and abort
// checks too).
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "tests/grid/cuda_ranks.h"
#include "tests/grid/device_values.h"

using namespace chorus;
using namespace chorus::test;

namespace {

int failures = 0;
// --quick: each configuration runs one in this many of the small cases (grid()).
constexpr int kQuickStride = 16;
#define EXPECT(cond, ...)                                                \
  do {                                                                   \
    if (!(cond)) {                                                       \
      if (++failures <= 30) {                                            \
        std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
        std::printf(__VA_ARGS__);                                        \
        std::printf(" (last error: %s)\n", chorusGetLastError(nullptr)); \
      }                                                                  \
    }                                                                    \
  } while (0)

// One call on every rank in one group (a thread drives every rank), on `streams` (chorus streams,
// wrapping CUDA ones, or null entries: the NULL stream).
chorusResult_t issue(Coll c, const std::vector<chorusComm_t>& comms, const std::vector<const void*>& in,
                     const std::vector<void*>& out, size_t count, int type, int op, int root,
                     const std::vector<chorusStream_t>& streams) {
  const int n = static_cast<int>(comms.size());
  chorusGroupStart();
  chorusResult_t rc = chorusSuccess;
  for (int r = 0; r < n && rc == chorusSuccess; ++r) {
    rc = issueOne(c, comms[r], r, n, in[r], out[r], count, type, op, root, streams[r]);
  }
  const chorusResult_t end = chorusGroupEnd();
  return rc != chorusSuccess ? rc : end;
}

using Ranks = CudaRanks;

// One case: on device (CUDA streams) and on the host path, compared with each other and the reference.
// `sameSchedule`: the device ran the host path's schedule, so even a floating average (each
// contribution pre-multiplied, then summed in the schedule's order) must match it bit for bit.
// An LL schedule cuts smaller pieces, and the device picks its own channel count (fewer than the
// host path's for small messages), either of which moves where a ring's element is first reduced:
// such floating averages match the host's to within the rounding of each of the n terms.
void runCase(Ranks& k, Coll c, int t, int op, size_t count, bool inPlace, int root, const std::string& label,
             bool sameSchedule = true) {
  const int n = static_cast<int>(k.comms.size());
  const size_t es = kTypeSize[t];
  // Each rank's input and output elements (a v-collective's differ by rank).
  std::vector<size_t> ics(n), ocs(n);
  for (int r = 0; r < n; ++r) {
    ics[r] = inCount(c, count, n, r);
    ocs[r] = outCount(c, count, n, r);
  }
  // In place: the input is the output's part (all-gather: this rank's block; reduce-scatter: the
  // output is this rank's block of the input), as NCCL defines it.
  const bool ip = inPlace && c != Coll::kAlltoAll && c != Coll::kSendRecv && c != Coll::kGather && c != Coll::kScatter;
  const bool v = c == Coll::kAllGatherV || c == Coll::kReduceScatterV;
  std::vector<void*> dbuf(n), dout(n);
  std::vector<const void*> din(n);
  std::vector<Bytes> hostBuf(n), hostIn(n);
  std::vector<const void*> hin(n);
  std::vector<void*> hout(n);
  std::vector<Bytes> before(n);
  for (int r = 0; r < n; ++r) {
    const size_t ic = ics[r];
    const size_t oc = ocs[r];
    const size_t bufCount = std::max(ic, oc);
    Bytes fill(bufCount * es, 0xA5);
    const Bytes in = values(t, r, ic);
    void* inDev = nullptr;
    CUDA_OK(cudaMalloc(&dbuf[r], std::max<size_t>(1, bufCount * es)));
    CUDA_OK(cudaMemcpy(dbuf[r], fill.data(), fill.size(), cudaMemcpyHostToDevice));
    hostBuf[r] = fill;
    if (ip) {
      // This rank's block: of the all-gather's output, and of the reduce-scatter's input.
      const size_t block = v ? vDispl(count, r) : r * count;
      const size_t at = c == Coll::kAllGather || c == Coll::kAllGatherV ? block : 0;
      CUDA_OK(cudaMemcpy(static_cast<char*>(dbuf[r]) + at * es, in.data(), in.size(), cudaMemcpyHostToDevice));
      std::memcpy(hostBuf[r].data() + at * es, in.data(), in.size());
      din[r] = static_cast<char*>(dbuf[r]) + at * es;
      const bool rs = c == Coll::kReduceScatter || c == Coll::kReduceScatterV;
      dout[r] = rs ? static_cast<char*>(dbuf[r]) + block * es : dbuf[r];
      hin[r] = hostBuf[r].data() + at * es;
      hout[r] = rs ? hostBuf[r].data() + block * es : hostBuf[r].data();
    } else {
      CUDA_OK(cudaMalloc(&inDev, std::max<size_t>(1, in.size())));
      CUDA_OK(cudaMemcpy(inDev, in.data(), in.size(), cudaMemcpyHostToDevice));
      din[r] = inDev;
      dout[r] = dbuf[r];
      hostIn[r] = in;
      hin[r] = hostIn[r].data();
      hout[r] = hostBuf[r].data();
    }
    before[r] = Bytes(static_cast<unsigned char*>(hout[r]), static_cast<unsigned char*>(hout[r]) + oc * es);
  }
  // A cudaMemcpy from pageable memory returns once the bytes are staged, maybe before they reach
  // the device; the ranks' non-blocking streams do not wait for the legacy stream's copies.
  CUDA_OK(cudaDeviceSynchronize());
  chorusResult_t rc = issue(c, k.comms, din, dout, count, t, op, root, k.streams);
  EXPECT(rc == chorusSuccess, "%s: device call", label.c_str());
  k.sync();
  const std::vector<chorusStream_t> nullStreams(n, nullptr);
  rc = issue(c, k.comms, hin, hout, count, t, op, root, nullStreams);
  EXPECT(rc == chorusSuccess, "%s: host call", label.c_str());
  for (int r = 0; r < n; ++r) {
    const size_t oc = ocs[r];
    Bytes got(oc * es);
    if (!got.empty()) CUDA_OK(cudaMemcpy(got.data(), dout[r], got.size(), cudaMemcpyDeviceToHost));
    const Bytes host(static_cast<unsigned char*>(hout[r]), static_cast<unsigned char*>(hout[r]) + oc * es);
    // Whether element e of a floating average is the host path's to within the rounding of n terms.
    auto withinRounding = [&](size_t e) {
      const double g = decode(t, got.data() + e * es);
      const double h = decode(t, host.data() + e * es);
      return std::fabs(g - h) <= n * epsilonOf(t) * std::fmax(1.0, std::fabs(h));
    };
    if (!sameSchedule && reduces(c) && op == chorusAvg && isFloat(t)) {
      size_t bad = 0;
      size_t first = 0;
      for (size_t i = 0; i < oc; ++i) {
        if (!withinRounding(i) && !bad++) first = i;
      }
      EXPECT(bad == 0, "%s: rank %d: %zu averages differ from the host path's past rounding, the first at element %zu",
             label.c_str(), r, bad, first);
    } else if (got != host) {
      size_t i = 0;
      while (i < got.size() && got[i] == host[i]) ++i;
      if (reduces(c) && op == chorusAvg && isFloat(t)) {
        // Said apart: the same terms rounded otherwise (a fused multiply-add) or a wrong element.
        const size_t e = i / es;
        EXPECT(false, "%s: rank %d differs from the host path at element %zu of %zu: %.17g, the host %.17g (%s)",
               label.c_str(), r, e, oc, decode(t, got.data() + e * es), decode(t, host.data() + e * es),
               withinRounding(e) ? "within rounding" : "past rounding");
      } else {
        EXPECT(false, "%s: rank %d differs from the host path at byte %zu of %zu", label.c_str(), r, i, got.size());
      }
    }
    Bytes want;
    if (expected(c, t, op, n, r, root, count, &want, before[r]) && got != want) {
      size_t i = 0;
      while (i < got.size() && got[i] == want[i]) ++i;
      EXPECT(false, "%s: rank %d differs from the reference at byte %zu of %zu", label.c_str(), r, i, got.size());
    }
    CUDA_OK(cudaFree(dbuf[r]));
    if (!ip) CUDA_OK(cudaFree(const_cast<void*>(din[r])));
  }
}

// `onlyRanks`: the grid for that many ranks alone (0: 2, 3 and 4). `stride` > 1 samples it: every
// configuration (ranks x channels x algorithm x protocol) still runs, but each of its small cases
// only when (case + configuration) % stride == 0, so that neighbouring configurations take other
// cases and the whole list is still covered across them; large cases run at 1 MiB always and 16 MiB
// with two channels. A line per configuration says how long it took, so a stall shows where.
void grid(int stride, int onlyRanks) {
  const Coll colls[] = {Coll::kAllReduce,     Coll::kBroadcast,  Coll::kReduce,        Coll::kAllGather,
                        Coll::kReduceScatter, Coll::kAlltoAll,   Coll::kGather,        Coll::kScatter,
                        Coll::kSendRecv,      Coll::kAllGatherV, Coll::kReduceScatterV};
  const size_t small[] = {0, 1, 7, 1000, 65539};
  const char* algos[] = {"ring", "tree", "direct", "one-copy"};
  const bool sampled = stride > 1;
  int cases = 0;
  int config = 0;
  for (int n : {2, 3, 4}) {
    if (onlyRanks && n != onlyRanks) continue;
    for (int nch : {1, 2, 4}) {
      for (const char* algo : algos) {
        for (const char* proto : {"simple", "ll", "ll128"}) {
          // One-copy has no protocol of its own: once (the others' fallback takes Simple).
          const bool oneCopy = std::strcmp(algo, "one-copy") == 0;
          if (oneCopy && std::strcmp(proto, "simple") != 0) continue;
          // CHORUS_ALGO picks the all-reduce's algorithm (one-copy: every collective on channels
          // where the ranks' buffers agree); the rest run the ring.
          // The v-collectives run the ring whatever is forced: under one-copy, the fallback it
          // leaves them.
          auto runs = [&](Coll c) {
            if (c == Coll::kAllGatherV || c == Coll::kReduceScatterV) return std::strcmp(algo, "ring") == 0 || oneCopy;
            return c == Coll::kAllReduce || std::strcmp(algo, "ring") == 0 ||
                   (oneCopy && (c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kAllGather ||
                                c == Coll::kReduceScatter));
          };
          ++config;
          const auto t0 = std::chrono::steady_clock::now();
          const int before = cases;
          const int failedBefore = failures;
          // The device path's channels (at most nch; fewer for small messages) and slot size: the
          // default, and small slots that cut every message past a few KiB into many pieces.
          const char* slot = nch == 1 ? "524288" : nch == 2 ? "8192" : "65536";
          setenv("CHORUS_NCHANNELS", std::to_string(nch).c_str(), 1);
          setenv("CHORUS_DEVICE_NCHANNELS", std::to_string(nch).c_str(), 1);
          setenv("CHORUS_DEVICE_SLOT_BYTES", slot, 1);
          setenv("CHORUS_ALGO", algo, 1);
          setenv("CHORUS_PROTO", proto, 1);  // the device's lanes; the host path has no LL or LL128
          // The same schedule as the host path: Simple, and one channel on both (with more, the
          // device takes fewer channels than CHORUS_NCHANNELS for a small message; the host does not).
          // One-copy reduces in rank order, not the ring's.
          const bool sameSchedule = std::strcmp(proto, "simple") == 0 && nch == 1 && !oneCopy;
          Ranks k(n);
          int index = 0;
          for (Coll c : colls) {
            if (!runs(c)) continue;
            for (int t = 0; t < chorusNumTypes; ++t) {
              for (int op = 0; op < (reduces(c) ? opCount(t) : 1); ++op) {
                for (size_t count : small) {
                  for (bool inPlace : {false, true}) {
                    if ((index++ + config) % stride != 0) continue;
                    const int root = static_cast<int>(count % n);
                    const std::string label = std::string(kCollName[static_cast<int>(c)]) + " " + kTypeName[t] + " " +
                                              kOpName[op] + " count " + std::to_string(count) +
                                              (inPlace ? " in place" : "") + " ranks " + std::to_string(n) +
                                              " channels " + std::to_string(nch) + " slot " + slot + " algo " + algo +
                                              " proto " + proto;
                    runCase(k, c, t, op, count, inPlace, root, label, sameSchedule);
                    ++cases;
                  }
                }
              }
            }
          }
          // Large: float sums and int8 maxes up to 64 MiB.
          for (size_t bytes : {size_t(1) << 20, size_t(16) << 20, size_t(64) << 20}) {
            if (sampled && (bytes > (size_t(16) << 20) || (bytes > (size_t(1) << 20) && nch != 2))) continue;
            for (Coll c : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter}) {
              if (!runs(c)) continue;
              const size_t count = c == Coll::kAllReduce ? bytes / 4 : bytes / 4 / n;
              const std::string where = std::string(" bytes ranks ") + std::to_string(n) + " channels " +
                                        std::to_string(nch) + " slot " + slot + " algo " + algo + " proto " + proto;
              runCase(k, c, chorusFloat32, chorusSum, count, false, 0,
                      std::string(kCollName[static_cast<int>(c)]) + " float sum " + std::to_string(bytes) + where,
                      sameSchedule);
              runCase(k, c, chorusInt8, chorusMax, count, true, 0,
                      std::string(kCollName[static_cast<int>(c)]) + " int8 max " + std::to_string(bytes) + where,
                      sameSchedule);
              cases += 2;
            }
          }
          std::printf("grid: ranks %d channels %d slot %s algo %s proto %s: %d cases, %d failed, %.1f s\n", n, nch,
                      slot, algo, proto, cases - before, failures - failedBefore,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          std::fflush(stdout);
        }
      }
    }
  }
  unsetenv("CHORUS_NCHANNELS");
  unsetenv("CHORUS_DEVICE_NCHANNELS");
  unsetenv("CHORUS_DEVICE_SLOT_BYTES");
  unsetenv("CHORUS_ALGO");
  unsetenv("CHORUS_PROTO");
  std::printf("grid: %d cases%s\n", cases, sampled ? " (sampled)" : "");
}

__global__ void spinThenFill(float* p, size_t n, float v, long long spinNs) {
  long long start = clock64();
  // About spinNs at ~1.5 GHz; exactness does not matter, only that it takes a while.
  while (clock64() - start < spinNs * 3 / 2) {
  }
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}

void streams() {
  const int n = 2;
  Ranks k(n);
  const size_t count = 1 << 20;
  std::vector<float*> buf(n);
  for (int r = 0; r < n; ++r) CUDA_OK(cudaMalloc(&buf[r], count * 4));
  // Ordering: the user's kernel fills the buffer, then the all-reduce, then a copy out, all on the
  // rank's stream; the call returns before the kernel is done.
  for (int r = 0; r < n; ++r) spinThenFill<<<64, 256, 0, k.cuda[r]>>>(buf[r], count, float(r + 1), 200'000'000);
  const auto t0 = std::chrono::steady_clock::now();
  chorusGroupStart();
  for (int r = 0; r < n; ++r)
    chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], k.streams[r]);
  EXPECT(chorusGroupEnd() == chorusSuccess, "stream order: enqueue");
  const double enqueueMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT(enqueueMs < 100,
         "the call returned after %.1f ms, before its work could be done (a 200 ms kernel precedes it)", enqueueMs);
  EXPECT(cudaStreamQuery(k.cuda[0]) == cudaErrorNotReady, "the stream still works after the call returns");
  std::vector<float> host(count);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaMemcpyAsync(host.data(), buf[r], count * 4, cudaMemcpyDeviceToHost, k.cuda[r]));
    CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
    size_t bad = 0;
    for (float v : host) bad += v != 3.0f;
    EXPECT(bad == 0, "stream order: rank %d has %zu elements not 3", r, bad);
  }
  // One communicator from two streams: the second stream's call waits for the first's.
  cudaStream_t other[n];
  chorusStream_t otherS[n];
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaStreamCreateWithFlags(&other[r], cudaStreamNonBlocking));
    chorusStreamFromCuda(other[r], &otherS[r]);
  }
  for (int round = 0; round < 4; ++round) {
    for (int r = 0; r < n; ++r) spinThenFill<<<64, 256, 0, k.cuda[r]>>>(buf[r], count, 1.0f, 50'000'000);
    chorusGroupStart();
    for (int r = 0; r < n; ++r)
      chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], k.streams[r]);
    chorusGroupEnd();
    chorusGroupStart();
    for (int r = 0; r < n; ++r) chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], otherS[r]);
    EXPECT(chorusGroupEnd() == chorusSuccess, "two streams");
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaStreamSynchronize(other[r]));
      CUDA_OK(cudaMemcpy(host.data(), buf[r], count * 4, cudaMemcpyDeviceToHost));
      size_t bad = 0;
      for (float v : host) bad += v != 4.0f;
      EXPECT(bad == 0, "two streams: rank %d round %d has %zu elements not 4", r, round, bad);
    }
  }
  for (int r = 0; r < n; ++r) {
    chorusStreamDestroy(otherS[r]);
    cudaStreamDestroy(other[r]);
  }
  // The NULL stream: done when the call returns.
  for (int r = 0; r < n; ++r)
    CUDA_OK(cudaMemcpy(buf[r], std::vector<float>(count, 2.0f).data(), count * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());  // the copies may still be on their way (runCase)
  chorusGroupStart();
  for (int r = 0; r < n; ++r) chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], nullptr);
  EXPECT(chorusGroupEnd() == chorusSuccess, "NULL stream");
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaMemcpy(host.data(), buf[r], count * 4, cudaMemcpyDeviceToHost));
    EXPECT(host[0] == 4.0f && host[count - 1] == 4.0f, "NULL stream: rank %d got %g", r, host[0]);
  }
  // Graph capture: capture an all-reduce on each rank's stream, replay it three times.
  std::vector<cudaGraph_t> graphs(n);
  std::vector<cudaGraphExec_t> execs(n);
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamBeginCapture(k.cuda[r], cudaStreamCaptureModeThreadLocal));
  chorusGroupStart();
  for (int r = 0; r < n; ++r)
    chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], k.streams[r]);
  EXPECT(chorusGroupEnd() == chorusSuccess, "capture");
  // Every capture ends before any graph is instantiated: in thread-local mode, instantiating while
  // another stream of this thread still captures is not permitted.
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamEndCapture(k.cuda[r], &graphs[r]));
  for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
  for (int rep = 0; rep < 3; ++rep) {
    for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphLaunch(execs[r], k.cuda[r]));
  }
  k.sync();
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaMemcpy(host.data(), buf[r], count * 4, cudaMemcpyDeviceToHost));
    // 4, then doubled by each of three replays.
    EXPECT(host[0] == 32.0f && host[count - 1] == 32.0f, "graph replay: rank %d got %g, want 32", r, host[0]);
    cudaGraphExecDestroy(execs[r]);
    cudaGraphDestroy(graphs[r]);
    cudaFree(buf[r]);
  }
}

// A CUDA stream of 0 is the legacy default stream (as NCCL takes it), and communicators that share
// one CUDA stream in a group all run: the all-reduce starts after the user's kernel on that stream
// and the copy after it waits for it. With the kernels on the communicators' own streams instead
// (unordered with stream 0) the all-reduce read the buffers before they were filled; with both
// ranks' kernels on one stream, rank 0's waited for rank 1's behind it until the deadline.
void sharedAndDefaultStreams() {
  const size_t count = 1 << 18;
  std::vector<float> host(count);
  const std::vector<float> hundred(count, 100.0f);
  for (int which = 0; which < 3; ++which) {
    const int n = 2;
    Ranks k(n);
    const char* names[] = {"stream 0", "cudaStreamPerThread", "a stream of the user's"};
    const char* name = names[which];
    cudaStream_t s = which == 0 ? nullptr : cudaStreamPerThread;
    cudaStream_t made = nullptr;
    if (which == 2) {
      CUDA_OK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
      s = made;
    }
    chorusStream_t w = nullptr;
    EXPECT(chorusStreamFromCuda(s, &w) == chorusSuccess, "wrap %s", name);
    std::vector<float*> buf(n);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaMalloc(&buf[r], count * 4));
      CUDA_OK(cudaMemcpy(buf[r], hundred.data(), count * 4, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaDeviceSynchronize());  // the copies may still be on their way (runCase)
    for (int r = 0; r < n; ++r) spinThenFill<<<64, 256, 0, s>>>(buf[r], count, float(r + 1), 100'000'000);
    chorusGroupStart();
    for (int r = 0; r < n; ++r) chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], w);
    EXPECT(chorusGroupEnd() == chorusSuccess, "%s shared by both ranks: enqueue", name);
    for (int r = 0; r < n; ++r) {
      // On stream 0, a plain cudaMemcpy waits for the stream's work; on the others, the stream.
      if (s == nullptr) {
        CUDA_OK(cudaMemcpy(host.data(), buf[r], count * 4, cudaMemcpyDeviceToHost));
      } else {
        CUDA_OK(cudaMemcpyAsync(host.data(), buf[r], count * 4, cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaStreamSynchronize(s));
      }
      size_t bad = 0;
      for (float v : host) bad += v != 3.0f;
      EXPECT(bad == 0, "%s shared by both ranks: rank %d has %zu of %zu elements not 3 (first %g)", name, r, bad, count,
             host[0]);
    }
    k.sync();
    CUDA_OK(cudaDeviceSynchronize());
    for (int r = 0; r < n; ++r) CUDA_OK(cudaFree(buf[r]));
    chorusStreamDestroy(w);
    if (made) CUDA_OK(cudaStreamDestroy(made));
  }
  // One rank's communicator on stream 0: its kernel goes on the legacy default stream itself.
  chorusComm_t one = nullptr;
  int dev = 0;
  EXPECT(chorusCommInitAll(&one, 1, &dev) == chorusSuccess, "one-rank communicator");
  chorusStream_t w = nullptr;
  EXPECT(chorusStreamFromCuda(nullptr, &w) == chorusSuccess, "wrap stream 0");
  float* in = nullptr;
  float* out = nullptr;
  CUDA_OK(cudaMalloc(&in, count * 4));
  CUDA_OK(cudaMalloc(&out, count * 4));
  CUDA_OK(cudaMemcpy(in, hundred.data(), count * 4, cudaMemcpyHostToDevice));
  spinThenFill<<<64, 256, 0, nullptr>>>(in, count, 7.0f, 100'000'000);
  EXPECT(chorusAllReduce(in, out, count, chorusFloat32, chorusSum, one, w) == chorusSuccess, "one rank on stream 0");
  CUDA_OK(cudaMemcpy(host.data(), out, count * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (float v : host) bad += v != 7.0f;
  EXPECT(bad == 0, "one rank on stream 0: %zu of %zu elements not 7 (first %g)", bad, count, host[0]);
  CUDA_OK(cudaDeviceSynchronize());
  cudaFree(in);
  cudaFree(out);
  chorusStreamDestroy(w);
  chorusCommDestroy(one);
}

// A pre-multiplied sum whose scalar is in device memory (chorusScalarDevice, PyTorch's PREMUL_SUM
// with a tensor factor): the kernel reads it when it runs, after the stream's earlier work wrote it.
// It was read on the host when the call was planned: a cudaMalloc'd scalar crashed the process.
void deviceScalar() {
  const int n = 2;
  Ranks k(n);
  const size_t count = 1 << 16;
  std::vector<float*> buf(n), scalar(n);
  std::vector<chorusRedOp_t> ops(n);
  const std::vector<float> ones(count, 1.0f);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaMalloc(&buf[r], count * 4));
    CUDA_OK(cudaMalloc(&scalar[r], 4));
    CUDA_OK(cudaMemset(scalar[r], 0, 4));
    CUDA_OK(cudaMemcpy(buf[r], ones.data(), count * 4, cudaMemcpyHostToDevice));
    EXPECT(
        chorusRedOpCreatePreMulSum(&ops[r], scalar[r], chorusFloat32, chorusScalarDevice, k.comms[r]) == chorusSuccess,
        "create a pre-multiplied sum with a device scalar");
    // The copy and the memset may still be on their way (runCase): done before the stream's work.
    CUDA_OK(cudaDeviceSynchronize());
    // Written on the stream before the all-reduce, after the operator is made.
    spinThenFill<<<1, 32, 0, k.cuda[r]>>>(scalar[r], 1, float(r + 2), 100'000'000);
  }
  chorusGroupStart();
  for (int r = 0; r < n; ++r) chorusAllReduce(buf[r], buf[r], count, chorusFloat32, ops[r], k.comms[r], k.streams[r]);
  EXPECT(chorusGroupEnd() == chorusSuccess, "device scalar: enqueue");
  k.sync();
  std::vector<float> host(count);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaMemcpy(host.data(), buf[r], count * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (float v : host) bad += v != 5.0f;
    EXPECT(bad == 0, "device scalar: rank %d has %zu of %zu elements not 2 x 1 + 3 x 1 (first %g)", r, bad, count,
           host[0]);
    EXPECT(chorusRedOpDestroy(ops[r], k.comms[r]) == chorusSuccess, "destroy the operator");
    cudaFree(buf[r]);
    cudaFree(scalar[r]);
  }
}

// One communicator's ops on two CUDA streams in one group: the streams are joined, as NCCL joins
// them (the launch waits for both, and both for the launch). It was refused.
void twoStreamsOneGroup() {
  const int n = 2;
  Ranks k(n);
  const size_t count = 1 << 16;
  std::vector<cudaStream_t> second(n);
  std::vector<chorusStream_t> secondW(n);
  std::vector<float*> a(n), b(n);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaStreamCreateWithFlags(&second[r], cudaStreamNonBlocking));
    EXPECT(chorusStreamFromCuda(second[r], &secondW[r]) == chorusSuccess, "wrap the second stream");
    CUDA_OK(cudaMalloc(&a[r], count * 4));
    CUDA_OK(cudaMalloc(&b[r], count * 4));
    spinThenFill<<<64, 256, 0, k.cuda[r]>>>(a[r], count, float(r + 1), 50'000'000);
    spinThenFill<<<64, 256, 0, second[r]>>>(b[r], count, float(10 * (r + 1)), 100'000'000);
  }
  chorusGroupStart();
  for (int r = 0; r < n; ++r) {
    chorusAllReduce(a[r], a[r], count, chorusFloat32, chorusSum, k.comms[r], k.streams[r]);
    chorusAllReduce(b[r], b[r], count, chorusFloat32, chorusSum, k.comms[r], secondW[r]);
  }
  EXPECT(chorusGroupEnd() == chorusSuccess, "two streams in one group: enqueue");
  std::vector<float> ha(count), hb(count);
  for (int r = 0; r < n; ++r) {
    // Each stream on its own: both wait for the launch.
    CUDA_OK(cudaMemcpyAsync(ha.data(), a[r], count * 4, cudaMemcpyDeviceToHost, k.cuda[r]));
    CUDA_OK(cudaMemcpyAsync(hb.data(), b[r], count * 4, cudaMemcpyDeviceToHost, second[r]));
    CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
    CUDA_OK(cudaStreamSynchronize(second[r]));
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) bad += (ha[i] != 3.0f) + (hb[i] != 30.0f);
    EXPECT(bad == 0, "two streams in one group: rank %d has %zu wrong elements (first %g and %g)", r, bad, ha[0],
           hb[0]);
  }
  k.sync();
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaStreamSynchronize(second[r]));
    chorusStreamDestroy(secondW[r]);
    cudaStreamDestroy(second[r]);
    cudaFree(a[r]);
    cudaFree(b[r]);
  }
}

// chorusCommFinalize (ncclCommFinalize) waits for the kernels already enqueued on the caller's
// streams, as NCCL's synchronises the stream its launches join; it returned at once.
void finalizeWaits() {
  const int n = 2;
  Ranks k(n);
  const size_t count = 1 << 16;
  std::vector<float*> buf(n);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaMalloc(&buf[r], count * 4));
    spinThenFill<<<64, 256, 0, k.cuda[r]>>>(buf[r], count, 1.0f, 200'000'000);
  }
  chorusGroupStart();
  for (int r = 0; r < n; ++r)
    chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], k.streams[r]);
  EXPECT(chorusGroupEnd() == chorusSuccess, "finalize: enqueue");
  EXPECT(cudaStreamQuery(k.cuda[0]) == cudaErrorNotReady, "finalize: the kernels still run");
  for (int r = 0; r < n; ++r) EXPECT(chorusCommFinalize(k.comms[r]) == chorusSuccess, "finalize rank %d", r);
  for (int r = 0; r < n; ++r) {
    EXPECT(cudaStreamQuery(k.cuda[r]) == cudaSuccess, "finalize returned before rank %d's kernel was done", r);
  }
  k.sync();
  std::vector<float> host(count);
  CUDA_OK(cudaMemcpy(host.data(), buf[1], count * 4, cudaMemcpyDeviceToHost));
  EXPECT(host[0] == 2.0f && host[count - 1] == 2.0f, "finalize: rank 1 got %g", host[0]);
  for (int r = 0; r < n; ++r) cudaFree(buf[r]);
}

void abortAndDeadline() {
  const char* was = std::getenv("CHORUS_TIMEOUT");
  const std::string before = was ? was : "";
  for (bool byAbort : {true, false}) {
    setenv("CHORUS_TIMEOUT", byAbort ? "600" : "2", 1);
    const int n = 2;
    Ranks k(n);
    float* buf;
    CUDA_OK(cudaMalloc(&buf, 4096 * 4));
    // Both ranks once, so that the pair is connected: a first operation connects its ranks on the
    // host (both must come), and only then does a kernel wait for a peer.
    float* both[n];
    for (int r = 0; r < n; ++r) CUDA_OK(cudaMalloc(&both[r], 4096 * 4));
    chorusGroupStart();
    for (int r = 0; r < n; ++r)
      chorusAllReduce(both[r], both[r], 4096, chorusFloat32, chorusSum, k.comms[r], k.streams[r]);
    EXPECT(chorusGroupEnd() == chorusSuccess, "connect the pair");
    k.sync();
    for (int r = 0; r < n; ++r) CUDA_OK(cudaFree(both[r]));
    // Rank 0 alone: it waits for rank 1, which never comes.
    EXPECT(chorusAllReduce(buf, buf, 4096, chorusFloat32, chorusSum, k.comms[0], k.streams[0]) == chorusSuccess,
           "enqueue the lone all-reduce");
    const auto t0 = std::chrono::steady_clock::now();
    if (byAbort) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      EXPECT(cudaStreamQuery(k.cuda[0]) == cudaErrorNotReady, "the kernel waits for rank 1");
      EXPECT(chorusCommAbort(k.comms[0]) == chorusSuccess, "abort");
      k.comms[0] = nullptr;
      EXPECT(cudaStreamQuery(k.cuda[0]) == cudaSuccess, "no kernel is left once chorusCommAbort returns");
    } else {
      CUDA_OK(cudaStreamSynchronize(k.cuda[0]));
      chorusResult_t async = chorusSuccess;
      chorusCommGetAsyncError(k.comms[0], &async);
      EXPECT(async == chorusSystemError, "the deadline's error is the communicator's");
      const std::string msg = chorusGetLastError(k.comms[0]);
      EXPECT(msg.find("channel") != std::string::npos && msg.find("rank 1") != std::string::npos &&
                 msg.find("step") != std::string::npos,
             "the message names the channel, step and peer: %s", msg.c_str());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT(s < 20, "%s took %.1f s", byAbort ? "abort" : "the deadline", s);
    cudaFree(buf);
    if (!byAbort) {
      // Rank 1's communicator is fine; rank 0's is failed: destroy both.
    }
  }
  if (was) {
    setenv("CHORUS_TIMEOUT", before.c_str(), 1);
  } else {
    unsetenv("CHORUS_TIMEOUT");
  }
}

}  // namespace

int main(int argc, char** argv) {
  chorus::test::useAllCudaQueues();
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: %s; collectives on device memory were compiled but not run\n",
                chorus::test::cudaSkipReason(e, devices).c_str());
    return 77;
  }
  int stride = 1;
  int onlyRanks = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      stride = kQuickStride;
    } else if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      onlyRanks = std::atoi(argv[++i]);
    } else {
      std::printf("usage: cuda_coll_test [--quick] [--ranks 2|3|4]\n");
      return 2;
    }
  }
  // A hang fails its case within half a minute, with the kernel's error, instead of running into
  // the check's time limit with nothing said.
  setenv("CHORUS_TIMEOUT", "30", 0);
  // A line at a time: a run cut short by a time limit still shows how far it came.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CUDA_OK(cudaSetDevice(0));
  const auto t0 = std::chrono::steady_clock::now();
  if (onlyRanks == 0 || onlyRanks == 2) {
    streams();
    std::printf("streams: done, %d failures so far\n", failures);
    sharedAndDefaultStreams();
    std::printf("stream 0 and shared streams: done, %d failures so far\n", failures);
    deviceScalar();
    std::printf("device scalar: done, %d failures so far\n", failures);
    twoStreamsOneGroup();
    std::printf("two streams in one group: done, %d failures so far\n", failures);
    finalizeWaits();
    std::printf("finalize: done, %d failures so far\n", failures);
    abortAndDeadline();
    std::printf("abort and deadline: done, %d failures so far\n", failures);
  }
  grid(stride, onlyRanks);
  std::printf("%s: %d failures, %.1f s\n", failures ? "FAILED" : "PASSED", failures,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return failures ? 1 : 0;
}
