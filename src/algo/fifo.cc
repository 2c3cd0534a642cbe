#include "src/algo/fifo.h"

#include <unistd.h>

#include <new>

#include "src/common/os.h"

namespace chorus {

FifoView FifoView::layout(void* mem, uint32_t nslots, uint32_t slotBytes) {
  FifoView v;
  v.ctrl = new (mem) FifoControl();
  v.slots = static_cast<char*>(mem) + sizeof(FifoControl);
  v.nslots = nslots;
  v.slotBytes = slotBytes;
  return v;
}

void ProxyLink::ring() const {
  if (wakeFd < 0) return;
  uint64_t one = 1;
  (void)!::write(wakeFd, &one, sizeof(one));
}

void FifoView::publish(uint32_t newTail) const {
  // A seq_cst read-modify-write (release and more): the sleeper stores consumerWaiting and then
  // re-reads tail; this store and the load below must not be reordered, or a wake-up is lost.
  ctrl->tail.exchange(newTail, std::memory_order_seq_cst);
  if (ctrl->consumerWaiting.load(std::memory_order_seq_cst) != 0) futexWakeAll(&ctrl->tail);
}

void FifoView::release(uint32_t newHead) const {
  ctrl->head.exchange(newHead, std::memory_order_seq_cst);  // as in publish()
  if (ctrl->producerWaiting.load(std::memory_order_seq_cst) != 0) futexWakeAll(&ctrl->head);
}

void FifoView::close() const {
  ctrl->closed.store(1, std::memory_order_release);
  futexWakeAll(&ctrl->tail);
  futexWakeAll(&ctrl->head);
}

}  // namespace chorus
