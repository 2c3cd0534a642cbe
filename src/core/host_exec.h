// The host executor of the primitives (src/algo/prims.h): the thread that runs a lane, with its
// communicator's worker group, over the lane's send and receive cursors. Waits never block: a
// piece that cannot go yet stops the run, and the lane reports what it waits on.
//
// What only host connectors do lives here too, as capabilities of the cursor's FIFO:
//   - refs (a socket proxy in this process): a piece that already sits in the user's input or
//     output is sent from there by reference instead of being copied into the slot;
//   - dests (a socket proxy receiving): the proxy may have put the payload straight into this
//     piece's output; the lane posts those destinations ahead (Lane::postAhead).
#pragma once

#include <cstring>

#include "src/algo/prims.h"
#include "src/core/lane.h"
#include "src/core/workers.h"

namespace chorus {

// Pieces smaller than this are moved by the calling thread alone: waking helpers costs more.
constexpr size_t kMinSplitBytes = 4096;

// r of `m` (src/algo/prims.h) for elements [lo, hi) of a piece.
inline void hostMoveRange(const LaneArgs& a, const PieceMove& m, size_t lo, size_t hi) {
  if (lo >= hi) return;
  const size_t es = a.elemSize;
  const size_t off = lo * es;
  const size_t n = hi - lo;
  const size_t bytes = n * es;
  const char* src = m.a + off;
  char* dst = m.dst ? m.dst + off : nullptr;
  char* dst2 = m.dst2 ? m.dst2 + off : nullptr;
  if (m.fold == Fold::kCopy) {
    if (dst && dst != src) std::memmove(dst, src, bytes);
    if (dst2) std::memcpy(dst2, src, bytes);
    return;
  }
  if (!dst) {
    dst = dst2;
    dst2 = nullptr;
  }
  if (!dst) return;
  const ReduceSpec* spec = &a.spec;
  ReduceSpec plain;
  if (m.noPre && a.spec.hasPre) {
    plain = a.spec;
    plain.hasPre = false;
    spec = &plain;
  }
  if (m.preA) {
    if (a.spec.hasPre && m.b + off == dst) {
      // b is where the result goes (in place): pre(b) there first, then OP pre(a). A reduction
      // with a pre-op is a sum, which commutes exactly.
      if (!m.noPre) a.kernels->pre(a.spec, a.type, dst, dst, n);
      a.kernels->reduce(a.spec, a.type, dst, dst, src, n, m.fold == Fold::kReducePost);
      if (dst2) std::memcpy(dst2, dst, bytes);
      return;
    }
    // pre(a) OP b: a pass of its own for the pre-op only when there is one.
    const char* first = src;
    if (a.spec.hasPre) {
      a.kernels->pre(a.spec, a.type, dst, src, n);
      first = dst;
    }
    a.kernels->reduce(*spec, a.type, dst, first, m.b + off, n, m.fold == Fold::kReducePost);
    if (dst2) std::memcpy(dst2, dst, bytes);
    return;
  }
  if (m.fold == Fold::kPre) {
    if (spec->hasPre) {
      a.kernels->pre(*spec, a.type, dst, src, n);
    } else if (dst != src) {
      std::memmove(dst, src, bytes);
    }
  } else {
    a.kernels->reduce(*spec, a.type, dst, src, m.b + off, n, m.fold == Fold::kReducePost);
  }
  if (dst2) std::memcpy(dst2, dst, bytes);
}

// A piece cut among the workers of a group, in parts of whole cache lines.
struct HostMoveJob {
  const LaneArgs* args;
  const PieceMove* move;
  size_t n;

  static void part(const void* ctx, int part, int parts) {
    const auto* job = static_cast<const HostMoveJob*>(ctx);
    const size_t line = job->args->elemSize >= 64 ? 1 : 64 / job->args->elemSize;
    size_t each = (job->n + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
    each = (each + line - 1) / line * line;
    const size_t lo = each * static_cast<size_t>(part);
    const size_t hi = lo + each < job->n ? lo + each : job->n;
    hostMoveRange(*job->args, *job->move, lo, hi);
  }
};

inline void hostMove(const LaneArgs& a, const PieceMove& m, size_t n) {
  if (a.workers && a.workers->size() > 1 && n * a.elemSize >= kMinSplitBytes) {
    const HostMoveJob job{&a, &m, n};
    a.workers->run(&HostMoveJob::part, &job);
  } else {
    hostMoveRange(a, m, 0, n);
  }
}

}  // namespace chorus
