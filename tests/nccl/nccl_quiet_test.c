/* What the drop-in prints when nobody asked for logs: NCCL 2.28 prints nothing with NCCL_DEBUG
 * unset (or set to a level it does not know), and WARN lines with NCCL_DEBUG=WARN. Two ranks as
 * threads, the second joining a second late (CHORUS_WARN_AFTER_MS=200 makes Chorus warn of the
 * wait at once), an unknown CHORUS_* name in the environment (which Chorus warns of), then an
 * all-reduce checked element by element. This process's stdout and stderr go to a file while it
 * runs, and are judged after:
 *   nccl_quiet_test quiet     NCCL_DEBUG unset: not one byte
 *   nccl_quiet_test unknown   NCCL_DEBUG=LOUD (not a level): not one byte
 *   nccl_quiet_test warn      NCCL_DEBUG=WARN: the late join's warning and the unknown name's */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kRanks = 2, kCount = 1000 };

static ncclUniqueId gId;

struct Rank {
  int rank;
  ncclResult_t result;
  int wrong;
};

static void* runRank(void* arg) {
  struct Rank* r = (struct Rank*)arg;
  if (r->rank == 1) sleep(1);
  ncclComm_t comm;
  r->result = ncclCommInitRank(&comm, kRanks, gId, r->rank);
  if (r->result != ncclSuccess) return NULL;
  float v[kCount];
  for (int i = 0; i < kCount; ++i) v[i] = (float)(i * (r->rank + 1));
  r->result = ncclAllReduce(v, v, kCount, ncclFloat32, ncclSum, comm, NULL);
  for (int i = 0; i < kCount && r->result == ncclSuccess; ++i) r->wrong += v[i] != (float)(i * 3);
  ncclResult_t d = ncclCommDestroy(comm);
  if (r->result == ncclSuccess) r->result = d;
  return NULL;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "quiet") && strcmp(mode, "unknown") && strcmp(mode, "warn")) {
    fprintf(stderr, "usage: nccl_quiet_test quiet|unknown|warn\n");
    return 2;
  }
  unsetenv("CHORUS_DEBUG");
  unsetenv("NCCL_DEBUG");
  if (!strcmp(mode, "unknown")) setenv("NCCL_DEBUG", "LOUD", 1);
  if (!strcmp(mode, "warn")) setenv("NCCL_DEBUG", "WARN", 1);
  setenv("CHORUS_WARN_AFTER_MS", "200", 1);
  setenv("CHORUS_NOT_A_SETTING", "1", 1);

  /* stdout and stderr into a file of their own until the ranks are done. */
  char path[] = "/tmp/nccl_quiet_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    perror("mkstemp");
    return 1;
  }
  unlink(path);
  fflush(stdout);
  fflush(stderr);
  const int savedOut = dup(1), savedErr = dup(2);
  dup2(fd, 1);
  dup2(fd, 2);

  ncclResult_t idResult = ncclGetUniqueId(&gId);
  struct Rank ranks[kRanks];
  pthread_t threads[kRanks];
  for (int i = 0; i < kRanks; ++i) {
    ranks[i].rank = i;
    ranks[i].result = ncclSuccess;
    ranks[i].wrong = 0;
    if (idResult == ncclSuccess) pthread_create(&threads[i], NULL, runRank, &ranks[i]);
  }
  for (int i = 0; i < kRanks && idResult == ncclSuccess; ++i) pthread_join(threads[i], NULL);

  fflush(stdout);
  fflush(stderr);
  dup2(savedOut, 1);
  dup2(savedErr, 2);
  char printed[16384];
  const ssize_t n = pread(fd, printed, sizeof(printed) - 1, 0);
  printed[n > 0 ? n : 0] = '\0';
  close(fd);

  int failures = 0;
  if (idResult != ncclSuccess) {
    printf("FAIL ncclGetUniqueId: %s\n", ncclGetErrorString(idResult));
    ++failures;
  }
  for (int i = 0; i < kRanks && idResult == ncclSuccess; ++i) {
    if (ranks[i].result != ncclSuccess || ranks[i].wrong) {
      printf("FAIL rank %d: %s, %d elements wrong\n", i, ncclGetErrorString(ranks[i].result), ranks[i].wrong);
      ++failures;
    }
  }
  if (!strcmp(mode, "warn")) {
    if (!strstr(printed, "still waiting for ranks 1") || !strstr(printed, "CHORUS_NOT_A_SETTING")) {
      printf("FAIL with NCCL_DEBUG=WARN, expected the late join's warning and the unknown name's; printed:\n%s\n",
             printed);
      ++failures;
    }
  } else if (n != 0) {
    printf("FAIL with NCCL_DEBUG %s, the library printed %zd bytes:\n%s\n",
           strcmp(mode, "quiet") ? "set to a level NCCL does not know" : "unset", n, printed);
    ++failures;
  }
  if (failures == 0) printf("nccl_quiet %s: %s\n", mode, strcmp(mode, "warn") ? "printed nothing" : "warned as asked");
  return failures == 0 ? 0 : 1;
}
