/*
 * An unmodified NCCL program on host buffers: compiled against the CUDA toolkit's own nccl.h,
 * linked to libnccl.so.2 by its soname, run under mpirun (rank 0's unique id reaches the others
 * through MPI_Bcast, as nccl-tests does). Whichever libnccl.so.2 the loader finds runs it:
 * Chorus's drop-in (LD_LIBRARY_PATH=build/nccl) must pass every check; NCCL's own refuses host
 * memory and must fail cleanly, with an error, never a crash.
 *
 * Every collective (all-reduce, broadcast and the in-place bcast, reduce, all-gather,
 * reduce-scatter, all-to-all, gather, scatter, send/recv around the ring) x every type x every
 * built-in operator (sum, prod, max, min, avg) x every root, in place and not, inside and outside
 * a group, each element of each result checked against a reference computed here from the
 * values every rank contributes (small integers, exact in every type; an average to within the
 * type's rounding). Then split with a config, ncclMemAlloc, registration and windows, a
 * pre-multiplied sum with per-rank scalars, a simulated group, revoke, and the device API's
 * refusals.
 *
 *   nccl_host_test [--expect-refusal]
 * Exit: 0 all passed; 1 a check failed; 3 the library refused (what --expect-refusal wants).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank = 0;
static int nranks = 1;
static int failures = 0;
static long cases = 0;
static int refused = 0;

static const char* const kTypeName[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",   "uint64",
                                        "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
static const size_t kTypeSize[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char* const kOpName[] = {"sum", "prod", "max", "min", "avg"};

/* --- Values: small integers in each type's bits --- */

/* A small number (an integer, or an average of them) in a float format of `ebits` exponent bits
 * and `mbits` mantissa bits, rounded to nearest even (normal numbers and zero suffice here). */
static uint32_t encodeFloat(double v, int ebits, int mbits) {
  if (v == 0) return 0;
  const uint32_t sign = v < 0 ? 1u : 0u;
  double a = fabs(v);
  int e = 0;
  const double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  e -= 1;                        /* a = (2m) * 2^e, 2m in [1, 2) */
  double frac = (2 * m - 1) * (double)(1u << mbits);
  double whole = floor(frac);
  double rest = frac - whole;
  if (rest > 0.5 || (rest == 0.5 && fmod(whole, 2) != 0)) whole += 1;
  if (whole >= (double)(1u << mbits)) {
    whole = 0;
    e += 1;
  }
  const int bias = (1 << (ebits - 1)) - 1;
  return sign << (ebits + mbits) | (uint32_t)(e + bias) << mbits | (uint32_t)whole;
}

static double decodeFloat(uint32_t bits, int ebits, int mbits) {
  const uint32_t sign = bits >> (ebits + mbits) & 1u;
  const int exp = (int)(bits >> mbits & ((1u << ebits) - 1));
  const uint32_t mant = bits & ((1u << mbits) - 1);
  const int bias = (1 << (ebits - 1)) - 1;
  double v;
  if (exp == 0) {
    v = ldexp((double)mant, 1 - bias - mbits);
  } else {
    v = ldexp(1.0 + (double)mant / (double)(1u << mbits), exp - bias);
  }
  return sign ? -v : v;
}

static void put(int t, void* buf, size_t i, double v) {
  char* p = (char*)buf + i * kTypeSize[t];
  switch (t) {
    case ncclInt8:
      *(int8_t*)p = (int8_t)v;
      break;
    case ncclUint8:
      *(uint8_t*)p = (uint8_t)(int64_t)v;
      break;
    case ncclInt32:
      *(int32_t*)p = (int32_t)v;
      break;
    case ncclUint32:
      *(uint32_t*)p = (uint32_t)(int64_t)v;
      break;
    case ncclInt64:
      *(int64_t*)p = (int64_t)v;
      break;
    case ncclUint64:
      *(uint64_t*)p = (uint64_t)(int64_t)v;
      break;
    case ncclFloat16:
      *(uint16_t*)p = (uint16_t)encodeFloat(v, 5, 10);
      break;
    case ncclFloat32:
      *(float*)p = (float)v;
      break;
    case ncclFloat64:
      *(double*)p = v;
      break;
    case ncclBfloat16:
      *(uint16_t*)p = (uint16_t)encodeFloat(v, 8, 7);
      break;
    case ncclFloat8e4m3:
      *(uint8_t*)p = (uint8_t)encodeFloat(v, 4, 3);
      break;
    default:
      *(uint8_t*)p = (uint8_t)encodeFloat(v, 5, 2);
      break;
  }
}

static double get(int t, const void* buf, size_t i) {
  const char* p = (const char*)buf + i * kTypeSize[t];
  switch (t) {
    case ncclInt8:
      return *(const int8_t*)p;
    case ncclUint8:
      return *(const uint8_t*)p;
    case ncclInt32:
      return *(const int32_t*)p;
    case ncclUint32:
      return *(const uint32_t*)p;
    case ncclInt64:
      return (double)*(const int64_t*)p;
    case ncclUint64:
      return (double)*(const uint64_t*)p;
    case ncclFloat16:
      return decodeFloat(*(const uint16_t*)p, 5, 10);
    case ncclFloat32:
      return *(const float*)p;
    case ncclFloat64:
      return *(const double*)p;
    case ncclBfloat16:
      return decodeFloat(*(const uint16_t*)p, 8, 7);
    case ncclFloat8e4m3:
      return decodeFloat(*(const uint8_t*)p, 4, 3);
    default:
      return decodeFloat(*(const uint8_t*)p, 5, 2);
  }
}

static int isUnsigned(int t) { return t == ncclUint8 || t == ncclUint32 || t == ncclUint64; }
static int isFloat(int t) { return t >= ncclFloat16; }

/* Rank r's element i of operation `salt`: -2 to 2 (0 to 3 for unsigned types), so that sums of
 * 4 ranks and their products are exact even in fp8 e5m2. */
static double valueOf(int t, int r, size_t i, int salt) {
  const int v = (int)((i * 7 + (size_t)r * 3 + (size_t)salt * 5) % 5);
  return isUnsigned(t) ? (double)(v % 4) : (double)(v - 2);
}

static double fold(int op, double a, double b) {
  switch (op) {
    case ncclProd:
      return a * b;
    case ncclMax:
      return a > b ? a : b;
    case ncclMin:
      return a < b ? a : b;
    default:
      return a + b; /* sum, and avg before its division */
  }
}

/* The reduction of element i over every rank, as the type holds it. */
static double reduced(int t, int op, size_t i, int salt) {
  double acc = valueOf(t, 0, i, salt);
  for (int r = 1; r < nranks; ++r) acc = fold(op, acc, valueOf(t, r, i, salt));
  if (op == ncclAvg) acc = isFloat(t) ? acc / nranks : trunc(acc / nranks);
  return acc;
}

/* Whether `got` is `want`: exactly, or for a floating average to within the type's rounding. */
static int same(int t, int op, double got, double want) {
  if (op == ncclAvg && isFloat(t)) {
    const int mbits = t == ncclFloat16      ? 10
                      : t == ncclFloat32    ? 23
                      : t == ncclFloat64    ? 52
                      : t == ncclBfloat16   ? 7
                      : t == ncclFloat8e4m3 ? 3
                                            : 2;
    return fabs(got - want) <= ldexp(fabs(want) > 1 ? fabs(want) : 1, 1 - mbits);
  }
  return got == want;
}

/* --- Checks --- */

static void report(const char* what, int t, int op, int root, size_t count, int inPlace, size_t at, double got,
                   double want) {
  if (++failures <= 20) {
    fprintf(stderr, "rank %d FAIL %s %s %s root %d count %zu%s: element %zu is %g, not %g\n", rank, what, kTypeName[t],
            op >= 0 ? kOpName[op] : "-", root, count, inPlace ? " in place" : "", at, got, want);
  }
}

static int call(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return 1;
  if (!refused) {
    fprintf(stderr, "rank %d: %s returned %d (%s): %s\n", rank, what, (int)r, ncclGetErrorString(r),
            ncclGetLastError(comm));
  }
  refused = 1;
  return 0;
}

/* Every collective of one type, op and count. */
static void checkAll(ncclComm_t comm, int t, size_t count, int salt) {
  const size_t es = kTypeSize[t];
  const size_t big = count * (size_t)nranks;
  char* in = malloc(big * es + 1);
  char* out = malloc(big * es + 1);
  for (int inPlace = 0; inPlace < 2; ++inPlace) {
    for (int op = 0; op < 5; ++op) {
      /* All-reduce. */
      for (size_t i = 0; i < count; ++i) put(t, inPlace ? out : in, i, valueOf(t, rank, i, salt + op));
      if (!call(ncclAllReduce(inPlace ? out : in, out, count, (ncclDataType_t)t, (ncclRedOp_t)op, comm, NULL), comm,
                "ncclAllReduce"))
        goto done;
      for (size_t i = 0; i < count; ++i) {
        const double want = reduced(t, op, i, salt + op);
        if (!same(t, op, get(t, out, i), want))
          report("all_reduce", t, op, -1, count, inPlace, i, get(t, out, i), want);
      }
      ++cases;
      /* Reduce, every root. */
      for (int root = 0; root < nranks; ++root) {
        for (size_t i = 0; i < count; ++i) put(t, inPlace ? out : in, i, valueOf(t, rank, i, salt + op + root));
        if (!call(ncclReduce(inPlace ? out : in, out, count, (ncclDataType_t)t, (ncclRedOp_t)op, root, comm, NULL),
                  comm, "ncclReduce"))
          goto done;
        if (rank == root) {
          for (size_t i = 0; i < count; ++i) {
            const double want = reduced(t, op, i, salt + op + root);
            if (!same(t, op, get(t, out, i), want))
              report("reduce", t, op, root, count, inPlace, i, get(t, out, i), want);
          }
        }
        ++cases;
      }
      /* Reduce-scatter: rank r's block r of the reduced whole. */
      for (size_t i = 0; i < big; ++i) put(t, inPlace ? out : in, i, valueOf(t, rank, i, salt + op));
      {
        char* dst = inPlace ? out + (size_t)rank * count * es : out;
        if (!call(ncclReduceScatter(inPlace ? out : in, dst, count, (ncclDataType_t)t, (ncclRedOp_t)op, comm, NULL),
                  comm, "ncclReduceScatter"))
          goto done;
        for (size_t i = 0; i < count; ++i) {
          const double want = reduced(t, op, (size_t)rank * count + i, salt + op);
          if (!same(t, op, get(t, dst, i), want))
            report("reduce_scatter", t, op, -1, count, inPlace, i, get(t, dst, i), want);
        }
        ++cases;
      }
    }
    /* Broadcast and bcast, every root. */
    for (int root = 0; root < nranks; ++root) {
      for (size_t i = 0; i < count; ++i) {
        put(t, in, i, valueOf(t, rank, i, salt + root));
        put(t, out, i, inPlace ? valueOf(t, rank, i, salt + root) : 99);
      }
      ncclResult_t r = inPlace ? ncclBcast(out, count, (ncclDataType_t)t, root, comm, NULL)
                               : ncclBroadcast(in, out, count, (ncclDataType_t)t, root, comm, NULL);
      if (!call(r, comm, inPlace ? "ncclBcast" : "ncclBroadcast")) goto done;
      for (size_t i = 0; i < count; ++i) {
        const double want = valueOf(t, root, i, salt + root);
        if (get(t, out, i) != want) report("broadcast", t, -1, root, count, inPlace, i, get(t, out, i), want);
      }
      ++cases;
    }
    /* All-gather: block r is rank r's. */
    for (size_t i = 0; i < count; ++i)
      put(t, inPlace ? out + (size_t)rank * count * es : in, i, valueOf(t, rank, i, salt));
    if (!call(ncclAllGather(inPlace ? out + (size_t)rank * count * es : in, out, count, (ncclDataType_t)t, comm, NULL),
              comm, "ncclAllGather"))
      goto done;
    for (int r = 0; r < nranks; ++r) {
      for (size_t i = 0; i < count; ++i) {
        const double want = valueOf(t, r, i, salt);
        const double got = get(t, out, (size_t)r * count + i);
        if (got != want) report("all_gather", t, -1, -1, count, inPlace, (size_t)r * count + i, got, want);
      }
    }
    ++cases;
    if (inPlace) continue; /* the rest are out of place only, as in NCCL */
    /* All-to-all: block p of rank r's output is block r of rank p's input. */
    for (int p = 0; p < nranks; ++p) {
      for (size_t i = 0; i < count; ++i)
        put(t, in, (size_t)p * count + i, valueOf(t, rank, (size_t)p * count + i, salt));
    }
    if (!call(ncclAlltoAll(in, out, count, (ncclDataType_t)t, comm, NULL), comm, "ncclAlltoAll")) goto done;
    for (int p = 0; p < nranks; ++p) {
      for (size_t i = 0; i < count; ++i) {
        const double want = valueOf(t, p, (size_t)rank * count + i, salt);
        const double got = get(t, out, (size_t)p * count + i);
        if (got != want) report("alltoall", t, -1, -1, count, 0, (size_t)p * count + i, got, want);
      }
    }
    ++cases;
    /* Gather and scatter, every root. */
    for (int root = 0; root < nranks; ++root) {
      for (size_t i = 0; i < count; ++i) put(t, in, i, valueOf(t, rank, i, salt + root));
      if (!call(ncclGather(in, out, count, (ncclDataType_t)t, root, comm, NULL), comm, "ncclGather")) goto done;
      if (rank == root) {
        for (int r = 0; r < nranks; ++r) {
          for (size_t i = 0; i < count; ++i) {
            const double want = valueOf(t, r, i, salt + root);
            const double got = get(t, out, (size_t)r * count + i);
            if (got != want) report("gather", t, -1, root, count, 0, (size_t)r * count + i, got, want);
          }
        }
      }
      for (size_t i = 0; i < big; ++i) put(t, in, i, valueOf(t, rank, i, salt + root));
      if (!call(ncclScatter(in, out, count, (ncclDataType_t)t, root, comm, NULL), comm, "ncclScatter")) goto done;
      for (size_t i = 0; i < count; ++i) {
        const double want = valueOf(t, root, (size_t)rank * count + i, salt + root);
        if (get(t, out, i) != want) report("scatter", t, -1, root, count, 0, i, get(t, out, i), want);
      }
      cases += 2;
    }
    /* Send to the next rank and receive from the previous, in a group. */
    for (size_t i = 0; i < count; ++i) put(t, in, i, valueOf(t, rank, i, salt));
    if (!call(ncclGroupStart(), comm, "ncclGroupStart")) goto done;
    if (!call(ncclSend(in, count, (ncclDataType_t)t, (rank + 1) % nranks, comm, NULL), comm, "ncclSend") ||
        !call(ncclRecv(out, count, (ncclDataType_t)t, (rank + nranks - 1) % nranks, comm, NULL), comm, "ncclRecv")) {
      ncclGroupEnd();
      goto done;
    }
    if (!call(ncclGroupEnd(), comm, "ncclGroupEnd")) goto done;
    for (size_t i = 0; i < count; ++i) {
      const double want = valueOf(t, (rank + nranks - 1) % nranks, i, salt);
      if (get(t, out, i) != want) report("sendrecv", t, -1, -1, count, 0, i, get(t, out, i), want);
    }
    ++cases;
  }
done:
  free(in);
  free(out);
}

/* NCCL's device API (nccl_device.h is C++; these are its C-linkage entry points, declared here
 * with the same layout). */
struct ncclTeam {
  int nRanks, rank, stride;
};
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
struct ncclTeam ncclTeamWorld(ncclComm_t comm);

static void expect(int ok, const char* what) {
  if (!ok && ++failures <= 20) fprintf(stderr, "rank %d FAIL %s\n", rank, what);
  ++cases;
}

/* The rest of the host API through libnccl.so.2: split with a config, memory, registration and
 * windows, a pre-multiplied sum, a simulated group, revoke, and the device API's refusals. */
static void checkExtras(ncclComm_t comm) {
  /* Split into even and odd ranks, with a config (a commName), and all-reduce inside. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = "halves";
  ncclComm_t half = NULL;
  if (!call(ncclCommSplit(comm, rank % 2, rank, &half, &config), comm, "ncclCommSplit")) return;
  int halfSize = 0;
  ncclCommCount(half, &halfSize);
  expect(halfSize == (nranks + 1 - rank % 2) / 2, "ncclCommSplit: the half's size");
  int32_t v = rank;
  if (!call(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, half, NULL), half, "ncclAllReduce on the half")) return;
  int32_t want = 0;
  for (int r = rank % 2; r < nranks; r += 2) want += r;
  expect(v == want, "ncclAllReduce on the half");
  /* A config that was never initialised is refused, saying so. */
  ncclConfig_t junk;
  memset(&junk, 0, sizeof(junk));
  ncclComm_t never = NULL;
  expect(ncclCommSplit(comm, 0, rank, &never, &junk) == ncclInvalidArgument &&
             strstr(ncclGetLastError(comm), "NCCL_CONFIG_INITIALIZER") != NULL,
         "ncclCommSplit with an uninitialised config is ncclInvalidArgument, naming the initializer");
  /* NCCL has no bitwise operators: the values of Chorus's own (chorusBand..chorusBxor) are refused as
     any operator NCCL does not know, and the buffer is left as it was. */
  for (int bitwise = 0x40000000; bitwise <= 0x40000002; ++bitwise) {
    int32_t x = 6, y = 5;
    expect(ncclAllReduce(&x, &y, 1, ncclInt32, (ncclRedOp_t)bitwise, comm, NULL) == ncclInvalidArgument && y == 5,
           "ncclAllReduce with an operator NCCL does not have (Chorus's bitwise ones) is ncclInvalidArgument");
  }
  /* ncclMemAlloc memory (host memory here, no GPU), registered, and as a window. */
  float* mem = NULL;
  if (!call(ncclMemAlloc((void**)&mem, 4096 * sizeof(float)), comm, "ncclMemAlloc")) return;
  void* handle = NULL;
  ncclWindow_t win = NULL;
  if (!call(ncclCommRegister(comm, mem, 4096 * sizeof(float), &handle), comm, "ncclCommRegister") ||
      !call(ncclCommWindowRegister(comm, mem, 4096 * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC), comm,
            "ncclCommWindowRegister"))
    return;
  for (int i = 0; i < 4096; ++i) mem[i] = (float)(i % 7 + rank);
  /* A pre-multiplied sum with each rank's own scalar (rank + 1). */
  ncclRedOp_t premul;
  float scalar = (float)(rank + 1);
  if (!call(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), comm,
            "ncclRedOpCreatePreMulSum"))
    return;
  if (!call(ncclAllReduce(mem, mem, 4096, ncclFloat32, premul, comm, NULL), comm, "ncclAllReduce premul")) return;
  int premulOk = 1;
  for (int i = 0; i < 4096; ++i) {
    double w = 0;
    for (int r = 0; r < nranks; ++r) w += (double)(i % 7 + r) * (r + 1);
    premulOk = premulOk && mem[i] == (float)w;
  }
  expect(premulOk, "ncclAllReduce with ncclRedOpCreatePreMulSum on registered ncclMemAlloc memory");
  call(ncclRedOpDestroy(premul, comm), comm, "ncclRedOpDestroy");
  call(ncclCommWindowDeregister(comm, win), comm, "ncclCommWindowDeregister");
  call(ncclCommDeregister(comm, handle), comm, "ncclCommDeregister");
  call(ncclMemFree(mem), comm, "ncclMemFree");
  /* A simulated group estimates and runs nothing. */
  int32_t untouched = 5;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  call(ncclGroupStart(), comm, "ncclGroupStart");
  call(ncclAllReduce(&untouched, &untouched, 1, ncclInt32, ncclSum, comm, NULL), comm, "ncclAllReduce (simulated)");
  expect(ncclGroupSimulateEnd(&sim) == ncclSuccess && sim.estimatedTime > 0 && untouched == 5,
         "ncclGroupSimulateEnd: an estimate, and nothing run");
  /* The device API refuses, with a message, and never crashes. */
  expect(ncclDevCommCreate(comm, NULL, NULL) == ncclInvalidUsage && strstr(ncclGetLastError(comm), "device API"),
         "ncclDevCommCreate is ncclInvalidUsage, saying the device API is not served");
  expect(ncclLLA2ACalcSlots(1024, 8) == 0, "ncclLLA2ACalcSlots answers 0");
  struct ncclTeam team = ncclTeamWorld(comm);
  expect(team.nRanks == 0, "ncclTeamWorld answers an empty team");
  /* Revoke the half: its operations are refused, and it can still be destroyed. */
  expect(ncclCommRevoke(half, NCCL_REVOKE_DEFAULT) == ncclSuccess, "ncclCommRevoke");
  expect(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, half, NULL) != ncclSuccess,
         "an all-reduce on a revoked communicator is refused");
  expect(ncclCommDestroy(half) == ncclSuccess, "ncclCommDestroy of a revoked communicator");
}

int main(int argc, char** argv) {
  const int expectRefusal = argc > 1 && strcmp(argv[1], "--expect-refusal") == 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  /* Which libnccl.so.2 the loader found. */
  Dl_info where;
  if (rank == 0 && dladdr((void*)&ncclAllReduce, &where) && where.dli_fname) {
    int version = 0;
    ncclGetVersion(&version);
    printf("libnccl.so.2 loaded from %s (version %d)\n", where.dli_fname, version);
  }
  /* Rank 0's id, with whether it could make one, for every rank. */
  struct {
    int ok;
    ncclUniqueId id;
  } idMsg;
  memset(&idMsg, 0, sizeof(idMsg));
  if (rank == 0) idMsg.ok = call(ncclGetUniqueId(&idMsg.id), NULL, "ncclGetUniqueId");
  MPI_Bcast(&idMsg, sizeof(idMsg), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = NULL;
  if (idMsg.ok && call(ncclCommInitRank(&comm, nranks, idMsg.id, rank), NULL, "ncclCommInitRank")) {
    int n = 0;
    int me = -1;
    if (call(ncclCommCount(comm, &n), comm, "ncclCommCount") &&
        call(ncclCommUserRank(comm, &me), comm, "ncclCommUserRank") && (n != nranks || me != rank)) {
      fprintf(stderr, "rank %d: the communicator says rank %d of %d\n", rank, me, n);
      ++failures;
    }
    int salt = 0;
    for (int t = 0; t < ncclNumTypes && !refused; ++t) {
      const size_t counts[] = {1, 7, 1000};
      for (size_t c = 0; c < 3 && !refused; ++c) checkAll(comm, t, counts[c], salt++);
    }
    if (!refused) checkExtras(comm);
    if (refused) {
      ncclCommAbort(comm);
    } else {
      call(ncclCommDestroy(comm), NULL, "ncclCommDestroy");
    }
  } else {
    refused = 1;
  }
  int local[2] = {failures, refused};
  int all[2] = {0, 0};
  MPI_Allreduce(local, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    if (all[1]) {
      printf("the library refused (see above)%s\n", expectRefusal ? ": as expected" : "");
    } else {
      printf("%ld cases on %d ranks, %s\n", cases, nranks, all[0] ? "FAILED" : "every element as expected");
    }
  }
  MPI_Finalize();
  if (all[1]) return 3;
  return all[0] ? 1 : 0;
}
