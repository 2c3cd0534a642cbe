// Conversions of fp16, bf16 and fp8 against independent references: the CPU's F16C instructions
// for fp16, and brute-force nearest-value search over every representable value for bf16 and fp8.
#include <cpuid.h>
#include <immintrin.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/numeric.h"

using namespace chorus;

namespace {

// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
bool hasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

__attribute__((target("f16c"))) float hwHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hwFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

bool sameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x;
  uint32_t y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

std::vector<float> sampleFloats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e-8f,
                          5.96e-8f,
                          448.0f,
                          464.0f,
                          480.0f,
                          57344.0f,
                          61440.0f,
                          1e30f,
                          -1e30f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(),
                          0.5f,
                          0.75f,
                          3.0f,
                          1.0f / 3.0f};
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  std::uniform_real_distribution<float> small(-600.0f, 600.0f);
  for (int i = 0; i < 200000; ++i) v.push_back(small(rng));
  return v;
}

// Brute force: the nearest of `values` (finite, with their bit patterns), ties to the even
// pattern; beyond the largest, saturate or go to inf as the format says.
struct Table {
  std::vector<std::pair<double, uint32_t>> finite;  // value, bits (non-negative values only)
  double maxFinite = 0;
};

template <typename Decode>
Table buildTable(int bits, Decode decode) {
  Table t;
  const uint32_t signBit = 1u << (bits - 1);
  for (uint32_t b = 0; b < signBit; ++b) {
    float f = decode(b);
    if (std::isfinite(f)) {
      t.finite.push_back({f, b});
      t.maxFinite = std::max<double>(t.maxFinite, f);
    }
  }
  return t;
}

uint32_t nearest(const Table& t, float x, int bits, bool saturate, uint32_t infBits, uint32_t nanBits) {
  const uint32_t signBit = 1u << (bits - 1);
  if (std::isnan(x)) return nanBits;
  const uint32_t s = std::signbit(x) ? signBit : 0;
  double a = std::fabs(static_cast<double>(x));
  if (std::isinf(x)) return s | (saturate ? 0 : infBits);  // filled by caller for saturation
  uint32_t best = 0;
  double bestErr = INFINITY;
  for (const auto& [v, b] : t.finite) {
    double err = std::fabs(v - a);
    if (err < bestErr || (err == bestErr && (b & 1) == 0)) {
      bestErr = err;
      best = b;
    }
  }
  return s | best;
}

}  // namespace

TEST_CASE("fp16 decode matches F16C for every pattern", "[numeric][f16c]") {
  // ctest runs the [f16c] cases only on CPUs with F16C (tests/needs_cpu.sh); by hand elsewhere they fail.
  if (!hasF16c()) FAIL("this CPU has no F16C, the reference for fp16 (ctest skips this case on such CPUs)");
  for (uint32_t b = 0; b < 65536; ++b) {
    const float ours = toFloat(Half{static_cast<uint16_t>(b)});
    const float hw = hwHalfToFloat(static_cast<uint16_t>(b));
    if (!sameFloat(ours, hw)) FAIL("pattern " << b << ": " << ours << " vs " << hw);
  }
}

TEST_CASE("fp16 encode matches F16C round-to-nearest-even", "[numeric][f16c]") {
  // ctest runs the [f16c] cases only on CPUs with F16C (tests/needs_cpu.sh); by hand elsewhere they fail.
  if (!hasF16c()) FAIL("this CPU has no F16C, the reference for fp16 (ctest skips this case on such CPUs)");
  size_t bad = 0;
  for (float f : sampleFloats()) {
    const uint16_t ours = fromFloat<Half>(f).bits;
    const uint16_t hw = hwFloatToHalf(f);
    const bool bothNan = std::isnan(f) && (ours & 0x7c00) == 0x7c00 && (ours & 0x3ff) && (hw & 0x3ff);
    if (ours != hw && !bothNan && ++bad < 10) FAIL_CHECK("float " << f << ": ours " << ours << " F16C " << hw);
  }
  CHECK(bad == 0);
}

TEST_CASE("bf16 encode is round-to-nearest-even of the float", "[numeric]") {
  size_t bad = 0;
  for (float f : sampleFloats()) {
    if (std::isnan(f)) {
      CHECK(std::isnan(toFloat(fromFloat<BFloat16>(f))));
      continue;
    }
    uint32_t u;
    std::memcpy(&u, &f, 4);
    // The two neighbours: truncation and the next pattern up in magnitude.
    const uint16_t lo = static_cast<uint16_t>(u >> 16);
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double dlo = std::fabs(static_cast<double>(toFloat(BFloat16{lo})) - f);
    // Past the largest finite value, the next pattern is infinity, which rounding treats as 2^128.
    double hiValue = toFloat(BFloat16{hi});
    if (std::isinf(hiValue)) hiValue = std::copysign(std::ldexp(1.0, 128), hiValue);
    const double dhi = std::fabs(hiValue - f);
    uint16_t want = dlo < dhi ? lo : (dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi));
    if ((u & 0xffff) == 0) want = lo;  // exact
    if (fromFloat<BFloat16>(f).bits != want && ++bad < 10) FAIL_CHECK("float " << f);
  }
  CHECK(bad == 0);
}

TEST_CASE("fp8 e4m3 decode and saturating encode against brute force", "[numeric]") {
  // e4m3 ("fn"): bias 7, no infinities, 0x7f/0xff are NaN, largest finite 448.
  auto refDecode = [](uint32_t b) -> float {
    const int e = (b >> 3) & 15;
    const int m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
    return static_cast<float>(v);
  };
  for (uint32_t b = 0; b < 256; ++b) {
    float want = refDecode(b & 0x7f);
    if (b & 0x80) want = -want;
    REQUIRE(sameFloat(toFloat(Fp8E4M3{static_cast<uint8_t>(b)}), want));
  }
  REQUIRE(toFloat(Fp8E4M3{0x7e}) == 448.0f);
  Table t = buildTable(8, refDecode);
  size_t bad = 0;
  for (float f : sampleFloats()) {
    uint32_t want;
    if (std::isnan(f)) {
      want = 0x7f;
      CHECK(std::isnan(toFloat(fromFloat<Fp8E4M3>(f))));
      continue;
    }
    if (std::fabs(f) >= 448.0f) {
      want = (std::signbit(f) ? 0x80 : 0) | 0x7e;  // saturate, infinities too
    } else {
      want = nearest(t, f, 8, true, 0, 0x7f);
    }
    if (fromFloat<Fp8E4M3>(f).bits != want && ++bad < 10) FAIL_CHECK("float " << f << " want " << want);
  }
  CHECK(bad == 0);
}

TEST_CASE("fp8 e5m2 decode and saturating encode against brute force", "[numeric]") {
  auto refDecode = [](uint32_t b) -> float {
    const int e = (b >> 2) & 31;
    const int m = b & 3;
    if (e == 31) return m ? NAN : INFINITY;
    double v = e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1 + m / 4.0, e - 15);
    return static_cast<float>(v);
  };
  for (uint32_t b = 0; b < 256; ++b) {
    float want = refDecode(b & 0x7f);
    if (b & 0x80) want = -want;
    REQUIRE(sameFloat(toFloat(Fp8E5M2{static_cast<uint8_t>(b)}), want));
  }
  Table t = buildTable(8, refDecode);
  size_t bad = 0;
  for (float f : sampleFloats()) {
    if (std::isnan(f)) {
      CHECK(std::isnan(toFloat(fromFloat<Fp8E5M2>(f))));
      continue;
    }
    uint32_t want;
    if (std::fabs(f) >= 57344.0f) {
      want = (std::signbit(f) ? 0x80 : 0) | 0x7b;  // saturate to 57344
    } else {
      want = nearest(t, f, 8, true, 0x7c, 0x7e);
    }
    if (fromFloat<Fp8E5M2>(f).bits != want && ++bad < 10) FAIL_CHECK("float " << f << " want " << want);
  }
  CHECK(bad == 0);
}
