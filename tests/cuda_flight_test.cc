// The flight recorder's device entries through the public API, ranks as threads of one process on
// one GPU, read back from chorusCommDumpState:
//   - an all-reduce enqueued behind a user's kernel is "enqueued" when the call returns, and "done"
//     once its stream is and the device watchdog has looked (every 50 ms);
//   - on the NULL stream it is done when the call returns; a send names its peer and protocol;
//   - captured into a CUDA graph, it is "captured", and stays so through the graph's replays;
//   - a kernel that gives up at its deadline (a peer that never comes) fails its entry, with the
//     kernel's error.
// Needs a CUDA device: without one it says so and exits with 77 (ctest: skipped).
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "tests/grid/cuda_ranks.h"
#include "tests/grid/state_dump.h"

namespace {

__global__ void spin(long long ns) {
  const long long start = clock64();
  // About ns at ~1.5 GHz; exactness does not matter, only that it takes a while.
  while (clock64() - start < ns * 3 / 2) {
  }
}

using Ranks = chorus::test::CudaRanks;

using chorus::test::has;

std::string dump(chorusComm_t comm) { return chorus::test::stateDump(comm, "cuda_flight"); }
std::string line(const std::string& d, const std::string& what) { return chorus::test::dumpLine(d, what); }

void allReduce(Ranks& k, float** buf, size_t count, bool nullStream) {
  chorusGroupStart();
  for (size_t r = 0; r < k.comms.size(); ++r) {
    chorusAllReduce(buf[r], buf[r], count, chorusFloat32, chorusSum, k.comms[r], nullStream ? nullptr : k.streams[r]);
  }
  EXPECT(chorusGroupEnd() == chorusSuccess, "all-reduce: %s", chorusGetLastError(nullptr));
}

void states() {
  const int n = 2;
  Ranks k(n);
  const size_t count = 1 << 16;
  float* buf[n];
  for (int r = 0; r < n; ++r) CUDA_OK(cudaMalloc(&buf[r], count * 4));
  // Behind a 300 ms kernel: enqueued when the call returns, done once the stream is.
  for (int r = 0; r < n; ++r) spin<<<1, 1, 0, k.cuda[r]>>>(300'000'000LL);
  allReduce(k, buf, count, false);
  std::string d = dump(k.comms[0]);
  std::string l = line(d, "device AllReduce seq 1");
  std::printf("behind a kernel: %s\n", l.c_str());
  EXPECT(has(l, "count 65536 type 7 op 0 algo") && has(l, " proto ") && has(l, " blocks ") &&
             has(l, "on GPU 0 stream 0x") && has(l, "enqueued for") && has(l, "not seen finished"),
         "the entry is enqueued on the user's stream: %s\n%s", l.c_str(), d.c_str());
  EXPECT(has(d, "device path on GPU 0: 1 kernel launches not yet seen finished"), "the dump's device line:\n%s",
         d.c_str());
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the watchdog looks every 50 ms
  d = dump(k.comms[0]);
  l = line(d, "device AllReduce seq 1");
  std::printf("after the stream: %s\n", l.c_str());
  EXPECT(has(l, " done (seen "), "done once the stream is: %s", l.c_str());
  // The NULL stream: done when the call returns.
  allReduce(k, buf, count, true);
  l = line(dump(k.comms[0]), "device AllReduce seq 2");
  std::printf("NULL stream: %s\n", l.c_str());
  EXPECT(has(l, "(the communicator's own stream) done"), "the NULL stream's entry: %s", l.c_str());
  // A send and its receive: the peer, the point-to-point algorithm and the protocol.
  chorusGroupStart();
  chorusSend(buf[0], 1024, chorusFloat32, 1, k.comms[0], k.streams[0]);
  chorusRecv(buf[1], 1024, chorusFloat32, 0, k.comms[1], k.streams[1]);
  EXPECT(chorusGroupEnd() == chorusSuccess, "send/recv: %s", chorusGetLastError(nullptr));
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  l = line(dump(k.comms[0]), "device Send seq 1");
  std::printf("send: %s\n", l.c_str());
  EXPECT(has(l, "peer 1 algo p2p proto ") && has(l, " done "), "the send's entry: %s", l.c_str());
  l = line(dump(k.comms[1]), "device Recv seq 1");
  EXPECT(has(l, "peer 0 algo p2p proto ") && has(l, " done "), "the receive's entry: %s", l.c_str());
  // Captured into a graph: captured, and never done, however often the graph runs.
  std::vector<cudaGraph_t> graphs(n);
  std::vector<cudaGraphExec_t> execs(n);
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamBeginCapture(k.cuda[r], cudaStreamCaptureModeThreadLocal));
  allReduce(k, buf, count, false);
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamEndCapture(k.cuda[r], &graphs[r]));
  for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
  for (int rep = 0; rep < 2; ++rep) {
    for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphLaunch(execs[r], k.cuda[r]));
  }
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  d = dump(k.comms[0]);
  l = line(d, "device AllReduce seq 3");
  std::printf("captured: %s\n", l.c_str());
  EXPECT(has(l, "captured into a CUDA graph"), "the captured entry: %s\n%s", l.c_str(), d.c_str());
  // Launches after a graph's replays are still told done.
  allReduce(k, buf, count, false);
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  l = line(dump(k.comms[0]), "device AllReduce seq 4");
  EXPECT(has(l, " done "), "after the replays: %s", l.c_str());
  for (int r = 0; r < n; ++r) {
    cudaGraphExecDestroy(execs[r]);
    cudaGraphDestroy(graphs[r]);
    cudaFree(buf[r]);
  }
}

void fault() {
  setenv("CHORUS_TIMEOUT", "2", 1);
  {
    const int n = 2;
    Ranks k(n);
    float* bufs[n];
    for (int r = 0; r < n; ++r) CUDA_OK(cudaMalloc(&bufs[r], 4096 * 4));
    // Both ranks first: the first operation between two ranks connects them.
    allReduce(k, bufs, 4096, false);
    for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(k.cuda[r]));
    // Then rank 0 alone: its kernel waits for rank 1, which never comes, and gives up at the deadline.
    EXPECT(chorusAllReduce(bufs[0], bufs[0], 4096, chorusFloat32, chorusSum, k.comms[0], k.streams[0]) == chorusSuccess,
           "enqueue the lone all-reduce: %s", chorusGetLastError(nullptr));
    std::string l = line(dump(k.comms[0]), "device AllReduce seq 2");
    EXPECT(has(l, "enqueued for"), "while the kernel waits: %s", l.c_str());
    CUDA_OK(cudaStreamSynchronize(k.cuda[0]));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string d = dump(k.comms[0]);
    EXPECT(has(line(d, "device AllReduce seq 1"), " done "), "the first, with both ranks:\n%s", d.c_str());
    l = line(d, "device AllReduce seq 2");
    std::printf("at the deadline: %s\n", l.c_str());
    EXPECT(has(l, " failed (seen ") && has(l, "result 2: ") && has(l, "gave up after 2 s") && has(l, "rank 1"),
           "the entry fails with the kernel's error: %s\n%s", l.c_str(), d.c_str());
    EXPECT(has(d, "a kernel recorded a fault"), "the dump's device line:\n%s", d.c_str());
    for (int r = 0; r < n; ++r) cudaFree(bufs[r]);
  }
  unsetenv("CHORUS_TIMEOUT");
}

}  // namespace

int main() {
  chorus::test::useAllCudaQueues();
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: %s; the flight recorder's device entries were not checked\n",
                chorus::test::cudaSkipReason(e, devices).c_str());
    return 77;
  }
  CUDA_OK(cudaSetDevice(0));
  states();
  fault();
  const int failures = chorus::test::expectFailures();
  std::printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
