#include "src/core/stream.h"

#include "src/common/os.h"
#include "src/device/cuda.h"

namespace chorus {

Stream::Stream() {
  thread_ = std::thread([this] {
    setThreadName("chorus-stream");
    loop();
  });
}

Stream::Stream(void* cudaStream) : isCuda_(true), cudaStream_(cudaStream) {}

Stream::~Stream() {
  if (isCuda_) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  workCv_.notify_all();
  thread_.join();
}

uint64_t Stream::enqueue(StreamItem item) {
  uint64_t seq;
  bool wake;
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(item));
    seq = enqueued_.load(std::memory_order_relaxed) + 1;
    enqueued_.store(seq, std::memory_order_release);
    wake = workerSleeping_ && !executing_;
    if (wake) workerSleeping_ = false;
  }
  if (wake) workCv_.notify_one();
  return seq;
}

void Stream::runFront(std::unique_lock<std::mutex>& lk) {
  StreamItem item = std::move(queue_.front());
  queue_.pop_front();
  lk.unlock();
  Status s;
  try {
    s = item();
  } catch (const std::exception& e) {
    s = internalError(std::string("stream work item threw: ") + e.what());
  }
  item.reset();  // what the item captured goes before its completion is visible
  lk.lock();
  executing_ = false;
  if (stop_ && workerSleeping_) workCv_.notify_one();  // a stopping worker waits for this item
  if (!s.isOk() && error_.isOk()) error_ = s;
  const uint64_t done = completed_.load(std::memory_order_relaxed) + 1;
  completed_.store(done, std::memory_order_release);
  if (done >= wakeAt_) {
    wakeAt_ = UINT64_MAX;
    doneCv_.notify_all();
  }
}

void Stream::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    // Sleep while a waiter runs an item, or while there is nothing to do and no stop.
    while (executing_ || (queue_.empty() && !stop_)) {
      workerRunning_ = false;
      workerSleeping_ = true;
      workCv_.wait(lk);
      workerSleeping_ = false;
    }
    if (queue_.empty()) return;  // stopping, with nothing left and nothing running
    executing_ = true;
    workerRunning_ = true;
    runFront(lk);
  }
}

void Stream::waitFor(uint64_t seq) {
  if (completed_.load(std::memory_order_acquire) >= seq) return;
  std::unique_lock<std::mutex> lk(mu_);
  while (completed_.load(std::memory_order_relaxed) < seq) {
    // The next item, unless the worker is going through the queue already: between two of its
    // items, taking one would move the communicator's state to this thread's core and back.
    if (!executing_ && !queue_.empty() && !workerRunning_) {
      executing_ = true;
      runFront(lk);
      continue;
    }
    // The worker is running the stream: leave it the rest (taking turns would wake this thread
    // at every item only to find the worker already on the next one).
    if (seq < wakeAt_) wakeAt_ = seq;
    doneCv_.wait(lk);
  }
  // Items enqueued after the mark stay with the worker.
  if (workerSleeping_ && !queue_.empty() && !executing_) {
    workerSleeping_ = false;
    workCv_.notify_one();
  }
}

Status Stream::synchronize() {
  if (isCuda_) return cuda::streamSynchronize(cudaStream_);
  waitFor(enqueued_.load(std::memory_order_acquire));
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

bool Stream::idle() {
  if (isCuda_) return cuda::streamDone(cudaStream_);
  return completed_.load(std::memory_order_acquire) == enqueued_.load(std::memory_order_acquire);
}

bool Stream::reached(uint64_t seq) { return completed_.load(std::memory_order_acquire) >= seq; }

uint64_t Stream::lastEnqueued() { return enqueued_.load(std::memory_order_acquire); }

void LaunchLatch::done(const Status& s) {
  std::lock_guard<std::mutex> g(mu_);
  if (!s.isOk() && first_.isOk()) first_ = s;
  if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) cv_.notify_all();
}

Status LaunchLatch::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return left_.load(std::memory_order_acquire) == 0; });
  return first_;
}

}  // namespace chorus
