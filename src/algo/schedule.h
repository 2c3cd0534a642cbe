// Schedules: what each rank does, step by step, for each collective. Pure functions.
//
// A schedule is a list of Steps for one rank on one channel. Each step names a primitive (the
// vocabulary of NCCL's device code: send, recv, recvReduceSend, recvReduceCopySend, recvCopySend,
// recvReduceCopy, copySend) and the elements it covers. The executor (src/core/lane.h) moves a
// step's elements through the FIFO in slot-sized pieces; sender and receiver cut the same step
// into the same pieces because both compute it from the same arguments.
//
// Ring collectives walk the data in loops: each loop handles at most `loopChunk` elements per
// rank block, so a step never sends more than the FIFO holds while its receiver is still sending
// (the first step of every rank is a send), which is what keeps the ring from deadlocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/hd.h"

namespace chorus {

enum class Prim : uint8_t {
  kSend,                // slot = pre(input)
  kRecv,                // output = slot
  kCopySend,            // output = input (unless the same place); slot = input
  kRecvReduceSend,      // slot' = slot OP pre(input)
  kRecvReduceCopySend,  // output = post(slot OP pre(input)); slot' = output
  kRecvCopySend,        // output = slot; slot' = slot
  kRecvReduceCopy,      // output = post(slot OP pre(input))
  kLocal,               // output = pre(input), no peer (a single rank)
};
const char* primName(Prim p);

CHORUS_HD bool primReceives(Prim p) {
  return p == Prim::kRecv || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend || p == Prim::kRecvCopySend ||
         p == Prim::kRecvReduceCopy;
}
CHORUS_HD bool primSends(Prim p) {
  return p == Prim::kSend || p == Prim::kCopySend || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend ||
         p == Prim::kRecvCopySend;
}

struct Step {
  Prim prim;
  size_t inOff;   // element offset into the input buffer
  size_t outOff;  // element offset into the output buffer
  size_t count;   // elements
};

struct Block {
  size_t offset;
  size_t count;
};

// Part `index` of `count` elements cut into `parts` nearly equal contiguous parts (the first
// count % parts parts are one element longer).
Block partition(size_t count, int parts, int index);

// Elements per rank block per loop: half the FIFO, so two loops' worth can be in flight.
size_t ringLoopChunk(size_t slotBytes, int slots, size_t elemSize);

// `pos` is this rank's position on the ring of n ranks; the ring sends to position pos+1.
// All-reduce over `count` elements: reduce-scatter then all-gather, in place in the output.
std::vector<Step> ringAllReduce(int n, int pos, size_t count, size_t loopChunk);
// Reduce-scatter of the elements [base, base+count) of each rank block (blocks are `stride`
// elements apart in the input); ring position p ends with block `blockOf[p]` in its output.
std::vector<Step> ringReduceScatter(int n, int pos, const std::vector<int>& blockOf, size_t stride, size_t base,
                                    size_t count, size_t loopChunk);
// All-gather of input elements [base, base+count) into each rank block of the output (blocks
// `stride` apart); position p's input lands in block `blockOf[p]`.
std::vector<Step> ringAllGather(int n, int pos, const std::vector<int>& blockOf, size_t stride, size_t base,
                                size_t count, size_t loopChunk);
// Broadcast down the chain rootPos -> rootPos+1 -> ... ; count elements.
std::vector<Step> chainBroadcast(int n, int pos, int rootPos, size_t count, size_t loopChunk);
// Reduce up the chain rootPos+1 -> ... -> rootPos.
std::vector<Step> chainReduce(int n, int pos, int rootPos, size_t count, size_t loopChunk);

}  // namespace chorus
