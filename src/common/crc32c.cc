// CRC32C (src/common/crc32c.h): the reflected polynomial 0x82F63B78, initial and final value
// ~0, as RFC 3720 defines it.
#include "src/common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace chorus {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

// Slicing-by-8: table k maps a byte to its CRC after k more zero bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (int k = 1; k < 8; ++k) {
      for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
  }
};

const Tables& tables() {
  static const Tables tab;
  return tab;
}

uint32_t portable(uint32_t c, const unsigned char* p, size_t n) {
  const auto& t = tables().t;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__x86_64__)
constexpr size_t kBlock = 8192;  // bytes per stream in the three-stream loop

// The CRC register after `bytes` zero bytes from register c (slow: for building the table below).
uint32_t shiftZerosSlow(uint32_t c, size_t bytes) {
  const auto& t = tables().t;
  while (bytes--) c = (c >> 8) ^ t[0][c & 0xFF];
  return c;
}

// The same past kBlock zero bytes, which is linear in c: four lookups, one per byte of c.
struct BlockShift {
  std::array<std::array<uint32_t, 256>, 4> t{};
  BlockShift() {
    for (int k = 0; k < 4; ++k) {
      for (uint32_t i = 0; i < 256; ++i) t[k][i] = shiftZerosSlow(i << (8 * k), kBlock);
    }
  }
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

const BlockShift& blockShift() {
  static const BlockShift shift;
  return shift;
}

__attribute__((target("sse4.2"))) uint32_t hardware(uint32_t c, const unsigned char* p, size_t n) {
  // Three streams at once hide the instruction's 3-cycle latency; their CRCs are joined by
  // shifting the earlier ones past the later streams' bytes.
  const BlockShift& shift = blockShift();
  while (n >= 3 * kBlock) {
    uint64_t a = c, b = 0, d = 0;
    const unsigned char* p1 = p + kBlock;
    const unsigned char* p2 = p + 2 * kBlock;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t x, y, z;
      std::memcpy(&x, p + i, 8);
      std::memcpy(&y, p1 + i, 8);
      std::memcpy(&z, p2 + i, 8);
      a = _mm_crc32_u64(a, x);
      b = _mm_crc32_u64(b, y);
      d = _mm_crc32_u64(d, z);
    }
    c = shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    c = shift(c) ^ static_cast<uint32_t>(d);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  uint64_t w64 = c;
  while (n >= 8) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    w64 = _mm_crc32_u64(w64, x);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(w64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}

bool hasHardware() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t crc32cPortable(uint32_t crc, const void* data, size_t n) {
  return ~portable(~crc, static_cast<const unsigned char*>(data), n);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (hasHardware()) return ~hardware(~crc, static_cast<const unsigned char*>(data), n);
#endif
  return crc32cPortable(crc, data, n);
}

bool crc32cHardware() {
#if defined(__x86_64__)
  return hasHardware();
#else
  return false;
#endif
}

}  // namespace chorus
