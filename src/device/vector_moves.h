// The device executor's bulk moves (LaneExec's Simple pieces and one-copy's parts), written once
// for host and device: 16-byte vectors, loaded in groups so that each thread has several loads in
// flight, copied or folded element by element through the lane's reduction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/hd.h"
#include "kernels/reduce.h"

namespace chorus::device {

// 16 bytes, moved as one load and one store.
struct alignas(16) Vec16 {
  uint32_t w[4];
};

// Whether `p` may take a 16-byte access (null does: a destination not written).
CHORUS_HD_EXEC bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// 16 bytes at a 16-byte aligned address, in one access: on the device a 128-bit load or store
// (a memcpy from a char pointer compiles to sixteen byte loads there, the compiler knowing no
// alignment); on the host a memcpy, which the compiler makes one vector move.
CHORUS_HD_EXEC Vec16 load16(const char* p) {
#ifdef __CUDA_ARCH__
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  return Vec16{{v.x, v.y, v.z, v.w}};
#else
  Vec16 v;
  __builtin_memcpy(&v, p, 16);
  return v;
#endif
}
CHORUS_HD_EXEC void store16(char* p, const Vec16& v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#else
  __builtin_memcpy(p, &v, 16);
#endif
}

// Vectors each thread has in flight at once in a piece's move: loads issued back to back before
// the first store, so a thread waits for memory once per group, not once per vector.
constexpr size_t kMoveUnroll = 4;

// How a piece's elements are made from its operands (PieceMove's fold): `spec` the lane's, its
// pre-op already off where the piece says noPre; `preA`: a is a contribution not yet
// pre-multiplied and the lane has a pre-op (PieceMove::preA).
struct ElemFold {
  Fold fold = Fold::kCopy;
  bool preA = false;
  ReduceSpec spec;
};

// One element of a piece.
template <typename T>
CHORUS_HD_EXEC T foldElem(const ElemFold& f, T a, T b) {
  switch (f.fold) {
    case Fold::kCopy:
      return a;
    case Fold::kPre:
      return ElemOps<T>::pre(f.spec, a);
    default: {
      T pa = a;
      if (f.preA) {
        ReduceSpec s = f.spec;
        s.hasPre = true;
        pa = ElemOps<T>::pre(s, a);
      }
      return reduceOne<T>(f.spec, pa, b, f.fold == Fold::kReducePost);
    }
  }
}

// The 16-byte vectors [0, nvec) of a piece whose operands are all 16-byte aligned: r from a (and
// b) to dst (unless null) and dst2 (unless null). Thread `tid` of `nthreads` moves vectors tid,
// tid + nthreads, ... in groups of kMoveUnroll, every load of a group before its first store.
struct VecMove {
  const char* a;
  const char* b;
  char* dst;
  char* dst2;
  size_t nvec;
  unsigned tid;
  unsigned nthreads;
};

// kFold: each element through foldElem; else the vector is copied as it is.
template <typename T, bool kFold>
CHORUS_HD_EXEC void moveVectorGroups(const VecMove& o, const ElemFold& f) {
  const size_t stride = o.nthreads;
  size_t v = o.tid;
  for (; v + (kMoveUnroll - 1) * stride < o.nvec; v += kMoveUnroll * stride) {
    Vec16 r[kMoveUnroll];
    Vec16 rb[kMoveUnroll] = {};
#pragma unroll
    for (size_t u = 0; u < kMoveUnroll; ++u) r[u] = load16(o.a + (v + u * stride) * 16);
    if (kFold && o.b) {
#pragma unroll
      for (size_t u = 0; u < kMoveUnroll; ++u) rb[u] = load16(o.b + (v + u * stride) * 16);
    }
#pragma unroll
    for (size_t u = 0; u < kMoveUnroll; ++u) {
      if constexpr (kFold) {
        for (size_t k = 0; k < 16 / sizeof(T); ++k) {
          storeElem<T>(&r[u], k, foldElem<T>(f, loadElem<T>(&r[u], k), loadElem<T>(&rb[u], k)));
        }
      }
      if (o.dst) store16(o.dst + (v + u * stride) * 16, r[u]);
      if (o.dst2) store16(o.dst2 + (v + u * stride) * 16, r[u]);
    }
  }
  for (; v < o.nvec; v += stride) {
    Vec16 r = load16(o.a + v * 16);
    if constexpr (kFold) {
      const Vec16 rb = o.b ? load16(o.b + v * 16) : Vec16{};
      for (size_t k = 0; k < 16 / sizeof(T); ++k) {
        storeElem<T>(&r, k, foldElem<T>(f, loadElem<T>(&r, k), loadElem<T>(&rb, k)));
      }
    }
    if (o.dst) store16(o.dst + v * 16, r);
    if (o.dst2) store16(o.dst2 + v * 16, r);
  }
}

// The two moves, each a function of its own on the device. Inlined into the launch kernel, a
// group's vectors competed for registers with the whole executor's state and went to local memory
// as they were loaded (the kernel's SASS: an STL.128 after each LD.E.128 but the last of a group),
// leaving one load in flight per thread (docs/records/2026-11-29-gpu-next.md, "Loads in flight"). A
// call spends a few saves of the caller's registers once per piece and gives the group the
// registers.
CHORUS_HD_OUTLINE void copyVectors(VecMove o) { moveVectorGroups<char, false>(o, ElemFold{}); }
template <typename T>
CHORUS_HD_OUTLINE void foldVectors(VecMove o, ElemFold f) {
  moveVectorGroups<T, true>(o, f);
}

// One-copy's part (oneCopyPart): the 16-byte vectors [0, nvec) from byte `inAt` of each of
// the `nin` inputs, reduced in their order (one input: copied, its pre-op applied), to byte
// `outAt` of each of the `nout` outputs but `skip` (-1: none; an output that is the input
// itself, which a copy need not rewrite). Thread `tid` of `nthreads` takes vectors tid, tid +
// nthreads, ... in groups of kMoveUnroll, a group's loads from one input issued together. Out of
// line on the device, as the moves above.
struct VecReduce {
  const char* const* input;
  char* const* output;
  uint32_t nin;
  uint32_t nout;
  uint64_t inAt;
  uint64_t outAt;
  size_t nvec;
  unsigned tid;
  unsigned nthreads;
  int32_t skip;
};

// M vectors at byte offsets off[0, M) past reduceVectors' inAt and outAt.
template <typename T, size_t M>
CHORUS_HD_EXEC void reduceGroup(const VecReduce& o, const ReduceSpec& spec, const size_t (&off)[M]) {
  constexpr size_t kPer = 16 / sizeof(T);
  Vec16 acc[M];
#pragma unroll
  for (size_t u = 0; u < M; ++u) acc[u] = load16(o.input[0] + o.inAt + off[u]);
  if (spec.hasPre) {
#pragma unroll
    for (size_t u = 0; u < M; ++u) {
      for (size_t k = 0; k < kPer; ++k) storeElem<T>(&acc[u], k, ElemOps<T>::pre(spec, loadElem<T>(&acc[u], k)));
    }
  }
  for (uint32_t r = 1; r < o.nin; ++r) {
    Vec16 x[M];
#pragma unroll
    for (size_t u = 0; u < M; ++u) x[u] = load16(o.input[r] + o.inAt + off[u]);
    const bool last = r + 1 == o.nin;
#pragma unroll
    for (size_t u = 0; u < M; ++u) {
      for (size_t k = 0; k < kPer; ++k) {
        storeElem<T>(&acc[u], k, reduceOne<T>(spec, loadElem<T>(&acc[u], k), loadElem<T>(&x[u], k), last));
      }
    }
  }
  for (uint32_t r = 0; r < o.nout; ++r) {
    if (static_cast<int32_t>(r) == o.skip) continue;
#pragma unroll
    for (size_t u = 0; u < M; ++u) store16(o.output[r] + o.outAt + off[u], acc[u]);
  }
}

template <typename T>
CHORUS_HD_OUTLINE void reduceVectors(VecReduce o, ReduceSpec spec) {
  const size_t stride = o.nthreads;
  size_t v = o.tid;
  for (; v + (kMoveUnroll - 1) * stride < o.nvec; v += kMoveUnroll * stride) {
    size_t off[kMoveUnroll];
#pragma unroll
    for (size_t u = 0; u < kMoveUnroll; ++u) off[u] = (v + u * stride) * 16;
    reduceGroup<T>(o, spec, off);
  }
  for (; v < o.nvec; v += stride) {
    const size_t off[1] = {v * 16};
    reduceGroup<T>(o, spec, off);
  }
}

}  // namespace chorus::device
