// Element types and their conversions, written once for host and device.
//
// fp16, bf16 and the two fp8 formats are stored as raw bits and computed in float. Conversions
// from float round to nearest even. fp16 and bf16 overflow to infinity as IEEE does; the fp8
// formats saturate to their largest finite value (infinities too), as NCCL's fp8 reductions do;
// NaN stays NaN everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/hd.h"

namespace chorus {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};

// A small binary float format: E exponent bits, M mantissa bits.
// kIeeeSpecials: the top exponent encodes inf/NaN (fp16, bf16, e5m2); otherwise only the all-ones
// pattern is NaN (e4m3 "fn").
template <int E, int M, bool kIeeeSpecials, bool kSaturate>
struct MiniFloat {
  static constexpr int kBias = (1 << (E - 1)) - 1;
  static constexpr int kMaxExpField = kIeeeSpecials ? (1 << E) - 2 : (1 << E) - 1;
  static constexpr uint32_t kMaxMantAtTop = kIeeeSpecials ? (1u << M) - 1 : (1u << M) - 2;

  // 2^k for k in float's normal range, built from its bits (exact, and constant-folded).
  CHORUS_HD static float pow2(int k) {
    const uint32_t u = uint32_t(k + 127) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }

  CHORUS_HD static float maxFinite() {
    return (1.0f + float(kMaxMantAtTop) / float(1u << M)) * pow2(kMaxExpField - kBias);
  }

  // Bit manipulation only: every value of the format is a float, so decoding is exact.
  CHORUS_HD static float decode(uint32_t bits) {
    const uint32_t sign = (bits >> (E + M)) & 1u;
    const uint32_t expField = (bits >> M) & ((1u << E) - 1);
    const uint32_t mant = bits & ((1u << M) - 1);
    float v;
    if (kIeeeSpecials && expField == (1u << E) - 1) {
      v = mant ? NAN : INFINITY;
    } else if (!kIeeeSpecials && expField == (1u << E) - 1 && mant == (1u << M) - 1) {
      v = NAN;
    } else if (expField == 0) {
      v = float(mant) * pow2(1 - kBias - M);  // subnormal: an exact small integer times 2^k
    } else {
      const uint32_t u = ((expField + 127u - uint32_t(kBias)) << 23) | (mant << (23 - M));
      memcpy(&v, &u, 4);
    }
    return sign ? -v : v;
  }

  // Round to nearest, ties to even, on float's bits.
  CHORUS_HD static uint32_t encode(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t signBit = (u >> 31) ? (1u << (E + M)) : 0u;
    const uint32_t nanBits = kIeeeSpecials ? (((1u << E) - 1) << M) | (1u << (M - 1)) : (1u << (E + M)) - 1;
    const uint32_t infBits = ((1u << E) - 1) << M;
    const uint32_t maxBits = (uint32_t(kMaxExpField) << M) | kMaxMantAtTop;
    const uint32_t overflowBits = (kSaturate || !kIeeeSpecials) ? maxBits : infBits;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return signBit | nanBits;
    if (u == 0x7f800000u) return signBit | overflowBits;
    const int floatExp = int(u >> 23) - 127;
    if (floatExp >= 1 - kBias) {
      // A normal of the format (or past its largest): drop 23 - M mantissa bits, rounding half to
      // even; a carry runs into the exponent, as it should.
      constexpr int kShift = 23 - M;
      const uint32_t r = (u + ((1u << (kShift - 1)) - 1) + ((u >> kShift) & 1u)) >> kShift;
      const int expField = int(r >> M) - 127 + kBias;
      const uint32_t mant = r & ((1u << M) - 1);
      // Past the largest finite value after rounding (IEEE formats: from max + half an ulp).
      if (expField > kMaxExpField || (expField == kMaxExpField && mant > kMaxMantAtTop)) {
        return signBit | overflowBits;
      }
      return signBit | (uint32_t(expField) << M) | mant;
    }
    // Below the smallest normal: a multiple of 2^(1 - bias - M). The scaling is exact; the
    // result is an integer up to 2^M (2^M itself is the smallest normal's encoding).
    float a;
    memcpy(&a, &u, 4);
    const float scaled = a * pow2(M + kBias - 1);
    const float fl = floorf(scaled);
    const float diff = scaled - fl;
    uint32_t q = uint32_t(fl);
    if (diff > 0.5f || (diff == 0.5f && (q & 1u))) ++q;
    return signBit | q;
  }
};

using HalfFormat = MiniFloat<5, 10, true, false>;
using E4M3Format = MiniFloat<4, 3, false, true>;
using E5M2Format = MiniFloat<5, 2, true, true>;

CHORUS_HD float toFloat(Half h) { return HalfFormat::decode(h.bits); }
CHORUS_HD float toFloat(Fp8E4M3 h) { return E4M3Format::decode(h.bits); }
CHORUS_HD float toFloat(Fp8E5M2 h) { return E5M2Format::decode(h.bits); }
CHORUS_HD float toFloat(BFloat16 h) {
  uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
CHORUS_HD T fromFloat(float x);
template <>
CHORUS_HD Half fromFloat<Half>(float x) {
  return Half{uint16_t(HalfFormat::encode(x))};
}
template <>
CHORUS_HD Fp8E4M3 fromFloat<Fp8E4M3>(float x) {
  return Fp8E4M3{uint8_t(E4M3Format::encode(x))};
}
template <>
CHORUS_HD Fp8E5M2 fromFloat<Fp8E5M2>(float x) {
  return Fp8E5M2{uint8_t(E5M2Format::encode(x))};
}
template <>
CHORUS_HD BFloat16 fromFloat<BFloat16>(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{uint16_t(u >> 16)};
}

}  // namespace chorus
