// The Gloo side of tools/compare_peers.py and tools/bench_netns.sh: gloo::allreduce of floats
// (sum; Gloo picks its ring) over its TCP transport on host memory, timed and printed as
// mpi_allreduce.c does (all_reduce_perf's row layout, the slowest rank's mean, the last call's
// result checked element by element).
//
// Rank and size come from the launcher's variables: mpirun (OMPI_COMM_WORLD_RANK/SIZE, used only
// to start the processes), chorusrun (CHORUS_RANK/NRANKS) or torchrun's RANK/WORLD_SIZE. The ranks
// meet through a gloo::rendezvous::FileStore in the directory `-s` (empty, and seen by every rank);
// `-H` is the address this rank listens on (default 127.0.0.1; a namespace's own address when the
// ranks run in different network namespaces).
//   gloo_allreduce -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP -s STOREDIR [-H ADDR]
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "peer_common.h"

namespace {

int launcherValue(const char* what, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  std::fprintf(stderr, "gloo_allreduce: no %s: start it under mpirun, chorusrun or torchrun\n", what);
  std::exit(2);
}

// Reduces `n` values of every rank into each rank's `v` with `fn` (gloo::sum or gloo::max).
template <typename T>
void reduceAll(const std::shared_ptr<gloo::Context>& context, T* v, size_t n,
               void (*fn)(void*, const void*, const void*, size_t)) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(v, n);
  opts.setReduceFunction(fn);
  gloo::allreduce(opts);
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = launcherValue("rank", {"OMPI_COMM_WORLD_RANK", "CHORUS_RANK", "RANK"});
  const int nranks = launcherValue("job size", {"OMPI_COMM_WORLD_SIZE", "CHORUS_NRANKS", "WORLD_SIZE"});
  size_t minBytes = 8, maxBytes = size_t(64) << 20, factor = 2;
  int iters = 20, warmup = 5, opt;
  std::string storeDir, host = "127.0.0.1";
  while ((opt = getopt(argc, argv, "b:e:f:n:w:s:H:")) != -1) {
    switch (opt) {
      case 'b':
        minBytes = peerParseSize(optarg);
        break;
      case 'e':
        maxBytes = peerParseSize(optarg);
        break;
      case 'f':
        factor = std::strtoull(optarg, nullptr, 0);
        break;
      case 'n':
        iters = std::atoi(optarg);
        break;
      case 'w':
        warmup = std::atoi(optarg);
        break;
      case 's':
        storeDir = optarg;
        break;
      case 'H':
        host = optarg;
        break;
      default:
        std::fprintf(stderr,
                     "usage: gloo_allreduce -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP -s STOREDIR [-H ADDR]\n");
        return 2;
    }
  }
  if (storeDir.empty() || minBytes < 4 || maxBytes < minBytes || factor < 2 || iters < 1 || warmup < 0) {
    std::fprintf(stderr, "gloo_allreduce: need -s STOREDIR, 4 <= MIN <= MAX, FACTOR >= 2, ITERS >= 1, WARMUP >= 0\n");
    return 2;
  }
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(storeDir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  context->connectFullMesh(store, device);

  const size_t maxCount = maxBytes / sizeof(float);
  std::vector<float> send(maxCount), recv(maxCount);
  if (rank == 0) {
    peerHeader(("peer gloo: gloo::allreduce float sum, " + std::to_string(nranks) + " ranks").c_str());
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    const size_t count = bytes / sizeof(float);
    for (size_t i = 0; i < count; ++i) send[i] = peerInput(rank, i);
    const auto allreduce = [&] {
      gloo::AllreduceOptions opts(context);
      opts.setInput(send.data(), count);
      opts.setOutput(recv.data(), count);
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(opts);
    };
    for (int i = 0; i < warmup; ++i) allreduce();
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) allreduce();
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
    double wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < nranks; ++r) want += peerInput(r, i);
      wrong += recv[i] != want;
    }
    reduceAll(context, &us, 1, &gloo::max<double>);
    reduceAll(context, &wrong, 1, &gloo::sum<double>);
    if (rank == 0) {
      const double algbw = bytes / us / 1e3;
      peerRow(bytes, "sum", us, algbw, algbw * 2.0 * (nranks - 1) / nranks, static_cast<long>(wrong));
    }
  }
  return 0;
}
