// One ISA's instance of the host reductions; CHORUS_ISA_NS and CHORUS_ISA_ENUM come from the build.
#include <immintrin.h>

#include <limits>

#include "kernels/reduce.h"
#include "kernels/reduce_host.h"

namespace chorus::CHORUS_ISA_NS {
namespace {

#ifdef __F16C__
// fp16 through the F16C conversions, eight elements at a time, computed in float as the generic
// path does (float's op, then round to nearest even; any NaN becomes the positive quiet NaN), so
// every ISA gives the same bits; the tail runs the generic element code.
constexpr size_t kHalfBlock = 8;

__m256 loadHalves(const void* p) { return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
void storeHalves(void* p, __m256 v) {
  _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

template <RedKind K, bool kPre>
void halfBlocks(const ReduceSpec& s, void* dst, const void* recv, const void* local, size_t blocks) {
  const __m256 scale = _mm256_set1_ps(static_cast<float>(s.scaleF));
  const __m256 qnan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for (size_t b = 0; b < blocks; ++b) {
    const size_t off = b * kHalfBlock * sizeof(uint16_t);
    const __m256 x = loadHalves(static_cast<const char*>(recv) + off);
    __m256 y = loadHalves(static_cast<const char*>(local) + off);
    if constexpr (kPre) {
      // As the generic path: the pre-multiplied operand is rounded to fp16 before the op.
      y = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(y, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    __m256 r;
    if constexpr (K == RedKind::kSum) {
      r = _mm256_add_ps(x, y);
    } else if constexpr (K == RedKind::kProd) {
      r = _mm256_mul_ps(x, y);
    } else if constexpr (K == RedKind::kMax) {
      r = _mm256_max_ps(x, y);  // x > y ? x : y, as floatOp (either zero's sign: y)
      r = _mm256_blendv_ps(r, qnan, _mm256_cmp_ps(x, y, _CMP_UNORD_Q));
    } else {
      r = _mm256_min_ps(x, y);
      r = _mm256_blendv_ps(r, qnan, _mm256_cmp_ps(x, y, _CMP_UNORD_Q));
    }
    r = _mm256_blendv_ps(r, qnan, _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    storeHalves(static_cast<char*>(dst) + off, r);
  }
}

template <bool kPre>
void halfBlocksFor(const ReduceSpec& s, void* dst, const void* recv, const void* local, size_t blocks) {
  switch (s.kind) {
    case RedKind::kSum:
      halfBlocks<RedKind::kSum, kPre>(s, dst, recv, local, blocks);
      break;
    case RedKind::kProd:
      halfBlocks<RedKind::kProd, kPre>(s, dst, recv, local, blocks);
      break;
    case RedKind::kMax:
      halfBlocks<RedKind::kMax, kPre>(s, dst, recv, local, blocks);
      break;
    default:
      halfBlocks<RedKind::kMin, kPre>(s, dst, recv, local, blocks);
      break;
  }
}

void reduceHalf(const ReduceSpec& s, void* dst, const void* recv, const void* local, size_t n, bool last) {
  const size_t blocks = n / kHalfBlock;
  if (s.hasPre) {
    halfBlocksFor<true>(s, dst, recv, local, blocks);
  } else {
    halfBlocksFor<false>(s, dst, recv, local, blocks);
  }
  const size_t done = blocks * kHalfBlock;
  const size_t off = done * sizeof(uint16_t);
  reduceStep<Half>(s, static_cast<char*>(dst) + off, static_cast<const char*>(recv) + off,
                   static_cast<const char*>(local) + off, n - done, last);
}
#endif

void preImpl(const ReduceSpec& s, int type, void* dst, const void* src, size_t n) {
  dispatchType(type, [&]<typename T>() { reducePre<T>(s, dst, src, n); });
}

void reduceImpl(const ReduceSpec& s, int type, void* dst, const void* recv, const void* local, size_t n, bool last) {
#ifdef __F16C__
  if (type == 6) {  // chorusFloat16 (fp16 has no post-division)
    reduceHalf(s, dst, recv, local, n, last);
    return;
  }
#endif
  dispatchType(type, [&]<typename T>() { reduceStep<T>(s, dst, recv, local, n, last); });
}

}  // namespace

const HostKernels kKernels = {&preImpl, &reduceImpl, CpuIsa::CHORUS_ISA_ENUM};

}  // namespace chorus::CHORUS_ISA_NS
