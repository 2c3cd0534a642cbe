// Fuzzes the bootstrap listener's reader: any bytes, in pieces of any size, from anyone who
// connects. Each message it accepts must carry the clique's magic, secret and id, a sender in
// range, a known kind and a length within its kind's limit, and be exactly that long; a dropped
// one must say why. The first input byte sets the piece size, the rest is the stream.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "src/bootstrap/bootstrap.h"

namespace {

constexpr uint64_t kSecret[2] = {0x1122334455667788ull, 0x99aabbccddeeff00ull};
constexpr uint64_t kClique = 0x0123456789abcdefull;
constexpr int kRanks = 4;

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using chorus::BootstrapHeader;
  using chorus::BootstrapReader;
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 97;
  size_t pos = 1;
  BootstrapReader reader(kSecret, kClique, kRanks);
  while (pos < size) {
    auto [dst, want] = reader.next();
    require(want > 0);
    const size_t n = std::min({want, piece, size - pos});
    std::memcpy(dst, data + pos, n);
    pos += n;
    const BootstrapReader::State st = reader.advance(n);
    if (st == BootstrapReader::State::kDrop) {
      require(!reader.why().empty());
      return 0;
    }
    if (st == BootstrapReader::State::kDone) {
      const BootstrapHeader& h = reader.header();
      require(h.magic == BootstrapHeader::kMagic && h.secret[0] == kSecret[0] && h.secret[1] == kSecret[1]);
      require(h.cliqueId == kClique && h.src >= 0 && h.src < kRanks);
      require(reader.payload().size() == h.len && h.len <= BootstrapHeader::kMaxMessageBytes);
      require(h.kind == BootstrapHeader::kMessage || h.kind == BootstrapHeader::kNotice);
      require(h.kind != BootstrapHeader::kNotice || h.len <= BootstrapHeader::kMaxNoticeBytes);
      require(h.len == 0 || std::memcmp(reader.payload().data(), data + pos - h.len, h.len) == 0);
      reader = BootstrapReader(kSecret, kClique, kRanks);  // the next connection
    }
  }
  return 0;
}
