// Ring and chain schedules.
//
// All-reduce (n ranks, ring positions 0..n-1, block c of each loop reduced along the ring):
//   step 0:        send            block pos-1
//   steps 1..n-2:  recvReduceSend  block pos-1-k       (partial sums travel one hop per step)
//   step n-1:      recvReduceCopySend block pos        (the last contribution: block is final)
//   steps n..2n-3: recvCopySend    block pos-(k-n+1)   (final blocks travel on)
//   step 2n-2:     recv            block pos+1
// Block c is reduced in the fixed order c+1, c+2, ..., c (each element once) and then only
// copied, so every rank ends with the same bits.
#include "src/algo/schedule.h"

#include <algorithm>

namespace chorus {

const char* primName(Prim p) {
  switch (p) {
    case Prim::kSend:
      return "send";
    case Prim::kRecv:
      return "recv";
    case Prim::kCopySend:
      return "copySend";
    case Prim::kRecvReduceSend:
      return "recvReduceSend";
    case Prim::kRecvReduceCopySend:
      return "recvReduceCopySend";
    case Prim::kRecvCopySend:
      return "recvCopySend";
    case Prim::kRecvReduceCopy:
      return "recvReduceCopy";
    case Prim::kLocal:
      return "local";
    case Prim::kLocalReduce:
      return "localReduce";
    case Prim::kRecvPairReduceCopy:
      return "recvPairReduceCopy";
    case Prim::kSendDesc:
      return "sendDesc";
    case Prim::kRecvDesc:
      return "recvDesc";
    case Prim::kSignal:
      return "signal";
    case Prim::kWaitSignal:
      return "waitSignal";
  }
  return "?";
}

Block partition(size_t count, int parts, int index) {
  const size_t p = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>(index);
  const size_t base = count / p;
  const size_t extra = count % p;
  return Block{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

size_t ringLoopChunk(size_t slotBytes, int slots, size_t elemSize) {
  const size_t perSlot = slotBytes / elemSize;
  return std::max<size_t>(1, perSlot * static_cast<size_t>(std::max(1, slots / 2)));
}

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

void push(std::vector<Step>& v, Prim p, size_t inOff, size_t outOff, size_t count) {
  if (count > 0) v.push_back(Step{p, inOff, outOff, count});
}

}  // namespace

std::vector<Step> splitLocal(size_t count, size_t elemSize, size_t partBytes, size_t maxParts) {
  std::vector<Step> s;
  if (count == 0) return s;
  const size_t perVec = 16 % elemSize == 0 ? 16 / elemSize : 1;
  const size_t parts =
      std::clamp<size_t>(count * elemSize / std::max<size_t>(partBytes, 1), 1, std::max<size_t>(maxParts, 1));
  const size_t per = (count + parts - 1) / parts;
  const size_t len = (per + perVec - 1) / perVec * perVec;
  for (size_t begin = 0; begin < count; begin += len) push(s, Prim::kLocal, begin, begin, std::min(len, count - begin));
  return s;
}

std::vector<Step> ringAllReduce(int n, int pos, size_t count, size_t loopChunk) {
  std::vector<Step> s;
  if (n == 1) {
    push(s, Prim::kLocal, 0, 0, count);
    return s;
  }
  const size_t loopSize = loopChunk * static_cast<size_t>(n);
  for (size_t grid = 0; grid < count; grid += loopSize) {
    const size_t loopCount = std::min(loopSize, count - grid);
    auto block = [&](int c) {
      Block b = partition(loopCount, n, mod(c, n));
      b.offset += grid;
      return b;
    };
    Block b = block(pos - 1);
    push(s, Prim::kSend, b.offset, b.offset, b.count);
    for (int k = 1; k <= n - 2; ++k) {
      b = block(pos - 1 - k);
      push(s, Prim::kRecvReduceSend, b.offset, b.offset, b.count);
    }
    b = block(pos);
    push(s, Prim::kRecvReduceCopySend, b.offset, b.offset, b.count);
    for (int k = 1; k <= n - 2; ++k) {
      b = block(pos - k);
      push(s, Prim::kRecvCopySend, b.offset, b.offset, b.count);
    }
    b = block(pos + 1);
    push(s, Prim::kRecv, b.offset, b.offset, b.count);
  }
  return s;
}

namespace {

// The ring reduce-scatter and all-gather over rank blocks, rank r's block being count(r)
// elements at element at(r) of the buffer of blocks: accessors, so the blocks of one size need
// no arrays (they run every all-gather and reduce-scatter).
template <class At, class Count>
std::vector<Step> reduceScatterOver(int n, int pos, const std::vector<int>& blockOf, At at, Count count, size_t ownAt,
                                    size_t loopChunk) {
  std::vector<Step> s;
  auto rank = [&](int p) { return static_cast<size_t>(blockOf[mod(p, n)]); };
  if (n == 1) {
    push(s, Prim::kLocal, at(rank(0)), ownAt, count(rank(0)));
    return s;
  }
  size_t longest = 0;
  for (int p = 0; p < n; ++p) longest = std::max(longest, count(rank(p)));
  // Loop by loop, each block's next piece (none once the block is done: sender and receiver of
  // a block skip it alike).
  for (size_t off = 0; off < longest; off += loopChunk) {
    auto len = [&](int p) { return count(rank(p)) > off ? std::min(loopChunk, count(rank(p)) - off) : 0; };
    auto in = [&](int p) { return at(rank(p)) + off; };
    push(s, Prim::kSend, in(pos - 1), 0, len(pos - 1));
    for (int k = 1; k <= n - 2; ++k) push(s, Prim::kRecvReduceSend, in(pos - 1 - k), 0, len(pos - 1 - k));
    push(s, Prim::kRecvReduceCopy, in(pos), ownAt + off, len(pos));
  }
  return s;
}

template <class At, class Count>
std::vector<Step> allGatherOver(int n, int pos, const std::vector<int>& blockOf, At at, Count count, size_t ownAt,
                                size_t loopChunk) {
  std::vector<Step> s;
  auto rank = [&](int p) { return static_cast<size_t>(blockOf[mod(p, n)]); };
  if (n == 1) {
    push(s, Prim::kLocal, ownAt, at(rank(0)), count(rank(0)));
    return s;
  }
  size_t longest = 0;
  for (int p = 0; p < n; ++p) longest = std::max(longest, count(rank(p)));
  for (size_t off = 0; off < longest; off += loopChunk) {
    auto len = [&](int p) { return count(rank(p)) > off ? std::min(loopChunk, count(rank(p)) - off) : 0; };
    auto out = [&](int p) { return at(rank(p)) + off; };
    push(s, Prim::kCopySend, ownAt + off, out(pos), len(pos));
    for (int k = 1; k <= n - 2; ++k) push(s, Prim::kRecvCopySend, 0, out(pos - k), len(pos - k));
    push(s, Prim::kRecv, 0, out(pos + 1), len(pos + 1));
  }
  return s;
}

}  // namespace

std::vector<Step> ringReduceScatterBlocks(int n, int pos, const std::vector<int>& blockOf, const RankBlocks& b,
                                          size_t loopChunk) {
  return reduceScatterOver(
      n, pos, blockOf, [&](size_t r) { return b.at[r]; }, [&](size_t r) { return b.count[r]; }, b.ownAt, loopChunk);
}

std::vector<Step> ringAllGatherBlocks(int n, int pos, const std::vector<int>& blockOf, const RankBlocks& b,
                                      size_t loopChunk) {
  return allGatherOver(
      n, pos, blockOf, [&](size_t r) { return b.at[r]; }, [&](size_t r) { return b.count[r]; }, b.ownAt, loopChunk);
}

std::vector<Step> ringReduceScatter(int n, int pos, const std::vector<int>& blockOf, size_t stride, size_t base,
                                    size_t count, size_t loopChunk) {
  return reduceScatterOver(
      n, pos, blockOf, [&](size_t r) { return r * stride + base; }, [&](size_t) { return count; }, base, loopChunk);
}

std::vector<Step> ringAllGather(int n, int pos, const std::vector<int>& blockOf, size_t stride, size_t base,
                                size_t count, size_t loopChunk) {
  return allGatherOver(
      n, pos, blockOf, [&](size_t r) { return r * stride + base; }, [&](size_t) { return count; }, base, loopChunk);
}

std::vector<Step> chainBroadcast(int n, int pos, int rootPos, size_t count, size_t loopChunk) {
  std::vector<Step> s;
  const int rel = mod(pos - rootPos, n);
  for (size_t off = 0; off < count; off += loopChunk) {
    const size_t len = std::min(loopChunk, count - off);
    if (n == 1) {
      push(s, Prim::kLocal, off, off, len);
    } else if (rel == 0) {
      push(s, Prim::kCopySend, off, off, len);
    } else if (rel == n - 1) {
      push(s, Prim::kRecv, off, off, len);
    } else {
      push(s, Prim::kRecvCopySend, off, off, len);
    }
  }
  return s;
}

std::vector<Step> chainReduce(int n, int pos, int rootPos, size_t count, size_t loopChunk) {
  std::vector<Step> s;
  const int rel = mod(pos - rootPos - 1, n);  // 0: first in the chain, n-1: the root
  for (size_t off = 0; off < count; off += loopChunk) {
    const size_t len = std::min(loopChunk, count - off);
    if (n == 1) {
      push(s, Prim::kLocal, off, off, len);
    } else if (rel == 0) {
      push(s, Prim::kSend, off, off, len);
    } else if (rel == n - 1) {
      push(s, Prim::kRecvReduceCopy, off, off, len);
    } else {
      push(s, Prim::kRecvReduceSend, off, off, len);
    }
  }
  return s;
}

std::vector<Step> treeAllReduce(bool hasParent, int nchildren, size_t offset, size_t count, size_t pieceElems) {
  std::vector<Step> s;
  const uint8_t parent = 0;
  const auto child = [&](int i) { return static_cast<uint8_t>((hasParent ? 1 : 0) + i); };
  const uint16_t partial = kLocalIsOutput | kLocalNoPre;  // the output holds what came up so far
  if (!hasParent && nchildren == 0) {
    push(s, Prim::kLocal, offset, offset, count);
    return s;
  }
  // Up: acc = c0 OP pre(in), then acc = c_i OP acc; the partial result waits in the output.
  for (size_t o = offset; o < offset + count; o += pieceElems) {
    const size_t n = std::min(pieceElems, offset + count - o);
    if (nchildren == 0) {
      s.push_back(Step{Prim::kSend, o, o, n, parent, 0, 0});
      continue;
    }
    for (int i = 0; i < nchildren; ++i) {
      const bool last = i + 1 == nchildren;
      const uint16_t local = i == 0 ? 0 : partial;
      if (last && hasParent) {
        s.push_back(Step{Prim::kRecvReduceSend, o, o, n, parent, child(i), local});
      } else {
        s.push_back(
            Step{Prim::kRecvReduceCopy, o, o, n, 0, child(i), static_cast<uint16_t>(local | (last ? 0 : kNoPost))});
      }
    }
  }
  // Down: the root's result, received from the parent into the output and passed to each child.
  for (size_t o = offset; o < offset + count; o += pieceElems) {
    const size_t n = std::min(pieceElems, offset + count - o);
    int first = 0;
    if (hasParent) {
      if (nchildren == 0) {
        s.push_back(Step{Prim::kRecv, o, o, n, 0, parent, 0});
      } else {
        s.push_back(Step{Prim::kRecvCopySend, o, o, n, child(0), parent, 0});
        first = 1;
      }
    }
    for (int i = first; i < nchildren; ++i) s.push_back(Step{Prim::kSend, o, o, n, child(i), 0, partial});
  }
  return s;
}

namespace {

// The fold of one piece [o, o + m) of the output from every rank's contribution in rank order,
// c0 OP c1, then OP c2, ... OP c(n-1), in one pass per contribution (the direct and slice
// all-reduces). `from(p)` is the receive index of peer p; `extra` goes on every step that
// receives. `stash`: this rank's piece sits in the scratch (in place, a rank from 2 on).
template <class From>
void foldPiece(std::vector<Step>& s, int n, int rank, size_t o, size_t m, bool stash, From from, uint16_t extra) {
  const auto last = [&](int r) { return static_cast<uint16_t>(r == n - 1 ? 0 : kNoPost); };
  const auto flags = [&](uint16_t f) { return static_cast<uint16_t>(f | extra); };
  // c0 OP c1, in one pass on every rank.
  if (rank == 0) {
    s.push_back(Step{Prim::kRecvReduceCopy, o, o, m, 0, from(1), flags(kOwnFirst | last(1))});
  } else if (rank == 1) {
    s.push_back(Step{Prim::kRecvReduceCopy, o, o, m, 0, from(0), flags(last(1))});
  } else {
    s.push_back(Step{Prim::kRecvPairReduceCopy, o, o, m, 0, from(1), flags(last(1)), from(0)});
  }
  // Then OP c2, ..., OP c(n-1).
  for (int r = 2; r < n; ++r) {
    if (r == rank) {
      s.push_back(Step{Prim::kLocalReduce, stash ? 0 : o, o, m, 0, 0,
                       static_cast<uint16_t>((stash ? kLocalIsScratch : 0) | last(r))});
    } else {
      s.push_back(Step{Prim::kRecvReduceCopy, o, o, m, 0, from(r), flags(kFoldIntoOutput | last(r))});
    }
  }
}

size_t piecesOf(size_t count, size_t pieceElems) { return (count + pieceElems - 1) / pieceElems; }

}  // namespace

std::vector<Step> directAllReduce(int n, int rank, size_t count, size_t pieceElems, bool inPlace) {
  std::vector<Step> s;
  if (n <= 1) {
    push(s, Prim::kLocal, 0, 0, count);
    return s;
  }
  const auto from = [&](int peer) { return static_cast<uint8_t>(directRecvIndex(rank, peer)); };
  const bool stash = inPlace && rank >= 2;  // the fold writes the output before this rank's turn
  s.reserve(piecesOf(count, pieceElems) * static_cast<size_t>(2 * n));
  for (size_t o = 0; o < count; o += pieceElems) {
    const size_t m = std::min(pieceElems, count - o);
    for (int k = 0; k < n - 1; ++k) s.push_back(Step{Prim::kSend, o, o, m, static_cast<uint8_t>(k), 0, 0});
    if (stash) s.push_back(Step{Prim::kLocal, o, 0, m, 0, 0, kLocalNoPre | kOutIsScratch});
    foldPiece(s, n, rank, o, m, stash, from, 0);
  }
  return s;
}

std::vector<Step> sliceAllReduce(int n, int rank, size_t count, size_t pieceElems, bool inPlace) {
  std::vector<Step> s;
  if (n <= 1) {
    push(s, Prim::kLocal, 0, 0, count);
    return s;
  }
  const auto index = [&](int peer) { return static_cast<uint8_t>(sliceIndex(n, rank, peer)); };
  const auto peerAt = [&](int k) { return (rank + 1 + k) % n; };
  const Block mine = partition(count, n, rank);
  const bool stash = inPlace && rank >= 2;
  // The offers, both ways; a kRecvDesc checks the peer's buffer holds `count` elements.
  for (int k = 0; k < n - 1; ++k) s.push_back(Step{Prim::kSendDesc, 0, 0, count, static_cast<uint8_t>(k), 0, 0});
  for (int k = 0; k < n - 1; ++k) s.push_back(Step{Prim::kRecvDesc, 0, 0, count, 0, static_cast<uint8_t>(k), 0});
  // The rounds: slice 0 is the longest, so its pieces count them.
  const size_t rounds = piecesOf(partition(count, n, 0).count, pieceElems);
  for (size_t i = 0; i < rounds; ++i) {
    const size_t at = i * pieceElems;
    const auto pieceOf = [&](const Block& b, size_t* o, size_t* m) {
      if (at >= b.count) return false;
      *o = b.offset + at;
      *m = std::min(pieceElems, b.count - at);
      return true;
    };
    size_t o = 0;
    size_t m = 0;
    for (int k = 0; k < n - 1; ++k) {
      if (pieceOf(partition(count, n, peerAt(k)), &o, &m)) {
        s.push_back(Step{Prim::kSend, o, o, m, static_cast<uint8_t>(k), 0, kUnlessExposed});
      }
    }
    if (pieceOf(mine, &o, &m)) {
      if (stash) s.push_back(Step{Prim::kLocal, o, 0, m, 0, 0, kLocalNoPre | kOutIsScratch});
      foldPiece(s, n, rank, o, m, stash, index, kFromPeer);
      for (int k = 0; k < n - 1; ++k) {
        s.push_back(
            Step{Prim::kSend, o, o, m, static_cast<uint8_t>(k), 0, kLocalIsOutput | kLocalNoPre | kUnlessExposed});
      }
    }
    for (int k = 0; k < n - 1; ++k) {
      if (pieceOf(partition(count, n, peerAt(k)), &o, &m)) {
        s.push_back(Step{Prim::kRecv, o, o, m, 0, static_cast<uint8_t>(k), kUnlessReads});
      }
    }
  }
  // This rank's slice is reduced: its output, offered to the peers reading in place; theirs,
  // copied from where they are.
  for (int k = 0; k < n - 1; ++k) {
    s.push_back(Step{Prim::kSendDesc, 0, 0, count, static_cast<uint8_t>(k), 0, kLocalIsOutput | kIfExposed});
  }
  for (int k = 0; k < n - 1; ++k) {
    s.push_back(Step{Prim::kRecvDesc, 0, 0, count, 0, static_cast<uint8_t>(k), kLocalIsOutput | kIfReads});
    const Block b = partition(count, n, peerAt(k));
    if (b.count > 0) {
      s.push_back(Step{Prim::kRecv, b.offset, b.offset, b.count, 0, static_cast<uint8_t>(k),
                       kIfReads | kFromPeer | kPeerOutput});
    }
  }
  // Done reading: told to each peer read, awaited from each peer that read this rank.
  for (int k = 0; k < n - 1; ++k)
    s.push_back(Step{Prim::kSignal, kStepDone, 0, 0, static_cast<uint8_t>(k), 0, kIfReads});
  for (int k = 0; k < n - 1; ++k) {
    s.push_back(Step{Prim::kWaitSignal, kStepDone, 0, 0, 0, static_cast<uint8_t>(k), kIfExposed});
  }
  return s;
}

}  // namespace chorus
