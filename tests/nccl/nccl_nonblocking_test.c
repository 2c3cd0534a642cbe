/* Non-blocking communicators (ncclConfig_t.blocking = 0) through the drop-in, answered as NCCL
 * 2.28 answers (init.cc, enqueue.cc, group.cc): the init returns ncclInProgress; an operation while
 * it is still initialising is ncclInvalidArgument; an operation outside a group, and the end of a
 * group holding one, return ncclInProgress, and ncclCommGetAsyncError then reads ncclSuccess; an
 * operation with nothing to move returns ncclSuccess. Two ranks as threads, the second joining
 * late; every all-reduce checked element by element.
 *   nccl_nonblocking_test        the config says blocking = 0
 *   nccl_nonblocking_test env    ncclCommInitRank, no config; NCCL_COMM_BLOCKING=0 decides */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kRanks = 2, kCount = 4096 };

static ncclUniqueId gId;
static pthread_mutex_t gMu = PTHREAD_MUTEX_INITIALIZER;
static int gFailures;
static int gByEnv; /* ncclCommInitRank under NCCL_COMM_BLOCKING=0 */

static void fail(int rank, const char* what, ncclResult_t got, ncclResult_t want) {
  pthread_mutex_lock(&gMu);
  printf("FAIL rank %d: %s returned %s, expected %s (%s)\n", rank, what, ncclGetErrorString(got),
         ncclGetErrorString(want), ncclGetLastError(NULL));
  ++gFailures;
  pthread_mutex_unlock(&gMu);
}

static void expect(int rank, const char* what, ncclResult_t got, ncclResult_t want) {
  if (got != want) fail(rank, what, got, want);
}

/* Polls the communicator until it stops reading ncclInProgress (30 s at most); its state then. */
static ncclResult_t settle(ncclComm_t comm) {
  const time_t start = time(NULL);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && time(NULL) - start < 30) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) usleep(1000);
  }
  return state;
}

static void checkSum(int rank, const char* what, const float* v) {
  for (int i = 0; i < kCount; ++i) {
    if (v[i] != (float)(3 * i)) {
      pthread_mutex_lock(&gMu);
      printf("FAIL rank %d: %s: element %d is %g, expected %g\n", rank, what, i, v[i], (float)(3 * i));
      ++gFailures;
      pthread_mutex_unlock(&gMu);
      return;
    }
  }
}

static void* runRank(void* arg) {
  const int rank = (int)(long)arg;
  if (rank == 1) usleep(500000); /* rank 0's init is still going meanwhile */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  if (gByEnv) {
    expect(rank, "ncclCommInitRank under NCCL_COMM_BLOCKING=0", ncclCommInitRank(&comm, kRanks, gId, rank),
           ncclInProgress);
  } else {
    expect(rank, "ncclCommInitRankConfig (non-blocking)", ncclCommInitRankConfig(&comm, kRanks, gId, rank, &config),
           ncclInProgress);
  }
  if (!comm) return NULL;
  float* v = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) v[i] = (float)(i * (rank + 1));
  if (rank == 0) {
    expect(rank, "ncclAllReduce while the communicator initialises",
           ncclAllReduce(v, v, kCount, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument);
  }
  expect(rank, "ncclCommGetAsyncError once the init is done", settle(comm), ncclSuccess);

  expect(rank, "ncclAllReduce outside a group", ncclAllReduce(v, v, kCount, ncclFloat32, ncclSum, comm, NULL),
         ncclInProgress);
  expect(rank, "ncclCommGetAsyncError after the all-reduce", settle(comm), ncclSuccess);
  checkSum(rank, "the all-reduce outside a group", v);

  for (int i = 0; i < kCount; ++i) v[i] = (float)(i * (rank + 1));
  expect(rank, "ncclGroupStart", ncclGroupStart(), ncclSuccess);
  expect(rank, "ncclAllReduce inside a group", ncclAllReduce(v, v, kCount, ncclFloat32, ncclSum, comm, NULL),
         ncclSuccess);
  expect(rank, "ncclGroupEnd of a group on a non-blocking communicator", ncclGroupEnd(), ncclInProgress);
  expect(rank, "ncclCommGetAsyncError after the group", settle(comm), ncclSuccess);
  checkSum(rank, "the all-reduce in a group", v);

  expect(rank, "ncclAllReduce of no elements", ncclAllReduce(v, v, 0, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  expect(rank, "ncclCommDestroy", ncclCommDestroy(comm), ncclSuccess);
  free(v);
  return NULL;
}

int main(int argc, char** argv) {
  gByEnv = argc > 1 && strcmp(argv[1], "env") == 0;
  if (gByEnv) setenv("NCCL_COMM_BLOCKING", "0", 1);
  unsetenv("NCCL_DEBUG");
  if (ncclGetUniqueId(&gId) != ncclSuccess) {
    printf("FAIL ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  pthread_t threads[kRanks];
  for (long r = 0; r < kRanks; ++r) pthread_create(&threads[r], NULL, runRank, (void*)r);
  for (int r = 0; r < kRanks; ++r) pthread_join(threads[r], NULL);
  if (gFailures == 0) printf("nccl_nonblocking: every call answered as NCCL answers\n");
  return gFailures == 0 ? 0 : 1;
}
