/* A minimal Chorus program: every rank contributes its rank number, all-reduce sums them.
 *
 *   chorusrun -n 4 -- ./chorus_example_allreduce
 *
 * Build against an installed Chorus: gcc -std=c99 allreduce.c $(pkg-config --cflags --libs chorus)
 */
#include <chorus/chorus.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    chorusResult_t r_ = (call);                                                                          \
    if (r_ != chorusSuccess) {                                                                           \
      fprintf(stderr, "%s failed: %s: %s\n", #call, chorusGetErrorString(r_), chorusGetLastError(NULL)); \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)

int main(void) {
  chorusComm_t comm;
  int rank, nranks;
  size_t i, count = 1 << 20;
  float* data;
  CHECK(chorusCommInitFromEnv(&comm, NULL));
  CHECK(chorusCommUserRank(comm, &rank));
  CHECK(chorusCommCount(comm, &nranks));

  data = malloc(count * sizeof(float));
  for (i = 0; i < count; ++i) data[i] = (float)rank;
  /* NULL stream: returns when the all-reduce is complete. In place: sendbuff == recvbuff. */
  CHECK(chorusAllReduce(data, data, count, chorusFloat32, chorusSum, comm, NULL));

  for (i = 0; i < count; ++i) {
    if (data[i] != (float)(nranks * (nranks - 1) / 2)) {
      fprintf(stderr, "rank %d: element %zu is %f\n", rank, i, data[i]);
      return 1;
    }
  }
  printf("rank %d of %d: all-reduce correct\n", rank, nranks);
  free(data);
  CHECK(chorusCommDestroy(comm));
  return 0;
}
