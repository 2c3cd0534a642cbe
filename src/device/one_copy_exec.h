// The one-copy collectives' kernel part (the OneCopy algorithm, src/algo/one_copy.cc; its host
// side, src/core/comm_onecopy.cc): each rank's blocks read its peers' buffers in place, with no
// FIFO between them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/hd.h"
#include "kernels/reduce.h"
#include "src/device/block_wait.h"
#include "src/device/launch_desc.h"
#include "src/device/vector_moves.h"

namespace chorus::device {

// One-copy's part of block `k` of this rank (OneCopy::run, between its barriers): elements [begin,
// end) of the rank's share, whole 16-byte vectors but the last part, read at inAt and written at
// outAt bytes (the share's place in the inputs and outputs) from and to the buffers each
// collective names (OneCopyArgs). Thread `tid` of `nthreads` does its share. Out of line on the
// device, as the moves above: inlined, its twelve types' element loops made the launch kernel
// larger and its compile longer.
template <typename T>
CHORUS_HD_OUTLINE void oneCopyPart(const OneCopyArgs* args, int32_t k, ReduceSpec laneSpec, unsigned tid,
                                   unsigned nthreads) {
  const OneCopyArgs& a = *args;
  constexpr size_t kPer = 16 % sizeof(T) == 0 ? 16 / sizeof(T) : 1;
  const uint8_t layout = a.layout;
  const uint32_t n = a.nranks;
  const uint32_t me = a.rank;
  // Block `me` of inputs or outputs of a block per rank is this rank's share; buffers of one block
  // share the message out over every rank's blocks.
  const bool ownBlock = (layout & (kOneCopyInBlocks | kOneCopyOutBlocks)) != 0;
  const uint64_t nparts = ownBlock ? a.parts : uint64_t(n) * a.parts;
  const uint64_t part = (ownBlock ? 0 : uint64_t(me) * a.parts) + static_cast<uint64_t>(k);
  const uint64_t per = ((a.count + nparts - 1) / nparts + kPer - 1) / kPer * kPer;
  const uint64_t begin = part * per < a.count ? part * per : a.count;
  const uint64_t end = begin + per < a.count ? begin + per : a.count;
  const uint64_t block = uint64_t(me) * a.count * sizeof(T);
  VecReduce o{a.input, a.output, n, n, begin * sizeof(T), begin * sizeof(T), 0, tid, nthreads, -1};
  if (layout & kOneCopyFromRoot) {
    o.input = &a.input[a.root];
    o.nin = 1;
    if (a.output[a.root] == a.input[a.root]) o.skip = a.root;  // in place at the root
  }
  if (layout & kOneCopyToRoot) {
    o.output = &a.output[a.root];
    o.nout = 1;
  }
  if (layout & kOneCopyInBlocks) {  // each rank's block `me` reduced into this rank's output
    o.inAt += block;
    o.output = &a.output[me];
    o.nout = 1;
  }
  if (layout & kOneCopyOutBlocks) {  // this rank's input into block `me` of every output
    o.input = &a.input[me];
    o.nin = 1;
    o.outAt += block;
    if (a.output[me] + block == a.input[me]) o.skip = static_cast<int32_t>(me);  // in place
  }
  // Copies take no operator: a spec of none (an all-gather's or broadcast's lane carries the
  // call's, which is not theirs to apply).
  const ReduceSpec spec = o.nin > 1 ? laneSpec : ReduceSpec{};
  bool vec = 16 % sizeof(T) == 0;
  for (uint32_t r = 0; r < o.nin; ++r) vec = vec && aligned16(o.input[r] + o.inAt);
  for (uint32_t r = 0; r < o.nout; ++r) vec = vec && aligned16(o.output[r] + o.outAt);
  uint64_t done = begin;
  if (vec) {
    o.nvec = (end - begin) / kPer;
    reduceVectors<T>(o, spec);
    done = begin + o.nvec * kPer;
  }
  // The rest element by element (an unaligned part, or the tail past the last whole vector).
  for (uint64_t i = done + tid; i < end; i += nthreads) {
    const uint64_t at = i - begin;
    T acc = ElemOps<T>::pre(spec, loadElem<T>(o.input[0] + o.inAt, at));
    for (uint32_t r = 1; r < o.nin; ++r) {
      acc = reduceOne<T>(spec, acc, loadElem<T>(o.input[r] + o.inAt, at), r + 1 == o.nin);
    }
    for (uint32_t r = 0; r < o.nout; ++r) {
      if (static_cast<int32_t>(r) != o.skip) storeElem<T>(o.output[r] + o.outAt, at, acc);
    }
  }
}

// One-copy collective: rank r's block k (lane.seqIndex) moves its part (OneCopyArgs says which
// for each collective) from every rank's input it reads, reduced in rank order, into every
// rank's output it writes. Around it, two barriers of the ranks' blocks k through the signal
// areas, both numbered by the lane's sequence number (the same on every rank, advanced by the
// kernel, so graph replays agree): "arrived" (every rank's kernel runs, so its input is ready and
// its output free to write) and "done" (every part of this rank's output is written and no one
// reads its input any more).
template <class Block, typename T>
class OneCopy {
 public:
  CHORUS_HD_EXEC OneCopy(Block& blk, const LaunchParams& p, uint32_t li)
      : b_(blk), p_(p), li_(li), lane_(p.lanes[li]), a_(*lane_.oneCopy) {}

  CHORUS_HD_EXEC bool run() {
    uint64_t* seqWord = laneSeqWord(p_, lane_);
    const uint64_t seq = b_.share(b_.tid() == 0 ? *seqWord + 1 : 0);
    if (!barrier(0, seq)) return false;
    oneCopyPart<T>(&a_, lane_.seqIndex, lane_.spec, b_.tid(), b_.nthreads());
    b_.sync();  // every thread's writes to every output precede the "done" signal
    if (!barrier(1, seq)) return false;
    if (b_.tid() == 0) *seqWord = seq;
    b_.sync();
    return true;
  }

 private:
  // Signals this rank's block into every rank's area, then waits for every rank's signal in its
  // own. The leader does both; the block learns whether it may go on.
  CHORUS_HD_EXEC bool barrier(int done, uint64_t seq) {
    const int k = lane_.seqIndex;
    uint32_t why = 0;
    int32_t late = -1;
    if (b_.tid() == 0) {
      for (uint32_t r = 0; r < a_.nranks; ++r) {
        if (r != a_.rank) b_.release64(oneCopyWord(a_.signal[r], k, done, static_cast<int>(a_.rank)), seq);
      }
      uint64_t since = 0;
      uint64_t* mine = a_.signal[a_.rank];
      for (uint32_t r = 0; r < a_.nranks && !why; ++r) {
        if (r == a_.rank) continue;
        uint64_t* word = oneCopyWord(mine, k, done, static_cast<int>(r));
        for (uint32_t polls = 1;; ++polls) {
          // A peer's word is this operation's number once it got here. A later one cannot be: a
          // peer passes this barrier only after this rank's next signal, which it has not sent.
          // Seen, it means the ranks' sequences differ (different operations): an error, not a
          // pass on a stale word.
          const auto ahead = static_cast<int64_t>(b_.acquire64(word) - seq);
          if (ahead == 0) break;
          if (ahead > 0) {
            why = static_cast<uint32_t>(DeviceFault::kMismatch);
            late = static_cast<int32_t>(r);
            break;
          }
          b_.relax();
          if (polls % kPollsPerCheck == 0 && (why = stopReason(b_, p_, &since)) != 0) {
            late = static_cast<int32_t>(r);
            break;
          }
        }
      }
      if (why) {
        recordFault(b_, p_, li_, static_cast<DeviceFault>(why), static_cast<uint32_t>(done), late, done ? 4u : 3u, seq,
                    0);
      }
    }
    return b_.share(why) == 0;
  }

  Block& b_;
  const LaunchParams& p_;
  uint32_t li_;
  const DeviceLane& lane_;
  const OneCopyArgs& a_;
};

}  // namespace chorus::device
