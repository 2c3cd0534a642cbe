// Ticker (src/core/ticker.h): ticks until stopped, never after stop returns, and stop waits for a
// tick in progress.
#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "src/core/ticker.h"

using chorus::Ticker;
using namespace std::chrono_literals;

namespace {

// Waits up to 10 s for `done`; only liveness is checked, never how fast.
template <typename F>
bool eventually(F done) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("a ticker calls its function until stopped, and never after", "[ticker]") {
  std::atomic<int> ticks{0};
  Ticker t;
  CHECK_FALSE(t.running());
  t.start("test-ticker", 1ms, [&] { ticks.fetch_add(1); });
  CHECK(t.running());
  REQUIRE(eventually([&] { return ticks.load() >= 3; }));
  t.stop();
  CHECK_FALSE(t.running());
  const int after = ticks.load();
  std::this_thread::sleep_for(20ms);
  CHECK(ticks.load() == after);
  t.stop();  // again: nothing
}

TEST_CASE("stopping a ticker waits for the tick in progress", "[ticker]") {
  std::atomic<bool> inTick{false};
  std::atomic<bool> tickEnded{false};
  Ticker t;
  t.start("test-ticker", 1ms, [&] {
    if (tickEnded.load()) return;
    inTick.store(true);
    std::this_thread::sleep_for(50ms);
    tickEnded.store(true);
  });
  REQUIRE(eventually([&] { return inTick.load(); }));
  t.stop();
  CHECK(tickEnded.load());
}

TEST_CASE("a ticker never started stops at once, and its destructor stops a running one", "[ticker]") {
  {
    Ticker idle;
    idle.stop();
    CHECK_FALSE(idle.running());
  }
  std::atomic<int> ticks{0};
  {
    Ticker t;
    t.start("test-ticker", 1ms, [&] { ticks.fetch_add(1); });
    REQUIRE(eventually([&] { return ticks.load() >= 1; }));
  }
  const int after = ticks.load();
  std::this_thread::sleep_for(20ms);
  CHECK(ticks.load() == after);
}
