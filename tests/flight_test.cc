// The flight recorder on its own: the ring keeps the newest entries, state changes only move
// forward, and the text and trace say what happened, for host operations and for device ones
// (enqueued, then done, failed or captured, as src/core/device_comm.h's tracker tells).
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

TEST_CASE("device entries: enqueued, then done, failed with the fault, or captured; never running", "[flight]") {
  FlightRecorder r(8);
  r.issue(entry(1, "AllReduce"));  // a host operation between device ones
  std::vector<FlightEntry> launch;
  for (uint64_t s = 2; s <= 4; ++s) {
    FlightEntry e = entry(s, s == 4 ? "Send" : "AllReduce");
    e.state = FlightEntry::State::kEnqueued;
    e.gpu = 1;
    e.proto = s == 4 ? "LL" : "Simple";
    e.blocks = s == 2 ? 16 : 0;  // one collective says its blocks, the other ops say none
    e.root = s == 4 ? 3 : -1;
    e.cudaStream = s == 3 ? 0 : 0xabc0;
    launch.push_back(e);
  }
  // A group's entries take consecutive ids, whatever else is recorded at the time.
  const uint64_t first = r.issueAll(launch);
  CHECK(first == 2);
  CHECK(r.issue(entry(5, "Broadcast")) == 5);
  CHECK(r.issueAll({}) == 0);

  r.mark(2, 2, FlightEntry::State::kDone, 0, 12000);
  r.mark(3, 3, FlightEntry::State::kFailed, 6, 13000, "a kernel gave up waiting for data from rank 3");
  r.mark(4, 4, FlightEntry::State::kCaptured, 0, 14000);
  r.mark(4, 4, FlightEntry::State::kDone, 0, 15000);  // a captured entry is never done
  r.mark(4, 4, FlightEntry::State::kFailed, 5, 15000, "x");
  r.mark(2, 2, FlightEntry::State::kFailed, 5, 16000, "too late");  // nor is a done one failed
  auto all = r.snapshot();
  REQUIRE(all.size() == 5);
  CHECK(all[1].state == FlightEntry::State::kDone);
  CHECK(all[1].startNs == 0);  // when a kernel started is not known to the host
  CHECK(all[1].endNs == 12000);
  CHECK(all[1].why.empty());
  CHECK(all[2].state == FlightEntry::State::kFailed);
  CHECK(all[2].result == 6);
  CHECK(all[2].why == "a kernel gave up waiting for data from rank 3");
  CHECK(all[3].state == FlightEntry::State::kCaptured);
  CHECK(all[3].endNs == 0);

  const std::string text = FlightRecorder::text(all);
  CHECK(text.find("#1 AllReduce seq 1 count 10 type 7 algo ring") != std::string::npos);  // host: as before
  CHECK(text.find(
            "#2 device AllReduce seq 2 count 20 type 7 algo ring proto Simple blocks 16 on GPU 1 stream 0xabc0 done "
            "(seen 0.010 ms after enqueue)") != std::string::npos);
  CHECK(text.find("#3 device AllReduce seq 3 count 30 type 7 algo ring proto Simple on GPU 1 (the communicator's "
                  "own stream) failed (seen 0.010 ms after enqueue) result 6: a kernel gave up waiting for data "
                  "from rank 3") != std::string::npos);
  CHECK(text.find("#4 device Send seq 4 count 40 type 7 peer 3 algo ring proto LL on GPU 1 stream 0xabc0 captured "
                  "into a CUDA graph") != std::string::npos);

  // A device entry still enqueued says how long, and that it is not seen finished.
  FlightRecorder q(2);
  FlightEntry e = entry(1, "AllGather");
  e.state = FlightEntry::State::kEnqueued;
  e.gpu = 0;
  q.issue(e);
  CHECK(FlightRecorder::text(q.snapshot()).find("on GPU 0 (the communicator's own stream) enqueued for ") !=
        std::string::npos);
  CHECK(FlightRecorder::text(q.snapshot()).find("(not seen finished)") != std::string::npos);

  // The trace puts device operations on a track of their own, named for the GPU.
  const auto trace = nlohmann::json::parse(FlightRecorder::chromeTrace(all, 0, "comm"));
  REQUIRE(trace.size() == 8);  // three metadata events, five spans
  CHECK(trace[2]["tid"] == 1);
  CHECK(trace[2]["args"]["name"] == "comm (GPU 1)");
  CHECK(trace[3]["tid"] == 0);  // the host operation
  CHECK(trace[4]["tid"] == 1);
  CHECK(trace[4]["args"]["state"] == "done");
  CHECK(trace[4]["args"]["gpu"] == 1);
  CHECK(trace[4]["args"]["stream"] == "0xabc0");
  CHECK(trace[4]["ts"].get<double>() == Approx(2.0));    // from the enqueue
  CHECK(trace[4]["dur"].get<double>() == Approx(10.0));  // to when the host saw it done
  CHECK(trace[5]["args"]["why"] == "a kernel gave up waiting for data from rank 3");
  CHECK(trace[5]["args"]["stream"] == "own");
  CHECK(trace[6]["args"]["state"] == "captured");
  CHECK(trace[6]["dur"].get<double>() == Approx(0.0));
  CHECK(trace[6]["args"]["proto"] == "LL");
}

TEST_CASE("a host operation issued in place leaves nothing of the entry it replaces", "[flight]") {
  FlightRecorder r(2);
  FlightEntry dev = entry(1, "AllReduce");
  dev.gpu = 3;
  dev.proto = "LL";
  dev.blocks = 8;
  dev.cudaStream = 0x1234;
  r.issue(dev);
  r.issue(entry(2, "Broadcast"));
  r.mark(1, 1, FlightEntry::State::kFailed, 5, 9000, "a kernel fault");
  // Id 3 takes id 1's slot.
  const FlightRecorder::HostOp op{7, "AllReduce", "direct (inline)", 2, 7, 0, -1};
  CHECK(r.issueHost(op, true, 12000) == 3);
  CHECK(r.issueHost(FlightRecorder::HostOp{8, "Reduce", "ring", 4, 7, 0, 1}, false, 13000) == 4);
  const auto all = r.snapshot();
  REQUIRE(all.size() == 2);
  const FlightEntry& e = all[0];
  CHECK(e.id == 3);
  CHECK(e.seq == 7);
  CHECK(std::string(e.coll) == "AllReduce");
  CHECK(std::string(e.algo) == "direct (inline)");
  CHECK(std::string(e.proto).empty());
  CHECK(e.blocks == 0);
  CHECK(e.count == 2);
  CHECK(e.type == 7);
  CHECK(e.op == 0);
  CHECK(e.root == -1);
  CHECK(e.state == FlightEntry::State::kRunning);
  CHECK(e.result == 0);
  CHECK(e.gpu == -1);
  CHECK(e.cudaStream == 0);
  CHECK(e.issuedNs == 12000);
  CHECK(e.startNs == 12000);
  CHECK(e.endNs == 0);
  CHECK(e.why.empty());
  CHECK(all[1].state == FlightEntry::State::kIssued);
  CHECK(all[1].startNs == 0);
  CHECK(all[1].root == 1);
  r.mark(3, 4, FlightEntry::State::kDone, 0, 15000);
  const auto done = r.snapshot();
  CHECK(done[0].endNs == 15000);
  CHECK(done[1].startNs == 15000);  // never marked running: it started when it was seen done
}
