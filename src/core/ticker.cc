#include "src/core/ticker.h"

#include <utility>

#include "src/common/os.h"
#include "src/common/status.h"

namespace chorus {

void Ticker::start(const char* name, std::chrono::milliseconds period, std::function<void()> tick) {
  CHORUS_CHECK(!thread_.joinable());
  name_ = name;
  period_ = period;
  tick_ = std::move(tick);
  thread_ = std::thread([this] { loop(); });
}

void Ticker::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Ticker::loop() {
  setThreadName(name_);
  std::unique_lock<std::mutex> lk(mu_);
  while (!cv_.wait_for(lk, period_, [this] { return stop_; })) {
    // The tick runs unlocked, so stop() is never held up by more than one tick.
    lk.unlock();
    tick_();
    lk.lock();
  }
}

}  // namespace chorus
