// The host reductions, every ISA path, against a plain scalar reference written here.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "kernels/reduce_host.h"
#include "tests/ref_ops.h"
#include "tests/special_floats.h"

using namespace chorus;
using test::quiet;
using test::refOp;
using test::sameBits;

namespace {

// Floats are eighths from -125 to 125, and one in eight is a special value (tests/special_floats.h):
// a subnormal, a signed zero, an infinity or a NaN with a payload and either sign.
template <typename T>
std::vector<T> randomValues(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      x = static_cast<T>(static_cast<int64_t>(rng() % 2001) - 1000) / T(8);
      if (rng() % 8 == 0) x = test::specialFloat<T>(rng());
    } else {
      x = static_cast<T>(rng());
    }
  }
  return v;
}

// The kernels of one ISA. The AVX2 and AVX-512 cases carry the tags [avx2] and [avx512]; ctest
// runs them as entries of their own, only on CPUs that have the ISA (tests/needs_cpu.sh), so a
// missing ISA shows as a skipped test. Run by hand on such a CPU, they fail.
HostKernels kernelsOrFail(CpuIsa isa) {
  std::optional<HostKernels> k = hostKernelsFor(isa);
  if (!k) FAIL("this CPU cannot run " << cpuIsaName(isa) << " (ctest skips this case on such CPUs)");
  return *k;
}

template <typename T>
void checkType(int typeId, CpuIsa isa) {
  {
    const std::optional<HostKernels> k = kernelsOrFail(isa);
    for (RedKind kind : test::kindsFor<T>()) {
      for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(17), size_t(1000), size_t(4099)}) {
        auto a = randomValues<T>(n + 1, 1);
        auto b = randomValues<T>(n + 1, 2);
        std::vector<T> out(n + 1);
        ReduceSpec s;
        s.kind = kind;
        // Misaligned by one element's worth of bytes through +1 on a char view.
        std::vector<char> ra((n + 1) * sizeof(T) + 1), rb((n + 1) * sizeof(T) + 1), ro((n + 1) * sizeof(T) + 1);
        std::memcpy(ra.data() + 1, a.data(), n * sizeof(T));
        std::memcpy(rb.data() + 1, b.data(), n * sizeof(T));
        k->reduce(s, typeId, ro.data() + 1, ra.data() + 1, rb.data() + 1, n, true);
        std::memcpy(out.data(), ro.data() + 1, n * sizeof(T));
        for (size_t i = 0; i < n; ++i) {
          const T want = refOp<T>(kind, a[i], b[i]);
          if (!sameBits(out[i], want)) {
            FAIL(cpuIsaName(isa) << " type " << typeId << " op " << int(kind) << " n " << n << " element " << i);
          }
        }
      }
    }
    // Pre-multiplied sum and, for integers, the final division of avg.
    const size_t n = 1031;
    auto a = randomValues<T>(n, 3);
    auto b = randomValues<T>(n, 4);
    std::vector<T> out(n);
    ReduceSpec s;
    s.kind = RedKind::kSum;
    s.hasPre = true;
    s.scaleF = 0.5;
    s.scaleI = 3;
    if constexpr (!std::is_floating_point_v<T>) {
      s.hasPostDiv = true;
      s.divisor = 3;
    }
    k->reduce(s, typeId, out.data(), a.data(), b.data(), n, true);
    for (size_t i = 0; i < n; ++i) {
      T want;
      if constexpr (std::is_floating_point_v<T>) {
        want = quiet(a[i] + quiet(static_cast<T>(b[i] * T(0.5))));
      } else {
        using U = std::make_unsigned_t<T>;
        T sum = static_cast<T>(static_cast<U>(a[i]) + static_cast<U>(b[i]) * U(3));
        want = static_cast<T>(sum / T(3));
      }
      if (!sameBits(out[i], want)) FAIL(cpuIsaName(isa) << " pre/post type " << typeId << " element " << i);
    }
    // pre() alone.
    k->pre(s, typeId, out.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) {
      T want;
      if constexpr (std::is_floating_point_v<T>) {
        want = quiet(static_cast<T>(b[i] * T(0.5)));
      } else {
        using U = std::make_unsigned_t<T>;
        want = static_cast<T>(static_cast<U>(b[i]) * U(3));
      }
      if (!sameBits(out[i], want)) FAIL(cpuIsaName(isa) << " pre type " << typeId << " element " << i);
    }
  }
}

// fp16/bf16/fp8: every path agrees bit for bit with the scalar path on all 2^16 or 2^8 pairs'
// worth of random patterns (the scalar path's conversions are checked in numeric_test.cc).
void checkLowFloat(int typeId, size_t bytes, CpuIsa isa) {
  auto scalar = hostKernelsFor(CpuIsa::kScalar);
  const size_t n = 65536;
  std::mt19937 rng(7);
  std::vector<unsigned char> a(n * bytes), b(n * bytes), ref(n * bytes), got(n * bytes);
  for (auto& x : a) x = static_cast<unsigned char>(rng());
  for (auto& x : b) x = static_cast<unsigned char>(rng());
  test::sprinkleSpecials(typeId, a.data(), n, rng);
  test::sprinkleSpecials(typeId, b.data(), n, rng);
  {
    const std::optional<HostKernels> k = kernelsOrFail(isa);
    for (RedKind kind : {RedKind::kSum, RedKind::kProd, RedKind::kMax, RedKind::kMin}) {
      ReduceSpec s;
      s.kind = kind;
      s.hasPre = kind == RedKind::kSum;
      s.scaleF = 0.25;
      scalar->reduce(s, typeId, ref.data(), a.data(), b.data(), n, true);
      k->reduce(s, typeId, got.data(), a.data(), b.data(), n, true);
      CHECK(std::memcmp(ref.data(), got.data(), n * bytes) == 0);
    }
  }
}

void checkAllTypes(CpuIsa isa) {
  checkType<int8_t>(0, isa);
  checkType<uint8_t>(1, isa);
  checkType<int32_t>(2, isa);
  checkType<uint32_t>(3, isa);
  checkType<int64_t>(4, isa);
  checkType<uint64_t>(5, isa);
  checkType<float>(7, isa);
  checkType<double>(8, isa);
}

void checkLowFloats(CpuIsa isa) {
  checkLowFloat(6, 2, isa);
  checkLowFloat(9, 2, isa);
  checkLowFloat(10, 1, isa);
  checkLowFloat(11, 1, isa);
}

}  // namespace

TEST_CASE("integer and float reductions match the reference: scalar", "[reduce]") { checkAllTypes(CpuIsa::kScalar); }

TEST_CASE("integer and float reductions match the reference: AVX2", "[reduce][avx2]") { checkAllTypes(CpuIsa::kAvx2); }

TEST_CASE("integer and float reductions match the reference: AVX-512", "[reduce][avx512]") {
  checkAllTypes(CpuIsa::kAvx512);
}

TEST_CASE("low-precision float reductions agree with the scalar path: AVX2", "[reduce][avx2]") {
  checkLowFloats(CpuIsa::kAvx2);
}

TEST_CASE("low-precision float reductions agree with the scalar path: AVX-512", "[reduce][avx512]") {
  checkLowFloats(CpuIsa::kAvx512);
}

TEST_CASE("fp16 sum rounds in float and propagates NaN in max", "[reduce]") {
  auto k = hostKernelsFor(CpuIsa::kScalar);
  Half a[2] = {fromFloat<Half>(1.0f), fromFloat<Half>(NAN)};
  Half b[2] = {fromFloat<Half>(2048.0f), fromFloat<Half>(1.0f)};
  Half out[2];
  ReduceSpec s;
  s.kind = RedKind::kSum;
  k->reduce(s, 6, out, a, b, 1, true);
  CHECK(toFloat(out[0]) == 2048.0f);  // 2049 rounds to even
  s.kind = RedKind::kMax;
  k->reduce(s, 6, out, a, b, 2, true);
  CHECK(std::isnan(toFloat(out[1])));
  // fp8 saturates instead of overflowing.
  Fp8E4M3 x = fromFloat<Fp8E4M3>(400.0f);
  Fp8E4M3 y = fromFloat<Fp8E4M3>(400.0f);
  Fp8E4M3 z;
  s.kind = RedKind::kSum;
  k->reduce(s, 10, &z, &x, &y, 1, true);
  CHECK(toFloat(z) == 448.0f);
}

// The rule for NaN results and subnormals, in bits, on the scalar path (the other paths and the
// device must give the scalar path's bits: the cases above and tests/device_test.cc).
TEST_CASE("NaN results are the positive quiet NaN and subnormals survive, in every floating type", "[reduce]") {
  auto k = hostKernelsFor(CpuIsa::kScalar);
  auto run = [&](RedKind kind, bool pre, int type, auto a, auto b) {
    decltype(a) out;
    ReduceSpec s;
    s.kind = kind;
    s.hasPre = pre;
    s.scaleF = 0.5;
    k->reduce(s, type, &out, &a, &b, 1, true);
    return out;
  };
  // float: a payload and a sign on either operand become 0x7fc00000; inf - inf too.
  for (RedKind kind : {RedKind::kSum, RedKind::kProd, RedKind::kMax, RedKind::kMin}) {
    for (bool pre : {false, true}) {
      CHECK(run(kind, pre, chorusFloat32, 0xffd23456u, 0x3f800000u) == 0x7fc00000u);
      CHECK(run(kind, pre, chorusFloat32, 0x3f800000u, 0xffd23456u) == 0x7fc00000u);
      CHECK(run(kind, pre, chorusFloat32, 0x7f800001u, 0xffc00000u) == 0x7fc00000u);
      CHECK(run(kind, pre, chorusFloat64, uint64_t(0xfffa5a5a5a5a5a5a), uint64_t(0x3ff0000000000000)) ==
            uint64_t(0x7ff8000000000000));
      CHECK(run(kind, pre, chorusFloat16, uint16_t(0xfd55), uint16_t(0x3c00)) == uint16_t(0x7e00));
      CHECK(run(kind, pre, chorusBfloat16, uint16_t(0xffa5), uint16_t(0x3f80)) == uint16_t(0x7fc0));
    }
  }
  CHECK(run(RedKind::kSum, false, chorusFloat32, 0x7f800000u, 0xff800000u) == 0x7fc00000u);
  // The smallest subnormals add up instead of flushing to zero.
  CHECK(run(RedKind::kSum, false, chorusFloat32, 0x00000001u, 0x00000001u) == 0x00000002u);
  CHECK(run(RedKind::kSum, false, chorusFloat64, uint64_t(1), uint64_t(1)) == uint64_t(2));
  CHECK(run(RedKind::kSum, false, chorusFloat16, uint16_t(1), uint16_t(1)) == uint16_t(2));
  CHECK(run(RedKind::kSum, false, chorusBfloat16, uint16_t(1), uint16_t(1)) == uint16_t(2));
  CHECK(run(RedKind::kMax, false, chorusFloat32, 0x80000001u, 0x00000000u) == 0x00000000u);
  // Equal operands (+0 and -0): max and min give the second.
  CHECK(run(RedKind::kMax, false, chorusFloat32, 0x80000000u, 0x00000000u) == 0x00000000u);
  CHECK(run(RedKind::kMax, false, chorusFloat32, 0x00000000u, 0x80000000u) == 0x80000000u);
  CHECK(run(RedKind::kMin, false, chorusFloat32, 0x00000000u, 0x80000000u) == 0x80000000u);
}
