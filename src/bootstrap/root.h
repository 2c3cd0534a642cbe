// The bootstrap root's wire format, shared by the root (root.cc) and the ranks that join it
// (bootstrap.cc): a rank connects, sends a RootHello, and reads RootReply records until one is not
// chorusInProgress; a chorusSuccess reply is followed by the address table.
#pragma once

#include <cerrno>
#include <cstdint>

#include "src/bootstrap/socket.h"

namespace chorus {

constexpr uint32_t kHelloMagic = 0x4348484c;  // "CHHL"

struct RootHello {
  uint32_t magic;
  int32_t rank;
  int32_t nranks;
  uint32_t version;
  uint64_t secret[2];
  uint64_t cliqueId;
  SockAddr listen;
};

struct RootReply {
  int32_t status;  // chorusResult_t; chorusInProgress: a word while the root waits, more follow
  int32_t nranks;
  char message[256];
};

// After accept fails for want of descriptors a listener is left alone this long (it stays
// readable, and polling it again at once would spin).
constexpr int64_t kAcceptBackoffNs = 100ll * 1000000;

inline bool outOfDescriptors(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

inline bool constantTimeEqual(const uint64_t a[2], const uint64_t b[2]) { return ((a[0] ^ b[0]) | (a[1] ^ b[1])) == 0; }

}  // namespace chorus
