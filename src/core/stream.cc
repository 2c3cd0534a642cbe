#include "src/core/stream.h"

namespace chorus {

Stream::Stream() {
  thread_ = std::thread([this] { loop(); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t Stream::enqueue(std::function<Status()> item) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(item));
    seq = ++enqueued_;
  }
  cv_.notify_all();
  return seq;
}

void Stream::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ with nothing left
    auto item = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    Status s;
    try {
      s = item();
    } catch (const std::exception& e) {
      s = internalError(std::string("stream work item threw: ") + e.what());
    }
    lk.lock();
    if (!s.isOk() && error_.isOk()) error_ = s;
    ++completed_;
    cv_.notify_all();
  }
}

Status Stream::synchronize() {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t target = enqueued_;
  cv_.wait(lk, [&] { return completed_ >= target; });
  return error_;
}

bool Stream::idle() {
  std::lock_guard<std::mutex> g(mu_);
  return completed_ == enqueued_;
}

bool Stream::reached(uint64_t seq) {
  std::lock_guard<std::mutex> g(mu_);
  return completed_ >= seq;
}

void Stream::waitFor(uint64_t seq) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return completed_ >= seq; });
}

uint64_t Stream::lastEnqueued() {
  std::lock_guard<std::mutex> g(mu_);
  return enqueued_;
}

void LaunchLatch::done(const Status& s) {
  std::lock_guard<std::mutex> g(mu_);
  if (!s.isOk() && first_.isOk()) first_ = s;
  if (--left_ == 0) cv_.notify_all();
}

Status LaunchLatch::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return left_ == 0; });
  return first_;
}

}  // namespace chorus
