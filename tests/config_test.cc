// Config::fromEnv: the algorithm settings and the FIFO slot count (the others are exercised through the
// grid variants).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "src/algo/tuner.h"
#include "src/common/config.h"
#include "src/common/guard.h"
#include "src/common/os.h"
#include "src/core/device_comm.h"
#include "src/core/engine.h"

using namespace chorus;

namespace {

// Sets one variable for a scope; its earlier value (or its absence) comes back after it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* had = std::getenv(name)) earlier_ = had;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (earlier_) {
      setenv(name_, earlier_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> earlier_;
};

// A setting's value in a config's snapshot, by name (declared beside its reader).
int64_t intSetting(const Config& c, const char* name) {
  const auto* s = dynamic_cast<const IntSetting*>(findSetting(name));
  REQUIRE(s);
  return s->get(c.env);
}

}  // namespace

TEST_CASE("CHORUS_ALGO is chosen per call unless forced", "[config]") {
  unsetenv("CHORUS_ALGO");
  unsetenv("CHORUS_DIRECT_MAX_BYTES");
  auto c = Config::fromEnv();
  REQUIRE(c.isOk());
  CHECK(c.value().algo.empty());
  CHECK(intSetting(c.value(), "CHORUS_DIRECT_MAX_BYTES") == 64 * 1024);
  {
    ScopedEnv e("CHORUS_ALGO", "Direct");
    auto d = Config::fromEnv();
    REQUIRE(d.isOk());
    CHECK(d.value().algo == "direct");
  }
  {
    ScopedEnv e("CHORUS_ALGO", "RING");
    auto d = Config::fromEnv();
    REQUIRE(d.isOk());
    CHECK(d.value().algo == "ring");
  }
  {
    ScopedEnv e("CHORUS_ALGO", "Tree");
    auto d = Config::fromEnv();
    REQUIRE(d.isOk());
    CHECK(d.value().algo == "tree");
  }
  {
    // The tuner parses the setting once, and refuses what it does not know.
    auto d = parseAlgoSetting("collnet");
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().code() == chorusInvalidArgument);
    CHECK(d.status().message().find("CHORUS_ALGO=collnet") != std::string::npos);
    CHECK(d.status().message().find("(ring, direct, tree, slice, one-copy)") != std::string::npos);
    auto t = parseAlgoSetting("Tree");
    REQUIRE(t.isOk());
    CHECK(t.value() == Algo::kTree);
    auto none = parseAlgoSetting("");
    REQUIRE(none.isOk());
    CHECK_FALSE(none.value().has_value());
  }
}

TEST_CASE("CHORUS_DIRECT_MAX_BYTES takes a byte count", "[config]") {
  {
    ScopedEnv e("CHORUS_DIRECT_MAX_BYTES", "0");
    auto d = Config::fromEnv();
    REQUIRE(d.isOk());
    CHECK(intSetting(d.value(), "CHORUS_DIRECT_MAX_BYTES") == 0);
  }
  {
    ScopedEnv e("CHORUS_DIRECT_MAX_BYTES", "4k");
    auto d = Config::fromEnv();
    REQUIRE_FALSE(d.isOk());
    CHECK(d.status().message().find("CHORUS_DIRECT_MAX_BYTES=4k") != std::string::npos);
  }
}

TEST_CASE("device FIFOs have slots of their own; per-peer ones never above them", "[config]") {
  {
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().deviceSlotBytes == 512 * 1024);
    CHECK(c.value().slotBytes == 128 * 1024);  // the host's stay
    CHECK(c.value().devicePeerSlots() == 32 * 1024);
  }
  {
    ScopedEnv e("CHORUS_DEVICE_SLOT_BYTES", "8192");
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().deviceSlotBytes == 8192);
    CHECK(c.value().devicePeerSlots() == 8192);
    CHECK(c.value().peerSlots() == 32 * 1024);
  }
  for (const char* bad : {"4000", "100", "1g"}) {
    ScopedEnv e("CHORUS_DEVICE_SLOT_BYTES", bad);
    auto c = Config::fromEnv();
    REQUIRE_FALSE(c.isOk());
    CHECK(c.status().message().find("CHORUS_DEVICE_SLOT_BYTES") != std::string::npos);
  }
}

TEST_CASE("CHORUS_ONECOPY: unset, 0 or 1", "[config]") {
  {
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().oneCopy == -1);
  }
  for (int v : {0, 1}) {
    ScopedEnv e("CHORUS_ONECOPY", std::to_string(v).c_str());
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().oneCopy == v);
  }
  ScopedEnv e("CHORUS_ONECOPY", "2");
  CHECK_FALSE(Config::fromEnv().isOk());
}

TEST_CASE("CHORUS_LL128: off unless set to 1; anything else is an error naming it", "[config]") {
  {
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK_FALSE(c.value().ll128);  // off: wrong results under MPS (docs/records/2026-11-29-gpu-runs.md)
  }
  for (const char* v : {"1", "0"}) {
    ScopedEnv e("CHORUS_LL128", v);
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().ll128 == (v[0] == '1'));
  }
  ScopedEnv e("CHORUS_LL128", "maybe");
  auto c = Config::fromEnv();
  REQUIRE_FALSE(c.isOk());
  CHECK(c.status().message().find("CHORUS_LL128") != std::string::npos);
}

TEST_CASE("CUDA_DEVICE_MAX_CONNECTIONS is read, never an error; ranks sharing a GPU in a process hear of it",
          "[config]") {
  {
    ScopedEnv e("CUDA_DEVICE_MAX_CONNECTIONS", "8");
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");  // the scope puts back what the test ran with
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().cudaConnections == 8);  // CUDA's default
    CHECK(c.value().envWarnings.empty());
  }
  for (const char* v : {"1", "16", "32"}) {
    ScopedEnv e("CUDA_DEVICE_MAX_CONNECTIONS", v);
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().cudaConnections == std::atoi(v));
  }
  for (const char* v : {"0", "33", "many"}) {
    ScopedEnv e("CUDA_DEVICE_MAX_CONNECTIONS", v);
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());  // CUDA's variable: Chorus does not refuse to start over it
    CHECK(c.value().cudaConnections == 8);
    REQUIRE(c.value().envWarnings.size() == 1);
    CHECK(c.value().envWarnings[0].find(std::string("CUDA_DEVICE_MAX_CONNECTIONS=") + v) != std::string::npos);
  }
  // No other rank of the process on the GPU: nothing to say at init or at a deadline.
  CHECK(sharedGpuWarning(0, 8).empty());
  CHECK(sharedGpuStallHint(0, 8).empty());
  // Two ranks on CUDA's default queues: told what to set, with the count they run with.
  const std::string w = sharedGpuWarning(1, 8);
  CHECK(w.find("2 ranks of this process") != std::string::npos);
  CHECK(w.find("(8 here)") != std::string::npos);
  CHECK(w.find("CUDA_DEVICE_MAX_CONNECTIONS=32") != std::string::npos);
  CHECK(sharedGpuWarning(3, 1).find("4 ranks") != std::string::npos);
  // The most queues CUDA gives: no warning, but a deadline still names the cause.
  CHECK(sharedGpuWarning(1, 32).empty());
  CHECK(sharedGpuStallHint(1, 32).find("32 queues here") != std::string::npos);
}

TEST_CASE("CHORUS_SLOTS is a power of two", "[config]") {
  // A slot is its 32-bit FIFO position modulo the count: any other count breaks the turn of the
  // slots when positions wrap.
  for (const char* ok : {"2", "4", "16", "64"}) {
    ScopedEnv e("CHORUS_SLOTS", ok);
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().slots == std::atoi(ok));
  }
  for (const char* bad : {"3", "6", "12", "48"}) {
    ScopedEnv e("CHORUS_SLOTS", bad);
    auto c = Config::fromEnv();
    REQUIRE_FALSE(c.isOk());
    CHECK(c.status().message().find(std::string("CHORUS_SLOTS=") + bad + " is not a power of two") !=
          std::string::npos);
  }
}

TEST_CASE("error texts lose CHORUS_TRY's source trail but keep bracketed addresses", "[config]") {
  ScopedEnv quiet("CHORUS_DEBUG", "WARN");
  CHECK(userMessage("connect failed [src/bootstrap/socket.cc:210] [src/core/comm.cc:88]") == "connect failed");
  CHECK(userMessage("no route to [fd00::2]:29500 [src/bootstrap/socket.cc:12]") == "no route to [fd00::2]:29500");
  CHECK(userMessage("interfaces found: lo (up) 127.0.0.1 [::1], eth0 (up) [fe80::fc:ff:fe00:1].") ==
        "interfaces found: lo (up) 127.0.0.1 [::1], eth0 (up) [fe80::fc:ff:fe00:1].");
  CHECK(userMessage("rank [3:4] and [a.cc:x] stay") == "rank [3:4] and [a.cc:x] stay");
  ScopedEnv trace("CHORUS_DEBUG", "TRACE");
  CHECK(userMessage("connect failed [src/bootstrap/socket.cc:210]") == "connect failed [src/bootstrap/socket.cc:210]");
}

TEST_CASE("waiting spins a little only while the host's ranks have a CPU each unless CHORUS_SPIN_NS says",
          "[config][idle]") {
  CHECK(IdlePolicy::hostSpinNs(2, 2) == IdlePolicy::kHostSpinNs);
  CHECK(IdlePolicy::hostSpinNs(1, 64) == IdlePolicy::kHostSpinNs);
  CHECK(IdlePolicy::hostSpinNs(4, 2) == 0);
  CHECK(IdlePolicy::hostSpinNs(3, 2) == 0);
  unsetenv("CHORUS_SPIN_NS");
  auto c = Config::fromEnv();
  REQUIRE(c.isOk());
  CHECK(IdlePolicy(c.value(), 2, 2).spinNs == IdlePolicy::kHostSpinNs);
  CHECK(IdlePolicy(c.value(), 8, 2).spinNs == 0);
  CHECK(IdlePolicy(c.value()).spinNs == 0);  // the engine's: no host given, no spin
  {
    ScopedEnv spin("CHORUS_SPIN_NS", "0");
    auto d = Config::fromEnv();
    REQUIRE(d.isOk());
    CHECK(IdlePolicy(d.value(), 2, 2).spinNs == 0);
  }
  {
    ScopedEnv spin("CHORUS_SPIN_NS", "50000");
    auto d = Config::fromEnv();
    REQUIRE(d.isOk());
    CHECK(IdlePolicy(d.value(), 8, 2).spinNs == 50000);
  }
  {
    ScopedEnv spin("CHORUS_SPIN_NS", "-5");
    CHECK_FALSE(Config::fromEnv().isOk());
  }
}

TEST_CASE("an idle loop reads the clock first on the 16th idle turn and starts over after a move", "[idle]") {
  IdlePolicy policy;
  policy.spinNs = int64_t(1) << 40;  // spin only: no yield, no nap
  IdleLoop idle(policy);
  WaitInfo w;
  for (int turn = 1; turn < 16; ++turn) {
    idle.after(false, w);
    CHECK(idle.now() == 0);
    CHECK(idle.idleSince() == 0);
  }
  const int64_t before = nowNs();
  idle.after(false, w);  // the 16th
  CHECK(idle.now() >= before);
  CHECK(idle.idleSince() == idle.now());
  const int64_t since = idle.idleSince();
  for (int turn = 0; turn < 15; ++turn) idle.after(false, w);
  CHECK(idle.idleSince() == since);
  idle.after(false, w);  // the 32nd: read again, the spell still timed from its start
  CHECK(idle.now() >= since);
  CHECK(idle.idleSince() == since);
  idle.after(true, w);
  CHECK(idle.idleSince() == 0);
  for (int turn = 1; turn < 16; ++turn) idle.after(false, w);
  CHECK(idle.idleSince() == 0);
  idle.after(false, w);
  CHECK(idle.idleSince() >= since);
}

TEST_CASE("a thread stops spinning after its spins keep running out and tries again now and then", "[idle]") {
  // A thread of its own: the history is per thread.
  std::thread([] {
    SpinHistory& h = SpinHistory::mine();
    CHECK(h.allowed());
    for (int i = 0; i < SpinHistory::kSpinMisses - 1; ++i) h.taught(false);
    CHECK(h.allowed());  // not yet
    h.taught(true);      // a hit starts the count over
    for (int i = 0; i < SpinHistory::kSpinMisses; ++i) h.taught(false);
    int allowed = 0;
    for (int i = 0; i < 10 * SpinHistory::kSpinProbeEvery; ++i) allowed += h.allowed() ? 1 : 0;
    CHECK(allowed == 10);  // one probe every kSpinProbeEvery waits
    h.taught(true);        // a probe that paid
    CHECK(h.allowed());
    CHECK(h.allowed());

    // Through an idle loop: spells whose spin stage runs out teach misses; after enough, the
    // loop yields from its first idle turn (yieldIters 1, then it would nap: none is reached).
    IdlePolicy policy;
    policy.spinNs = 1;  // over by the first clock read
    policy.yieldIters = 1000000;
    WaitInfo w;
    for (int spell = 0; spell < SpinHistory::kSpinMisses; ++spell) {
      IdleLoop idle(policy);
      // The 16th turn starts the spell's clock, the 32nd finds the spin stage over.
      for (int turn = 0; turn < 40; ++turn) idle.after(false, w);
    }
    CHECK(h.misses == SpinHistory::kSpinMisses);
    CHECK_FALSE(h.allowed());
  }).join();
}

TEST_CASE("CHORUS_NET names a built-in network, IB or Socket, in any case", "[config]") {
  for (const char* v : {"IB", "ib", "Socket", "SOCKET"}) {
    ScopedEnv e("CHORUS_NET", v);
    auto c = Config::fromEnv();
    REQUIRE(c.isOk());
    CHECK(c.value().netName == v);
  }
  ScopedEnv e("CHORUS_NET", "ofi");
  auto c = Config::fromEnv();
  REQUIRE_FALSE(c.isOk());
  CHECK(c.status().message().find("CHORUS_NET=ofi names no built-in network: set IB or Socket") != std::string::npos);
}
