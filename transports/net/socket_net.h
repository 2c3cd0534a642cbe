// Chorus's socket network: the network ABI of include/chorus/net.h over TCP.
//
// One device: the interface CHORUS_SOCKET_IFNAME names, or the first non-loopback interface that is
// up, or loopback (src/bootstrap/socket.h, localInterfaceAddr). listen binds a non-blocking
// listener there and writes a handle {magic, a random nonce, the address}; connect and accept
// make the connection in steps that never block (connect's progress is kept in the handle, as
// NCCL's networks do), and the connecting side opens with a hello carrying the nonce, so a
// listener takes only connections made from its own handle. Each send comm is one TCP connection;
// every message goes as a 16-byte header (tag, size) and its bytes. Requests progress inside test(),
// in the order they were issued, and never block: sends leave up to 8 messages per sendmsg(); a
// receive comm reads ahead into a 4 KiB stage (small messages arrive many per recv() and are
// copied out) and reads the rest of a body of 2 KiB or more straight into its receive. waitFd
// gives the connection's socket.
//
// Host memory only (ptrSupport CHORUS_NET_PTR_HOST): registration records the range, iflush has
// nothing to do. At most 8 receives in a group (maxRecvs).
#pragma once

#include "include/chorus/net.h"

namespace chorus {

const chorusNet_v1_t& socketNetwork();
// How many messages a request of the socket network has (1 for a send): for networks written over
// this one whose test reports a count it does not know otherwise (the tests' plugins).
int socketRequestParts(const void* request);

}  // namespace chorus
