// The transports as units (transports/transport.h): which one connects which peers, what each
// says about sharing memory, and the socket transport's stop after a failed setup.
#include <catch2/catch.hpp>

#include "src/common/log.h"
#include "transports/transport.h"

using namespace chorus;

namespace {

// An out-of-band channel whose peer is gone: every exchange fails.
struct GonePeer : OutOfBand {
  std::string server = "none";
  Result<UniqueFd> openConnection(int, uint64_t) override { return systemError("peer gone"); }
  Result<UniqueFd> takeConnection(int, uint64_t) override { return systemError("peer gone"); }
  std::string peerAddress(int) const override { return "nowhere:1"; }
  const std::string& fdServerName() const override { return server; }
  void exportFd(int, uint64_t, UniqueFd) override {}
  Result<UniqueFd> importFd(int, const std::string&, uint64_t) override { return systemError("peer gone"); }
  Status awaitClaim(int, uint64_t) override { return systemError("peer gone"); }
};

PeerInfo peer(uint64_t host, uint64_t process, int pid, uint32_t flags = 0) {
  PeerInfo p;
  p.hostHash = host;
  p.processNonce = process;
  p.pid = pid;
  p.flags = flags;
  return p;
}

}  // namespace

TEST_CASE("the first transport that can connect a pair does, and says how memory is shared", "[transport]") {
  Logger log(LogLevel::kWarn, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  auto all = makeTransports(env);
  auto pick = [&](const PeerInfo& a, const PeerInfo& b) -> Transport* {
    for (auto& t : all) {
      if (t->canConnect(a, b)) return t.get();
    }
    return nullptr;
  };
  const PeerInfo me = peer(1, 7, 100);
  struct Case {
    PeerInfo other;
    const char* name;
    Transport::MemoryReach reach;
  };
  const Case cases[] = {
      {peer(1, 7, 100), "inproc", Transport::MemoryReach::kAddressSpace},
      {peer(1, 7, 100, PeerInfo::kP2pDisabled), "shm", Transport::MemoryReach::kSharedMapping},
      {peer(1, 8, 101), "shm", Transport::MemoryReach::kSharedMapping},
      {peer(1, 8, 101, PeerInfo::kShmDisabled), "socket", Transport::MemoryReach::kNone},
      {peer(2, 7, 100), "socket", Transport::MemoryReach::kNone},
  };
  for (const Case& c : cases) {
    Transport* t = pick(me, c.other);
    REQUIRE(t != nullptr);
    CHECK(std::string(t->name()) == c.name);
    CHECK(t->memoryReach() == c.reach);
    CHECK(pick(c.other, me) == t);  // both sides agree
  }
}

TEST_CASE("a socket connection whose setup failed is not touched when traffic stops", "[transport]") {
  // Before, the transport kept a view of every FIFO it made, also of one freed when its setup
  // failed, and closing it on stopTraffic wrote into unmapped memory.
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  auto t = makeSocketTransport(env);
  GonePeer oob;
  ConnectContext ctx;
  ctx.oob = &oob;
  ctx.nslots = 4;
  ctx.slotBytes = 1 << 20;
  for (int i = 0; i < 4; ++i) {
    auto sent = t->connectSend(ctx, 1, 42 + i, {});
    REQUIRE_FALSE(sent.isOk());
    CHECK(sent.status().message().find("peer gone") != std::string::npos);
  }
  t->stopTraffic();  // what a failing communicator does next
  SUCCEED("stopTraffic returned");
}
