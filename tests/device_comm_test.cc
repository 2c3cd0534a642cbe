// What the host tells of its device launches without waiting on the device (src/core/device_comm.h):
// the launch tracker, with events and the device's error record and abort word played by plain
// values, and the failures the device watchdog counts while kernels run. No GPU needed.
#include <catch2/catch.hpp>
#include <map>
#include <vector>

#include "src/core/device_comm.h"

using namespace chorus;
using device::SeqKind;
using Span = LaunchTracker::Span;

namespace {

constexpr int kRanks = 4;

// Events are addresses of flags here: "done" when the flag is set.
struct FakeDevice {
  std::map<void*, bool> done;
  LaunchTracker::DeviceState state;
  int asked = 0;  // events asked in the last look
  LaunchTracker::Found look(LaunchTracker& t) {
    asked = 0;
    return t.look(
        [this](void* e) {
          ++asked;
          return done[e];
        },
        [this] { return state; });
  }
};

// A launch of `lanes` on channels 0..lanes-1 (collective counters), waiting on `peers`.
void addColl(LaunchTracker& t, void* event, Span flight, int lanes, const std::vector<int>& peers) {
  std::vector<uint32_t> counters;
  for (int c = 0; c < lanes; ++c) counters.push_back(LaunchTracker::counterOf(SeqKind::kColl, c, kRanks));
  t.add(event, flight, peers, counters);
}

bool same(const std::vector<Span>& a, const std::vector<Span>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].last != b[i].last) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("the launch tracker: launches are done in issue order, their peers leave with them", "[device_comm]") {
  LaunchTracker t;
  FakeDevice dev;
  int e[3];
  addColl(t, &e[0], {1, 2}, 2, {1, 3});  // a group of two ops, flight ids 1-2
  addColl(t, &e[1], {3, 3}, 2, {1, 3});
  // A send to rank 2: its counter is the point-to-point one, after the channels.
  t.add(&e[2], {4, 4}, {2}, {LaunchTracker::counterOf(SeqKind::kP2pSend, 2, kRanks)});
  CHECK(t.size() == 3);
  CHECK(t.peers() == std::vector<int>{1, 2, 3});

  // Nothing done: nothing leaves, and the look stops at the first launch not done.
  auto f = dev.look(t);
  CHECK(f.done.empty());
  CHECK(f.freed.empty());
  CHECK(dev.asked == 1);
  // The second is done, the first not (yet as far as its event says): neither leaves, since the
  // first not seen done is the one in flight.
  dev.done[&e[1]] = true;
  f = dev.look(t);
  CHECK(f.done.empty());
  CHECK(t.size() == 3);
  dev.done[&e[0]] = true;
  f = dev.look(t);
  CHECK(same(f.done, {{1, 2}, {3, 3}}));
  CHECK(f.freed == std::vector<void*>{&e[0], &e[1]});
  CHECK(t.size() == 1);
  CHECK(t.peers() == std::vector<int>{2});  // ranks 1 and 3 are no longer waited on
  dev.done[&e[2]] = true;
  f = dev.look(t);
  CHECK(same(f.done, {{4, 4}}));
  CHECK(t.peers().empty());
  CHECK(t.size() == 0);
}

TEST_CASE("the launch tracker: a fault fails the launch whose lane took the faulting sequence number",
          "[device_comm]") {
  LaunchTracker t;
  FakeDevice dev;
  int e[4];
  // Four all-reduces, each a launch of one lane per channel (2 channels): channel 1's counter is
  // 1, 2, 3, 4 after them.
  for (int i = 0; i < 4; ++i) addColl(t, &e[i], {uint64_t(i + 1), uint64_t(i + 1)}, 2, {1});
  // The first is seen done at an earlier look.
  dev.done[&e[0]] = true;
  CHECK(same(dev.look(t).done, {{1, 1}}));
  // Then the second finishes, the third faults on channel 1 (its lane's number there is 3) and the
  // fourth runs nothing; all their events are done by the next look. The second is done, the
  // third failed, the fourth not run: none is taken as done for its event alone.
  for (int i = 1; i < 4; ++i) dev.done[&e[i]] = true;
  dev.state.faulted = true;
  dev.state.faultCounter = LaunchTracker::counterOf(SeqKind::kColl, 1, kRanks);
  dev.state.faultSeq = 3;
  auto f = dev.look(t);
  CHECK(same(f.done, {{2, 2}}));
  CHECK(same(f.faulted, {{3, 3}}));
  CHECK(same(f.notRun, {{4, 4}}));
  CHECK(f.stopped.empty());
  CHECK(f.freed.size() == 3);
  CHECK(t.size() == 0);
  // A launch enqueued after the fault runs nothing either: not run, even before its event is done.
  addColl(t, &e[0], {5, 5}, 2, {1});
  dev.done[&e[0]] = false;
  f = dev.look(t);
  CHECK(f.done.empty());
  CHECK(same(f.notRun, {{5, 5}}));
  CHECK(f.faulted.empty());
}

TEST_CASE("the launch tracker: a fault whose number matches no launch fails the one in flight", "[device_comm]") {
  // A graph's replays advanced the device's counters past the tracker's: the fault's number is one
  // no tracked launch took, so the oldest launch not seen done (the one in flight) takes it.
  LaunchTracker t;
  FakeDevice dev;
  int e[2];
  addColl(t, &e[0], {7, 8}, 1, {2});
  addColl(t, &e[1], {9, 9}, 1, {2});
  dev.state.faulted = true;
  dev.state.faultCounter = 0;
  dev.state.faultSeq = 40;
  auto f = dev.look(t);
  CHECK(f.done.empty());
  CHECK(same(f.faulted, {{7, 8}}));
  CHECK(same(f.notRun, {{9, 9}}));
  // A fault on a point-to-point queue: matched on that queue's counter, not a channel's.
  LaunchTracker p;
  FakeDevice pd;
  const uint32_t toOne = LaunchTracker::counterOf(SeqKind::kP2pSend, 1, kRanks);
  const uint32_t fromOne = LaunchTracker::counterOf(SeqKind::kP2pRecv, 1, kRanks);
  CHECK(toOne != fromOne);
  CHECK(toOne >= static_cast<uint32_t>(device::DeviceCommState::kMaxChannels));
  p.add(&e[0], {1, 1}, {1}, {toOne});
  p.add(&e[1], {2, 2}, {1}, {fromOne});
  pd.state.faulted = true;
  pd.state.faultCounter = fromOne;
  pd.state.faultSeq = 1;
  f = pd.look(p);
  CHECK(same(f.done, {{1, 1}}));
  CHECK(same(f.faulted, {{2, 2}}));
}

TEST_CASE("the launch tracker: after the abort word nothing is taken as done", "[device_comm]") {
  LaunchTracker t;
  FakeDevice dev;
  int e[2];
  addColl(t, &e[0], {1, 1}, 1, {1});
  addColl(t, &e[1], {2, 2}, 1, {1});
  // Both events done, but the abort word is set (no fault recorded: no kernel was waiting): the
  // first may have finished before the stop or been cut short by it.
  dev.done[&e[0]] = true;
  dev.done[&e[1]] = true;
  dev.state.stopped = true;
  auto f = dev.look(t);
  CHECK(f.done.empty());
  CHECK(same(f.stopped, {{1, 1}, {2, 2}}));
  CHECK(t.size() == 0);
  CHECK(t.peers().empty());
}

TEST_CASE("the launch tracker: past its bound, launches merge into the newest", "[device_comm]") {
  LaunchTracker t;
  FakeDevice dev;
  std::vector<int> e(LaunchTracker::kMaxLaunches);
  for (size_t i = 0; i < e.size(); ++i) addColl(t, &e[i], {i + 1, i + 1}, 1, {1});
  CHECK(t.full());
  // The caller records the newest event again after the next launch, and adds it with that event.
  void* newest = t.newestEvent();
  CHECK(newest == &e.back());
  addColl(t, newest, {1000, 1001}, 1, {3});
  CHECK(t.size() == LaunchTracker::kMaxLaunches);
  CHECK(t.peers() == std::vector<int>{1, 3});
  for (int& x : e) dev.done[&x] = true;
  auto f = dev.look(t);
  REQUIRE(f.done.size() == LaunchTracker::kMaxLaunches + 1);
  CHECK(f.done.back().first == 1000);
  CHECK(f.done.back().last == 1001);
  CHECK(f.freed.size() == LaunchTracker::kMaxLaunches);  // each event once
  // The merged launch's lanes are counted: a fault at channel 0's number 257 is the newest launch's
  // (launch 256's lane took 256, the merged one's 257), not the oldest's for want of a match.
  LaunchTracker u;
  FakeDevice ud;
  for (size_t i = 0; i < e.size(); ++i) addColl(u, &e[i], {i + 1, i + 1}, 1, {1});
  addColl(u, u.newestEvent(), {1000, 1001}, 1, {3});
  ud.state.faulted = true;
  ud.state.faultCounter = 0;
  ud.state.faultSeq = LaunchTracker::kMaxLaunches + 1;
  f = ud.look(u);
  CHECK(f.done.size() == LaunchTracker::kMaxLaunches - 1);
  CHECK(same(f.faulted, {{LaunchTracker::kMaxLaunches, LaunchTracker::kMaxLaunches}, {1000, 1001}}));
  CHECK(f.notRun.empty());
}

TEST_CASE("the device watchdog counts a failure about a peer only while a launch waits on it", "[device_comm]") {
  const Status goneB = remoteError("rank 1 is gone").about(1);
  const Status socketC = remoteError("the socket connection to rank 2 ended").about(2);
  const Status anyone = systemError("something about no rank in particular");
  // Rank 1 finished and left; the launches in flight talk to rank 2 or 3 only.
  CHECK(failureInFlight({goneB}, {2, 3}).isOk());
  CHECK(failureInFlight({goneB}, {}).isOk());
  CHECK(failureInFlight({goneB, Status::ok()}, {0, 2}).isOk());
  // A launch that waits on it: it counts.
  CHECK(failureInFlight({goneB}, {0, 1, 2}).subject() == 1);
  // The first that counts, in the order found, past the ones that do not.
  CHECK(failureInFlight({goneB, socketC}, {2}).subject() == 2);
  CHECK(failureInFlight({goneB, socketC}, {1, 2}).subject() == 1);
  // A failure about no rank always counts.
  CHECK(failureInFlight({goneB, anyone}, {3}).message() == anyone.message());
  CHECK(failureInFlight({anyone}, {}).code() == chorusSystemError);
  CHECK(failureInFlight({}, {1, 2}).isOk());
}
