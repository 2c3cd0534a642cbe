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
  kLocalReduce,         // output = post(output OP pre(input)), no peer (own contribution onto a partial result)
  kRecvPairReduceCopy,  // output = post(slot' OP slot): slot' from Step::recvFirst, slot from recvFrom
  // Control slots (no data; the header's step is a code, kStepDesc and on):
  kSendDesc,    // offer this rank's input to the peer in place (a MemDesc) or say bytes will come
  kRecvDesc,    // the peer's offer: read its memory in place from now on, or take its bytes
  kSignal,      // a slot of no data whose header step is the code in Step::inOff
  kWaitSignal,  // the peer's slot with that code
};
const char* primName(Prim p);

CHORUS_HD bool primReceives(Prim p) {
  return p == Prim::kRecv || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend || p == Prim::kRecvCopySend ||
         p == Prim::kRecvReduceCopy || p == Prim::kRecvPairReduceCopy || p == Prim::kRecvDesc || p == Prim::kWaitSignal;
}
CHORUS_HD bool primSends(Prim p) {
  return p == Prim::kSend || p == Prim::kCopySend || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend ||
         p == Prim::kRecvCopySend || p == Prim::kSendDesc || p == Prim::kSignal;
}
CHORUS_HD bool primIsControl(Prim p) {
  return p == Prim::kSendDesc || p == Prim::kRecvDesc || p == Prim::kSignal || p == Prim::kWaitSignal;
}

// SlotHeader::step of a control slot; a data piece's is its step index, always below these.
constexpr uint32_t kStepDesc = 0x80000000u;   // a MemDesc: read this buffer in place
constexpr uint32_t kStepBytes = 0x80000001u;  // no MemDesc: the data comes as bytes
constexpr uint32_t kStepDone = 0x80000002u;   // done reading the receiver's memory
constexpr uint32_t kStepHello = 0x80000003u;  // the slice all-reduce greets its ring neighbours

// Step::flags.
enum StepFlag : uint16_t {
  kLocalIsOutput = 1,  // the local operand (a send's source, a reduction's own side) is the output
  kLocalNoPre = 2,     // the local operand is a partial result, already pre-multiplied
  kNoPost = 4,         // not the last contribution: a reduction into the output skips the post-op
  // recvReduceCopy folds the received contribution onto the partial result in the output:
  // output = post(output OP slot) (neither side gets the pre-op again).
  kFoldIntoOutput = 8,
  kLocalIsScratch = 16,  // the local operand is the lane's scratch (one slot), at inOff
  kOutIsScratch = 32,    // the step's output is the lane's scratch, at outOff
  // recvReduceCopy with this rank's input first: output = post(pre(input) OP slot).
  kOwnFirst = 64,
  // Peers that read memory in place (kSendDesc / kRecvDesc decide it per connector index at run
  // time; a lane using these keeps send index k and receive index k for the same peer). The
  // index is the step's connector: sendTo for a step that sends, recvFrom for one that receives.
  kUnlessExposed = 128,  // skipped when this rank let that peer read its memory
  kUnlessReads = 256,    // skipped when this rank reads that peer's memory
  kIfExposed = 512,      // runs only when this rank let that peer read its memory
  kIfReads = 1024,       // runs only when this rank reads that peer's memory
  // A receive whose operand, when this rank reads that peer's memory, is the peer's element at
  // the step's output offset (its input; its output with kPeerOutput), as the peer holds it: no
  // slot, no wait, and a contribution not yet pre-multiplied.
  kFromPeer = 2048,
  kPeerOutput = 4096,
};
constexpr uint16_t kPeerCondition = kUnlessExposed | kUnlessReads | kIfExposed | kIfReads;

// A lane talks to at most this many peers each way: every other rank of a direct all-reduce
// (Tuner::kDirectMaxRanks ranks); a tree rank's parent and children need four.
constexpr int kMaxLanePeers = 7;

struct Step {
  Prim prim;
  size_t inOff;           // element offset into the input buffer
  size_t outOff;          // element offset into the output buffer
  size_t count;           // elements
  uint8_t sendTo = 0;     // which of the lane's send connectors (ring and chain: the only one)
  uint8_t recvFrom = 0;   // which of its receive connectors
  uint16_t flags = 0;     // StepFlag
  uint8_t recvFirst = 0;  // recvPairReduceCopy: the receive connector of the first operand
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

// One rank's copy of `count` elements of `elemSize` bytes cut into kLocal steps for up to
// `maxParts` blocks: parts of at least `partBytes` (one part below that), every boundary on a
// whole 16-byte vector where the element size divides 16, together covering [0, count) once.
std::vector<Step> splitLocal(size_t count, size_t elemSize, size_t partBytes, size_t maxParts);

// `pos` is this rank's position on the ring of n ranks; the ring sends to position pos+1.
// All-reduce over `count` elements: reduce-scatter then all-gather, in place in the output.
std::vector<Step> ringAllReduce(int n, int pos, size_t count, size_t loopChunk);
// Rank blocks of any sizes: rank r's block is count[r] elements at element at[r] of the buffer of
// blocks (a reduce-scatter's input, an all-gather's output); this rank's own block lies at
// element ownAt of its other buffer (the reduce-scatter's output, the all-gather's input). The
// arrays are indexed by rank and hold one channel's share of each block.
struct RankBlocks {
  const size_t* at;
  const size_t* count;
  size_t ownAt;
};
// Reduce-scatter: ring position p ends with rank blockOf[p]'s block, every rank's reduced.
std::vector<Step> ringReduceScatterBlocks(int n, int pos, const std::vector<int>& blockOf, const RankBlocks& b,
                                          size_t loopChunk);
// All-gather: position p's own block lands in rank blockOf[p]'s block of every output.
std::vector<Step> ringAllGatherBlocks(int n, int pos, const std::vector<int>& blockOf, const RankBlocks& b,
                                      size_t loopChunk);
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

// One tree of the double-binary-tree all-reduce over the elements [offset, offset + count), in
// pieces of `pieceElems`: first every piece up the tree (this rank's input with its pre-op, then
// each child's partial result in order, to the parent; the root applies the post-op into its
// output), then every piece down it (the root's result to every rank, forwarded to the children).
// Connectors: index 0 is the parent when there is one; the children follow in order.
std::vector<Step> treeAllReduce(bool hasParent, int nchildren, size_t offset, size_t count, size_t pieceElems);

// The direct all-reduce of rank `rank` of n (2 <= n <= kMaxLanePeers + 1) over `count` elements,
// piece by piece (`pieceElems`, one slot): the piece goes to every peer, then every rank's
// contribution is folded into the output in rank order, c0 OP c1, then OP c2, ... OP c(n-1), the
// same operands in the same order on every rank, so every rank gets the same bits. One exchange
// instead of the ring's 2(n-1) steps. `inPlace` (the output is the input): a rank from 2 on
// keeps its piece in the lane's scratch before the output is written.
// Connectors: send k goes to rank (rank + 1 + k) % n (peers are not all hit at once); receive
// directRecvIndex(rank, p) comes from rank p.
std::vector<Step> directAllReduce(int n, int rank, size_t count, size_t pieceElems, bool inPlace);
CHORUS_HD int directSendPeer(int n, int rank, int k) { return (rank + 1 + k) % n; }
CHORUS_HD int directRecvIndex(int rank, int peer) { return peer < rank ? peer : peer - 1; }

// The slice all-reduce of rank `rank` of n (2 <= n <= kMaxLanePeers + 1): rank r reduces slice
// partition(count, n, r) and every rank gets every slice. First each rank offers every peer its
// buffers in place (kSendDesc; kRecvDesc learns what each peer offered). Then, piece by piece
// (`pieceElems`) and for every slice at once, in rounds:
//   - scatter: this rank's input for each peer's slice, as bytes to a peer that cannot read it;
//   - fold: this rank's slice, every contribution in rank order as the direct all-reduce folds,
//     each from a slot or read from the peer's input in place;
//   - gather: the reduced piece, as bytes, to each peer that cannot read it, and each peer's
//     reduced piece from those whose memory this rank cannot read.
// Then each rank tells the peers reading its memory that its slice is reduced (its output,
// offered), copies the slices of the peers whose memory it reads, and the ranks exchange a done
// wherever memory was read, so no rank returns while a peer still reads its buffers.
// Every round's sends precede its receives and hold at most one piece per connection, so FIFOs
// of any size keep it moving. Connectors: send and receive index sliceIndex(n, rank, p) are
// peer p's (the same peers as directSendPeer).
std::vector<Step> sliceAllReduce(int n, int rank, size_t count, size_t pieceElems, bool inPlace);
CHORUS_HD int sliceIndex(int n, int rank, int peer) { return (peer - rank - 1 + n) % n; }

}  // namespace chorus
