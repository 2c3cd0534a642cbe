// One floating-point element of a chorusDataType_t buffer as a double, both ways (host code:
// the test grid and the perf tools' checks). fp16, bf16 and fp8 go through float.
#pragma once

#include <cstring>

#include "include/chorus/chorus.h"
#include "kernels/numeric.h"

namespace chorus {

// The bits of a T at `p`, which need not be aligned (the grid misaligns buffers on purpose).
template <typename T>
inline T loadBits(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// `type` must be a floating type; float64 is the fallback.
inline double loadFloatElem(chorusDataType_t type, const void* p) {
  switch (type) {
    case chorusFloat16:
      return toFloat(Half{loadBits<uint16_t>(p)});
    case chorusBfloat16:
      return toFloat(BFloat16{loadBits<uint16_t>(p)});
    case chorusFloat8e4m3:
      return toFloat(Fp8E4M3{*static_cast<const uint8_t*>(p)});
    case chorusFloat8e5m2:
      return toFloat(Fp8E5M2{*static_cast<const uint8_t*>(p)});
    case chorusFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

// Rounds `v` to T and stores its bits.
template <typename T>
inline void storeLowFloat(void* p, double v) {
  const auto bits = fromFloat<T>(static_cast<float>(v)).bits;
  std::memcpy(p, &bits, sizeof(bits));
}

// Rounds `v` to the floating type and stores its bits; float64 is the fallback.
inline void storeFloatElem(chorusDataType_t type, void* p, double v) {
  switch (type) {
    case chorusFloat16:
      return storeLowFloat<Half>(p, v);
    case chorusBfloat16:
      return storeLowFloat<BFloat16>(p, v);
    case chorusFloat8e4m3:
      return storeLowFloat<Fp8E4M3>(p, v);
    case chorusFloat8e5m2:
      return storeLowFloat<Fp8E5M2>(p, v);
    case chorusFloat32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    default:
      std::memcpy(p, &v, 8);
      return;
  }
}

}  // namespace chorus
