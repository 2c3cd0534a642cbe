// Fuzzes what a rank makes of a chorusUniqueId it was handed (any 128 bytes) and of a
// "host:port" string (CHORUS_COMM_ID): either a clear error, or an id whose root address is a
// valid IPv4 or IPv6 address that prints and parses back to itself.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/bootstrap/bootstrap.h"

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorusUniqueId u;
  std::memset(&u, 0, sizeof(u));
  std::memcpy(u.internal, data, std::min(size, sizeof(u.internal)));
  auto id = chorus::BootstrapId::fromUniqueId(u);
  if (id.isOk()) {
    require(id.value().root.valid());
    (void)id.value().root.toString();
    (void)id.value().root.isLoopback();
  } else {
    require(!id.status().message().empty());
  }
  // Numeric addresses only: a name would send the fuzzer to the resolver.
  std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find_first_not_of("0123456789abcdefABCDEF.:[]%") != std::string::npos) return 0;
  auto addr = chorus::SockAddr::parse(text);
  if (addr.isOk()) {
    require(addr.value().valid());
    auto again = chorus::SockAddr::parse(addr.value().toString());
    require(again.isOk() && again.value().toString() == addr.value().toString());
  } else {
    require(!addr.status().message().empty());
  }
  return 0;
}
