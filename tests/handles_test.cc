// Handles and their lifetimes: destroyed or forged stream, event and communicator handles are
// refused (never read, never freed twice), a destroyed handle stays dead after its memory is
// reused, and chorusCommAbort from a watchdog thread ends a collective that another thread is
// blocked in without freeing anything under it; running out of descriptors at init is reported at
// once. Runs under ASan and TSan (tools/setup.sh).
#include <fcntl.h>
#include <sys/resource.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/ddp.h"
#include "tests/test_util.h"

using chorus::test::World;

namespace {

std::string lastError() { return chorusGetLastError(nullptr); }

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("streams and events destroyed twice, or forged, are refused", "[api][handles][misuse]") {
  chorusStream_t s = nullptr;
  REQUIRE(chorusStreamCreate(&s) == chorusSuccess);
  REQUIRE(chorusStreamDestroy(s) == chorusSuccess);
  CHECK(chorusStreamDestroy(s) == chorusInvalidArgument);
  CHECK(lastError().find("not a live chorusStream_t") != std::string::npos);
  CHECK(chorusStreamSynchronize(s) == chorusInvalidArgument);
  CHECK(chorusStreamQuery(s) == chorusInvalidArgument);

  chorusEvent_t e = nullptr;
  REQUIRE(chorusEventCreate(&e) == chorusSuccess);
  REQUIRE(chorusEventDestroy(e) == chorusSuccess);
  CHECK(chorusEventDestroy(e) == chorusInvalidArgument);
  CHECK(lastError().find("not a live chorusEvent_t") != std::string::npos);
  CHECK(chorusEventQuery(e) == chorusInvalidArgument);
  CHECK(chorusEventSynchronize(e) == chorusInvalidArgument);

  // Memory that was never a handle: zeros, noise, a heap block.
  alignas(64) unsigned char zeros[256] = {0};
  alignas(64) unsigned char noise[256];
  for (size_t i = 0; i < sizeof(noise); ++i) noise[i] = static_cast<unsigned char>(i * 37 + 11);
  std::vector<char> heap(128, 'x');
  for (void* p : {static_cast<void*>(zeros), static_cast<void*>(noise), static_cast<void*>(heap.data())}) {
    auto fs = static_cast<chorusStream_t>(p);
    auto fe = static_cast<chorusEvent_t>(p);
    CHECK(chorusStreamDestroy(fs) == chorusInvalidArgument);
    CHECK(chorusStreamSynchronize(fs) == chorusInvalidArgument);
    CHECK(chorusLaunchHostFunc(
              fs, [](void*) {}, nullptr) == chorusInvalidArgument);
    CHECK(chorusEventRecord(fe, nullptr) == chorusInvalidArgument);
    CHECK(chorusEventDestroy(fe) == chorusInvalidArgument);
    CHECK(chorusStreamWaitEvent(nullptr, fe) == chorusInvalidArgument);
  }
  for (size_t i = 0; i < sizeof(noise); ++i) {
    REQUIRE(zeros[i] == 0);
    REQUIRE(noise[i] == static_cast<unsigned char>(i * 37 + 11));
  }

  // A stream passed where an event goes, and the other way round.
  REQUIRE(chorusStreamCreate(&s) == chorusSuccess);
  REQUIRE(chorusEventCreate(&e) == chorusSuccess);
  CHECK(chorusEventDestroy(reinterpret_cast<chorusEvent_t>(s)) == chorusInvalidArgument);
  CHECK(chorusStreamDestroy(reinterpret_cast<chorusStream_t>(e)) == chorusInvalidArgument);
  CHECK(chorusEventRecord(e, s) == chorusSuccess);
  CHECK(chorusEventSynchronize(e) == chorusSuccess);
  // An event recorded on a stream that is then destroyed still answers.
  CHECK(chorusStreamDestroy(s) == chorusSuccess);
  CHECK(chorusEventQuery(e) == chorusSuccess);
  CHECK(chorusEventDestroy(e) == chorusSuccess);
}

TEST_CASE("a destroyed communicator handle stays dead when its memory is reused", "[api][handles][misuse]") {
  // Many rounds: a handle that were an address would come back within a few.
  std::vector<chorusComm_t> dead;
  for (int round = 0; round < 20; ++round) {
    chorusComm_t c = nullptr;
    REQUIRE(chorusCommInitAll(&c, 1, nullptr) == chorusSuccess);
    for (chorusComm_t d : dead) REQUIRE(d != c);
    for (chorusComm_t d : dead) {
      INFO("round " << round);
      REQUIRE(chorusCommDestroy(d) == chorusInvalidArgument);
      REQUIRE(lastError().find("not a live communicator") != std::string::npos);
      int n = 0;
      REQUIRE(chorusCommCount(d, &n) == chorusInvalidArgument);
    }
    // The live one is untouched by the stale handles.
    int n = 0;
    REQUIRE(chorusCommCount(c, &n) == chorusSuccess);
    REQUIRE(n == 1);
    float x = 2.0f;
    REQUIRE(chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, c, nullptr) == chorusSuccess);
    REQUIRE(x == 2.0f);
    REQUIRE(chorusCommDestroy(c) == chorusSuccess);
    dead.push_back(c);
  }
}

TEST_CASE("a handle a thread looked up last is refused once destroyed on that thread and on others", "[api][handles]") {
  // Each thread keeps its last lookup (src/common/handles.h): a destroy anywhere must end it.
  chorusComm_t a = nullptr;
  chorusComm_t b = nullptr;
  REQUIRE(chorusCommInitAll(&a, 1, nullptr) == chorusSuccess);
  REQUIRE(chorusCommInitAll(&b, 1, nullptr) == chorusSuccess);
  int n = 0;
  // Both threads look `a` up last.
  REQUIRE(chorusCommCount(a, &n) == chorusSuccess);
  std::atomic<int> phase{0};
  std::atomic<int> otherResult{-1};
  std::thread other([&] {
    int m = 0;
    (void)chorusCommCount(a, &m);
    phase.store(1);
    while (phase.load() != 2) std::this_thread::yield();
    otherResult.store(chorusCommCount(a, &m));
  });
  while (phase.load() != 1) std::this_thread::yield();
  // Alternating handles on one thread: each answer is its own communicator's.
  float x = 3.0f;
  for (int i = 0; i < 4; ++i) {
    chorusComm_t c = i % 2 ? a : b;
    REQUIRE(chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, c, nullptr) == chorusSuccess);
    REQUIRE(x == 3.0f);
  }
  REQUIRE(chorusCommDestroy(a) == chorusSuccess);
  phase.store(2);
  other.join();
  CHECK(otherResult.load() == chorusInvalidArgument);
  REQUIRE(chorusCommCount(a, &n) == chorusInvalidArgument);
  CHECK(lastError().find("not a live communicator") != std::string::npos);
  CHECK(chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, a, nullptr) == chorusInvalidArgument);
  // The other handle is untouched.
  REQUIRE(chorusCommCount(b, &n) == chorusSuccess);
  REQUIRE(chorusCommDestroy(b) == chorusSuccess);
}

TEST_CASE("abort from a watchdog thread ends a collective blocked on another thread", "[api][abort][handles]") {
  // The pattern PyTorch's and NCCL's users run: a monitor thread aborts a communicator while a
  // collective on it waits for a peer that will not come. The blocked call must return an error
  // at once, and nothing it still touches may be freed under it (ASan checks the second).
  constexpr size_t kCount = 1 << 20;
  for (int round = 0; round < 8; ++round) {
    INFO("round " << round);
    setenv("CHORUS_TIMEOUT", "60", 1);
    World w(2);
    unsetenv("CHORUS_TIMEOUT");
    REQUIRE(w.ok());
    std::vector<float> buf(kCount, 1.0f);
    std::atomic<chorusResult_t> rc{chorusSuccess};
    std::atomic<bool> returned{false};
    chorusComm_t c0 = w.release(0);
    std::thread blocked([&] {
      // A host stream for odd rounds: the wait is then inside the stream's worker.
      if (round % 2 == 0) {
        rc = chorusAllReduce(buf.data(), buf.data(), kCount, chorusFloat32, chorusSum, c0, nullptr);
      } else {
        chorusStream_t s = nullptr;
        chorusResult_t r = chorusStreamCreate(&s);
        if (r == chorusSuccess) r = chorusAllReduce(buf.data(), buf.data(), kCount, chorusFloat32, chorusSum, c0, s);
        if (r == chorusSuccess) r = chorusStreamSynchronize(s);
        chorusStreamDestroy(s);
        rc = r;
      }
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + 50 * round));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(chorusCommAbort(c0) == chorusSuccess);
    const double abortTook = secondsSince(t0);
    blocked.join();
    const double callTook = secondsSince(t0);
    CHECK(returned.load());
    CHECK(rc.load() != chorusSuccess);
    // Far below the 60 s timeout: the abort ended the call, not the clock.
    CHECK(abortTook < 15.0);
    CHECK(callTook < 15.0);
    // The aborted handle is dead; rank 1, which never called, aborts too.
    CHECK(chorusCommAbort(c0) == chorusInvalidArgument);
    CHECK(chorusCommAbort(w.release(1)) == chorusSuccess);
  }
}

TEST_CASE("abort while another thread keeps calling on the communicator", "[api][abort][handles]") {
  // Calls racing an abort either run or are refused as not live; none crashes or hangs.
  for (int round = 0; round < 4; ++round) {
    World w(1);
    REQUIRE(w.ok());
    chorusComm_t c = w.release(0);
    std::atomic<bool> stop{false};
    std::atomic<int> refused{0};
    std::thread caller([&] {
      float x = 1.0f;
      while (!stop.load()) {
        chorusResult_t r = chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, c, nullptr);
        int n = 0;
        if (r != chorusSuccess && chorusCommCount(c, &n) == chorusInvalidArgument) ++refused;
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(chorusCommAbort(c) == chorusSuccess);
    // The caller must meet the dead handle; on a loaded machine it may not run for a while.
    const auto t0 = std::chrono::steady_clock::now();
    while (refused.load() == 0 && secondsSince(t0) < 10.0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop = true;
    caller.join();
    CHECK(refused.load() > 0);
  }
}

TEST_CASE("running out of descriptors during init is reported at once, with the numbers", "[api][init][fds]") {
  // Twenty ranks in this process with room for a few to about sixty more descriptors: they cannot
  // all start. Which call meets the limit first depends on the room left (the root accepting a
  // rank, a rank's listener, a rank's socket toward the root), so the room is swept. Every rank
  // must stop within seconds (not at the 60 s timeout), and the error must say "too many open
  // files" and how many descriptors the job needs.
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  for (int room : {59, 45, 30, 16, 8, 3}) {
    INFO("room for " << room << " more descriptors");
    int open = 0;
    for (int fd = 0; fd < 4096; ++fd) open += fcntl(fd, F_GETFD) != -1;
    rlimit tight = saved;
    tight.rlim_cur = static_cast<rlim_t>(open + room);
    REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
    setenv("CHORUS_TIMEOUT", "60", 1);
    std::vector<chorusComm_t> comms(20, nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    const chorusResult_t rc = chorusCommInitAll(comms.data(), 20, nullptr);
    const double took = secondsSince(t0);
    const std::string msg = lastError();
    unsetenv("CHORUS_TIMEOUT");
    REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    INFO(msg);
    CHECK(rc == chorusSystemError);
    CHECK(took < 20.0);
    CHECK(msg.find("too many open files") != std::string::npos);
    CHECK(msg.find("need about") != std::string::npos);
    for (chorusComm_t c : comms) CHECK(c == nullptr);
    // Nothing lingers: the clique's root in this process closes its listener and connections
    // too (before, it held them until the init timeout).
    int now = open + 1;
    for (int wait = 0; wait < 250 && now > open; ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      now = 0;
      for (int fd = 0; fd < 4096; ++fd) now += fcntl(fd, F_GETFD) != -1;
    }
    CHECK(now <= open);
  }
  // With the limit back, the same init works.
  std::vector<chorusComm_t> comms(20, nullptr);
  REQUIRE(chorusCommInitAll(comms.data(), 20, nullptr) == chorusSuccess);
  for (chorusComm_t c : comms) CHECK(chorusCommDestroy(c) == chorusSuccess);
}

TEST_CASE("a destroyed DDP reducer handle stays dead when its memory is reused", "[api][handles][ddp]") {
  World w(1);
  REQUIRE(w.ok());
  chorusDdpParam_t param{};
  param.count = 16;
  param.type = chorusFloat32;
  std::vector<chorusDdpReducer_t> dead;
  for (int round = 0; round < 10; ++round) {
    chorusDdpReducer_t r = nullptr;
    REQUIRE(chorusDdpReducerCreate(&r, w[0], &param, 1, nullptr) == chorusSuccess);
    for (chorusDdpReducer_t d : dead) {
      REQUIRE(d != r);
      REQUIRE(chorusDdpReducerDestroy(d) == chorusInvalidArgument);
      void* grad = nullptr;
      REQUIRE(chorusDdpGradient(d, 0, &grad) == chorusInvalidArgument);
    }
    void* grad = nullptr;
    REQUIRE(chorusDdpGradient(r, 0, &grad) == chorusSuccess);
    REQUIRE(grad != nullptr);
    REQUIRE(chorusDdpReducerDestroy(r) == chorusSuccess);
    dead.push_back(r);
  }
}
