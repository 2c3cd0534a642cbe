// The reductions' reference for the tests: one element at a time, in the obvious way, written
// apart from kernels/reduce.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/reduce.h"

namespace chorus::test {

// The rule of kernels/reduce.h: a NaN result is the positive quiet NaN without payload.
template <typename T>
T quiet(T r) {
  return std::isnan(r) ? T(NAN) : r;
}

// One step of operator k on floating or integer values (integers wrap; the bitwise operators are
// for integers only).
template <typename T>
T refOp(RedKind k, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return T(NAN);
    switch (k) {
      case RedKind::kSum:
        return quiet(a + b);
      case RedKind::kProd:
        return quiet(a * b);
      case RedKind::kMax:
        return a > b ? a : b;  // equal (+0 and -0): the second operand, as the kernels
      default:
        return a < b ? a : b;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (k) {
      case RedKind::kSum:
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case RedKind::kProd:
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case RedKind::kMax:
        return std::max(a, b);
      case RedKind::kMin:
        return std::min(a, b);
      case RedKind::kBand:
        return static_cast<T>(static_cast<U>(a) & static_cast<U>(b));
      case RedKind::kBor:
        return static_cast<T>(static_cast<U>(a) | static_cast<U>(b));
      default:
        return static_cast<T>(static_cast<U>(a) ^ static_cast<U>(b));
    }
  }
}

// The operators a type has: the bitwise ones for integers only.
template <typename T>
std::vector<RedKind> kindsFor() {
  if constexpr (std::is_integral_v<T>) {
    return {RedKind::kSum, RedKind::kProd, RedKind::kMax, RedKind::kMin, RedKind::kBand, RedKind::kBor, RedKind::kBxor};
  } else {
    return {RedKind::kSum, RedKind::kProd, RedKind::kMax, RedKind::kMin};
  }
}

// Bit for bit: NaNs too (their payload and sign are part of the rule), and -0 is not +0.
template <typename T>
bool sameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

}  // namespace chorus::test
