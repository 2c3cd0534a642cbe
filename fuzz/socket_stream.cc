// Fuzzes the receive side of the net transport over the socket network, with a real proxy thread
// and a real TCP connection: any bytes a peer (or a stranger that got past the hello) can send.
// On the wire each message is a 16-byte header (int32 tag, 4 bytes reserved, uint64 size) and its
// bytes; each slot is two messages, its 64-byte SlotHeader (tag 1) and its payload (tag 2), in
// either order. The proxy must publish exactly the slots an independent parse of the stream finds,
// never one whose payload is not the header's byte count or larger than a slot, put each payload
// where the consumer looks for it, and close the FIFO at the end of the stream or at the first bad
// message, within a deadline. The first input byte picks the slot size, the slot count and whether
// the consumer posts destinations ahead (as the ring's receives do).
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "src/algo/fifo.h"
#include "src/bootstrap/socket.h"
#include "src/common/os.h"
#include "transports/net/net_proxy.h"
#include "transports/net/socket_net.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

struct Slot {
  size_t header;   // offset of the SlotHeader's bytes in the stream
  size_t payload;  // and of the payload's
  uint32_t bytes;
};

struct Wire {
  int32_t tag;
  uint32_t reserved;
  uint64_t size;
};
static_assert(sizeof(Wire) == 16, "the socket network's message header");

// The slots a correct receiver publishes: pairs of whole messages tagged 1 and 2 (either order),
// the first 64 bytes, the second within a slot and as long as the first says, up to the first
// message that breaks a rule or is cut off.
std::vector<Slot> expectedSlots(const uint8_t* s, size_t n, uint32_t slotBytes) {
  std::vector<Slot> out;
  size_t pos = 0;
  for (;;) {
    Slot slot{0, 0, 0};
    bool have[3] = {false, false, false};
    uint64_t sizes[3] = {0, 0, 0};
    for (int k = 0; k < 2; ++k) {
      if (n - pos < sizeof(Wire)) return out;
      Wire w;
      std::memcpy(&w, s + pos, sizeof(w));
      if ((w.tag != 1 && w.tag != 2) || have[w.tag]) return out;
      const uint64_t cap = w.tag == 1 ? sizeof(chorus::SlotHeader) : slotBytes;
      if (w.size > cap || n - pos - sizeof(w) < w.size) return out;
      have[w.tag] = true;
      sizes[w.tag] = w.size;
      (w.tag == 1 ? slot.header : slot.payload) = pos + sizeof(w);
      pos += sizeof(w) + w.size;
    }
    if (sizes[1] != sizeof(chorus::SlotHeader)) return out;
    chorus::SlotHeader h;
    std::memcpy(&h, s + slot.header, sizeof(h));
    if (h.bytes != sizes[2]) return out;
    slot.bytes = h.bytes;
    out.push_back(slot);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  if (size < 1) return 0;
  const uint32_t slotBytes = 64u << (data[0] & 3);  // a multiple of 64, as the config requires
  const uint32_t nslots = 2 + ((data[0] >> 2) & 3);
  const bool post = (data[0] & 0x10) != 0;
  const uint8_t* stream = data + 1;
  const size_t n = size - 1;
  const std::vector<Slot> want = expectedSlots(stream, n, slotBytes);

  const size_t memBytes = fifoBytes(nslots, slotBytes);
  std::unique_ptr<char, decltype(&std::free)> mem(static_cast<char*>(std::aligned_alloc(64, (memBytes + 63) / 64 * 64)),
                                                  &std::free);
  std::memset(mem.get(), 0, memBytes);
  FifoView fifo = FifoView::layout(mem.get(), nslots, slotBytes);
  std::vector<std::atomic<uintptr_t>> dests(nslots);
  std::vector<uint32_t> destBytes(nslots, 0);
  std::vector<std::vector<char>> posted(nslots, std::vector<char>(slotBytes + 1));
  ProxyLink link;
  if (post) {
    link.dests = dests.data();
    link.destBytes = destBytes.data();
  }

  // A receive comm of the socket network, and a plain TCP connection into it that says the hello
  // (the listener's nonce from its handle) and then the stream.
  const chorusNet_v1_t& net = socketNetwork();
  void* ctx = nullptr;
  require(net.init(&ctx, 1, nullptr, nullptr) == chorusSuccess);
  char handle[CHORUS_NET_HANDLE_MAXSIZE] = {};
  void* listen = nullptr;
  require(net.listen(ctx, 0, handle, &listen) == chorusSuccess);
  SockAddr addr;
  std::memcpy(&addr, handle + 16, sizeof(addr));  // after the handle's magic and nonce
  Result<UniqueFd> conn = connectTo(addr, nowNs() + 5ll * 1000000000, "the fuzzer's listener");
  require(conn.isOk());
  UniqueFd writer = conn.take();
  uint64_t hello[2] = {0x6f6c6c65482d4e53ull, 0};
  std::memcpy(&hello[1], handle + 8, sizeof(uint64_t));
  require(::send(writer.get(), hello, sizeof(hello), MSG_NOSIGNAL) == ssize_t(sizeof(hello)));
  void* recv = nullptr;
  for (int64_t until = nowNs() + 5ll * 1000000000; !recv;) {
    require(net.accept(listen, &recv) == chorusSuccess);
    require(nowNs() < until);
  }
  require(net.closeListen(listen) == chorusSuccess);
  setNonBlocking(writer.get(), true);
  {
    NetProxy proxy{Logger(LogLevel::kNone, 0, 0), &net, ctx, nullptr};
    require(proxy.start().isOk());
    link.wakeFd = proxy.notifyFd();
    size_t got = 0;  // slots consumed
    uint32_t head = 0;
    // Offer, for each free slot whose payload the parse knows, a destination of exactly its size
    // before the proxy may post that slot's receive (a lap ahead, as the lane does).
    auto offer = [&](uint32_t slot) {
      if (!post || slot >= want.size() || want[slot].bytes == 0) return;
      const uint32_t idx = slot % nslots;
      destBytes[idx] = want[slot].bytes;  // read by the proxy only after it sees the destination
      uintptr_t zero = 0;
      dests[idx].compare_exchange_strong(zero, reinterpret_cast<uintptr_t>(posted[idx].data()));
    };
    for (uint32_t k = 0; k < nslots; ++k) offer(k);
    NetProxy::Link l;
    l.isSend = false;
    l.peer = 1;
    l.peerName = "the fuzzer";
    l.fifo = fifo;
    l.lane = link;
    l.mem = mem.get();
    l.memBytes = memBytes;
    l.comm = recv;
    proxy.add(std::move(l));

    size_t sent = 0;
    const int64_t deadline = nowNs() + 10ll * 1000000000;
    while (true) {
      require(nowNs() < deadline);  // the proxy must neither hang nor miss the end of the stream
      if (writer.valid() && sent < n) {
        const ssize_t w = ::send(writer.get(), stream + sent, n - sent, MSG_NOSIGNAL);
        if (w > 0) sent += static_cast<size_t>(w);
      }
      if (writer.valid() && sent == n) writer.reset();  // end of stream
      if (fifo.hasData(head)) {
        const SlotHeader* h = fifo.header(head);
        require(got < want.size());
        require(std::memcmp(h, stream + want[got].header, sizeof(SlotHeader)) == 0);
        require(h->bytes == want[got].bytes && h->bytes <= slotBytes);
        const uint32_t idx = head % nslots;
        const char* payload = fifo.payload(head);
        if (post && dests[idx].load() == reinterpret_cast<uintptr_t>(posted[idx].data())) {
          payload = posted[idx].data();
          require(posted[idx][h->bytes] == 0);  // nothing past what was posted
        }
        require(h->bytes == 0 || std::memcmp(payload, stream + want[got].payload, h->bytes) == 0);
        if (post) {
          std::memset(posted[idx].data(), 0, posted[idx].size());
          dests[idx].store(0);
          offer(head + nslots);
        }
        fifo.release(++head);
        link.ring();
        ++got;
        continue;
      }
      if (fifo.closed() && !fifo.hasData(head)) break;
      ::usleep(20);
    }
    require(got == want.size());
    proxy.quiesce(1000000000);
  }  // the proxy closes the comm
  require(net.finalize(ctx) == chorusSuccess);
  return 0;
}
