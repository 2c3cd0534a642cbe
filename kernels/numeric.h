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

  CHORUS_HD static float maxFinite() {
    return std::ldexp(1.0f + float(kMaxMantAtTop) / float(1u << M), kMaxExpField - kBias);
  }

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
      v = std::ldexp(float(mant), 1 - kBias - M);
    } else {
      v = std::ldexp(float(mant | (1u << M)), int(expField) - kBias - M);
    }
    return sign ? -v : v;
  }

  CHORUS_HD static uint32_t encode(float x) {
    const uint32_t signBit = std::signbit(x) ? (1u << (E + M)) : 0u;
    const uint32_t nanBits = kIeeeSpecials ? (((1u << E) - 1) << M) | (1u << (M - 1)) : (1u << (E + M)) - 1;
    const uint32_t infBits = ((1u << E) - 1) << M;
    const uint32_t maxBits = (uint32_t(kMaxExpField) << M) | kMaxMantAtTop;
    if (std::isnan(x)) return signBit | nanBits;
    double a = std::fabs(double(x));
    if (std::isinf(x)) return signBit | (kSaturate || !kIeeeSpecials ? maxBits : infBits);
    if (a == 0.0) return signBit;
    int e;
    (void)std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the leading bit has weight 2^(e-1)
    int lead = e - 1;
    if (lead < 1 - kBias) lead = 1 - kBias;  // subnormal range: fixed quantum
    const double quantum = std::ldexp(1.0, lead - M);
    const double q = std::nearbyint(a / quantum) * quantum;  // round half to even
    const double maxV = double(maxFinite());
    if (q > maxV) {
      // Past the largest finite value: IEEE formats round to inf once beyond max + half an ulp.
      if (kSaturate || !kIeeeSpecials) return signBit | maxBits;
      return signBit | infBits;
    }
    if (q == 0.0) return signBit;
    int qe;
    (void)std::frexp(q, &qe);
    const int qlead = qe - 1;
    if (qlead < 1 - kBias) {
      return signBit | uint32_t(q / std::ldexp(1.0, 1 - kBias - M));
    }
    const uint32_t mant = uint32_t(q / std::ldexp(1.0, qlead - M)) - (1u << M);
    return signBit | (uint32_t(qlead + kBias) << M) | mant;
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
