// The C API when ranks disagree or go away: CHORUS_CHECK naming the rank whose call differs, a
// mismatched count without it, chorusCommShrink, and calls on a communicator still initialising.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "tests/test_util.h"

using chorus::test::hasMessage;
using chorus::test::onRanks;
using chorus::test::World;

namespace {

// Three ranks as threads under CHORUS_CHECK=1; rank 2 calls `odd` where ranks 0 and 1 call an
// all-reduce of 100 floats. Returns each rank's result and message.
template <typename Odd>
std::vector<std::pair<chorusResult_t, std::string>> checkedMismatch(Odd odd) {
  setenv("CHORUS_CHECK", "1", 1);
  setenv("CHORUS_TIMEOUT", "20", 1);
  World w(3);
  unsetenv("CHORUS_CHECK");
  unsetenv("CHORUS_TIMEOUT");
  REQUIRE(w.ok());
  std::vector<std::pair<chorusResult_t, std::string>> out(3);
  std::vector<std::vector<float>> buf(3, std::vector<float>(400, 1.0f));
  onRanks(3, [&](int r) {
    // One agreed collective first: the check passes it.
    chorusResult_t rc = chorusAllReduce(buf[r].data(), buf[r].data(), 4, chorusFloat32, chorusSum, w[r], nullptr);
    if (rc == chorusSuccess) {
      // Guard: everything past the first 100 elements must stay as it is.
      rc = r == 2 ? odd(buf[r].data(), w[r])
                  : chorusAllReduce(buf[r].data(), buf[r].data(), 100, chorusFloat32, chorusSum, w[r], nullptr);
    }
    out[r] = {rc, chorusGetLastError(w[r])};
    return rc;
  });
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 100; i < 400; ++i) REQUIRE(buf[r][i] == 1.0f);
  }
  for (int r = 0; r < 3; ++r) chorusCommAbort(w.release(r));
  return out;
}

}  // namespace

TEST_CASE("CHORUS_CHECK: every rank learns which rank called a different collective, and how", "[api][check]") {
  struct Case {
    const char* name;
    std::function<chorusResult_t(float*, chorusComm_t)> odd;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"another collective",
       [](float* b, chorusComm_t c) { return chorusBroadcast(b, b, 100, chorusFloat32, 0, c, nullptr); },
       "rank 2 called Broadcast (count 100, float32, root 0)"},
      {"another count",
       [](float* b, chorusComm_t c) { return chorusAllReduce(b, b, 99, chorusFloat32, chorusSum, c, nullptr); },
       "rank 2 called AllReduce (count 99, float32, op sum)"},
      {"another operator",
       [](float* b, chorusComm_t c) { return chorusAllReduce(b, b, 100, chorusFloat32, chorusMax, c, nullptr); },
       "rank 2 called AllReduce (count 100, float32, op max)"},
      {"another type",
       [](float* b, chorusComm_t c) { return chorusAllReduce(b, b, 100, chorusInt32, chorusSum, c, nullptr); },
       "rank 2 called AllReduce (count 100, int32, op sum)"},
      {"a collective issued twice, in a group",
       [](float* b, chorusComm_t c) {
         chorusGroupStart();
         chorusReduce(b, b, 100, chorusFloat32, chorusSum, 1, c, nullptr);
         chorusAllReduce(b, b, 100, chorusFloat32, chorusSum, c, nullptr);
         return chorusGroupEnd();
       },
       "rank 2 called Reduce (count 100, float32, op sum, root 1)"},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      auto out = checkedMismatch(c.odd);
      for (int r = 0; r < 3; ++r) {
        INFO("rank " << r << ": " << out[r].second);
        CHECK(out[r].first == chorusInvalidUsage);
        CHECK(out[r].second.find("CHORUS_CHECK: collective #2") != std::string::npos);
        CHECK(out[r].second.find("rank 0 called AllReduce (count 100, float32, op sum)") != std::string::npos);
        CHECK(out[r].second.find(c.says) != std::string::npos);
      }
    }
  }
}

TEST_CASE("CHORUS_CHECK passes agreeing collectives, also with one thread driving every rank in a group",
          "[api][check][group]") {
  setenv("CHORUS_CHECK", "1", 1);
  World w(3);
  unsetenv("CHORUS_CHECK");
  REQUIRE(w.ok());
  std::vector<std::vector<int32_t>> buf(3);
  for (int r = 0; r < 3; ++r) buf[r] = {r + 1, 10 * (r + 1)};
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < 3; ++r) {
    REQUIRE(chorusAllReduce(buf[r].data(), buf[r].data(), 2, chorusInt32, chorusSum, w[r], nullptr) == chorusSuccess);
    REQUIRE(chorusBroadcast(buf[r].data(), buf[r].data(), 1, chorusInt32, 2, w[r], nullptr) == chorusSuccess);
  }
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  for (int r = 0; r < 3; ++r) {
    CHECK(buf[r][0] == 6);
    CHECK(buf[r][1] == 60);
  }
}

TEST_CASE("without CHORUS_CHECK a mismatched count is an error that writes nothing past a buffer",
          "[api][check][misuse]") {
  // Counts that take the direct schedule (4 KiB) and the slice all-reduce (256 KiB) on the longer
  // side, and both sides on the slice schedule (4 MiB against 256 KiB), where each rank reads the
  // other's buffers in place: every read must stay inside what the peer declared. Each buffer is
  // its own heap block, so ASan sees a read past the shorter one.
  const std::pair<size_t, size_t> pairs[] = {{1000, 10}, {65536, 10}, {1 << 20, 65536}};
  for (auto [big, small] : pairs) {
    // Where the check must end the call, the timeout is far above the bound on how long it took, so
    // a loaded machine cannot make the one look like the other.
    const bool checkEndsIt = small != 10 || big == 1000;
    setenv("CHORUS_TIMEOUT", checkEndsIt ? "60" : "5", 1);
    setenv("CHORUS_INIT_TIMEOUT", "60", 1);
    World w(2);
    unsetenv("CHORUS_TIMEOUT");
    unsetenv("CHORUS_INIT_TIMEOUT");
    REQUIRE(w.ok());
    const size_t n[2] = {big, small};
    std::vector<std::vector<float>> in{std::vector<float>(big, 3.0f), std::vector<float>(small, 3.0f)};
    std::vector<std::vector<float>> out{std::vector<float>(big + 1000, 5.0f), std::vector<float>(small + 1000, 5.0f)};
    const auto t0 = std::chrono::steady_clock::now();
    auto rc = onRanks(2, [&](int r) {
      return chorusAllReduce(in[r].data(), out[r].data(), n[r], chorusFloat32, chorusSum, w[r], nullptr);
    });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("count " << big << " against " << small);
    CHECK(rc[0] != chorusSuccess);
    CHECK(rc[1] != chorusSuccess);
    // Failed by the check, not by the 5 s timeout, where both ranks ran one schedule (at 65536
    // against 10 one rank runs slice and the other direct, on different connections: the
    // timeout ends it, or CHORUS_CHECK at once).
    if (checkEndsIt) CHECK(took < 20.0);
    for (int r = 0; r < 2; ++r) {
      for (size_t i = n[r]; i < out[r].size(); ++i) REQUIRE(out[r][i] == 5.0f);
      for (size_t i = 0; i < n[r]; ++i) REQUIRE(in[r][i] == 3.0f);
    }
    for (int r = 0; r < 2; ++r) chorusCommAbort(w.release(r));
  }
}

TEST_CASE("chorusCommShrink: bad arguments are refused with a message", "[api][shrink][misuse]") {
  World w(3);
  REQUIRE(w.ok());
  chorusComm_t out = reinterpret_cast<chorusComm_t>(0x1);
  int one[1] = {2};
  int self[1] = {0};
  int range[1] = {3};
  int twice[2] = {1, 1};
  int all[3] = {0, 1, 2};
  CHECK(chorusCommShrink(w[0], one, 1, nullptr, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(chorusCommShrink(nullptr, one, 1, &out, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(out == nullptr);
  CHECK(chorusCommShrink(w[0], one, -1, &out, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(nullptr)).find("negative") != std::string::npos);
  CHECK(chorusCommShrink(w[0], nullptr, 1, &out, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(chorusCommShrink(w[0], range, 1, &out, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(nullptr)).find("outside [0, 3)") != std::string::npos);
  CHECK(chorusCommShrink(w[0], twice, 2, &out, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(nullptr)).find("twice") != std::string::npos);
  CHECK(chorusCommShrink(w[0], self, 1, &out, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(nullptr)).find("its own excludeRanksList") != std::string::npos);
  CHECK(chorusCommShrink(w[0], all, 3, &out, nullptr, CHORUS_SHRINK_DEFAULT) == chorusInvalidArgument);
  CHECK(chorusCommShrink(w[0], one, 1, &out, nullptr, 7) == chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(nullptr)).find("CHORUS_SHRINK_ABORT") != std::string::npos);
  CHECK(out == nullptr);
  // None of this touched the communicators.
  std::vector<int> v(3, 1);
  auto rc = onRanks(3, [&](int r) { return chorusAllReduce(&v[r], &v[r], 1, chorusInt32, chorusSum, w[r], nullptr); });
  for (int r = 0; r < 3; ++r) CHECK((rc[r] == chorusSuccess && v[r] == 3));
}

TEST_CASE("chorusCommShrink: the survivors go on without the excluded rank", "[api][shrink]") {
  World w(4);
  REQUIRE(w.ok());
  for (int flags : {CHORUS_SHRINK_DEFAULT, CHORUS_SHRINK_ABORT}) {
    INFO("flags " << flags);
    std::vector<chorusComm_t> small(4, nullptr);
    int exclude[1] = {1};  // rank 1 takes no part (as if it had died)
    auto rc = onRanks(4, [&](int r) {
      if (r == 1) return chorusSuccess;
      return chorusCommShrink(w[r], exclude, 1, &small[r], nullptr, flags);
    });
    std::vector<int64_t> v(4);
    rc = onRanks(4, [&](int r) {
      if (r == 1) return chorusSuccess;
      int me = -1, n = 0;
      chorusCommUserRank(small[r], &me);
      chorusCommCount(small[r], &n);
      if (n != 3 || me != (r == 0 ? 0 : r - 1)) return chorusInternalError;
      v[r] = 10 + r;
      return chorusAllReduce(&v[r], &v[r], 1, chorusInt64, chorusSum, small[r], nullptr);
    });
    for (int r : {0, 2, 3}) {
      CHECK(rc[r] == chorusSuccess);
      CHECK(v[r] == 10 + 12 + 13);
      CHECK(chorusCommDestroy(small[r]) == chorusSuccess);
    }
    if (flags == CHORUS_SHRINK_ABORT) {
      // The parent's operations were stopped: it is failed now, and says why.
      chorusResult_t async;
      CHECK(chorusCommGetAsyncError(w[0], &async) == chorusSuccess);
      CHECK(async == chorusRemoteError);
      CHECK(std::string(chorusGetLastError(w[0])).find("CHORUS_SHRINK_ABORT") != std::string::npos);
    }
  }
  for (int r = 0; r < 4; ++r) chorusCommAbort(w.release(r));
}

TEST_CASE("chorusCommShrink: survivors whose exclude lists differ all fail, naming the lists", "[api][shrink]") {
  setenv("CHORUS_TIMEOUT", "60", 1);
  World w(4);
  unsetenv("CHORUS_TIMEOUT");
  REQUIRE(w.ok());
  std::vector<chorusComm_t> small(4, nullptr);
  std::vector<std::string> msg(4);
  const auto t0 = std::chrono::steady_clock::now();
  auto rc = onRanks(4, [&](int r) {
    if (r == 3) return chorusSuccess;  // rank 3 takes no part
    int three[1] = {3};
    chorusResult_t x = r == 2 ? chorusCommShrink(w[r], nullptr, 0, &small[r], nullptr, CHORUS_SHRINK_DEFAULT)
                              : chorusCommShrink(w[r], three, 1, &small[r], nullptr, CHORUS_SHRINK_DEFAULT);
    msg[r] = chorusGetLastError(nullptr);
    return x;
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << msg[r]);
    CHECK(rc[r] == chorusInvalidUsage);
    CHECK(small[r] == nullptr);
    CHECK(msg[r].find("excludeRanksList") != std::string::npos);
    CHECK(msg[r].find("[3]") != std::string::npos);
    CHECK(msg[r].find("[]") != std::string::npos);
  }
  CHECK(took < 20);  // at once, not at the 60 s timeout
  for (int r = 0; r < 4; ++r) chorusCommAbort(w.release(r));
}

TEST_CASE("calls on a communicator still initialising are refused, not dropped", "[api][init]") {
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  chorusComm_t c0 = nullptr;
  chorusComm_t c1 = nullptr;
  // Rank 0 cannot finish before rank 1 joins.
  REQUIRE(chorusCommInitRankConfig(&c0, 2, id, 0, &cfg) == chorusInProgress);
  float x = 1.0f;
  CHECK(chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, c0, nullptr) == chorusInvalidUsage);
  CHECK(std::string(chorusGetLastError(nullptr)).find("still initialising") != std::string::npos);
  chorusResult_t state = chorusSuccess;
  CHECK(chorusCommGetAsyncError(c0, &state) == chorusSuccess);
  CHECK(state == chorusInProgress);
  std::thread t([&] { chorusCommInitRank(&c1, 2, id, 1); });
  while (state == chorusInProgress) {
    chorusCommGetAsyncError(c0, &state);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  t.join();
  REQUIRE(state == chorusSuccess);
  float y = 2.0f;
  auto rc = onRanks(2, [&](int r) {
    return chorusAllReduce(r ? &y : &x, r ? &y : &x, 1, chorusFloat32, chorusSum, r ? c1 : c0, nullptr);
  });
  CHECK(rc[0] == chorusSuccess);
  CHECK(x == 3.0f);
  CHECK(y == 3.0f);
  CHECK(chorusCommDestroy(c0) == chorusSuccess);
  CHECK(chorusCommDestroy(c1) == chorusSuccess);
}

TEST_CASE("CHORUS_ALGO=one-copy: host all-reduces stay the tuner's; with CHORUS_ONECOPY=0 init refuses it",
          "[api][init][misuse]") {
  setenv("CHORUS_ALGO", "one-copy", 1);
  {
    // Device memory only: host all-reduces of every size run as the tuner chooses, and sum.
    World w(3);
    REQUIRE(w.ok());
    for (size_t count : {size_t(1), size_t(1000), size_t(300000)}) {
      INFO(count << " elements");
      std::vector<std::vector<float>> buf(3, std::vector<float>(count));
      const auto rc = onRanks(3, [&](int r) {
        for (size_t i = 0; i < count; ++i) buf[r][i] = float(r + 1) * float(i % 7);
        return chorusAllReduce(buf[r].data(), buf[r].data(), count, chorusFloat32, chorusSum, w[r], nullptr);
      });
      for (int r = 0; r < 3; ++r) {
        REQUIRE(rc[r] == chorusSuccess);
        for (size_t i = 0; i < count; ++i) REQUIRE(buf[r][i] == 6.0f * float(i % 7));
      }
    }
  }
  setenv("CHORUS_ONECOPY", "0", 1);
  {
    World w(2);
    CHECK_FALSE(w.ok());
    const std::string msg = chorusGetLastError(nullptr);
    CHECK(msg.find("CHORUS_ALGO=one-copy asks for the one-copy algorithm and CHORUS_ONECOPY=0 forbids it") !=
          std::string::npos);
  }
  unsetenv("CHORUS_ONECOPY");
  unsetenv("CHORUS_ALGO");
}

TEST_CASE("a forced algorithm that cannot run this many ranks fails init, saying so", "[api][init][misuse]") {
  for (const char* algo : {"direct", "slice"}) {
    INFO(algo);
    setenv("CHORUS_ALGO", algo, 1);
    {
      World w(9);
      CHECK_FALSE(w.ok());
      const std::string msg = chorusGetLastError(nullptr);
      CHECK(msg.find(std::string("CHORUS_ALGO=") + algo + " runs on at most 8 ranks and this communicator has 9") !=
            std::string::npos);
    }
    {
      World w(8);  // at most 8: runs
      REQUIRE(w.ok());
      std::vector<std::vector<float>> buf(8, std::vector<float>(1000, 1.0f));
      const auto rc = onRanks(8, [&](int r) {
        for (size_t i = 0; i < buf[r].size(); ++i) buf[r][i] = float(r + 1) * float(i % 5);
        return chorusAllReduce(buf[r].data(), buf[r].data(), 1000, chorusFloat32, chorusSum, w[r], nullptr);
      });
      for (int r = 0; r < 8; ++r) {
        REQUIRE(rc[r] == chorusSuccess);
        for (size_t i = 0; i < buf[r].size(); ++i) REQUIRE(buf[r][i] == 36.0f * float(i % 5));
      }
    }
    unsetenv("CHORUS_ALGO");
  }
}
