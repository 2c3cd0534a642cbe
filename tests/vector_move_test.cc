// The device executor's vector moves (src/device/vector_moves.h: copyVectors, foldVectors,
// reduceVectors), called directly: every type, operator and fold, over a range that gives each
// thread whole groups of kMoveUnroll vectors and a tail, each thread of a block called in turn.
// Every element of every destination is checked against a reference written here (the operator
// of tests/ref_ops.h, in float for the narrow floating types, whose conversions numeric_test
// checks), and the bytes around the range must be untouched.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "src/device/lane_exec.h"
#include "tests/ref_ops.h"

using namespace chorus;
using namespace chorus::device;
using test::sameBits;

namespace {

constexpr unsigned kThreads = 3;
// Two full groups per thread and a tail of 5 vectors shared unevenly.
constexpr size_t kVectors = 2 * kMoveUnroll * kThreads + 5;
// Bytes before the range (at) and around it that must stay as they were.
constexpr size_t kAt = 32;
constexpr size_t kPad = 48;
constexpr uint8_t kSentinel = 0xa5;

template <typename T>
constexpr bool kNarrow = IsLowFloat<T>::value;

// Small values: sums and products stay finite and, for the floating types, are exact enough that
// the reference's rounding is the only rounding.
template <typename T>
T value(std::mt19937_64& rng) {
  const int v = static_cast<int>(rng() % 7) - 3;
  if constexpr (kNarrow<T>) {
    return fromFloat<T>(static_cast<float>(v) / 2);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v) / 2;
  } else {
    return static_cast<T>(rng());
  }
}

template <typename T>
T refPre(const ReduceSpec& s, T x) {
  if (!s.hasPre) return x;
  if constexpr (kNarrow<T>) {
    return fromFloat<T>(toFloat(x) * static_cast<float>(s.scaleF));
  } else if constexpr (std::is_floating_point_v<T>) {
    return x * static_cast<T>(s.scaleF);
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(s.scaleI));
  }
}

// The operator, in float for the narrow floating types.
template <typename T>
T refOp(RedKind k, T a, T b) {
  if constexpr (kNarrow<T>) {
    return fromFloat<T>(test::refOp<float>(k, toFloat(a), toFloat(b)));
  } else {
    return test::refOp<T>(k, a, b);
  }
}

template <typename T>
T refPost(const ReduceSpec& s, T x) {
  if constexpr (std::is_integral_v<T>) {
    if (s.hasPostDiv) {
      if constexpr (std::is_signed_v<T>) return static_cast<T>(int64_t(x) / int64_t(s.divisor));
      return static_cast<T>(uint64_t(x) / s.divisor);
    }
  }
  return x;
}

template <typename T>
T get(const std::vector<uint8_t>& buf, size_t i) {
  T x;
  std::memcpy(&x, buf.data() + kAt + i * sizeof(T), sizeof(T));
  return x;
}

template <typename T>
std::vector<uint8_t> randomBuffer(std::mt19937_64& rng) {
  std::vector<uint8_t> buf(kAt + kVectors * 16 + kPad, kSentinel);
  for (size_t i = 0; i < kVectors * 16 / sizeof(T); ++i) {
    const T x = value<T>(rng);
    std::memcpy(buf.data() + kAt + i * sizeof(T), &x, sizeof(T));
  }
  return buf;
}

// A destination: the sentinel everywhere; the move must write exactly [kAt, kAt + kVectors * 16).
std::vector<uint8_t> sentinelBuffer() { return std::vector<uint8_t>(kAt + kVectors * 16 + kPad, kSentinel); }

bool untouchedAround(const std::vector<uint8_t>& buf) {
  for (size_t i = 0; i < buf.size(); ++i) {
    if ((i < kAt || i >= kAt + kVectors * 16) && buf[i] != kSentinel) return false;
  }
  return true;
}

// The specs a fold is checked with: each operator, with and without a pre-op, and for the
// integer types a division after the last contribution (an integer average).
template <typename T>
std::vector<ReduceSpec> specs() {
  std::vector<ReduceSpec> out;
  for (RedKind k : test::kindsFor<T>()) {
    for (bool pre : {false, true}) {
      ReduceSpec s;
      s.kind = k;
      s.hasPre = pre;
      s.scaleF = 0.5;
      s.scaleI = 3;
      if (std::is_integral_v<T> && pre) {
        s.hasPostDiv = true;
        s.divisor = 3;
      }
      out.push_back(s);
    }
  }
  return out;
}

template <typename T>
void checkFolds() {
  constexpr size_t kPer = 16 / sizeof(T);
  std::mt19937_64 rng(sizeof(T) * 7919 + (kNarrow<T> ? 1 : 0));
  for (const ReduceSpec& spec : specs<T>()) {
    for (Fold fold : {Fold::kPre, Fold::kReduce, Fold::kReducePost}) {
      for (bool preA : {false, true}) {
        if (fold == Fold::kPre && preA) continue;
        INFO("kind " << int(spec.kind) << " pre " << spec.hasPre << " fold " << int(fold) << " preA " << preA);
        const std::vector<uint8_t> a = randomBuffer<T>(rng);
        const std::vector<uint8_t> b = randomBuffer<T>(rng);
        std::vector<uint8_t> dst = sentinelBuffer();
        std::vector<uint8_t> dst2 = sentinelBuffer();
        // The executor passes preA only where the lane has a pre-op (LaneExec::elemFold).
        const ElemFold f{fold, preA && spec.hasPre, spec};
        for (unsigned t = 0; t < kThreads; ++t) {
          const char* bp = fold == Fold::kPre ? nullptr : reinterpret_cast<const char*>(b.data()) + kAt;
          foldVectors<T>(
              VecMove{reinterpret_cast<const char*>(a.data()) + kAt, bp, reinterpret_cast<char*>(dst.data()) + kAt,
                      reinterpret_cast<char*>(dst2.data()) + kAt, kVectors, t, kThreads},
              f);
        }
        size_t wrong = 0;
        for (size_t i = 0; i < kVectors * kPer; ++i) {
          const T x = get<T>(a, i);
          T want;
          if (fold == Fold::kPre) {
            want = refPre(spec, x);
          } else {
            ReduceSpec withPre = spec;
            withPre.hasPre = true;
            const T pa = f.preA ? refPre(withPre, x) : x;
            want = refOp(spec.kind, pa, refPre(spec, get<T>(b, i)));
            if (fold == Fold::kReducePost) want = refPost(spec, want);
          }
          if (!sameBits(get<T>(dst, i), want) || !sameBits(get<T>(dst2, i), want)) ++wrong;
        }
        CHECK(wrong == 0);
        CHECK(untouchedAround(dst));
        CHECK(untouchedAround(dst2));
      }
    }
  }
}

template <typename T>
void checkReduce() {
  constexpr size_t kPer = 16 / sizeof(T);
  std::mt19937_64 rng(sizeof(T) * 104729 + (kNarrow<T> ? 1 : 0));
  for (const ReduceSpec& spec : specs<T>()) {
    for (uint32_t n = 1; n <= 4; ++n) {
      INFO("kind " << int(spec.kind) << " pre " << spec.hasPre << " ranks " << n);
      std::vector<std::vector<uint8_t>> in;
      std::vector<std::vector<uint8_t>> out;
      std::vector<const char*> inp;
      std::vector<char*> outp;
      for (uint32_t r = 0; r < n; ++r) in.push_back(randomBuffer<T>(rng));
      for (uint32_t r = 0; r < n; ++r) out.push_back(sentinelBuffer());
      for (uint32_t r = 0; r < n; ++r) {
        inp.push_back(reinterpret_cast<const char*>(in[r].data()));
        outp.push_back(reinterpret_cast<char*>(out[r].data()));
      }
      // With three ranks, the second output is skipped (one-copy's in-place copies).
      const int32_t skip = n == 3 ? 1 : -1;
      for (unsigned t = 0; t < kThreads; ++t) {
        reduceVectors<T>(VecReduce{inp.data(), outp.data(), n, n, kAt, kAt, kVectors, t, kThreads, skip}, spec);
      }
      size_t wrong = 0;
      for (size_t i = 0; i < kVectors * kPer; ++i) {
        T want = refPre(spec, get<T>(in[0], i));
        for (uint32_t r = 1; r < n; ++r) want = refOp(spec.kind, want, refPre(spec, get<T>(in[r], i)));
        if (n > 1) want = refPost(spec, want);
        for (uint32_t r = 0; r < n; ++r) {
          if (static_cast<int32_t>(r) != skip) wrong += sameBits(get<T>(out[r], i), want) ? 0 : 1;
        }
      }
      CHECK(wrong == 0);
      for (uint32_t r = 0; r < n; ++r) {
        if (static_cast<int32_t>(r) == skip) {
          CHECK(out[r] == sentinelBuffer());  // the output skipped is not written at all
        } else {
          CHECK(untouchedAround(out[r]));
        }
      }
    }
  }
}

using AllTypes =
    std::tuple<int8_t, uint8_t, int32_t, uint32_t, int64_t, uint64_t, Half, float, double, BFloat16, Fp8E4M3, Fp8E5M2>;

}  // namespace

TEST_CASE("vector moves: a copy reaches both destinations, or only the second", "[device_lane]") {
  std::mt19937_64 rng(11);
  const std::vector<uint8_t> a = randomBuffer<uint64_t>(rng);
  for (bool first : {true, false}) {
    std::vector<uint8_t> dst = sentinelBuffer();
    std::vector<uint8_t> dst2 = sentinelBuffer();
    for (unsigned t = 0; t < kThreads; ++t) {
      copyVectors(VecMove{reinterpret_cast<const char*>(a.data()) + kAt, nullptr,
                          first ? reinterpret_cast<char*>(dst.data()) + kAt : nullptr,
                          reinterpret_cast<char*>(dst2.data()) + kAt, kVectors, t, kThreads});
    }
    CHECK(std::memcmp(dst2.data() + kAt, a.data() + kAt, kVectors * 16) == 0);
    CHECK(untouchedAround(dst2));
    if (first) {
      CHECK(std::memcmp(dst.data() + kAt, a.data() + kAt, kVectors * 16) == 0);
      CHECK(untouchedAround(dst));
    } else {
      CHECK(dst == sentinelBuffer());
    }
  }
}

TEMPLATE_LIST_TEST_CASE("vector moves: every fold and operator, element by element", "[device_lane]", AllTypes) {
  checkFolds<TestType>();
}

TEMPLATE_LIST_TEST_CASE("vector moves: one-copy's reduction of n ranks, element by element", "[device_lane]",
                        AllTypes) {
  checkReduce<TestType>();
}
