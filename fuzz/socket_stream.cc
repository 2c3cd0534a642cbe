// Fuzzes the socket transport's receive side with a real proxy thread and a real socket: any
// bytes a peer (or a stranger holding a data connection) can send. The proxy must publish exactly
// the slots an independent parse of the stream finds (64-byte header, then `bytes` of payload),
// never one whose header claims more than a slot holds, put each payload where the consumer
// looks for it, and close the FIFO at the end of the stream or at the first bad header, within
// a deadline. The first input byte picks the slot size, the slot count and whether the consumer
// posts destinations ahead (as the ring's receives do).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "src/algo/fifo.h"
#include "src/bootstrap/socket.h"
#include "src/common/os.h"
#include "transports/socket/socket_proxy.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

struct Slot {
  size_t offset;  // of the payload in the stream
  uint32_t bytes;
};

// The slots a correct receiver publishes: whole header + payload pairs, up to the first header
// that claims more than a slot.
std::vector<Slot> expectedSlots(const uint8_t* s, size_t n, uint32_t slotBytes) {
  std::vector<Slot> out;
  size_t pos = 0;
  while (n - pos >= sizeof(chorus::SlotHeader)) {
    chorus::SlotHeader h;
    std::memcpy(&h, s + pos, sizeof(h));
    if (h.bytes > slotBytes || n - pos - sizeof(h) < h.bytes) break;
    out.push_back({pos + sizeof(h), h.bytes});
    pos += sizeof(h) + h.bytes;
  }
  return out;
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
  std::vector<std::vector<char>> posted(nslots, std::vector<char>(slotBytes));
  if (post) {
    fifo.dests = dests.data();
    fifo.destBytes = destBytes.data();
  }

  int sv[2];
  require(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd writer(sv[1]);
  setNonBlocking(writer.get(), true);
  {
    SocketProxy proxy{Logger(LogLevel::kWarn, 0, 0)};
    require(proxy.start().isOk());
    fifo.notifyFd = proxy.notifyFd();
    proxy.add(UniqueFd(sv[0]), fifo, false, 1, "the fuzzer");

    size_t sent = 0;
    size_t got = 0;  // slots consumed
    uint32_t head = 0;
    const int64_t deadline = nowNs() + 10ll * 1000000000;
    while (true) {
      require(nowNs() < deadline);  // the proxy must neither hang nor miss the end of the stream
      if (writer.valid() && sent < n) {
        const ssize_t w = ::send(writer.get(), stream + sent, n - sent, MSG_NOSIGNAL);
        if (w > 0) sent += static_cast<size_t>(w);
      }
      if (writer.valid() && sent == n) writer.reset();  // end of stream
      if (post) {
        // Offer a destination for every free slot not yet taken, expecting the slot's bytes
        // (the posted size is sometimes wrong on purpose: the proxy must then use the slot).
        for (uint32_t k = 0; k < nslots; ++k) {
          const uint32_t idx = (head + k) % nslots;
          if (dests[idx].load() != 0) continue;  // posted already, or taken by the proxy
          uint32_t bytes = slotBytes;
          if (got + k < want.size()) bytes = want[got + k].bytes;
          if ((head + k) % 3 == 2) bytes = bytes == 1 ? 2 : 1;
          destBytes[idx] = bytes;  // read by the proxy only after it sees the destination
          uintptr_t zero = 0;
          dests[idx].compare_exchange_strong(zero, reinterpret_cast<uintptr_t>(posted[idx].data()));
        }
      }
      if (fifo.hasData(head)) {
        const SlotHeader* h = fifo.header(head);
        require(got < want.size());
        require(h->bytes == want[got].bytes && h->bytes <= slotBytes);
        const uint32_t idx = head % nslots;
        const char* payload = fifo.payload(head);
        if (post && dests[idx].load() == reinterpret_cast<uintptr_t>(posted[idx].data())) {
          payload = posted[idx].data();
        }
        require(h->bytes == 0 || std::memcmp(payload, stream + want[got].offset, h->bytes) == 0);
        if (post) dests[idx].store(0);
        fifo.release(++head);
        ++got;
        continue;
      }
      if (fifo.closed() && !fifo.hasData(head)) break;
      ::usleep(20);
    }
    require(got == want.size());
    proxy.quiesce(1000000000);
  }
  return 0;
}
