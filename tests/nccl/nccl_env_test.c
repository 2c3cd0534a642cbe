/* NCCL's environment variables through Chorus's libnccl.so.2 (docs/environment.md, "NCCL's
 * names"): read at the first initialisation, not at load; each sets its CHORUS_* twin unless the
 * user set the twin; ncclResetDebugInit maps them again as they are then. One rank, no MPI. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

/* nccl.h marks ncclResetDebugInit deprecated; NCCL 2.28 still exports it, and so does the drop-in. */
static void resetDebugInit(void) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
}

static void expect(const char* name, const char* want, const char* when) {
  const char* got = getenv(name);
  if (want == NULL ? got == NULL : (got != NULL && strcmp(got, want) == 0)) return;
  fprintf(stderr, "FAIL %s: %s is %s%s%s, expected %s%s%s\n", when, name, got ? "\"" : "", got ? got : "unset",
          got ? "\"" : "", want ? "\"" : "", want ? want : "unset", want ? "\"" : "");
  ++failures;
}

static void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  fprintf(stderr, "FAIL %s: %s (%s)\n", what, ncclGetErrorString(r), ncclGetLastError(NULL));
  exit(1);
}

int main(void) {
  static const char* const kNames[] = {
      "DEBUG", "DEBUG_SUBSYS", "DEBUG_FILE",   "COMM_ID",       "SOCKET_IFNAME", "P2P_DISABLE", "SHM_DISABLE",
      "ALGO",  "PROTO",        "NCHANNELS",    "MIN_NCHANNELS", "MAX_NCHANNELS", "BUFFSIZE",    "SLOT_BYTES",
      "SLOTS", "TIMEOUT",      "INIT_TIMEOUT", "CUMEM_ENABLE",  "NTHREADS",      "LAUNCH_MODE", "DEVICE_NCHANNELS",
      "NET",   "IB_HCA",       "IB_GID_INDEX", "IB_TIMEOUT",    "IB_DISABLE"};
  char name[64];
  for (size_t i = 0; i < sizeof(kNames) / sizeof(kNames[0]); ++i) {
    snprintf(name, sizeof(name), "NCCL_%s", kNames[i]);
    unsetenv(name);
    snprintf(name, sizeof(name), "CHORUS_%s", kNames[i]);
    unsetenv(name);
  }

  /* Set after the library loaded, before the first initialisation (os.environ after import). */
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_ALGO", "Ring", 1);
  setenv("NCCL_PROTO", "LL128", 1);
  setenv("NCCL_MIN_NCHANNELS", "4", 1);
  setenv("NCCL_MAX_NCHANNELS", "2", 1);
  setenv("NCCL_BUFFSIZE", "4194304", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_CUMEM_ENABLE", "true", 1); /* NCCL reads "true" as 0 (strtol): off */
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("CHORUS_P2P_DISABLE", "0", 1); /* the user's CHORUS_* twin wins */
  setenv("NCCL_NET", "Socket", 1);
  setenv("NCCL_IB_HCA", "=mlx5_0:1", 1);
  setenv("NCCL_IB_GID_INDEX", "-1", 1); /* NCCL's "choose": Chorus's default */
  setenv("NCCL_IB_TIMEOUT", "0x16", 1); /* strtol: 22 */
  setenv("NCCL_IB_DISABLE", "2", 1);    /* NCCL disables at any non-zero */
  expect("CHORUS_ALGO", NULL, "before the first init");
  expect("CHORUS_DEBUG", NULL, "before the first init");

  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  const char* when = "after ncclGetUniqueId";
  expect("CHORUS_DEBUG", "WARN", when);
  expect("CHORUS_ALGO", "ring", when);
  expect("CHORUS_PROTO", "ll128", when);
  expect("CHORUS_NCHANNELS", "2", when);
  expect("CHORUS_DEVICE_NCHANNELS", "2", when); /* NCCL_MAX_NCHANNELS caps the device path too */
  expect("CHORUS_SLOT_BYTES", "524288", when);  /* 4 MiB over the default 8 slots */
  expect("CHORUS_DEVICE_SLOT_BYTES", "524288", when);
  expect("CHORUS_SHM_DISABLE", "1", when);
  expect("CHORUS_P2P_DISABLE", "0", when);
  expect("CHORUS_CUMEM_ENABLE", "0", when);
  expect("CHORUS_NET", "Socket", when);
  expect("CHORUS_IB_HCA", "=mlx5_0:1", when);
  expect("CHORUS_IB_GID_INDEX", NULL, when);
  expect("CHORUS_IB_TIMEOUT", "22", when);
  expect("CHORUS_IB_DISABLE", "1", when);
  /* No deadline of Chorus's own: NCCL waits until the program aborts. */
  expect("CHORUS_TIMEOUT", "1073741824", when);
  expect("CHORUS_INIT_TIMEOUT", "1073741824", when);

  /* The mapped settings run: an all-reduce on one rank (ring, LL128, 2 channels, 512 KiB slots). */
  ncclComm_t comm;
  check(ncclCommInitRank(&comm, 1, id, 0), "ncclCommInitRank");
  enum { kCount = 100000 };
  float* in = malloc(kCount * sizeof(float));
  float* out = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) in[i] = (float)(i % 977) - 300.0f;
  check(ncclAllReduce(in, out, kCount, ncclFloat32, ncclSum, comm, NULL), "ncclAllReduce");
  for (int i = 0; i < kCount; ++i) {
    if (out[i] != in[i]) {
      fprintf(stderr, "FAIL all-reduce on one rank: element %d is %g, expected %g\n", i, out[i], in[i]);
      ++failures;
      break;
    }
  }

  /* Later changes wait for ncclResetDebugInit, as NCCL's do. */
  setenv("NCCL_ALGO", "Tree", 1);
  setenv("NCCL_DEBUG", "VERSION", 1);
  unsetenv("NCCL_PROTO");
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  expect("CHORUS_ALGO", "ring", "after a change without ncclResetDebugInit");

  resetDebugInit();
  when = "after ncclResetDebugInit";
  expect("CHORUS_ALGO", "tree", when);
  expect("CHORUS_DEBUG", "VERSION", when);
  expect("CHORUS_PROTO", NULL, when); /* set by the drop-in, removed with its NCCL_PROTO */
  expect("CHORUS_NCHANNELS", "2", when);
  expect("CHORUS_P2P_DISABLE", "0", when);

  /* A value Chorus has no counterpart for sets nothing. */
  setenv("NCCL_ALGO", "NVLS", 1);
  resetDebugInit();
  expect("CHORUS_ALGO", NULL, "after NCCL_ALGO=NVLS");

  /* NCCL's switches as NCCL reads them: disabled at exactly 1 ("2" and "true" leave SHM on, where
   * Chorus's own variables refuse both), cuMem on at any positive value and automatic at -2. */
  setenv("NCCL_SHM_DISABLE", "2", 1);
  setenv("NCCL_CUMEM_ENABLE", "-2", 1);
  resetDebugInit();
  expect("CHORUS_SHM_DISABLE", "0", "after NCCL_SHM_DISABLE=2");
  expect("CHORUS_CUMEM_ENABLE", NULL, "after NCCL_CUMEM_ENABLE=-2");
  setenv("NCCL_SHM_DISABLE", "true", 1);
  setenv("NCCL_CUMEM_ENABLE", "3", 1);
  resetDebugInit();
  expect("CHORUS_SHM_DISABLE", "0", "after NCCL_SHM_DISABLE=true");
  expect("CHORUS_CUMEM_ENABLE", "1", "after NCCL_CUMEM_ENABLE=3");

  /* The user's CHORUS_TIMEOUT wins. */
  setenv("CHORUS_TIMEOUT", "77", 1);
  resetDebugInit();
  expect("CHORUS_TIMEOUT", "77", "after the user set CHORUS_TIMEOUT");
  expect("CHORUS_INIT_TIMEOUT", "1073741824", "after the user set CHORUS_TIMEOUT");

  /* Settings with no counterpart are said once, at INFO, on stderr. */
  char path[] = "/tmp/nccl_env_test.XXXXXX";
  const int fd = mkstemp(path);
  fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_NTHREADS", "256", 1);
  resetDebugInit();
  resetDebugInit();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 4;
  ncclComm_t second;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  check(ncclCommInitRankConfig(&second, 1, id, 0, &config), "ncclCommInitRankConfig with minCTAs");
  check(ncclCommDestroy(second), "ncclCommDestroy");
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char said[65536];
  const ssize_t got = pread(fd, said, sizeof(said) - 1, 0);
  said[got > 0 ? got : 0] = 0;
  close(fd);
  unlink(path);
  const char* nthreads = strstr(said, "NCCL_NTHREADS=256 is ignored");
  if (!nthreads || strstr(nthreads + 1, "NCCL_NTHREADS=256 is ignored")) {
    fprintf(stderr, "FAIL NCCL_NTHREADS: not said exactly once at INFO; stderr was:\n%s\n", said);
    ++failures;
  }
  if (!strstr(said, "ncclConfig_t.minCTAs=4 is ignored")) {
    fprintf(stderr, "FAIL ncclConfig_t.minCTAs: not said at INFO; stderr was:\n%s\n", said);
    ++failures;
  }

  /* NCCL 2.28 takes a NULL registration handle and a window of NULL or 0 bytes as nothing to do. */
  check(ncclCommDeregister(comm, NULL), "ncclCommDeregister of NULL");
  check(ncclCommFinalize(NULL), "ncclCommFinalize of NULL");
  ncclWindow_t win = (ncclWindow_t)in;
  check(ncclCommWindowRegister(comm, NULL, 4096, &win, NCCL_WIN_DEFAULT), "ncclCommWindowRegister of NULL");
  if (win != NULL) {
    fprintf(stderr, "FAIL ncclCommWindowRegister of NULL left a window\n");
    ++failures;
  }
  check(ncclCommWindowRegister(comm, in, 0, &win, NCCL_WIN_DEFAULT), "ncclCommWindowRegister of 0 bytes");
  check(ncclCommWindowDeregister(comm, NULL), "ncclCommWindowDeregister of NULL");
  if (ncclCommDeregister(NULL, NULL) == ncclSuccess) {
    fprintf(stderr, "FAIL ncclCommDeregister(NULL comm) succeeded\n");
    ++failures;
  }

  /* A failed communicator's attributes are its error, as NCCL's ncclCommEnsureReady makes them. */
  ncclComm_t failed;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  check(ncclCommInitRank(&failed, 1, id, 0), "ncclCommInitRank");
  check(ncclCommRevoke(failed, NCCL_REVOKE_DEFAULT), "ncclCommRevoke");
  int attr = -1;
  if (ncclCommCount(failed, &attr) == ncclSuccess || ncclCommUserRank(failed, &attr) == ncclSuccess) {
    fprintf(stderr, "FAIL ncclCommCount or ncclCommUserRank succeeded on a revoked communicator\n");
    ++failures;
  }
  check(ncclCommDestroy(failed), "ncclCommDestroy of the revoked communicator");

  check(ncclCommDestroy(comm), "ncclCommDestroy");
  free(in);
  free(out);
  if (failures == 0) printf("nccl_env: every NCCL_* variable mapped as documented\n");
  return failures == 0 ? 0 : 1;
}
