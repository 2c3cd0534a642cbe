// The connections algorithms run over, named so that the core keeps them in one table and
// makes them without knowing which algorithm asked.
//
// A family is the set of FIFOs one kind of algorithm uses, apart from every other family's so
// that two algorithms never meet in one FIFO. Ring connections are one pair per channel (to the
// next rank of the channel's ring, from the previous); the others one per peer and direction.
#pragma once

#include <cstdint>

namespace chorus {

enum class ConnFamily : unsigned char {
  kRing,    // ring and chain collectives, one pair per channel
  kP2p,     // sends and receives (and the collectives made of them)
  kDirect,  // the direct all-reduce; the slice all-reduce's inputs; the first tree
  kGather,  // the slice all-reduce's results; the second tree
};
constexpr int kConnFamilies = 4;
// Ring connections come in sets of one per channel: the ring's (index c), and one more set an
// algorithm may take for rings of its own (index nChannels + c).
constexpr int kRingSets = 2;

// For the log: "Channel 01", "P2P", "Direct", "Gather".
const char* connFamilyName(ConnFamily f);

// Point-to-point connections on the device path come in channels, up to kMaxP2pChannels per
// peer and direction: a device transfer is cut into parts, one per channel, each run by a block
// of its own through a FIFO of its own (Tuner::p2pChannels). A kP2p connection's index is its
// peer with the channel above it; channel 0's is the peer itself, the only one the host path
// uses.
constexpr int kMaxP2pChannels = 8;
constexpr int kP2pChannelShift = 16;
inline int p2pIndex(int peer, int channel) { return peer | channel << kP2pChannelShift; }
inline int p2pChannel(int index) { return index >> kP2pChannelShift; }

// One connection: its family, its index in the family (the channel for kRing, counting the
// sets of kRingSets; p2pIndex for kP2p; the peer otherwise), the peer, and which end this rank
// holds.
struct ConnKey {
  ConnFamily family;
  int index;
  int peer;
  bool send;
  bool device = false;  // a FIFO in device memory, for kernels (the device path); else host memory
};

// The bootstrap tag of a connection's setup exchange: one per family, channel and memory kind,
// so setups of several families (or channels) between the same two ranks never mix.
inline uint64_t connTag(ConnFamily f, int index, bool device = false) {
  const uint64_t base = ((static_cast<uint64_t>(f) + 1) << 40) | (device ? uint64_t(1) << 39 : 0);
  if (f == ConnFamily::kRing) return base | static_cast<uint64_t>(index);
  if (f == ConnFamily::kP2p) return base | static_cast<uint64_t>(p2pChannel(index));
  return base;
}

}  // namespace chorus
