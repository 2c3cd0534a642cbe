/* NCCL's environment variables through Chorus's libnccl.so.2 (docs/environment.md, "NCCL's
 * names"): read at the first initialisation, not at load; each sets its CHORUS_* twin unless the
 * user set the twin; ncclResetDebugInit maps them again as they are then. One rank, no MPI. */
#include <dirent.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
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

/* Threads of this process now. */
static int threadCount(void) {
  DIR* d = opendir("/proc/self/task");
  int n = 0;
  if (!d) return -1;
  for (struct dirent* e = readdir(d); e; e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* A thread's failure, for the check that the last error is the process's, not the thread's. */
static void* failOnAThread(void* arg) {
  (void)arg;
  if (ncclGetVersion(NULL) == ncclSuccess) {
    fprintf(stderr, "FAIL ncclGetVersion(NULL) succeeded\n");
    ++failures;
  }
  return NULL;
}

/* With NCCL_NET_PLUGIN unset, a libnccl-net.so on the library path is the network plugin, as NCCL
 * takes it (the ctest entry puts one there). */
static int defaultNetPlugin(void) {
  unsetenv("NCCL_NET_PLUGIN");
  unsetenv("CHORUS_NET_PLUGIN");
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  expect("CHORUS_NET_PLUGIN", "libnccl-net.so", "with libnccl-net.so on the library path");
  if (!dlopen("libnccl-net.so", RTLD_NOW | RTLD_NOLOAD)) {
    fprintf(stderr, "FAIL libnccl-net.so was not loaded\n");
    ++failures;
  }
  if (failures == 0) printf("nccl_env: libnccl-net.so taken as the network plugin\n");
  return failures == 0 ? 0 : 1;
}

/* ncclCommInitAll with devlist NULL puts rank i on device i, as NCCL does, in a program that uses
 * CUDA (here: the driver loaded and a device found; exit 77 without one). */
static int initAllDevices(void) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  int (*cuInit)(unsigned) = cuda ? (int (*)(unsigned))dlsym(cuda, "cuInit") : NULL;
  int (*cuDeviceGetCount)(int*) = cuda ? (int (*)(int*))dlsym(cuda, "cuDeviceGetCount") : NULL;
  int devices = 0;
  if (!cuInit || !cuDeviceGetCount || cuInit(0) != 0 || cuDeviceGetCount(&devices) != 0 || devices < 1) {
    printf("SKIP: no CUDA device here\n");
    return 77;
  }
  const int n = devices < 2 ? devices : 2;
  ncclComm_t comms[2];
  check(ncclCommInitAll(comms, n, NULL), "ncclCommInitAll with devlist NULL");
  for (int i = 0; i < n; ++i) {
    int device = -2;
    check(ncclCommCuDevice(comms[i], &device), "ncclCommCuDevice");
    if (device != i) {
      fprintf(stderr, "FAIL ncclCommInitAll with devlist NULL put rank %d on device %d, not %d\n", i, device, i);
      ++failures;
    }
  }
  for (int i = 0; i < n; ++i) check(ncclCommDestroy(comms[i]), "ncclCommDestroy");
  if (failures == 0) printf("nccl_env: ncclCommInitAll(devlist NULL) put each of %d ranks on its device\n", n);
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "default-net-plugin") == 0) return defaultNetPlugin();
  if (argc > 1 && strcmp(argv[1], "initall-devices") == 0) return initAllDevices();
  static const char* const kNames[] = {
      "DEBUG", "DEBUG_SUBSYS", "DEBUG_FILE",   "COMM_ID",       "SOCKET_IFNAME", "P2P_DISABLE", "SHM_DISABLE",
      "ALGO",  "PROTO",        "NCHANNELS",    "MIN_NCHANNELS", "MAX_NCHANNELS", "BUFFSIZE",    "SLOT_BYTES",
      "SLOTS", "TIMEOUT",      "INIT_TIMEOUT", "CUMEM_ENABLE",  "NTHREADS",      "LAUNCH_MODE", "DEVICE_NCHANNELS",
      "NET",   "IB_HCA",       "IB_GID_INDEX", "IB_TIMEOUT",    "IB_DISABLE",    "NET_PLUGIN",  "CONF_FILE"};
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

  /* NCCL's configuration file, read at the first initialisation: KEY=VALUE split at the first '=',
   * nothing trimmed, '#' in the first column a comment; the environment wins. */
  char conf[] = "/tmp/nccl_env_conf.XXXXXX";
  const int confFd = mkstemp(conf);
  FILE* cf = confFd >= 0 ? fdopen(confFd, "w") : NULL;
  if (!cf) {
    fprintf(stderr, "FAIL cannot write a configuration file in /tmp\n");
    return 1;
  }
  fputs(
      "# NCCL_SOCKET_IFNAME=eth9\nNCCL_SOCKET_IFNAME=lo\nNCCL_ALGO=Tree\nNCCL_CONF_TEST= spaced = value \n"
      "no equals sign\n",
      cf);
  fclose(cf);
  unsetenv("NCCL_CONF_TEST");
  setenv("NCCL_CONF_FILE", conf, 1);

  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  unlink(conf);
  const char* when = "after ncclGetUniqueId";
  expect("CHORUS_SOCKET_IFNAME", "lo", "from NCCL_CONF_FILE");
  expect("NCCL_ALGO", "Ring", "with NCCL_ALGO in the environment and in NCCL_CONF_FILE");
  expect("NCCL_CONF_TEST", " spaced = value ", "from NCCL_CONF_FILE");
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

  /* NCCL's list syntax: per-function entries, '^' exclusions, any case; the all-reduce's row is
   * mapped where it leaves one choice Chorus has. */
  static const char* const kLists[][4] = {
      {"NCCL_ALGO", "allreduce:tree,ring;broadcast:ring", "CHORUS_ALGO", NULL},
      {"NCCL_ALGO", "ring;AllReduce:^RING", "CHORUS_ALGO", "tree"},
      {"NCCL_ALGO", "^tree,collnetdirect,collnetchain,nvls,nvlstree,pat", "CHORUS_ALGO", "ring"},
      {"NCCL_PROTO", "^LL128;allreduce:LL128", "CHORUS_PROTO", "ll128"},
      {"NCCL_PROTO", "^ll,ll128", "CHORUS_PROTO", "simple"},
      {"NCCL_PROTO", "^LL", "CHORUS_PROTO", NULL},
  };
  for (size_t i = 0; i < sizeof(kLists) / sizeof(kLists[0]); ++i) {
    setenv(kLists[i][0], kLists[i][1], 1);
    resetDebugInit();
    char whenList[160];
    snprintf(whenList, sizeof(whenList), "after %s=%s", kLists[i][0], kLists[i][1]);
    expect(kLists[i][2], kLists[i][3], whenList);
    unsetenv(kLists[i][0]);
  }
  /* What NCCL's parser refuses makes every init fail with ncclInvalidUsage, saying why. */
  static const char* const kBad[][3] = {
      {"NCCL_ALGO", "Ring,Bogus", "Unrecognized element token \"Bogus\""},
      {"NCCL_ALGO", "ring;tree", "All entries except the first must have a prefix"},
      {"NCCL_PROTO", "sendrecv:simple", "Unrecognized prefix token \"sendrecv\""},
  };
  for (size_t i = 0; i < sizeof(kBad) / sizeof(kBad[0]); ++i) {
    setenv(kBad[i][0], kBad[i][1], 1);
    resetDebugInit();
    ncclComm_t refused = NULL;
    const ncclResult_t r = ncclCommInitRank(&refused, 1, id, 0);
    if (r != ncclInvalidUsage || !strstr(ncclGetLastError(NULL), kBad[i][2])) {
      fprintf(stderr, "FAIL init with %s=%s: %s (\"%s\"), expected ncclInvalidUsage saying %s\n", kBad[i][0],
              kBad[i][1], ncclGetErrorString(r), ncclGetLastError(NULL), kBad[i][2]);
      ++failures;
    }
    unsetenv(kBad[i][0]);
  }
  resetDebugInit();

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

  /* NCCL 2.28: a handle never registered is ncclInvalidUsage (register.cc); a shrink that excludes
   * no rank is ncclInvalidArgument before anything runs, *newcomm left as it was (init.cc). */
  if (ncclCommDeregister(comm, in) != ncclInvalidUsage) {
    fprintf(stderr, "FAIL ncclCommDeregister of a handle never registered: not ncclInvalidUsage\n");
    ++failures;
  }
  ncclComm_t untouched = (ncclComm_t)out;
  int none[1] = {0};
  if (ncclCommShrink(comm, none, 0, &untouched, NULL, NCCL_SHRINK_DEFAULT) != ncclInvalidArgument ||
      ncclCommShrink(comm, NULL, 1, &untouched, NULL, NCCL_SHRINK_DEFAULT) != ncclInvalidArgument ||
      untouched != (ncclComm_t)out) {
    fprintf(stderr, "FAIL ncclCommShrink excluding no rank: not ncclInvalidArgument, or *newcomm changed\n");
    ++failures;
  }

  /* ncclCommInitRankScalable with two ids of this process: the bootstrap is the first's, and the
   * second's root ends with it instead of keeping a thread and a port to the init deadline (under
   * the drop-in: none). */
  const int threadsBefore = threadCount();
  ncclUniqueId ids[2];
  check(ncclGetUniqueId(&ids[0]), "ncclGetUniqueId");
  check(ncclGetUniqueId(&ids[1]), "ncclGetUniqueId");
  ncclComm_t scalable;
  ncclConfig_t scalableConfig = NCCL_CONFIG_INITIALIZER;
  check(ncclCommInitRankScalable(&scalable, 1, 0, 2, ids, &scalableConfig), "ncclCommInitRankScalable");
  check(ncclCommDestroy(scalable), "ncclCommDestroy of the scalable communicator");
  int threadsAfter = threadCount();
  for (int i = 0; i < 300 && threadsAfter > threadsBefore; ++i) {
    usleep(10000);
    threadsAfter = threadCount();
  }
  if (threadsAfter > threadsBefore) {
    fprintf(stderr, "FAIL after ncclCommInitRankScalable with two ids and its destroy: %d threads, %d before\n",
            threadsAfter, threadsBefore);
    ++failures;
  }

  /* A split inside a group: *newcomm is NULL until the group ends, as NCCL writes it then. */
  ncclComm_t child = (ncclComm_t)out;
  check(ncclGroupStart(), "ncclGroupStart");
  check(ncclCommSplit(comm, 0, 0, &child, NULL), "ncclCommSplit inside a group");
  const int nullInGroup = child == NULL;
  check(ncclGroupEnd(), "ncclGroupEnd of the split");
  int childSize = 0;
  if (!nullInGroup || child == NULL || ncclCommCount(child, &childSize) != ncclSuccess || childSize != 1) {
    fprintf(stderr, "FAIL a split inside a group: *newcomm %s before ncclGroupEnd, %s after\n",
            nullInGroup ? "NULL" : "set", child ? "a communicator" : "NULL");
    ++failures;
  }
  if (child && child != (ncclComm_t)out) check(ncclCommDestroy(child), "ncclCommDestroy of the split");

  /* A communicator's own operators: one communicator's used on another is refused, even where
   * the other has an operator of its own at the same place (NCCL scrambles their values). */
  ncclComm_t peerComm;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  check(ncclCommInitRank(&peerComm, 1, id, 0), "ncclCommInitRank of a second communicator");
  float two = 2.0f, three = 3.0f;
  ncclRedOp_t mine, theirs;
  check(ncclRedOpCreatePreMulSum(&mine, &two, ncclFloat32, ncclScalarHostImmediate, comm), "ncclRedOpCreatePreMulSum");
  check(ncclRedOpCreatePreMulSum(&theirs, &three, ncclFloat32, ncclScalarHostImmediate, peerComm),
        "ncclRedOpCreatePreMulSum on the second communicator");
  float v = 5.0f;
  if (ncclAllReduce(&v, &v, 1, ncclFloat32, mine, peerComm, NULL) != ncclInvalidArgument) {
    fprintf(stderr, "FAIL one communicator's operator accepted on another\n");
    ++failures;
  }
  v = 5.0f;
  check(ncclAllReduce(&v, &v, 1, ncclFloat32, theirs, peerComm, NULL),
        "an all-reduce with the communicator's operator");
  if (v != 15.0f) {
    fprintf(stderr, "FAIL the pre-multiplied sum gave %g, not 15\n", v);
    ++failures;
  }
  check(ncclRedOpDestroy(mine, comm), "ncclRedOpDestroy");
  check(ncclRedOpDestroy(theirs, peerComm), "ncclRedOpDestroy on the second communicator");
  check(ncclCommDestroy(peerComm), "ncclCommDestroy of the second communicator");

  /* NCCL 2.29's calls on a communicator are refused here, never passed to another libnccl. */
  ncclResult_t (*suspend)(ncclComm_t, int) = (ncclResult_t(*)(ncclComm_t, int))dlsym(RTLD_DEFAULT, "ncclCommSuspend");
  ncclResult_t (*resume)(ncclComm_t) = (ncclResult_t(*)(ncclComm_t))dlsym(RTLD_DEFAULT, "ncclCommResume");
  if (!suspend || !resume || suspend(comm, 0) != ncclInvalidUsage || !strstr(ncclGetLastError(NULL), "2.28.9") ||
      resume(comm) != ncclInvalidUsage) {
    fprintf(stderr, "FAIL ncclCommSuspend and ncclCommResume: not found, or not refused naming NCCL 2.28.9\n");
    ++failures;
  }

  /* NCCL's sentences for its result codes. */
  if (strcmp(ncclGetErrorString(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)") ||
      strcmp(ncclGetErrorString(ncclInProgress), "NCCL operation in progress") ||
      strcmp(ncclGetErrorString((ncclResult_t)99), "unknown result code")) {
    fprintf(stderr, "FAIL ncclGetErrorString: not NCCL's sentences (\"%s\")\n", ncclGetErrorString(ncclInvalidUsage));
    ++failures;
  }

  /* The last error is the process's (NCCL keeps one, written on any thread, never cleared). */
  pthread_t other;
  pthread_create(&other, NULL, failOnAThread, NULL);
  pthread_join(other, NULL);
  int version = 0;
  check(ncclGetVersion(&version), "ncclGetVersion");
  if (!strstr(ncclGetLastError(comm), "version is NULL")) {
    fprintf(stderr, "FAIL ncclGetLastError after another thread's failure and a success says \"%s\"\n",
            ncclGetLastError(comm));
    ++failures;
  }

  /* A revoked communicator as NCCL 2.28 leaves it (init.cc, enqueue.cc): quiescent, not failed (its
   * async error ncclSuccess, its attributes answered); an operation on it ncclInvalidUsage, and so
   * the group it is in; a second revoke and a finalize ncclInvalidArgument; destroy works. */
  ncclComm_t revoked;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  check(ncclCommInitRank(&revoked, 1, id, 0), "ncclCommInitRank");
  check(ncclCommRevoke(NULL, NCCL_REVOKE_DEFAULT), "ncclCommRevoke of NULL");
  check(ncclCommRevoke(revoked, NCCL_REVOKE_DEFAULT), "ncclCommRevoke");
  int attr = -1;
  ncclResult_t async = ncclInternalError;
  check(ncclCommCount(revoked, &attr), "ncclCommCount of a revoked communicator");
  check(ncclCommUserRank(revoked, &attr), "ncclCommUserRank of a revoked communicator");
  check(ncclCommGetAsyncError(revoked, &async), "ncclCommGetAsyncError of a revoked communicator");
  if (async != ncclSuccess) {
    fprintf(stderr, "FAIL a revoked communicator's async error is %s, not ncclSuccess\n", ncclGetErrorString(async));
    ++failures;
  }
  float one = 1.0f;
  if (ncclAllReduce(&one, &one, 1, ncclFloat32, ncclSum, revoked, NULL) != ncclInvalidUsage ||
      !strstr(ncclGetLastError(NULL), "revoked")) {
    fprintf(stderr, "FAIL an all-reduce on a revoked communicator: not ncclInvalidUsage saying revoked\n");
    ++failures;
  }
  check(ncclGroupStart(), "ncclGroupStart");
  const ncclResult_t inGroup = ncclSend(&one, 1, ncclFloat32, 0, revoked, NULL);
  const ncclResult_t groupEnd = ncclGroupEnd();
  if (inGroup != ncclInvalidUsage || groupEnd != ncclInvalidUsage) {
    fprintf(stderr,
            "FAIL a send on a revoked communicator in a group: %s, then ncclGroupEnd %s (expected "
            "ncclInvalidUsage twice)\n",
            ncclGetErrorString(inGroup), ncclGetErrorString(groupEnd));
    ++failures;
  }
  check(ncclAllReduce(&one, &one, 1, ncclFloat32, ncclSum, comm, NULL), "an all-reduce after the failed group");
  if (ncclCommRevoke(revoked, NCCL_REVOKE_DEFAULT) != ncclInvalidArgument ||
      ncclCommFinalize(revoked) != ncclInvalidArgument) {
    fprintf(stderr, "FAIL a second revoke or a finalize after revoke: not ncclInvalidArgument\n");
    ++failures;
  }
  check(ncclCommDestroy(revoked), "ncclCommDestroy of the revoked communicator");

  check(ncclCommDestroy(comm), "ncclCommDestroy");
  free(in);
  free(out);
  if (failures == 0) printf("nccl_env: every NCCL_* variable mapped as documented\n");
  return failures == 0 ? 0 : 1;
}
