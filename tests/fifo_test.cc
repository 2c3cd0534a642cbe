// The FIFO's counters and the send cursor's cached view of the consumer (no threads: the orders
// are the transports' business; this pins the arithmetic).
#include <catch2/catch.hpp>
#include <vector>

#include "src/algo/fifo.h"
#include "src/core/lane.h"

using namespace chorus;

TEST_CASE("hasData is a signed difference, hasSpace a bounded one", "[fifo]") {
  std::vector<char> mem(fifoBytes(4, 4096) + 64, 0);
  void* base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
  FifoView f = FifoView::layout(base, 4, 4096);
  CHECK_FALSE(f.hasData(0));
  f.publish(1);
  CHECK(f.hasData(0));
  CHECK_FALSE(f.hasData(1));
  // A consumer that took slot 1 on seeing its header, before the tail store reached it, has
  // head 2 while tail still reads 1: that is "no data", not "data".
  CHECK_FALSE(f.hasData(2));
  // Across the 32-bit wrap.
  f.ctrl->tail.store(2u);
  CHECK(f.hasData(0xffffffffu));
  CHECK_FALSE(f.hasData(2u));
}

TEST_CASE("a send cursor re-reads the consumer's head only when it must", "[fifo]") {
  std::vector<char> mem(fifoBytes(4, 4096) + 64, 0);
  void* base = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
  SendCursor c;
  c.fifo = FifoView::layout(base, 4, 4096);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(c.hasSpace());
    c.fifo.publish(++c.tail);
  }
  CHECK_FALSE(c.hasSpace());  // four in flight, none freed
  c.fifo.release(1);
  CHECK(c.hasSpace());  // re-read: one freed
  CHECK(c.headSeen == 1u);
  c.fifo.publish(++c.tail);
  CHECK_FALSE(c.hasSpace());
  c.fifo.release(5);
  CHECK(c.hasSpace());
  CHECK(c.headSeen == 5u);
}
