/*
 * Chorus with CUDA: CUDA streams as chorusStream_t, and device memory that peers can map.
 *
 * Every collective and point-to-point call of chorus.h takes device buffers as well as host
 * buffers; Chorus asks the CUDA driver what each buffer is. Both buffers of one call are of one
 * kind, and device buffers are on the communicator's device (chorusConfig_t.cudaDevice,
 * chorusCommCuDevice); anything else is chorusInvalidArgument with a sentence naming the
 * argument. Operations on device buffers run as one CUDA kernel per call (per group, inside
 * chorusGroupStart/End):
 *   - on a chorusStream_t made by chorusStreamFromCuda, the call returns once the kernel is
 *     enqueued on that CUDA stream, ordered with the caller's own work on it, as in NCCL, and may
 *     be captured into a CUDA graph;
 *   - on the NULL stream (synchronous), it returns when the operation is complete;
 *   - on a host stream (chorusStreamCreate), it runs in that stream's order.
 *
 * Declared with the CUDA runtime's own stream type (cudaStream_t is `struct CUstream_st*`), so
 * this header needs no CUDA header. In a build of Chorus without CUDA these functions fail with
 * chorusInvalidUsage, saying so.
 */
#ifndef CHORUS_CHORUS_CUDA_H_
#define CHORUS_CHORUS_CUDA_H_

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/** Wraps the CUDA stream `cudaStream` (a cudaStream_t; NULL is the legacy default stream) as
 *  *stream. chorusStreamSynchronize and chorusStreamQuery then ask the CUDA stream;
 *  chorusStreamDestroy releases the wrapper and leaves the CUDA stream to its owner, who keeps it
 *  alive while the wrapper is used. Only device buffers go on it. */
chorusResult_t chorusStreamFromCuda(struct CUstream_st* cudaStream, chorusStream_t* stream);
/** The CUDA stream a wrapper stands for; chorusInvalidArgument for a host stream or NULL. */
chorusResult_t chorusStreamGetCuda(chorusStream_t stream, struct CUstream_st** cudaStream);

/** Allocates `size` bytes of device memory on the current CUDA device that peers in other
 *  processes can map: cuMem with a POSIX file descriptor handle where the driver supports it,
 *  cudaMalloc otherwise. */
chorusResult_t chorusCudaMemAlloc(void** ptr, size_t size);
/** Frees memory of chorusCudaMemAlloc (after synchronising its device). */
chorusResult_t chorusCudaMemFree(void* ptr);
/** Where ptr points: *device is the CUDA device of device (or managed) memory, -1 for host memory
 *  (and for every pointer in a program that has not loaded CUDA, or a build without CUDA). This is
 *  how Chorus itself tells a call's buffers apart. */
chorusResult_t chorusPointerGetDevice(const void* ptr, int* device);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_CHORUS_CUDA_H_ */
