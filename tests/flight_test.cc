// The flight recorder on its own: the ring keeps the newest entries, state changes only move
// forward, and the text and trace say what happened.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "src/core/flight.h"

using chorus::FlightEntry;
using chorus::FlightRecorder;

namespace {
FlightEntry entry(uint64_t seq, const char* coll) {
  FlightEntry e;
  e.seq = seq;
  e.coll = coll;
  e.algo = "ring";
  e.count = seq * 10;
  e.type = 7;
  e.issuedNs = 1000 * static_cast<int64_t>(seq);
  return e;
}
}  // namespace

TEST_CASE("the flight recorder keeps the newest operations and moves states forward", "[flight]") {
  FlightRecorder r(4);
  for (uint64_t s = 1; s <= 6; ++s) CHECK(r.issue(entry(s, "AllReduce")) == s);
  auto all = r.snapshot();
  REQUIRE(all.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(all[i].seq == i + 3);  // 1 and 2 fell out

  r.mark(1, 6, FlightEntry::State::kRunning, 0, 50000);  // ids 1-2 are gone: no effect on them
  r.mark(5, 5, FlightEntry::State::kDone, 0, 60000);
  r.mark(3, 6, FlightEntry::State::kFailed, 2, 70000);   // the done one stays done
  r.mark(6, 6, FlightEntry::State::kRunning, 0, 80000);  // never backwards
  all = r.snapshot();
  CHECK(all[0].state == FlightEntry::State::kFailed);
  CHECK(all[0].result == 2);
  CHECK(all[0].startNs == 50000);
  CHECK(all[0].endNs == 70000);
  CHECK(all[2].state == FlightEntry::State::kDone);
  CHECK(all[2].endNs == 60000);
  CHECK(all[3].state == FlightEntry::State::kFailed);

  const std::string text = FlightRecorder::text(all, 2);
  CHECK(text.find("#4") == std::string::npos);
  CHECK(text.find("#5 AllReduce seq 5 count 50 type 7 algo ring done in 0.010 ms") != std::string::npos);
  CHECK(text.find("#6 AllReduce seq 6 count 60 type 7 algo ring failed in 0.020 ms") != std::string::npos);

  const auto trace = nlohmann::json::parse(FlightRecorder::chromeTrace(all, 3, "comm \"x\""));
  REQUIRE(trace.size() == 6);  // two metadata events, four spans
  CHECK(trace[1]["args"]["name"] == "comm \"x\"");
  CHECK(trace[2]["name"] == "AllReduce #3");
  CHECK(trace[2]["pid"] == 3);
  CHECK(trace[2]["ts"].get<double>() == Approx(50.0));
  CHECK(trace[2]["dur"].get<double>() == Approx(20.0));
  CHECK(trace[2]["args"]["state"] == "failed");
}

TEST_CASE("a flight recorder of size 0 records nothing", "[flight]") {
  FlightRecorder r(0);
  CHECK_FALSE(r.enabled());
  CHECK(r.issue(entry(1, "Send")) == 0);
  r.mark(0, 0, FlightEntry::State::kDone, 0, 1);
  CHECK(r.snapshot().empty());
}
