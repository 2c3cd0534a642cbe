/*
 * The MPI shim (tests/nccl/mpi_shim) as nccl-tests uses it, under chorusrun: rank and size, an
 * in-place all-gather of host hashes, a split by color, a broadcast inside it, in-place
 * all-reduces of int, long long, int64 and double with sum, min and max, a gather of bytes to
 * rank 0 (other ranks pass no receive buffer), barriers, free and finalize. Every value checked.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static int rank = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    ++failures;
    fprintf(stderr, "rank %d FAIL %s\n", rank, what);
  }
}

int main(int argc, char** argv) {
  int size = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  uint64_t* hashes = calloc((size_t)size, sizeof(uint64_t));
  hashes[rank] = 1000u + (uint64_t)rank;
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hashes, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r) expect(hashes[r] == 1000u + (uint64_t)r, "MPI_Allgather in place");
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  int halfRank = -1;
  int halfSize = 0;
  MPI_Comm_rank(half, &halfRank);
  MPI_Comm_size(half, &halfSize);
  expect(halfRank == rank / 2 && halfSize == (size + 1 - rank % 2) / 2, "MPI_Comm_split ranks and sizes");
  char id[128];
  memset(id, halfRank == 0 ? 'a' + rank % 2 : 0, sizeof(id));
  MPI_Bcast(id, sizeof(id), MPI_BYTE, 0, half);
  expect(id[0] == 'a' + rank % 2 && id[127] == 'a' + rank % 2, "MPI_Bcast inside the split");
  MPI_Barrier(MPI_COMM_WORLD);
  int i = rank + 1;
  MPI_Allreduce(MPI_IN_PLACE, &i, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  expect(i == size * (size + 1) / 2, "MPI_Allreduce int sum");
  int lo = rank + 5;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  expect(lo == 5, "MPI_Allreduce int min");
  long long ll = (long long)rank << 33;
  MPI_Allreduce(MPI_IN_PLACE, &ll, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  expect(ll == (long long)(size - 1) << 33, "MPI_Allreduce long long max");
  int64_t big = 3;
  MPI_Allreduce(MPI_IN_PLACE, &big, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  expect(big == 3 * size, "MPI_Allreduce int64 sum");
  double d[2] = {0.5 * rank, 1.0};
  double sum[2];
  MPI_Allreduce(d, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  expect(sum[0] == 0.25 * size * (size - 1) && sum[1] == size, "MPI_Allreduce double sum, out of place");
  char line[16];
  snprintf(line, sizeof(line), "rank %d", rank);
  char* lines = rank == 0 ? calloc((size_t)size, sizeof(line)) : NULL;
  MPI_Gather(line, sizeof(line), MPI_BYTE, lines, sizeof(line), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      char want[16];
      snprintf(want, sizeof(want), "rank %d", r);
      expect(strcmp(lines + r * sizeof(line), want) == 0, "MPI_Gather of bytes to rank 0");
    }
  }
  MPI_Comm_free(&half);
  expect(half == MPI_COMM_NULL, "MPI_Comm_free clears the handle");
  int all = failures;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("mpi shim on %d ranks: %s\n", size, all ? "FAILED" : "every value as expected");
  MPI_Finalize();
  free(hashes);
  free(lines);
  return all ? 1 : 0;
}
