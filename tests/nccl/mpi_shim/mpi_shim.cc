// libmpi.so for nccl-tests over Chorus's C API (mpi.h says what it is and is not). World is
// chorusCommInitFromEnv's communicator (chorusrun's CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID);
// CHORUS_COMM_ID is cleared after it, so the program's own unique ids (ncclGetUniqueId through
// the drop-in) get roots of their own. Every failure is fatal, with Chorus's message.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "chorus/chorus.h"
#include "mpi.h"

namespace {

std::mutex mu;
std::vector<chorusComm_t> comms;  // by MPI_Comm; [0] is world, null once freed

[[noreturn]] void fatal(const char* what, chorusComm_t comm) {
  std::fprintf(stderr, "mpi shim: %s failed: %s\n", what, chorusGetLastError(comm));
  std::fflush(stderr);
  _exit(1);
}

chorusComm_t commOf(MPI_Comm c, const char* what) {
  std::lock_guard<std::mutex> g(mu);
  if (c < 0 || static_cast<size_t>(c) >= comms.size() || !comms[c]) {
    std::fprintf(stderr, "mpi shim: %s: communicator %d is not live\n", what, c);
    _exit(1);
  }
  return comms[c];
}

void check(chorusResult_t r, const char* what, chorusComm_t comm) {
  if (r != chorusSuccess) fatal(what, comm);
}

chorusDataType_t typeOf(MPI_Datatype t, size_t* size) {
  switch (t) {
    case MPI_BYTE:
      *size = 1;
      return chorusUint8;
    case MPI_CHAR:
      *size = 1;
      return chorusInt8;
    case MPI_INT:
      *size = 4;
      return chorusInt32;
    case MPI_UNSIGNED:
      *size = 4;
      return chorusUint32;
    case MPI_LONG:
    case MPI_LONG_LONG:
    case MPI_INT64_T:
      *size = 8;
      return chorusInt64;
    case MPI_UNSIGNED_LONG:
    case MPI_UINT64_T:
      *size = 8;
      return chorusUint64;
    case MPI_FLOAT:
      *size = 4;
      return chorusFloat32;
    case MPI_DOUBLE:
      *size = 8;
      return chorusFloat64;
    default:
      std::fprintf(stderr, "mpi shim: datatype %d is not one the shim knows\n", t);
      _exit(1);
  }
}

chorusRedOp_t opOf(MPI_Op op) {
  switch (op) {
    case MPI_SUM:
      return chorusSum;
    case MPI_PROD:
      return chorusProd;
    case MPI_MAX:
      return chorusMax;
    case MPI_MIN:
      return chorusMin;
    default:
      std::fprintf(stderr, "mpi shim: operator %d is not one the shim knows\n", op);
      _exit(1);
  }
}

int rankIn(chorusComm_t c) {
  int r = 0;
  check(chorusCommUserRank(c, &r), "MPI_Comm_rank", c);
  return r;
}

}  // namespace

extern "C" {

int MPI_Init(int*, char***) {
  chorusComm_t world = nullptr;
  check(chorusCommInitFromEnv(&world, nullptr), "MPI_Init (chorusCommInitFromEnv)", nullptr);
  unsetenv("CHORUS_COMM_ID");
  std::lock_guard<std::mutex> g(mu);
  comms.assign(1, world);
  return MPI_SUCCESS;
}

int MPI_Initialized(int* flag) {
  std::lock_guard<std::mutex> g(mu);
  *flag = comms.empty() ? 0 : 1;
  return MPI_SUCCESS;
}

int MPI_Finalize(void) {
  std::lock_guard<std::mutex> g(mu);
  for (chorusComm_t& c : comms) {
    if (c) chorusCommDestroy(c);
    c = nullptr;
  }
  return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm, int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code ? code : 1);
}

int MPI_Comm_rank(MPI_Comm comm, int* rank) {
  *rank = rankIn(commOf(comm, "MPI_Comm_rank"));
  return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int* size) {
  chorusComm_t c = commOf(comm, "MPI_Comm_size");
  check(chorusCommCount(c, size), "MPI_Comm_size", c);
  return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  chorusComm_t c = commOf(comm, "MPI_Comm_split");
  chorusComm_t child = nullptr;
  check(chorusCommSplit(c, color == MPI_UNDEFINED ? CHORUS_SPLIT_NOCOLOR : color, key, &child, nullptr),
        "MPI_Comm_split", c);
  if (!child) {
    *newcomm = MPI_COMM_NULL;
    return MPI_SUCCESS;
  }
  std::lock_guard<std::mutex> g(mu);
  comms.push_back(child);
  *newcomm = static_cast<MPI_Comm>(comms.size() - 1);
  return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm* comm) {
  if (*comm == MPI_COMM_NULL) return MPI_SUCCESS;
  chorusComm_t c = commOf(*comm, "MPI_Comm_free");
  check(chorusCommDestroy(c), "MPI_Comm_free", nullptr);
  std::lock_guard<std::mutex> g(mu);
  comms[*comm] = nullptr;
  *comm = MPI_COMM_NULL;
  return MPI_SUCCESS;
}

int MPI_Barrier(MPI_Comm comm) {
  chorusComm_t c = commOf(comm, "MPI_Barrier");
  int32_t token = 0;
  check(chorusAllReduce(&token, &token, 1, chorusInt32, chorusSum, c, nullptr), "MPI_Barrier", c);
  return MPI_SUCCESS;
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  chorusComm_t c = commOf(comm, "MPI_Bcast");
  size_t size = 0;
  const chorusDataType_t t = typeOf(type, &size);
  check(chorusBcast(buffer, static_cast<size_t>(count), t, root, c, nullptr), "MPI_Bcast", c);
  return MPI_SUCCESS;
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  chorusComm_t c = commOf(comm, "MPI_Allreduce");
  size_t size = 0;
  const chorusDataType_t t = typeOf(type, &size);
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  check(chorusAllReduce(in, recvbuf, static_cast<size_t>(count), t, opOf(op), c, nullptr), "MPI_Allreduce", c);
  return MPI_SUCCESS;
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  chorusComm_t c = commOf(comm, "MPI_Allgather");
  size_t size = 0;
  const chorusDataType_t t = typeOf(recvtype, &size);
  const size_t n = static_cast<size_t>(recvcount);
  // In place: this rank's block of recvbuf is its contribution.
  const void* in =
      sendbuf == MPI_IN_PLACE ? static_cast<char*>(recvbuf) + static_cast<size_t>(rankIn(c)) * n * size : sendbuf;
  (void)sendcount;
  (void)sendtype;
  check(chorusAllGather(in, recvbuf, n, t, c, nullptr), "MPI_Allgather", c);
  return MPI_SUCCESS;
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  chorusComm_t c = commOf(comm, "MPI_Gather");
  size_t size = 0;
  const chorusDataType_t t = typeOf(sendtype, &size);
  (void)recvcount;
  (void)recvtype;
  check(chorusGather(sendbuf, recvbuf, static_cast<size_t>(sendcount), t, root, c, nullptr), "MPI_Gather", c);
  return MPI_SUCCESS;
}

double MPI_Wtime(void) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // extern "C"
