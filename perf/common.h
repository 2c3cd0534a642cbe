// The shared harness of the perf tools, after nccl-tests: the same flags, the same table, the
// same bus-bandwidth factors, so numbers compare directly.
#pragma once

#include <cstddef>

#include "include/chorus/chorus.h"

namespace chorus::perf {

// How a collective's in-place form places its buffers (as nccl-tests does).
enum class InPlace {
  kSame,             // sendbuff == recvbuff
  kSendInRecvBlock,  // sendbuff == recvbuff + rank * per-rank count (all-gather, gather at root)
  kRecvInSendBlock,  // recvbuff == sendbuff + rank * per-rank count (reduce-scatter, scatter at root)
  kNone,             // no in-place form: the in-place columns are N/A
};

// One collective. `count` is the elements of the larger buffer of one rank (the whole output of
// all-gather, the whole input of reduce-scatter, ...); the table's count column is callCount,
// the count argument of the call, as nccl-tests prints it.
struct CollDesc {
  const char* name;
  bool reduces;
  bool rooted;
  InPlace inPlace;
  // Elements of each rank's buffers, and the count argument of the call, for `count`.
  size_t (*sendElems)(size_t count, int n);
  size_t (*recvElems)(size_t count, int n);
  size_t (*callCount)(size_t count, int n);
  // Rounds count down to what the collective can split evenly.
  size_t (*roundCount)(size_t count, int n);
  // nccl-tests' busbw = algbw * factor.
  double (*busFactor)(int n);
  chorusResult_t (*run)(const void* send, void* recv, size_t callCount, chorusDataType_t type, chorusRedOp_t op,
                        int root, chorusComm_t comm, chorusStream_t stream);
  // Which rank's input element (and whether a reduction over all ranks) lands at recv element i;
  // false when this rank's receive buffer holds no result there.
  bool (*source)(int rank, int n, int root, size_t count, size_t i, int* srcRank, size_t* srcElem, bool* reduced);
};

const CollDesc& allReduceDesc();
const CollDesc& allGatherDesc();
const CollDesc& broadcastDesc();
const CollDesc& reduceDesc();
const CollDesc& reduceScatterDesc();
const CollDesc& alltoAllDesc();
const CollDesc& sendRecvDesc();
const CollDesc& gatherDesc();
const CollDesc& scatterDesc();
const CollDesc& allGatherVDesc();
const CollDesc& reduceScatterVDesc();

// Parses the command line, runs the sweep on this process's ranks and prints the table.
int runPerf(const CollDesc& desc, int argc, char** argv);

}  // namespace chorus::perf
