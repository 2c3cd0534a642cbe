// Chorus's ibverbs network (the built-in "IB" network): the network ABI of include/chorus/net.h
// straight over RDMA NICs (InfiniBand, RoCE) through libibverbs, loaded at run time, as NCCL's IB
// transport does it. Data moves by the RDMA protocol of transports/net/rdma_proto.h (clear-to-send
// entries and write-with-immediate) over reliable-connected queue pairs.
//
// Devices: every active port of the HCAs CHORUS_IB_HCA selects (all by default), each with the
// GID CHORUS_IB_GID_INDEX / CHORUS_IB_ADDR_FAMILY / CHORUS_IB_ADDR_RANGE /
// CHORUS_IB_ROCE_VERSION_NUM choose (transports/ib/ib_select.h). A machine without libibverbs or
// without an active port does not offer the network: ibOffered says why, and the net transport
// uses sockets.
//
// A connection: the listener's handle carries a TCP address (the CHORUS_SOCKET_IFNAME interface)
// and a nonce. connect opens a TCP connection to it and sends its queue pairs' numbers, its port's
// LID, GID and MTU, and where its protocol memory is; accept creates the receive side's queue
// pairs, brings them to ready-to-send with the sender's numbers and answers with its own; the
// sender does the same and says it is ready, and only then does accept return the comm (no write
// reaches a queue pair that is not ready to receive). Neither call blocks: both keep their stage
// and go on at the next call. The TCP connection stays open: the peer's process ending closes
// it, which fails the comm at once instead of after the NIC's retries.
//
// CHORUS_IB_QPS_PER_CONNECTION queue pairs per connection (1 to 16; NCCL's default 1): writes go
// round-robin over them, and with CHORUS_IB_SPLIT_DATA_ON_QPS=1 each message larger than 128
// bytes per queue pair is split into one write per queue pair. With adaptive routing
// (CHORUS_IB_ADAPTIVE_ROUTING; on for InfiniBand ports by default) a write larger than
// CHORUS_IB_AR_THRESHOLD bytes goes as a plain RDMA write followed by a zero-byte write with
// immediate on the same queue pair, as NCCL does. CHORUS_IB_TIMEOUT and CHORUS_IB_RETRY_CNT are
// the queue pairs' ack timeout and retry count; CHORUS_IB_SL, CHORUS_IB_TC and CHORUS_IB_PKEY
// their service level, traffic class and partition key index.
//
// Memory: host memory always; device memory through nvidia-peermem (CHORUS_NET_PTR_CUDA) when
// the kernel has it, and as dma-buf (regMrDmaBuf, CHORUS_NET_PTR_DMABUF) when libibverbs and the
// kernel support it; iflush of received device memory is an RDMA read through a queue pair
// connected to itself. Registrations go through a RegCache per port (nothing unused is kept:
// ibverbs pins what it registers).
//
// Nothing of this has run on a NIC: it is tested against an in-process fake of libibverbs
// (tests/fake_verbs.h), and docs/network.md says what that covers.
#pragma once

#include <string>

#include "include/chorus/net.h"
#include "src/common/status.h"
#include "transports/ib/verbs.h"

namespace chorus {
namespace ib {

const chorusNet_v1_t& ibNetwork();

// Whether the network has a port to offer; if not, *why says why. An error when a CHORUS_IB_*
// setting is wrong (the message names it).
Result<bool> ibOffered(std::string* why);

// Puts the network on another table of libibverbs's functions (a fake one, in tests); nullptr
// puts back the system's. Only while no context of the network is open.
void useVerbs(const Verbs* verbs);

}  // namespace ib
}  // namespace chorus
