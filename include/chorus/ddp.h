/*
 * Chorus DDP: gradient bucketing for data-parallel training, on top of the Chorus C API.
 *
 * The shape follows PyTorch DDP's Reducer. A reducer is made over a communicator with the list of
 * parameters (element count and type) in definition order. It owns the gradient storage: buckets of
 * parameters of one type, each one flat buffer; chorusDdpGradient says where the framework writes a
 * parameter's gradient. As each gradient is produced the framework calls chorusDdpMarkReady (from
 * any thread); when every gradient of a bucket is ready, the bucket's all-reduce starts on the
 * reducer's own stream, strictly in bucket order, so every rank issues the same sequence of
 * collectives and communication overlaps the rest of the backward pass. chorusDdpFinalize waits
 * for the buckets and leaves the averaged gradients in place (the average is the all-reduce's own
 * chorusAvg, not an extra pass).
 *
 * One training step:
 *
 *   chorusDdpPrepareForBackward(r, &rebuilt);   (forward; re-read chorusDdpGradient if rebuilt)
 *   backward: for each gradient produced, write it at chorusDdpGradient(r, i) and
 *             chorusDdpMarkReady(r, i)
 *   chorusDdpFinalize(r);                        (averaged gradients are now in place)
 *   optimizer step; chorusDdpZeroGrad(r) when gradients are not overwritten
 *
 * The first synchronised iteration uses PyTorch's bucket assignment (reverse definition order,
 * a small first bucket). Once it has finished, the next chorusDdpPrepareForBackward rebuilds the
 * buckets in the order rank 0's gradients became ready, broadcast from rank 0 so every rank agrees.
 *
 * Gradient storage is host memory, or device memory on the communicator's GPU
 * (chorusDdpConfig_t.gradientMemory). Where a GPU program produces the gradients, it marks them
 * with chorusDdpMarkReadyOn and the CUDA stream whose kernels write them: the bucket's all-reduce
 * waits for that work on the device, never on the host, and runs on the reducer's own CUDA stream;
 * chorusDdpFinalizeOn then makes the caller's stream wait for the buckets, so the optimizer's
 * kernels follow without a host synchronisation:
 *
 *   chorusDdpPrepareForBackward(r, &rebuilt);
 *   backward kernels on CUDA stream s (wrapped: chorusStreamFromCuda(s, &cs)); after the kernel
 *             that writes gradient i is enqueued: chorusDdpMarkReadyOn(r, i, cs)
 *   chorusDdpFinalizeOn(r, cs);                  (returns at once; s waits for the buckets)
 *   optimizer kernels on s
 *
 * The same two calls take host streams (chorusStreamCreate) for host gradients produced by work
 * enqueued there.
 *
 * Every function is collective over the communicator where it says so; those must be called by
 * every rank in the same order.
 *
 * Functions return chorusResult_t; chorusGetLastError(NULL) gives the reason on failure.
 */
#ifndef CHORUS_DDP_H_
#define CHORUS_DDP_H_

#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque reducer handle. */
typedef struct chorusDdpReducer* chorusDdpReducer_t;

/** One parameter, as created by the framework. */
typedef struct {
  size_t count;          /**< elements of the parameter (and of its gradient) */
  chorusDataType_t type; /**< element type of the gradient */
  const char* name;      /**< optional (NULL): used in error messages; copied */
} chorusDdpParam_t;

/** Built-in communication hooks: what a bucket becomes on the wire. */
typedef enum CHORUS_ENUM_INT {
  /** The bucket is all-reduced in its own type with chorusAvg. */
  chorusDdpHookAllReduce = 0,
  /** fp32 and fp64 buckets are converted to fp16, all-reduced with chorusAvg, and converted back
   *  (PyTorch's fp16_compress_hook). Buckets of other types go as they are. */
  chorusDdpHookFp16 = 1,
  /** As chorusDdpHookFp16 with bf16 (PyTorch's bf16_compress_hook). */
  chorusDdpHookBf16 = 2
} chorusDdpHook_t;

/** Where a reducer keeps its gradients (chorusDdpConfig_t.gradientMemory). */
typedef enum CHORUS_ENUM_INT {
  /** Host memory (chorusMemAlloc). */
  chorusDdpMemoryHost = 0,
  /** Device memory on the communicator's CUDA device (chorusCommCuDevice), as chorusCudaMemAlloc
   *  allocates it. Needs a build of Chorus with CUDA and a communicator with a device. */
  chorusDdpMemoryDevice = 1
} chorusDdpMemory_t;

#define CHORUS_DDP_UNDEF_SIZE SIZE_MAX
#define CHORUS_DDP_UNDEF_INT INT_MIN
#define CHORUS_DDP_CONFIG_MAGIC 0xddbcfa11u

/** Reducer options. Initialise with CHORUS_DDP_CONFIG_INITIALIZER and set what differs; the
 *  options must be equal on every rank (chorusDdpReducerCreate checks). */
typedef struct chorusDdpConfig_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  /** A bucket closes once it holds at least this many bytes. Default 25 MiB. 0 gives every
   *  parameter a bucket of its own. */
  size_t bucketCapBytes;
  /** The same limit for the first bucket of each type (the one reduced last in the first
   *  iteration). Default 1 MiB. */
  size_t firstBucketCapBytes;
  /** 1: parameters may take no part in an iteration. chorusDdpFinalize counts every parameter not
   *  marked ready as unused (its contribution is zero), and a map of used parameters is
   *  all-reduced once per iteration (chorusDdpParamUsed). Buckets are then not rebuilt unless
   *  staticGraph is set. Default 0. */
  int findUnusedParameters;
  /** 1: the set of parameters used is the same in every iteration. The used map is all-reduced
   *  in the first synchronised iteration only; afterwards parameters unused then are marked
   *  ready (with zeros) as the iteration starts. Default 0. */
  int staticGraph;
  /** 1: ranks may run out of data at different times (chorusDdpJoin). Each
   *  chorusDdpPrepareForBackward then also all-reduces two integers so that ranks inside
   *  chorusDdpJoin know what to match. Default 0. */
  int unevenInputs;
  /** A built-in hook (chorusDdpHook_t); chorusDdpRegisterCommHook replaces it. Default
   *  chorusDdpHookAllReduce. */
  int hook;
  /** chorusDdpBroadcastParameters packs parameters into chunks of at most this many bytes.
   *  Default 250 MiB. */
  size_t broadcastChunkBytes;
  /** Where the gradients live (chorusDdpMemory_t). Default: device memory when the communicator
   *  has a CUDA device (chorusCommCuDevice is not -1 when the reducer is made), else host memory.
   *  A field added after version 1 of this struct: a config of the older size (without it) is
   *  still taken, with the default. */
  int gradientMemory;
} chorusDdpConfig_t;

#define CHORUS_DDP_CONFIG_INITIALIZER                                                                             \
  {                                                                                                               \
    sizeof(chorusDdpConfig_t), CHORUS_DDP_CONFIG_MAGIC, CHORUS_VERSION(CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH), \
        CHORUS_DDP_UNDEF_SIZE, CHORUS_DDP_UNDEF_SIZE, CHORUS_DDP_UNDEF_INT, CHORUS_DDP_UNDEF_INT,                 \
        CHORUS_DDP_UNDEF_INT, CHORUS_DDP_UNDEF_INT, CHORUS_DDP_UNDEF_SIZE, CHORUS_DDP_UNDEF_INT                   \
  }

/** A bucket as a communication hook sees it. */
typedef struct {
  int index;             /**< position in the bucket order, 0 first */
  int nbuckets;          /**< buckets in this layout */
  void* data;            /**< the flat bucket: its parameters' gradients back to back */
  size_t count;          /**< elements in data */
  chorusDataType_t type; /**< their type */
  int nparams;           /**< parameters in the bucket */
  const int* params;     /**< their indices, in the order they lie in data */
  const size_t* offsets; /**< each one's first element in data */
} chorusDdpBucket_t;

/**
 * A user communication hook. Called once per bucket, in bucket order, on the thread whose
 * chorusDdpMarkReady (or chorusDdpFinalize, or chorusDdpJoin) completed the bucket. It enqueues on
 * `stream` the work that leaves the bucket's reduced result in bucket->data, typically collectives
 * on `comm` and host functions (chorusLaunchHostFunc), and returns without waiting for it: the
 * reducer waits in chorusDdpFinalize. The result replaces the gradients as it is: a hook that sums
 * divides by itself. It must not call chorusDdp* functions on the same reducer. On a rank inside
 * chorusDdpJoin it is called on zero buckets so that its collectives match the other ranks'.
 */
typedef chorusResult_t (*chorusDdpCommHook_t)(void* state, const chorusDdpBucket_t* bucket, chorusComm_t comm,
                                              chorusStream_t stream);

/** Statistics of a reducer. Times are seconds. */
typedef struct {
  int nbuckets;              /**< buckets in the current layout */
  int rebuilt;               /**< 1 once the buckets follow the order gradients became ready */
  int64_t iterations;        /**< finalized iterations, with or without synchronisation */
  int64_t syncedIterations;  /**< those that communicated */
  size_t largestBucketBytes; /**< of the current layout */
  /** Of the last synchronised iteration: time the reducer's stream spent on the buckets. */
  double lastCommSeconds;
  /** Of it, the time chorusDdpFinalize waited: communication the backward pass did not hide. */
  double lastExposedSeconds;
  /** 1 - exposed / comm, in [0, 1]; 0 before any synchronised iteration. */
  double lastHiddenFraction;
  double totalCommSeconds;    /**< over all synchronised iterations */
  double totalExposedSeconds; /**< over all synchronised iterations */
} chorusDdpStats_t;

/** Collective. Creates a reducer over comm for nparams parameters, in definition order. The
 *  parameter lists (counts and types) and the options are checked to be equal on every rank.
 *  config may be NULL (defaults). Gradient storage starts zeroed. */
chorusResult_t chorusDdpReducerCreate(chorusDdpReducer_t* reducer, chorusComm_t comm, const chorusDdpParam_t* params,
                                      int nparams, const chorusDdpConfig_t* config);
/** Waits for the reducer's work and frees it with its gradient storage. The communicator stays. */
chorusResult_t chorusDdpReducerDestroy(chorusDdpReducer_t reducer);

/** Where parameter `index`'s gradient lives (count elements of its type). Valid until a
 *  chorusDdpPrepareForBackward reports a rebuild; gradients are carried over to the new place. */
chorusResult_t chorusDdpGradient(chorusDdpReducer_t reducer, int index, void** grad);
/** Sets every gradient to zero. Not during an iteration. Device gradients are zeroed on the
 *  reducer's stream after the work of the last chorusDdpFinalizeOn's stream, and this waits for it. */
chorusResult_t chorusDdpZeroGrad(chorusDdpReducer_t reducer);

/** Synchronise gradients in the following iterations (1, the default) or only accumulate them
 *  locally (0, PyTorch's no_sync): with 0, chorusDdpMarkReady and chorusDdpFinalize communicate
 *  nothing and the framework keeps adding gradients into the same storage; the next synchronised
 *  iteration reduces what has accumulated. Must be equal on every rank. Not during an
 *  iteration. */
chorusResult_t chorusDdpSetSync(chorusDdpReducer_t reducer, int enabled);

/** Collective when synchronising. Starts an iteration (call it at the forward pass). Fails, naming
 *  them, when the previous iteration marked some gradients ready but was never finalized. May
 *  rebuild the buckets: *rebuilt (may be NULL) is then 1 and gradient addresses have changed. */
chorusResult_t chorusDdpPrepareForBackward(chorusDdpReducer_t reducer, int* rebuilt);
/** Parameter `index`'s gradient is written; it must not change until chorusDdpFinalize. Thread
 *  safe. The bucket that becomes complete, and every complete bucket after it in order, starts
 *  its all-reduce. */
chorusResult_t chorusDdpMarkReady(chorusDdpReducer_t reducer, int index);
/** As chorusDdpMarkReady for a gradient that work enqueued on `producer` writes: the bucket's
 *  all-reduce waits for what `producer` had enqueued when this was called, on the device (device
 *  gradients: a CUDA stream wrapped by chorusStreamFromCuda) or on the reducer's host stream (host
 *  gradients: a host stream), and this returns without waiting. NULL: the gradient is already
 *  written (chorusDdpMarkReady). A stream of the other kind is an error that says which to pass. */
chorusResult_t chorusDdpMarkReadyOn(chorusDdpReducer_t reducer, int index, chorusStream_t producer);
/** Parameter `index` takes no part in this iteration on this rank: it counts as ready and
 *  contributes zeros. Needs findUnusedParameters or staticGraph. Thread safe. */
chorusResult_t chorusDdpMarkUnused(chorusDdpReducer_t reducer, int index);
/** Collective when synchronising. Ends the iteration: with findUnusedParameters, parameters not
 *  marked are unused; all buckets are reduced and waited for, and the averaged gradients are in
 *  place. Without findUnusedParameters, a parameter never marked ready is an error that names
 *  it. */
chorusResult_t chorusDdpFinalize(chorusDdpReducer_t reducer);

/** As chorusDdpFinalize, but returns once every bucket is enqueued: work enqueued on `stream`
 *  after this call waits for the buckets (on the device for device gradients, a CUDA stream
 *  wrapped by chorusStreamFromCuda; a host stream for host gradients). The used map of
 *  findUnusedParameters is host memory and is still waited for here. An error of the reduction
 *  itself shows at the next call that waits (chorusDdpPrepareForBackward's rebuild, chorusDdpZeroGrad,
 *  chorusDdpReducerDestroy, chorusStreamSynchronize(stream)). The framework's streams that write
 *  gradients next must be ordered after `stream` (in PyTorch, one stream does both). NULL is
 *  chorusDdpFinalize. Collective when synchronising. */
chorusResult_t chorusDdpFinalizeOn(chorusDdpReducer_t reducer, chorusStream_t stream);

/** After a synchronised chorusDdpFinalize with findUnusedParameters or staticGraph: whether any
 *  rank used parameter `index` in that iteration (1) or none did (0; its gradient holds zeros and
 *  an optimizer should skip it). Always 1 without those options. */
chorusResult_t chorusDdpParamUsed(chorusDdpReducer_t reducer, int index, int* used);

/** Collective. Copies every parameter from rank `root` to all ranks, packed into chunks of at most
 *  broadcastChunkBytes (a larger parameter goes in place, alone). params[i] points at parameter
 *  i's values (count elements of its type), in the gradients' kind of memory (device memory on the
 *  reducer's GPU for device gradients). Not during an iteration. */
chorusResult_t chorusDdpBroadcastParameters(chorusDdpReducer_t reducer, void* const* params, int root);

/** Replaces the bucket all-reduce by fn (state is passed back). Not during an iteration; must be
 *  done alike on every rank. fn NULL restores the configured built-in hook. */
chorusResult_t chorusDdpRegisterCommHook(chorusDdpReducer_t reducer, chorusDdpCommHook_t fn, void* state);

/** Collective; needs unevenInputs. Called by a rank that has run out of data, between iterations:
 *  it matches the other ranks' collectives (zero gradients) until every rank has called it, then
 *  returns. Its gradient storage is used for that. When params is not NULL (on every rank alike),
 *  the parameters of the last rank to join are then broadcast to all, so every rank leaves with
 *  the same model. */
chorusResult_t chorusDdpJoin(chorusDdpReducer_t reducer, void* const* params);

/** Statistics, see chorusDdpStats_t. */
chorusResult_t chorusDdpGetStats(chorusDdpReducer_t reducer, chorusDdpStats_t* stats);
/** Bucket `index` of the current layout (data, count, type, parameters); valid until a rebuild. */
chorusResult_t chorusDdpGetBucket(chorusDdpReducer_t reducer, int index, chorusDdpBucket_t* bucket);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CHORUS_DDP_H_ */
