/* The Open MPI side of tools/compare_peers.py: MPI_Allreduce of floats (sum) on host memory,
 * timed as nccl-tests time a collective, one row per size in all_reduce_perf's layout
 *   size count type redop root time(us) algbw busbw #wrong
 * so that one parser reads every contender. Per size: `-w` calls to warm up, a barrier, `-n`
 * calls back to back; the time is the slowest rank's mean. The last call's result is then checked
 * element by element against the sum computed here (small integers: exact in float).
 *   mpi_allreduce -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "peer_common.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t minBytes = 8, maxBytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5, opt;
  while ((opt = getopt(argc, argv, "b:e:f:n:w:")) != -1) {
    switch (opt) {
      case 'b':
        minBytes = peerParseSize(optarg);
        break;
      case 'e':
        maxBytes = peerParseSize(optarg);
        break;
      case 'f':
        factor = strtoull(optarg, NULL, 0);
        break;
      case 'n':
        iters = atoi(optarg);
        break;
      case 'w':
        warmup = atoi(optarg);
        break;
      default:
        if (rank == 0) fprintf(stderr, "usage: mpi_allreduce -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (minBytes < 4 || maxBytes < minBytes || factor < 2 || iters < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "mpi_allreduce: need 4 <= MIN <= MAX, FACTOR >= 2, ITERS >= 1, WARMUP >= 0\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t maxCount = maxBytes / sizeof(float);
  float* send = malloc(maxCount * sizeof(float));
  float* recv = malloc(maxCount * sizeof(float));
  if (!send || !recv) {
    fprintf(stderr, "mpi_allreduce: cannot allocate 2 x %zu bytes\n", maxBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    char what[64];
    snprintf(what, sizeof(what), "peer openmpi: MPI_Allreduce float sum, %d ranks", nranks);
    peerHeader(what);
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    const size_t count = bytes / sizeof(float);
    for (size_t i = 0; i < count; ++i) send[i] = peerInput(rank, i);
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - start) * 1e6 / iters;
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < nranks; ++r) want += peerInput(r, i);
      wrong += recv[i] != want;
    }
    double slowest = 0;
    long wrongAll = 0;
    MPI_Reduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &wrongAll, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      const double algbw = bytes / slowest / 1e3;
      peerRow(bytes, "sum", slowest, algbw, algbw * 2.0 * (nranks - 1) / nranks, wrongAll);
    }
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
