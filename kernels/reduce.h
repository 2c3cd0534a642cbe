// Element-wise reductions for every type and op, written once for host and device.
//
// Semantics (DESIGN.md, "Kernels"):
// - integers wrap (computed in the unsigned type); integer avg is the wrapped sum divided by
//   nranks, truncated toward zero, applied once, when the last contribution is added;
// - float avg and pre-multiplied sum multiply each rank's own input by the scalar before it enters
//   the sum (fp16/bf16/fp8 in float, then rounded to the type);
// - band/bor/bxor (bitwise and, or, exclusive or) are for the integer types only (RedOpTable::check
//   refuses them on floating types, so the floating ops below never see them);
// - min/max propagate NaN; fp16/bf16/fp8 compute each step in float and round to the type;
// - a NaN result of an op or a pre-multiplication is the type's positive quiet NaN without payload
//   (float 0x7fc00000, double 0x7ff8000000000000, fp16 0x7e00, ...). Which operand's NaN comes out,
//   and whether its payload survives, differs between x86 (the first operand's, quieted; the
//   compiler may swap operands) and the GPU (float: 0x7fffffff), so every path (scalar, vector,
//   F16C, device) makes it this one. Subnormals are kept everywhere (no flush to zero: nvcc's
//   default without fast math, and no contraction into FMA on either side, cmake/cuda.cmake).
//
// The two building blocks every schedule needs:
//   pre(dst, src, n):                dst = pre(src)                  (a rank's first contribution)
//   reduce(dst, recv, local, n, last): dst = post?(recv OP pre(local)) (add the local contribution)
// dst may alias either input exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "include/chorus/chorus.h"
#include "kernels/numeric.h"

namespace chorus {

enum class RedKind : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kBand = 4, kBor = 5, kBxor = 6 };

// Whether `k` is one of the bitwise operators, defined for integer types only.
constexpr bool isBitwise(RedKind k) { return k == RedKind::kBand || k == RedKind::kBor || k == RedKind::kBxor; }

// What one reduction does, resolved from (op, type, nranks) at plan time. Trivially copyable so a
// device kernel can take it by value.
struct ReduceSpec {
  RedKind kind = RedKind::kSum;
  bool hasPre = false;      // multiply each local input by the scalar first
  bool hasPostDiv = false;  // divide the final sum by `divisor` (integer avg)
  double scaleF = 1.0;      // floating types' scalar
  uint64_t scaleI = 1;      // integer types' scalar (pre-multiplied sum)
  uint64_t divisor = 1;
  // A pre-multiplied sum's scalar in device memory (chorusScalarDevice on device buffers): read by
  // the kernel when it runs, in the stream's order (setScale), not when the call is planned.
  const void* scalePtr = nullptr;
};

template <typename T>
struct IsLowFloat : std::false_type {};
template <>
struct IsLowFloat<Half> : std::true_type {};
template <>
struct IsLowFloat<BFloat16> : std::true_type {};
template <>
struct IsLowFloat<Fp8E4M3> : std::true_type {};
template <>
struct IsLowFloat<Fp8E5M2> : std::true_type {};

template <typename T>
CHORUS_HD T loadElem(const void* p, size_t i) {
  T v;
  __builtin_memcpy(&v, static_cast<const char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}

// Sets s's scalar from one `type` element at `v` (native byte order): signed integers
// sign-extended into scaleI, unsigned ones zero-extended, floating types into scaleF.
CHORUS_HD void setScale(ReduceSpec& s, int type, const void* v) {
  switch (type) {
    case chorusInt8:
      s.scaleI = static_cast<uint64_t>(static_cast<int64_t>(loadElem<int8_t>(v, 0)));
      return;
    case chorusUint8:
      s.scaleI = loadElem<uint8_t>(v, 0);
      return;
    case chorusInt32:
      s.scaleI = static_cast<uint64_t>(static_cast<int64_t>(loadElem<int32_t>(v, 0)));
      return;
    case chorusUint32:
      s.scaleI = loadElem<uint32_t>(v, 0);
      return;
    case chorusInt64:
    case chorusUint64:
      s.scaleI = loadElem<uint64_t>(v, 0);
      return;
    case chorusFloat16:
      s.scaleF = toFloat(loadElem<Half>(v, 0));
      return;
    case chorusBfloat16:
      s.scaleF = toFloat(loadElem<BFloat16>(v, 0));
      return;
    case chorusFloat8e4m3:
      s.scaleF = toFloat(loadElem<Fp8E4M3>(v, 0));
      return;
    case chorusFloat8e5m2:
      s.scaleF = toFloat(loadElem<Fp8E5M2>(v, 0));
      return;
    case chorusFloat32:
      s.scaleF = loadElem<float>(v, 0);
      return;
    default:
      s.scaleF = loadElem<double>(v, 0);
      return;
  }
}
template <typename T>
CHORUS_HD void storeElem(void* p, size_t i, T v) {
  __builtin_memcpy(static_cast<char*>(p) + i * sizeof(T), &v, sizeof(T));
}

template <typename F>
CHORUS_HD F floatOp(RedKind k, F a, F b) {
  switch (k) {
    case RedKind::kSum:
      return a + b;
    case RedKind::kProd:
      return a * b;
    case RedKind::kMax:
      return (a != a || b != b) ? (a + b) : (a > b ? a : b);  // a+b is NaN when either is
    default:                                                  // kMin (the bitwise kinds never reach a floating type)
      return (a != a || b != b) ? (a + b) : (a < b ? a : b);
  }
}

// The rule for NaN results above: NaN compares unequal to itself in every IEEE mode we build with.
template <typename F>
CHORUS_HD F quietNan(F r) {
  return r != r ? F(NAN) : r;
}

template <typename T>
CHORUS_HD T intOp(RedKind k, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (k) {
    case RedKind::kSum:
      return T(U(a) + U(b));
    case RedKind::kProd:
      return T(U(a) * U(b));
    case RedKind::kMax:
      return a > b ? a : b;
    case RedKind::kMin:
      return a < b ? a : b;
    case RedKind::kBand:
      return T(U(a) & U(b));
    case RedKind::kBor:
      return T(U(a) | U(b));
    default:
      return T(U(a) ^ U(b));
  }
}

// Per-type arithmetic: the value after pre, one op step, and the final division.
template <typename T, typename Enable = void>
struct ElemOps;

template <typename T>
struct ElemOps<T, std::enable_if_t<std::is_integral_v<T>>> {
  CHORUS_HD static T pre(const ReduceSpec& s, T x) {
    using U = std::make_unsigned_t<T>;
    return s.hasPre ? T(U(x) * U(s.scaleI)) : x;
  }
  CHORUS_HD static T op(const ReduceSpec& s, T a, T b) { return intOp<T>(s.kind, a, b); }
  CHORUS_HD static T post(const ReduceSpec& s, T x) {
    if (!s.hasPostDiv) return x;
    if constexpr (std::is_signed_v<T>) {
      return T(int64_t(x) / int64_t(s.divisor));
    } else {
      return T(uint64_t(x) / s.divisor);
    }
  }
};

// a * b rounded on its own: nvcc contracts a product and the sum it feeds into one fused
// multiply-add, rounded once where the host rounds twice, so a pre-multiplied sum (a float
// average on 3 ranks: the scalar 1/3 is inexact) would differ from the host path's in the last bit.
template <typename T>
CHORUS_HD T mulRounded(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) return __fmul_rn(a, b);
  if constexpr (std::is_same_v<T, double>) return __dmul_rn(a, b);
#endif
  return a * b;
}

template <typename T>
struct ElemOps<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  // Without a scalar, pre is a copy: a NaN keeps its bits, as a copy does on every path.
  CHORUS_HD static T pre(const ReduceSpec& s, T x) { return s.hasPre ? quietNan(mulRounded(x, T(s.scaleF))) : x; }
  CHORUS_HD static T op(const ReduceSpec& s, T a, T b) { return quietNan(floatOp<T>(s.kind, a, b)); }
  CHORUS_HD static T post(const ReduceSpec&, T x) { return x; }
};

template <typename T>
struct ElemOps<T, std::enable_if_t<IsLowFloat<T>::value>> {
  CHORUS_HD static T pre(const ReduceSpec& s, T x) {
    return s.hasPre ? fromFloat<T>(quietNan(mulRounded(toFloat(x), float(s.scaleF)))) : x;
  }
  CHORUS_HD static T op(const ReduceSpec& s, T a, T b) {
    return fromFloat<T>(quietNan(floatOp<float>(s.kind, toFloat(a), toFloat(b))));
  }
  CHORUS_HD static T post(const ReduceSpec&, T x) { return x; }
};

// One element: post?(recv OP pre(local)). Host loops and device threads both use it.
template <typename T>
CHORUS_HD T reduceOne(const ReduceSpec& s, T recv, T local, bool last) {
  T v = ElemOps<T>::op(s, recv, ElemOps<T>::pre(s, local));
  return (last && s.hasPostDiv) ? ElemOps<T>::post(s, v) : v;
}

// dst = pre(src) over n elements; when there is no pre this is a copy.
template <typename T>
CHORUS_HD void reducePre(const ReduceSpec& s, void* dst, const void* src, size_t n) {
  for (size_t i = 0; i < n; ++i) storeElem<T>(dst, i, ElemOps<T>::pre(s, loadElem<T>(src, i)));
}

// The element loop with the operator and the pre-multiplication fixed at compile time, so it
// carries no per-element branches on the spec and vectorises where the type allows.
template <typename T, RedKind K, bool kPre>
CHORUS_HD void reduceLoop(const ReduceSpec& spec, void* dst, const void* recv, const void* local, size_t n) {
  ReduceSpec s = spec;
  s.kind = K;
  s.hasPre = kPre;
  for (size_t i = 0; i < n; ++i) {
    const T l = loadElem<T>(local, i);
    storeElem<T>(dst, i, ElemOps<T>::op(s, loadElem<T>(recv, i), kPre ? ElemOps<T>::pre(s, l) : l));
  }
}

template <typename T, bool kPre>
CHORUS_HD void reduceLoopFor(const ReduceSpec& s, void* dst, const void* recv, const void* local, size_t n) {
  switch (s.kind) {
    case RedKind::kSum:
      reduceLoop<T, RedKind::kSum, kPre>(s, dst, recv, local, n);
      break;
    case RedKind::kProd:
      reduceLoop<T, RedKind::kProd, kPre>(s, dst, recv, local, n);
      break;
    case RedKind::kMax:
      reduceLoop<T, RedKind::kMax, kPre>(s, dst, recv, local, n);
      break;
    case RedKind::kMin:
      reduceLoop<T, RedKind::kMin, kPre>(s, dst, recv, local, n);
      break;
    case RedKind::kBand:  // the bitwise kinds: integer types only (RedOpTable::check)
      reduceLoop<T, RedKind::kBand, kPre>(s, dst, recv, local, n);
      break;
    case RedKind::kBor:
      reduceLoop<T, RedKind::kBor, kPre>(s, dst, recv, local, n);
      break;
    default:
      reduceLoop<T, RedKind::kBxor, kPre>(s, dst, recv, local, n);
      break;
  }
}

// dst = recv OP pre(local), then post when `last` (the final contribution).
template <typename T>
CHORUS_HD void reduceStep(const ReduceSpec& s, void* dst, const void* recv, const void* local, size_t n, bool last) {
  if (last && s.hasPostDiv) {
    for (size_t i = 0; i < n; ++i)
      storeElem<T>(dst, i, reduceOne<T>(s, loadElem<T>(recv, i), loadElem<T>(local, i), true));
    return;
  }
  if (s.hasPre) {
    reduceLoopFor<T, true>(s, dst, recv, local, n);
  } else {
    reduceLoopFor<T, false>(s, dst, recv, local, n);
  }
}

// Calls f.template operator()<T>() for the C type of `type` (a chorusDataType_t value). Host only:
// it picks which instantiation to run.
template <typename F>
inline void dispatchType(int type, F&& f) {
  switch (type) {
    case 0:
      f.template operator()<int8_t>();
      break;
    case 1:
      f.template operator()<uint8_t>();
      break;
    case 2:
      f.template operator()<int32_t>();
      break;
    case 3:
      f.template operator()<uint32_t>();
      break;
    case 4:
      f.template operator()<int64_t>();
      break;
    case 5:
      f.template operator()<uint64_t>();
      break;
    case 6:
      f.template operator()<Half>();
      break;
    case 7:
      f.template operator()<float>();
      break;
    case 8:
      f.template operator()<double>();
      break;
    case 9:
      f.template operator()<BFloat16>();
      break;
    case 10:
      f.template operator()<Fp8E4M3>();
      break;
    default:
      f.template operator()<Fp8E5M2>();
      break;
  }
}

}  // namespace chorus
