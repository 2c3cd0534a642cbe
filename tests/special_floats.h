// Special values of every floating type, for the reduction tests (host paths and the device's):
// subnormals, signed zeros, the extremes of the normals, infinities, and NaNs with payloads and
// either sign (quiet and signalling). A test sprinkles them among ordinary values so that pairs of
// them meet too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>

#include "include/chorus/chorus.h"

namespace chorus::test {

inline constexpr uint32_t kSpecialFloat32[] = {0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00400000,
                                               0x00000000, 0x80000000, 0x00800000, 0x80800000, 0x7f7fffff,
                                               0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                                               0x7fc00001, 0xffd23456, 0x7f800001, 0xffbfffff, 0x7fffffff};
inline constexpr uint64_t kSpecialFloat64[] = {
    0x0000000000000001, 0x8000000000000001, 0x000fffffffffffff, 0x800fffffffffffff, 0x0000000000000000,
    0x8000000000000000, 0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff, 0x7ff0000000000000,
    0xfff0000000000000, 0x7ff8000000000000, 0xfff8000000000000, 0x7ff8000000000123, 0xfffa5a5a5a5a5a5a,
    0x7ff0000000000001, 0x7fffffffffffffff};
// fp16 and bf16: the same kinds in their formats.
inline constexpr uint16_t kSpecialFloat16[] = {0x0001, 0x8001, 0x03ff, 0x83ff, 0x0000, 0x8000, 0x0400, 0x7bff,
                                               0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e01, 0xfd55, 0x7c01};
inline constexpr uint16_t kSpecialBfloat16[] = {0x0001, 0x8001, 0x007f, 0x807f, 0x0000, 0x8000, 0x0080, 0x7f7f,
                                                0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fc1, 0xffa5, 0x7f81};
// fp8 e4m3 has no infinities and one NaN pattern per sign; e5m2 is IEEE-like.
inline constexpr uint8_t kSpecialE4M3[] = {0x01, 0x81, 0x07, 0x87, 0x00, 0x80, 0x08, 0x7e, 0xfe, 0x7f, 0xff};
inline constexpr uint8_t kSpecialE5M2[] = {0x01, 0x81, 0x03, 0x83, 0x00, 0x80, 0x04, 0x7b,
                                           0xfb, 0x7c, 0xfc, 0x7e, 0xfe, 0x7d, 0xff};

template <typename T, size_t N>
T pick(const T (&table)[N], uint64_t r) {
  return table[r % N];
}

// A special value of float or double, chosen by `r`.
template <typename F>
F specialFloat(uint64_t r) {
  F v;
  if constexpr (sizeof(F) == 4) {
    const uint32_t bits = pick(kSpecialFloat32, r);
    std::memcpy(&v, &bits, 4);
  } else {
    const uint64_t bits = pick(kSpecialFloat64, r);
    std::memcpy(&v, &bits, 8);
  }
  return v;
}

// Overwrites about one element in `every` of the `n` elements of type `type` (a chorusDataType_t)
// at `p` with a special value; integer types are left alone.
inline void sprinkleSpecials(int type, unsigned char* p, size_t n, std::mt19937& rng, unsigned every = 4) {
  for (size_t i = 0; i < n; ++i) {
    if (rng() % every != 0) continue;
    const uint64_t r = rng();
    switch (type) {
      case chorusFloat16: {
        const uint16_t b = pick(kSpecialFloat16, r);
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case chorusBfloat16: {
        const uint16_t b = pick(kSpecialBfloat16, r);
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case chorusFloat32: {
        const uint32_t b = pick(kSpecialFloat32, r);
        std::memcpy(p + 4 * i, &b, 4);
        break;
      }
      case chorusFloat64: {
        const uint64_t b = pick(kSpecialFloat64, r);
        std::memcpy(p + 8 * i, &b, 8);
        break;
      }
      case chorusFloat8e4m3:
        p[i] = pick(kSpecialE4M3, r);
        break;
      case chorusFloat8e5m2:
        p[i] = pick(kSpecialE5M2, r);
        break;
      default:
        return;
    }
  }
}

}  // namespace chorus::test
