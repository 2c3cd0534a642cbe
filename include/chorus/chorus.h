/*
 * Chorus: collective communication for host memory and CUDA devices.
 *
 * The API has the shape of NCCL 2.28 (same functions, argument order, enumerator values and
 * semantics) with the `chorus` prefix. It is plain C99 and needs no CUDA: streams are Chorus's
 * own host streams (`chorusStream_t`); CUDA interop lives in chorus_cuda.h.
 *
 * Every function returns a chorusResult_t. On failure, chorusGetLastError() gives a sentence that
 * says what was wrong and what to change.
 */
#ifndef CHORUS_CHORUS_H_
#define CHORUS_CHORUS_H_

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_MAJOR 0
#define CHORUS_MINOR 1
#define CHORUS_PATCH 0
#define CHORUS_SUFFIX ""
/** Same encoding as NCCL_VERSION for versions after 2.8: X*10000 + Y*100 + Z. */
#define CHORUS_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define CHORUS_VERSION_CODE CHORUS_VERSION(CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH)

/** Opaque communicator handle. */
typedef struct chorusComm* chorusComm_t;
#define CHORUS_COMM_NULL NULL

/** Opaque host stream: an in-order queue of operations executed in the background. NULL means
 *  synchronous (the call returns when the operation is complete; inside a group, at
 *  chorusGroupEnd). */
typedef struct chorusStream* chorusStream_t;
/** Opaque event recorded on a stream; marks completion of the work enqueued before it. */
typedef struct chorusEvent* chorusEvent_t;

/* In C++ the enums below have int as their fixed underlying type, so any int a caller passes is a
 * value of the type and the library can check it without undefined behaviour; in C an enum
 * already holds any int. The size is that of int either way. */
#ifdef __cplusplus
#define CHORUS_ENUM_INT : int
#else
#define CHORUS_ENUM_INT
#endif

#define CHORUS_UNIQUE_ID_BYTES 128
/** Identifies a clique of ranks: the bootstrap root's address and a random secret. */
typedef struct {
  char internal[CHORUS_UNIQUE_ID_BYTES];
} chorusUniqueId;

/** Result codes, numerically equal to ncclResult_t. */
typedef enum CHORUS_ENUM_INT {
  chorusSuccess = 0,
  chorusUnhandledCudaError = 1,
  chorusSystemError = 2,
  chorusInternalError = 3,
  chorusInvalidArgument = 4,
  chorusInvalidUsage = 5,
  chorusRemoteError = 6,
  chorusInProgress = 7,
  chorusNumResults = 8
} chorusResult_t;

#define CHORUS_CONFIG_UNDEF_INT INT_MIN
#define CHORUS_CONFIG_UNDEF_PTR NULL
#define CHORUS_SPLIT_NOCOLOR -1
#define CHORUS_UNDEF_FLOAT -1.0f

#define CHORUS_CTA_POLICY_DEFAULT 0x00
#define CHORUS_CTA_POLICY_EFFICIENCY 0x01
#define CHORUS_CTA_POLICY_ZERO 0x02

#define CHORUS_SHRINK_DEFAULT 0x00
#define CHORUS_SHRINK_ABORT 0x01

/**
 * Communicator configuration. The leading fields mirror ncclConfig_t (NCCL 2.28) field for field;
 * GPU-only fields are accepted and ignored on host. Chorus's own fields follow.
 */
typedef struct chorusConfig_v1 {
  /* attributes that users should never touch. */
  size_t size;
  unsigned int magic;
  unsigned int version;
  /* attributes of ncclConfig_t. */
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  /* Chorus's own attributes. */
  /** Seconds any wait of this communicator may last before it fails with an error that names the
   *  peer waited for; CHORUS_CONFIG_UNDEF_INT takes CHORUS_TIMEOUT (default 1800). */
  int timeoutSeconds;
  /** The CUDA device of the communicator's device buffers (chorus_cuda.h); CHORUS_CONFIG_UNDEF_INT
   *  takes the device current on the initialising thread when the program has loaded CUDA, else the
   *  device of the first device buffer passed. Ignored for host buffers. */
  int cudaDevice;
} chorusConfig_t;

#define CHORUS_CONFIG_MAGIC 0xcafebeef

#define CHORUS_CONFIG_INITIALIZER                                                                           \
  {                                                                                                         \
    sizeof(chorusConfig_t), CHORUS_CONFIG_MAGIC, CHORUS_VERSION(CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH),  \
        CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, \
        CHORUS_CONFIG_UNDEF_PTR, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_PTR, \
        CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, \
        CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT, CHORUS_CONFIG_UNDEF_INT  \
  }

/** Reduction operations. chorusSum..chorusAvg are numerically equal to ncclRedOp_t's; values from
 *  chorusNumOps up are custom operations made by chorusRedOpCreatePreMulSum. chorusBand, chorusBor
 *  and chorusBxor (bitwise and, or, exclusive or, as MPI_BAND, MPI_BOR, MPI_BXOR) are Chorus's own,
 *  for the integer types only; NCCL has no such operators (the NCCL drop-in refuses them), and their
 *  values lie far above the custom operators' so that NCCL's numbering stays as it is. */
typedef enum { chorusNumOps_dummy = 5 } chorusRedOp_dummy_t;
typedef enum {
  chorusSum = 0,
  chorusProd = 1,
  chorusMax = 2,
  chorusMin = 3,
  chorusAvg = 4,
  chorusNumOps = 5,
  chorusBand = 0x40000000,
  chorusBor = 0x40000001,
  chorusBxor = 0x40000002,
  chorusMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(chorusRedOp_dummy_t))
} chorusRedOp_t;

/** Element types, numerically equal to ncclDataType_t. */
typedef enum CHORUS_ENUM_INT {
  chorusInt8 = 0,
  chorusChar = 0,
  chorusUint8 = 1,
  chorusInt32 = 2,
  chorusInt = 2,
  chorusUint32 = 3,
  chorusInt64 = 4,
  chorusUint64 = 5,
  chorusFloat16 = 6,
  chorusHalf = 6,
  chorusFloat32 = 7,
  chorusFloat = 7,
  chorusFloat64 = 8,
  chorusDouble = 8,
  chorusBfloat16 = 9,
  chorusFloat8e4m3 = 10,
  chorusFloat8e5m2 = 11,
  chorusNumTypes = 12
} chorusDataType_t;

/** Where the scalar of a pre-multiplied sum lives. */
typedef enum CHORUS_ENUM_INT { chorusScalarDevice = 0, chorusScalarHostImmediate = 1 } chorusScalarResidence_t;

/** Host callback run in stream order by chorusLaunchHostFunc. */
typedef void (*chorusHostFn_t)(void* userData);

/* ---------------------------------------------------------------------------------------------- */
/* Library and communicators                                                                       */

/** Writes CHORUS_VERSION_CODE of the library (not of the header) to *version. */
chorusResult_t chorusGetVersion(int* version);
/** Makes a new id: starts the bootstrap root in this process (or, with CHORUS_COMM_ID=host:port,
 *  returns the id for that address, the same on every rank). */
chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId);
/** Creates this rank's communicator of a clique of nranks ranks. Collective over the clique. */
chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank);
/** As chorusCommInitRank with a configuration; with config->blocking == 0 it may return
 *  chorusInProgress, and completion is polled with chorusCommGetAsyncError. */
chorusResult_t chorusCommInitRankConfig(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank,
                                        chorusConfig_t* config);
/** As chorusCommInitRankConfig with nId ids (NCCL 2.28's ncclCommInitRankScalable), the same ids in
 *  the same order on every rank: NCCL spreads its bootstrap over them; Chorus's bootstrap uses the
 *  first (one root serves every rank) and checks the others are well formed. */
chorusResult_t chorusCommInitRankScalable(chorusComm_t* newcomm, int nranks, int myrank, int nId,
                                          chorusUniqueId* commIds, chorusConfig_t* config);
/** Creates ndev communicators of one clique whose ranks are threads of this process. devlist, when
 *  not NULL, is each rank's CUDA device (entries may repeat: several ranks may share a GPU); NULL
 *  leaves each rank's device to its first device buffer (chorus_cuda.h), and host buffers need
 *  none. */
chorusResult_t chorusCommInitAll(chorusComm_t* comms, int ndev, const int* devlist);
/** Initialises a communicator from a launcher's environment: chorusrun (CHORUS_RANK,
 *  CHORUS_NRANKS, CHORUS_COMM_ID), torchrun (RANK, WORLD_SIZE, MASTER_ADDR), Open MPI
 *  (OMPI_COMM_WORLD_RANK/SIZE with CHORUS_COMM_ID) or Slurm (SLURM_PROCID, SLURM_NTASKS,
 *  SLURM_STEP_NODELIST). With no launcher, a communicator of one rank (as MPI's singleton
 *  init). Says which variables are missing when a launcher's are incomplete. */
chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm, chorusConfig_t* config);
/** Flushes outstanding work; after it the communicator only accepts chorusCommDestroy. */
chorusResult_t chorusCommFinalize(chorusComm_t comm);
/** Frees the communicator's resources. */
chorusResult_t chorusCommDestroy(chorusComm_t comm);
/** Stops outstanding work on the communicator and frees it; never waits on a peer. */
chorusResult_t chorusCommAbort(chorusComm_t comm);
/** Splits comm into communicators of the ranks with equal color, ordered by key then old rank.
 *  color CHORUS_SPLIT_NOCOLOR yields *newcomm == NULL. Collective over comm. */
chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t* newcomm, chorusConfig_t* config);
/** chorusCommShrink flags, equal to NCCL's. */
#define CHORUS_SHRINK_DEFAULT 0x00 /* the parent has no operation in flight (they are waited for) */
#define CHORUS_SHRINK_ABORT 0x01   /* first stop the parent's operations in flight (they fail) */
/** A communicator of the parent's ranks but the excludeRanksCount ranks in excludeRanksList,
 *  renumbered in rank order (NCCL 2.28's ncclCommShrink). Called by every surviving rank with
 *  the same list, also after the parent failed because an excluded rank died: no root and no
 *  excluded rank is needed. A survivor whose list differs, or a survivor that cannot be reached,
 *  makes the call fail with a message naming the rank. Excluded ranks must not call it. */
chorusResult_t chorusCommShrink(chorusComm_t comm, int* excludeRanksList, int excludeRanksCount, chorusComm_t* newcomm,
                                chorusConfig_t* config, int shrinkFlags);
/** chorusCommRevoke flags, equal to NCCL's. */
#define CHORUS_REVOKE_DEFAULT 0x00
/** Stops every operation of comm in flight (each fails with chorusRemoteError) and refuses new
 *  ones; returns once none runs (NCCL 2.28's ncclCommRevoke). Local, not collective. Afterwards
 *  chorusCommShrink, chorusCommDestroy and chorusCommAbort work; chorusCommGetAsyncError reports
 *  chorusRemoteError saying the communicator was revoked. revokeFlags must be
 *  CHORUS_REVOKE_DEFAULT. */
chorusResult_t chorusCommRevoke(chorusComm_t comm, int revokeFlags);

/** A sentence for a result code. */
const char* chorusGetErrorString(chorusResult_t result);
/** The last error's message, on this thread (comm may be NULL). */
const char* chorusGetLastError(chorusComm_t comm);
/** Reads CHORUS_DEBUG_FILE again: every communicator's log goes where it says from now on
 *  (ncclResetDebugInit). CHORUS_DEBUG and CHORUS_DEBUG_SUBSYS are read at each communicator's
 *  init already. */
void chorusResetDebugInit(void);
/** chorusSuccess, chorusInProgress while a non-blocking call runs, or the error that stopped the
 *  communicator (a dead peer, a timeout, ...). */
chorusResult_t chorusCommGetAsyncError(chorusComm_t comm, chorusResult_t* asyncError);
/** Writes what the communicator is doing and its last operations (the flight recorder:
 *  CHORUS_FLIGHT_ENTRIES of them, with sequence numbers, sizes, algorithm, state and timings) to
 *  the file `path` (appended), or to stderr when path is NULL. Safe to call from any thread, also
 *  while another thread is blocked in a call on the communicator. A Chorus extension. */
chorusResult_t chorusCommDumpState(chorusComm_t comm, const char* path);
chorusResult_t chorusCommCount(const chorusComm_t comm, int* count);
/** The CUDA device of the communicator's device buffers (chorusConfig_t.cudaDevice); -1 while it
 *  has none (a host-only program, or a build without CUDA). */
chorusResult_t chorusCommCuDevice(const chorusComm_t comm, int* device);
chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank);

/** Allocates memory that Chorus can share with peers (memfd-backed on host). */
chorusResult_t chorusMemAlloc(void** ptr, size_t size);
chorusResult_t chorusMemFree(void* ptr);
/** Registers [buff, buff + size) with comm. Where a collective's buffer lies in a registered range
 *  of a chorusMemAlloc allocation, peers in other processes of the host may read it in place
 *  instead of receiving a copy. Local (not collective); other memory is accepted and gains
 *  nothing. Deregister before chorusMemFree, and before destroying comm. */
chorusResult_t chorusCommRegister(const chorusComm_t comm, void* buff, size_t size, void** handle);
chorusResult_t chorusCommDeregister(const chorusComm_t comm, void* handle);
/** A registered window (NCCL 2.28's ncclWindow_t). */
typedef struct chorusWindow* chorusWindow_t;
#define CHORUS_WIN_DEFAULT 0x00
#define CHORUS_WIN_COLL_SYMMETRIC 0x01
/** ncclCommWindowRegister's shape: registers [buff, buff + size) as chorusCommRegister does and
 *  returns it as a window. NCCL's call is collective and enables its symmetric kernels; Chorus's
 *  registers locally (every rank calls it, none waits), and winFlags (CHORUS_WIN_DEFAULT or
 *  CHORUS_WIN_COLL_SYMMETRIC) change nothing. */
chorusResult_t chorusCommWindowRegister(chorusComm_t comm, void* buff, size_t size, chorusWindow_t* win, int winFlags);
chorusResult_t chorusCommWindowDeregister(chorusComm_t comm, chorusWindow_t win);

/* ---------------------------------------------------------------------------------------------- */
/* Reduction operators                                                                             */

/** Creates an operator that multiplies each input by *scalar and sums. scalar is read at creation
 *  (chorusScalarHostImmediate) or at each use (chorusScalarDevice, a pointer that stays valid: for
 *  a call on device buffers, device memory the kernel reads when it runs, after the stream's
 *  earlier work; for host buffers, host memory read when the call is made). A call copies the
 *  operator when it is made: destroying it before the group ends changes nothing. */
chorusResult_t chorusRedOpCreatePreMulSum(chorusRedOp_t* op, void* scalar, chorusDataType_t datatype,
                                          chorusScalarResidence_t residence, chorusComm_t comm);
chorusResult_t chorusRedOpDestroy(chorusRedOp_t op, chorusComm_t comm);

/* ---------------------------------------------------------------------------------------------- */
/* Collectives. They return once enqueued on the stream (NULL stream: once complete). In-place when
 * sendbuff == recvbuff (for all-gather: sendbuff == recvbuff + rank * sendcount elements). */

chorusResult_t chorusReduce(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                            chorusRedOp_t op, int root, chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusBcast(void* buff, size_t count, chorusDataType_t datatype, int root, chorusComm_t comm,
                           chorusStream_t stream);
chorusResult_t chorusBroadcast(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                               chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusAllReduce(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                               chorusRedOp_t op, chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, chorusDataType_t datatype,
                                   chorusRedOp_t op, chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, chorusDataType_t datatype,
                               chorusComm_t comm, chorusStream_t stream);
/** All-gather with a count per rank (MPI_Allgatherv): rank r contributes recvcounts[r] elements
 *  (its sendcount; every rank passes the same recvcounts), which land in every rank's recvbuff at
 *  element displs[r] (this rank's displacements; NULL: the blocks packed in rank order). Blocks
 *  may be empty and must not overlap. In place when sendbuff == recvbuff + displs[rank]. */
chorusResult_t chorusAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                                const size_t* displs, chorusDataType_t datatype, chorusComm_t comm,
                                chorusStream_t stream);
/** Reduce-scatter with a count per rank (MPI_Reduce_scatter, with displacements): block r of
 *  every rank's sendbuff (sendcounts[r] elements at element displs[r]; NULL: packed in rank order;
 *  every rank passes the same sendcounts) is reduced with op into rank r's recvbuff, which holds
 *  recvcount = sendcounts[r] elements. In place when recvbuff == sendbuff + displs[rank]. */
chorusResult_t chorusReduceScatterV(const void* sendbuff, const size_t* sendcounts, const size_t* displs,
                                    void* recvbuff, size_t recvcount, chorusDataType_t datatype, chorusRedOp_t op,
                                    chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusAlltoAll(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype,
                              chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusGather(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                            chorusComm_t comm, chorusStream_t stream);
chorusResult_t chorusScatter(const void* sendbuff, void* recvbuff, size_t count, chorusDataType_t datatype, int root,
                             chorusComm_t comm, chorusStream_t stream);

/** Point to point: matching sends and receives between a pair complete in issue order; inside a
 *  group, any set of matching sends and receives completes, whatever their order. */
chorusResult_t chorusSend(const void* sendbuff, size_t count, chorusDataType_t datatype, int peer, chorusComm_t comm,
                          chorusStream_t stream);
chorusResult_t chorusRecv(void* recvbuff, size_t count, chorusDataType_t datatype, int peer, chorusComm_t comm,
                          chorusStream_t stream);
/** A receive from whichever rank's send to this rank comes first (MPI_ANY_SOURCE; PyTorch's recv
 *  without a source). Not in NCCL. The sender calls chorusSend as usual, with the same count and
 *  type. *source is the rank received from: set when the call returns on the NULL stream, else
 *  once the stream has run it (after chorusStreamSynchronize). Sends from one rank are received
 *  in the order they were sent. Not inside a group: the source is chosen when the receive runs. */
chorusResult_t chorusRecvAny(void* recvbuff, size_t count, chorusDataType_t datatype, int* source, chorusComm_t comm,
                             chorusStream_t stream);

/** Group calls nest; state is per thread. Nothing starts until the outermost chorusGroupEnd. */
chorusResult_t chorusGroupStart(void);
chorusResult_t chorusGroupEnd(void);
/** What chorusGroupSimulateEnd tells (ncclSimInfo_t's layout). */
typedef struct chorusSimInfo_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime; /* microseconds */
} chorusSimInfo_t;
#define CHORUS_SIM_INFO_MAGIC 0x74685283
#define CHORUS_SIM_INFO_INITIALIZER                                                                           \
  {                                                                                                           \
    sizeof(chorusSimInfo_t), CHORUS_SIM_INFO_MAGIC, CHORUS_VERSION(CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH), \
        CHORUS_UNDEF_FLOAT                                                                                    \
  }
/** Ends the outermost group as chorusGroupEnd would, but runs nothing: simInfo->estimatedTime is
 *  the tuner's estimate of the group's time in microseconds (each communicator's operations one
 *  after another, the slowest communicator's sum), and the operations are dropped. Inits in the
 *  group are refused. */
chorusResult_t chorusGroupSimulateEnd(chorusSimInfo_t* simInfo);

/* ---------------------------------------------------------------------------------------------- */
/* Host streams and events                                                                         */

chorusResult_t chorusStreamCreate(chorusStream_t* stream);
/** Waits until all work enqueued on the stream is complete; returns the first error it met. */
chorusResult_t chorusStreamSynchronize(chorusStream_t stream);
/** chorusSuccess when the stream is idle, chorusInProgress while work remains. */
chorusResult_t chorusStreamQuery(chorusStream_t stream);
/** Waits for the stream's work, then frees it. */
chorusResult_t chorusStreamDestroy(chorusStream_t stream);
/** Runs fn(userData) on a Chorus thread once the work enqueued before it completes. */
chorusResult_t chorusLaunchHostFunc(chorusStream_t stream, chorusHostFn_t fn, void* userData);

chorusResult_t chorusEventCreate(chorusEvent_t* event);
/** Captures the work enqueued on stream so far (NULL stream: already complete). */
chorusResult_t chorusEventRecord(chorusEvent_t event, chorusStream_t stream);
/** chorusSuccess when the captured work is complete (or nothing was recorded), chorusInProgress
 *  otherwise. */
chorusResult_t chorusEventQuery(chorusEvent_t event);
chorusResult_t chorusEventSynchronize(chorusEvent_t event);
/** Work enqueued on stream after this call waits for the event's captured work. */
chorusResult_t chorusStreamWaitEvent(chorusStream_t stream, chorusEvent_t event);
chorusResult_t chorusEventDestroy(chorusEvent_t event);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CHORUS_CHORUS_H_ */
