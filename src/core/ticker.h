// Ticker: a thread of its own that calls a function at a fixed period until it is stopped (the
// device watchdog's; any periodic look that must not block the threads it watches).
//
// Thread-safe: start and stop from any thread (stop waits for a tick in progress, so the function
// never runs after stop returns); the function runs on the ticker's thread only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace chorus {

class Ticker {
 public:
  Ticker() = default;
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  ~Ticker() { stop(); }

  // Calls `tick` every `period` (the first after one period) on a thread named `name`, until
  // stop(). A ticker runs once: a second start is a bug.
  void start(const char* name, std::chrono::milliseconds period, std::function<void()> tick);
  // Ends the thread and waits for it; nothing when it never started or has stopped.
  void stop();
  bool running() const { return thread_.joinable(); }

 private:
  void loop();

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::chrono::milliseconds period_{0};
  std::function<void()> tick_;
  const char* name_ = "";
};

}  // namespace chorus
