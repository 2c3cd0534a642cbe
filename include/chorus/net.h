/*
 * Chorus's network ABI: what a network that moves tagged messages between registered buffers of two
 * hosts provides to Chorus, as a versioned C struct of function pointers (chorusNet_v1_t). The
 * semantics are those of NCCL's ncclNet interface (its current versions: a context made by init and
 * ended by finalize, devices and their properties, non-blocking listen/connect/accept over a handle
 * exchanged out of band, memory registration, grouped tagged receives, sends, tests, flushes of
 * received device memory, close calls), so a network written for one is easily written for the
 * other.
 *
 * Chorus's own socket network implements it (the built-in "Socket" network). A plugin is a shared
 * library exporting `const chorusNet_v1_t chorusNetPlugin_v1` (a newer library may export newer
 * versions beside it; Chorus takes the newest it knows), loaded from CHORUS_NET_PLUGIN.
 *
 * Rules every implementation follows:
 *   - No call blocks. connect and accept return chorusSuccess with *comm NULL until the connection
 *     is made, and are called again; isend and irecv may return chorusSuccess with *request NULL
 *     when they cannot take the request now (too many in flight), and are called again.
 *   - A send comm carries messages one way to one receive comm. Messages are matched to receives in
 *     the order both sides issue them; a grouped receive (n > 1, at most maxRecvs) takes the next n
 *     messages, each into the receive whose tag it carries.
 *   - A message may be shorter than its receive (test reports the size that arrived), never longer:
 *     a longer one is an error of both requests.
 *   - Requests may progress only inside test (a send need not leave before it is tested): the caller
 *     tests every request it has issued, sends included.
 *   - test is called until *done; a request is then gone. An error of a request is an error of its
 *     comm: every later call on it fails.
 *   - Buffers passed to isend and irecv lie inside memory registered on that comm (regMr) and stay
 *     untouched until the request is done.
 *   - Errors are chorusResult_t values; the logger (may be NULL) hears why.
 *   - Members after closeListen are optional: NULL means the network does without them.
 */
#ifndef CHORUS_NET_H_
#define CHORUS_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The most bytes of a handle (listen writes it, connect reads it; Chorus carries it between the
 *  two ranks). NCCL's NCCL_NET_HANDLE_MAXSIZE. */
#define CHORUS_NET_HANDLE_MAXSIZE 128
/** The most requests one comm may have in flight. */
#define CHORUS_NET_MAX_REQUESTS 32

/** Kinds of memory (chorusNetProperties_v1_t.ptrSupport, regMr's type), NCCL's values. */
#define CHORUS_NET_PTR_HOST 0x1
#define CHORUS_NET_PTR_CUDA 0x2
#define CHORUS_NET_PTR_DMABUF 0x4

/** Log levels of the logger, NCCL's ncclDebugLogLevel values. */
typedef enum CHORUS_ENUM_INT {
  chorusNetLogNone = 0,
  chorusNetLogVersion = 1,
  chorusNetLogWarn = 2,
  chorusNetLogInfo = 3,
  chorusNetLogAbort = 4,
  chorusNetLogTrace = 5
} chorusNetLogLevel_t;

/** How a network tells Chorus's log something (NCCL's ncclDebugLogger_t shape; `flags` are
 *  NCCL's subsystem bits, NCCL_NET = 0x10). */
typedef void (*chorusNetLogger_t)(chorusNetLogLevel_t level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

/** What init is told about the communicator it serves. */
typedef struct {
  /** A traffic class for the network's packets, or -1 for its default. */
  int trafficClass;
} chorusNetCommConfig_v1_t;

/** A network device (one NIC port, or one interface). */
typedef struct {
  char* name;          /**< for logs (an interface name) */
  char* pciPath;       /**< the device in /sys, or NULL */
  uint64_t guid;       /**< the NIC chip (several functions of one chip share it) */
  int ptrSupport;      /**< CHORUS_NET_PTR_* bits: memory it can move without staging */
  int regIsGlobal;     /**< 1: a registration is good on every comm of the device */
  int forceFlush;      /**< 1: received device memory always needs iflush */
  int speed;           /**< port speed, Mbps */
  int port;            /**< port number */
  float latency;       /**< microseconds (0: unknown) */
  int maxComms;        /**< comms it can hold */
  int maxRecvs;        /**< the most receives of one grouped irecv */
  size_t maxP2pBytes;  /**< the largest message */
  size_t maxCollBytes; /**< the same, for collectives */
} chorusNetProperties_v1_t;

typedef struct {
  /** The network's name, for logs ("Socket", "OFI"). */
  const char* name;
  /** Makes a context for one communicator (`commId` tells communicators apart in logs). */
  chorusResult_t (*init)(void** ctx, uint64_t commId, const chorusNetCommConfig_v1_t* config, chorusNetLogger_t logger);
  /** Ends a context; every comm made under it is closed first. */
  chorusResult_t (*finalize)(void* ctx);
  /** How many devices. */
  chorusResult_t (*devices)(int* ndev);
  chorusResult_t (*getProperties)(int dev, chorusNetProperties_v1_t* props);
  /** Makes a listening endpoint on `dev` and writes the handle (at most CHORUS_NET_HANDLE_MAXSIZE
   *  bytes) a peer connects to. */
  chorusResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  /** Connects to a peer's handle, without blocking: *sendComm stays NULL until it is made. The
   *  caller passes the same handle buffer to every call of one connection: the network may keep
   *  the connection's progress in it (as NCCL's do). */
  chorusResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm);
  /** Takes the next connection of a listening endpoint, without blocking: *recvComm stays NULL
   *  until one is made. */
  chorusResult_t (*accept)(void* listenComm, void** recvComm);
  /** Registers [data, data + size) of memory `type` on a send or receive comm. */
  chorusResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  /** The same for device memory exported as a dma-buf (`fd`, at `offset`); NULL when unsupported. */
  chorusResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  chorusResult_t (*deregMr)(void* comm, void* mhandle);
  /** Sends `size` bytes at `data` tagged `tag`. */
  chorusResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  /** Receives the next n messages into data[i] (at most sizes[i] bytes) by their tags. */
  chorusResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                          void** request);
  /** Makes received device memory visible to the GPU; *request NULL: nothing to do. */
  chorusResult_t (*iflush)(void* recvComm, int n, void** data, size_t* sizes, void** mhandles, void** request);
  /** Whether a request is done; then, when sizes is not NULL, the bytes each of its messages
   *  carried (n of them for a grouped receive, one for a send). */
  chorusResult_t (*test)(void* request, int* done, size_t* sizes);
  chorusResult_t (*closeSend)(void* sendComm);
  chorusResult_t (*closeRecv)(void* recvComm);
  chorusResult_t (*closeListen)(void* listenComm);
  /** Optional (NULL: the network has none). A file descriptor, and the poll() events on it, that
   *  become ready when calling test on the send or receive comm's requests may move something
   *  (the descriptor also reports the connection's end), so a caller with nothing else to do can
   *  sleep in poll() instead of calling test in a loop. *fd -1: none now; *events 0: nothing is
   *  waiting on the comm. Without it Chorus polls the comm's requests, backing off to short sleeps. */
  chorusResult_t (*waitFd)(void* comm, int* fd, short* events);
} chorusNet_v1_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CHORUS_NET_H_ */
