// The transports as units (src/transport/transport.h): which one connects which peers, what each
// says about sharing memory, the net transport's stop after a failed setup, and the failures of
// its FIFOs for kernels, one per peer.
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "include/chorus/net.h"
#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/socket.h"
#include "src/common/log.h"
#include "src/core/clique.h"
#include "src/core/device_comm.h"
#include "src/transport/transport.h"
#include "tests/fake_verbs.h"
#include "transports/ib/ib_net.h"
#include "transports/registry.h"

using namespace chorus;

namespace {

// An out-of-band channel whose peer is gone: every exchange fails.
struct GonePeer : OutOfBand {
  std::string server = "none";
  std::string peerAddress(int) const override { return "nowhere:1"; }
  const std::string& fdServerName() const override { return server; }
  void exportFd(int, uint64_t, UniqueFd) override {}
  Result<UniqueFd> importFd(int, const std::string&, uint64_t) override { return systemError("peer gone"); }
  Status awaitClaim(int, uint64_t) override { return systemError("peer gone"); }
};

// What a transport's connection calls are given: FIFOs of `nslots` slots of `slotBytes` bytes.
ConnectContext fifoContext(OutOfBand* oob, uint32_t nslots, uint32_t slotBytes, bool forKernels = false) {
  ConnectContext ctx;
  ctx.oob = oob;
  ctx.nslots = nslots;
  ctx.slotBytes = slotBytes;
  ctx.forKernels = forKernels;
  return ctx;
}

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
      {peer(1, 8, 101, PeerInfo::kShmDisabled), "NET/Socket", Transport::MemoryReach::kNone},
      {peer(2, 7, 100), "NET/Socket", Transport::MemoryReach::kNone},
  };
  for (const Case& c : cases) {
    Transport* t = pick(me, c.other);
    REQUIRE(t != nullptr);
    CHECK(std::string(t->name()) == c.name);
    CHECK(t->memoryReach() == c.reach);
    CHECK(pick(c.other, me) == t);  // both sides agree
  }
}

TEST_CASE("a network connection whose setup failed is not touched when traffic stops", "[transport]") {
  // Before, the transport kept a view of every FIFO it made, also of one freed when its setup
  // failed, and closing it on stopTraffic wrote into unmapped memory.
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  auto t = makeNetTransport(env);
  GonePeer oob;
  ConnectContext ctx = fifoContext(&oob, 4, 1 << 20);
  for (int i = 0; i < 4; ++i) {
    // A handle no listener wrote: the socket network's connect refuses it.
    auto sent = t->connectSend(ctx, 1, 42 + i, std::vector<char>(CHORUS_NET_HANDLE_MAXSIZE, 0));
    REQUIRE_FALSE(sent.isOk());
    CHECK(sent.status().message().find("NET/Socket: connect for the connection with rank 1 failed") !=
          std::string::npos);
    CHECK(sent.status().message().find("set CHORUS_NET or CHORUS_NET_PLUGIN alike on every host") != std::string::npos);
  }
  // A handle of the wrong size is refused before anything is made.
  auto sent = t->connectSend(ctx, 1, 50, {});
  REQUIRE_FALSE(sent.isOk());
  CHECK(sent.status().message().find("has 0 bytes, not 128") != std::string::npos);
  t->stopTraffic();  // what a failing communicator does next
  SUCCEED("stopTraffic returned");
}

namespace {

// A GPU record as a rank would send it: `id` names the GPU, `reach` the GPUs its GPU reaches
// (itself included unless the list says otherwise); 0: no GPU.
GpuInfo gpu(uint64_t id, std::initializer_list<uint64_t> reach) {
  GpuInfo g;
  if (id == 0) return g;
  g.uuid[0] = id;
  g.uuid[1] = id * 31;
  for (uint64_t r : reach) {
    g.reach[g.nreach][0] = r;
    g.reach[g.nreach][1] = r * 31;
    ++g.nreach;
  }
  std::snprintf(g.busId, sizeof(g.busId), "0000:%02x:00.0", static_cast<unsigned>(id));
  return g;
}

}  // namespace

TEST_CASE("device connections take the first transport that connects both GPU records, on both sides alike",
          "[transport]") {
  Logger log(LogLevel::kWarn, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  auto all = makeTransports(env);
  auto pick = [&](const DevicePeer& a, const DevicePeer& b) -> std::string {
    for (auto& t : all) {
      if (t->canConnectDevice(a, b)) return t->name();
    }
    return "none";
  };
  const PeerInfo thread = peer(1, 7, 100);
  const PeerInfo process = peer(1, 8, 101);
  const PeerInfo remote = peer(2, 9, 102);
  // GPUs 1 and 2 reach each other; 3 reaches nobody; GPU 4 sees 1, but 1 does not list 4 (another
  // process's CUDA_VISIBLE_DEVICES, say): peer access must hold both ways.
  const GpuInfo g1 = gpu(1, {1, 2, 4});
  const GpuInfo g1only = gpu(1, {1});
  const GpuInfo g2 = gpu(2, {2, 1});
  const GpuInfo g3 = gpu(3, {3});
  const GpuInfo g4 = gpu(4, {4, 1});
  const GpuInfo none = gpu(0, {});
  struct Case {
    DevicePeer a;
    DevicePeer b;
    const char* want;
  };
  const Case cases[] = {
      {{thread, g1}, {thread, g1}, "inproc"},  // two threads on one GPU
      {{thread, g1}, {thread, g2}, "inproc"},  // peer access
      {{thread, g1}, {thread, g3}, "shm"},     // no peer access: host-staged
      {{thread, g1}, {peer(1, 7, 100, PeerInfo::kP2pDisabled), g2}, "shm"},
      {{thread, g1}, {process, g1}, "cuda_ipc"},  // two processes on one GPU
      {{thread, g1}, {process, g2}, "cuda_ipc"},
      {{thread, g1only}, {process, g4}, "shm"},  // reach one way only
      {{thread, g1}, {process, g3}, "shm"},
      {{thread, g1}, {process, none}, "shm"},
      {{thread, g1}, {peer(1, 8, 101, PeerInfo::kP2pDisabled), g2}, "shm"},
      {{thread, g1}, {peer(1, 8, 101, PeerInfo::kShmDisabled), g3}, "NET/Socket"},
      {{thread, g1}, {peer(1, 8, 101, PeerInfo::kShmDisabled), g2}, "cuda_ipc"},
      {{thread, g1}, {remote, g2}, "NET/Socket"},  // another host, whatever the records say
  };
  for (const Case& c : cases) {
    INFO("a: host " << c.a.host.hostHash << " process " << c.a.host.processNonce << " GPU " << c.a.gpu.uuid[0]
                    << "; b: host " << c.b.host.hostHash << " process " << c.b.host.processNonce << " flags "
                    << c.b.host.flags << " GPU " << c.b.gpu.uuid[0]);
    CHECK(pick(c.a, c.b) == c.want);
    CHECK(pick(c.b, c.a) == c.want);  // both sides agree
  }
  // Host buffers never take cuda_ipc.
  for (auto& t : all) {
    if (std::string(t->name()) == "cuda_ipc") CHECK_FALSE(t->canConnect(thread, process));
  }
}

TEST_CASE("a GPU record travels as bytes and says which GPUs it reaches", "[transport]") {
  const GpuInfo g = gpu(5, {5, 6});
  std::vector<char> wire(sizeof(GpuInfo));
  std::memcpy(wire.data(), &g, sizeof(g));
  GpuInfo back;
  std::memcpy(&back, wire.data(), sizeof(back));
  CHECK(back.has());
  CHECK(back.same(g));
  CHECK(back.reaches(gpu(6, {}).uuid));
  CHECK_FALSE(back.reaches(gpu(7, {}).uuid));
  CHECK_FALSE(gpu(0, {}).has());
  CHECK_FALSE(gpu(0, {}).same(gpu(0, {})));  // two ranks without a GPU share none
}

TEST_CASE("a FIFO for kernels over the network: the proxies poll it, and its broken connection is reported",
          "[transport]") {
  // Host threads stand in for the kernels (no device: the FIFO is not mapped for one).
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  auto rt = makeNetTransport(env);
  auto st = makeNetTransport(env);
  GonePeer oob;  // the network makes its own connections: only the peer's name is asked for
  ConnectContext ctx = fifoContext(&oob, 2, 4096, true);
  std::vector<char> handle;
  auto recv = rt->setupRecv(ctx, 1, 5, &handle);
  REQUIRE(recv.isOk());
  auto send = st->connectSend(ctx, 0, 5, handle);
  REQUIRE(send.isOk());
  REQUIRE(rt->finishRecv(ctx, *recv.value(), 1, 5).isOk());
  const FifoView tx = send.value()->kernelFifo();
  const FifoView rx = recv.value()->kernelFifo();
  CHECK(send.value()->proxyLink().wakeFd == -1);  // nothing rings the proxy: it polls
  CHECK(recv.value()->proxyLink().dests == nullptr);
  CHECK(send.value()->viaProxy());
  // Ten pieces through two slots, as a kernel publishes them (release store of the tail, no ring)
  // and takes them (acquire load of the tail, release store of the head).
  std::thread producer([&] {
    for (uint32_t i = 0; i < 10; ++i) {
      while (i - tx.ctrl->head.load(std::memory_order_acquire) >= tx.nslots) std::this_thread::yield();
      SlotHeader* h = tx.header(i);
      h->commId = 9;
      h->seq = i;
      h->step = 0;
      h->bytes = 1000 + i;
      std::memset(tx.payload(i), static_cast<int>('a' + i), h->bytes);
      tx.ctrl->tail.store(i + 1, std::memory_order_release);
    }
  });
  for (uint32_t i = 0; i < 10; ++i) {
    while (static_cast<int32_t>(rx.ctrl->tail.load(std::memory_order_acquire) - i) <= 0) std::this_thread::yield();
    const SlotHeader* h = rx.header(i);
    REQUIRE(h->seq == i);
    REQUIRE(h->bytes == 1000 + i);
    for (uint32_t b = 0; b < h->bytes; ++b) REQUIRE(rx.payload(i)[b] == static_cast<char>('a' + i));
    rx.ctrl->head.store(i + 1, std::memory_order_release);
  }
  producer.join();
  CHECK(rt->kernelFifoErrors().empty());
  // The sending side goes away (its process died, say): the receiving proxy reports it for the
  // communicator's watchdog, naming the peer, since a kernel cannot see a closed FIFO.
  st.reset();  // its proxy thread, and with it the connection
  send.take().reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rt->kernelFifoErrors().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::vector<Status> errors = rt->kernelFifoErrors();
  REQUIRE(errors.size() == 1);
  const Status s = errors[0];
  REQUIRE_FALSE(s.isOk());
  CHECK(s.message().find("rank 1") != std::string::npos);
  CHECK(s.subject() == 1);
  rt.reset();  // its proxy before the receive FIFO it serves
}

TEST_CASE("a net transport keeps the first failure of its FIFOs for kernels per peer", "[transport]") {
  // Rank 0 receives over the network for kernels from rank 1 (two connections: two channels, say) and
  // from rank 2; host threads stand in for the kernels. A peer that finished and closed its
  // sockets must be told apart from another: the watchdog counts a failure about a peer only while
  // kernels wait on it (failureInFlight), so the transport keeps one per peer, not the first alone.
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  auto rt = makeNetTransport(env);
  std::unique_ptr<Transport> st[3] = {nullptr, makeNetTransport(env), makeNetTransport(env)};
  GonePeer oob;
  const struct {
    int from;
    uint64_t tag;
  } links[] = {{1, 5}, {1, 6}, {2, 7}};
  ConnectContext ctx = fifoContext(&oob, 2, 4096, true);
  std::vector<std::unique_ptr<Connection>> recvs;
  std::vector<std::unique_ptr<Connection>> sends[3];
  for (const auto& l : links) {
    std::vector<char> handle;
    auto recv = rt->setupRecv(ctx, l.from, l.tag, &handle);
    REQUIRE(recv.isOk());
    auto send = st[l.from]->connectSend(ctx, 0, l.tag, handle);
    REQUIRE(send.isOk());
    REQUIRE(rt->finishRecv(ctx, *recv.value(), l.from, l.tag).isOk());
    recvs.push_back(recv.take());
    sends[l.from].push_back(send.take());
  }
  auto waitFor = [&](size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (rt->kernelFifoErrors().size() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return rt->kernelFifoErrors();
  };
  CHECK(rt->kernelFifoErrors().empty());
  // Rank 1 leaves: both its connections end, one failure about it.
  st[1].reset();
  sends[1].clear();
  std::vector<Status> errors = waitFor(1);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].subject() == 1);
  CHECK(errors[0].message().find("rank 1") != std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its second connection's end, too
  CHECK(rt->kernelFifoErrors().size() == 1);
  // Counted only while kernels wait on rank 1.
  CHECK(failureInFlight(errors, {2}).isOk());
  CHECK(failureInFlight(errors, {}).isOk());
  CHECK(failureInFlight(errors, {1, 2}).subject() == 1);
  // Rank 2 leaves too: its failure is kept beside rank 1's, not dropped as a second failure.
  st[2].reset();
  sends[2].clear();
  errors = waitFor(2);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].subject() == 1);
  CHECK(errors[1].subject() == 2);
  CHECK(failureInFlight(errors, {2}).subject() == 2);
  rt.reset();  // its proxies before the receive FIFOs they serve
}

TEST_CASE("ranks exchange GPU records before their first device connection and choose alike", "[transport]") {
  // Three ranks as threads; rank 0's GPU and rank 1's reach each other, rank 2's reaches none.
  std::vector<std::shared_ptr<CommHandle>> handles;
  REQUIRE(initClique(&handles, 3, nullptr).isOk());
  const GpuInfo records[3] = {gpu(1, {1, 2}), gpu(2, {2, 1}), gpu(3, {3})};
  std::vector<std::pair<Communicator*, std::vector<Communicator::ConnNeed>>> work;
  for (int r = 0; r < 3; ++r) {
    Communicator* c = handles[r]->impl.get();
    c->devicePath().setGpuInfo(records[r]);
    std::vector<Communicator::ConnNeed> needs;
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      // A send and a receive to each peer, twice over: each peer's record is asked for once.
      for (bool send : {true, false}) {
        needs.push_back(ConnKey{ConnFamily::kP2p, p, p, send, true});
        needs.push_back(ConnKey{ConnFamily::kRing, 0, p, send, true});
      }
    }
    work.emplace_back(c, std::move(needs));
  }
  REQUIRE(DevicePath::exchangeInfo(work).isOk());
  auto name = [&](int r, int p) { return std::string(handles[r]->impl->devicePath().transport(p)->name()); };
  CHECK(name(0, 1) == "inproc");
  CHECK(name(1, 0) == "inproc");
  for (int r : {0, 1}) {
    CHECK(name(r, 2) == "shm");  // no peer access: host-staged
    CHECK(name(2, r) == "shm");
  }
  // Chosen once: a second exchange asks nothing and changes nothing.
  handles[0]->impl->devicePath().setGpuInfo(gpu(9, {9}));
  REQUIRE(DevicePath::exchangeInfo(work).isOk());
  CHECK(name(0, 1) == "inproc");
  for (auto& h : handles) h->impl.reset();
}

TEST_CASE("a bootstrap wait on a rank that is gone ends within seconds, naming it", "[transport][bootstrap]") {
  // Two ranks of one clique from known addresses; rank 1 sends one message and then goes (its
  // bootstrap and listener destroyed, as its process's would be). Rank 0, waiting for a second
  // message, finds out from the listener's refusal, not at its 60 s timeout.
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  const uint64_t secret[2] = {7, 11};
  std::vector<SockAddr> addrs(2);
  std::vector<UniqueFd> listeners;
  for (int r = 0; r < 2; ++r) {
    auto local = SockAddr::parse("127.0.0.1:0");
    REQUIRE(local.isOk());
    auto l = listenOn(local.value(), &addrs[r]);
    REQUIRE(l.isOk());
    listeners.push_back(l.take());
  }
  const int64_t timeout = int64_t(60) * 1000000000;
  auto b0 = Bootstrap::fromTable(99, secret, 0, addrs, std::move(listeners[0]), timeout, log, nullptr);
  auto b1 = Bootstrap::fromTable(99, secret, 1, addrs, std::move(listeners[1]), timeout, log, nullptr);
  REQUIRE(b0.isOk());
  REQUIRE(b1.isOk());
  std::unique_ptr<Bootstrap> zero = b0.take();
  std::unique_ptr<Bootstrap> one = b1.take();
  const int first = 1;
  REQUIRE(one->send(0, 5, &first, sizeof(first)).isOk());
  REQUIRE(zero->recv(1, 5).isOk());
  one.reset();
  // Each wait ends naming rank 1's refusal: a probe after 1 s, then up to 3 s for a notice naming
  // a cause; the timeout is 60 s.
  const auto endsNamingIt = [](const Status& s, std::chrono::steady_clock::time_point since) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    CHECK(s.code() == chorusRemoteError);
    CHECK(s.message().find("rank 1") != std::string::npos);
    CHECK(s.message().find("refused") != std::string::npos);
    CHECK(secs < 8.0);
  };
  auto t = std::chrono::steady_clock::now();
  auto second = zero->recv(1, 6);
  REQUIRE_FALSE(second.isOk());
  endsNamingIt(second.status(), t);
  // So does the wait for its claim of a shared-memory descriptor.
  zero->exportFd(1, 9, UniqueFd(::eventfd(0, EFD_CLOEXEC)));
  t = std::chrono::steady_clock::now();
  const Status claim = zero->awaitClaim(1, 9);
  REQUIRE_FALSE(claim.isOk());
  endsNamingIt(claim, t);
  // And a wait a transport runs through awaitPeer (the net transport's accept), which polls
  // until then; a poll that fails or succeeds ends it at once.
  t = std::chrono::steady_clock::now();
  int polls = 0;
  const Status accepted = zero->awaitPeer(
      1, "a network connection", [&]() -> Result<bool> { return ++polls < 0; }, timeout);
  REQUIRE_FALSE(accepted.isOk());
  endsNamingIt(accepted, t);
  CHECK(accepted.message().find("waited on for a network connection") != std::string::npos);
  CHECK(polls > 10);
  CHECK(zero->awaitPeer(
                1, "x", []() -> Result<bool> { return true; }, timeout)
            .isOk());
  CHECK(zero->awaitPeer(
                1, "x", []() -> Result<bool> { return invalidUsage("no"); }, timeout)
            .message() == "no");
  // A live peer that is only slow is not taken for gone: its message, sent after a few probes,
  // arrives.
  std::vector<SockAddr> addrs2(2);
  std::vector<UniqueFd> listeners2;
  for (int r = 0; r < 2; ++r) {
    auto l = listenOn(SockAddr::parse("127.0.0.1:0").value(), &addrs2[r]);
    REQUIRE(l.isOk());
    listeners2.push_back(l.take());
  }
  auto c0 = Bootstrap::fromTable(100, secret, 0, addrs2, std::move(listeners2[0]), timeout, log, nullptr).take();
  auto c1 = Bootstrap::fromTable(100, secret, 1, addrs2, std::move(listeners2[1]), timeout, log, nullptr).take();
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const int v = 42;
    (void)c1->send(0, 7, &v, sizeof(v));
  });
  auto got = c0->recv(1, 7);
  late.join();
  REQUIRE(got.isOk());
  CHECK(got.value().size() == sizeof(int));
}

namespace {

std::string testPlugin(const std::string& kind) {
  return std::string(CHORUS_TEST_NET_PLUGIN_DIR) + "/libchorus_test_net_" + kind + ".so";
}

}  // namespace

TEST_CASE("CHORUS_NET_PLUGIN picks the network and one that cannot be used leaves sockets", "[transport][net_plugin]") {
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  env.connectTimeoutNs = 300'000'000;  // bounds the plugin's self-test
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/Socket");
  env.netPlugin = testPlugin("v11");
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/ChorusSocketAsNccl");
  env.netPlugin = testPlugin("v1");
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/Socket");  // Chorus's own interface, the socket network
#ifdef CHORUS_OFI_PLUGIN
  // libfabric's tcp provider sets its self-test connection up through rxm, which on a loaded
  // machine can take longer than the 300 ms the broken plugins below get: the default 10 s here.
  env.connectTimeoutNs = 10'000'000'000;
  env.netPlugin = CHORUS_OFI_PLUGIN;
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/OFI");
  env.connectTimeoutNs = 300'000'000;
#endif
  // Missing symbols, a failing init, a connect that never completes, no library: sockets, no crash.
  for (const char* broken : {"missing", "bad_init", "hang", "none", "no_such_plugin"}) {
    env.netPlugin = testPlugin(broken);
    CAPTURE(broken);
    CHECK(std::string(makeNetTransport(env)->name()) == "NET/Socket");
  }
}

TEST_CASE("a net transport sends host FIFO slots by reference and receives them in place, over a plugin too",
          "[transport][net_plugin]") {
  // The lane's side of ProxyLink, played by hand: the producer publishes some slots by reference
  // (the payload stays in its buffer), the consumer posts where some payloads go before the proxy
  // may post their slot's receive (a lap ahead, as Lane::postAhead does).
  // 0: the socket network; 1: the v11 test plugin; 2: the ibverbs network on the fake libibverbs.
  // With CHORUS_NET_CHECKSUM's wire headers too (their CRC checked on every slot).
  const int via = GENERATE(0, 1, 2);
  const bool checksum = GENERATE(false, true);
  CAPTURE(via, checksum);
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  env.netChecksum = checksum;
  if (via == 1) env.netPlugin = testPlugin("v11");
  std::unique_ptr<fakeib::Installed> ib;
  if (via == 2)
    ib = std::make_unique<fakeib::Installed>(
        std::vector<fakeib::DeviceSpec>{fakeib::roceDevice("mlx5_0", "10.0.0.1", 1)});
  auto rt = makeNetTransport(env);
  auto st = makeNetTransport(env);
  CHECK(std::string(rt->name()) == (via == 0 ? "NET/Socket" : via == 1 ? "NET/ChorusSocketAsNccl" : "NET/IB"));
  GonePeer oob;
  ConnectContext ctx = fifoContext(&oob, 4, 8192);
  std::vector<char> handle;
  auto recv = rt->setupRecv(ctx, 1, 9, &handle);
  REQUIRE(recv.isOk());
  auto send = st->connectSend(ctx, 0, 9, handle);
  REQUIRE(send.isOk());
  const FifoView tx = send.value()->fifo();
  const FifoView rx = recv.value()->fifo();
  const ProxyLink txl = send.value()->proxyLink();
  const ProxyLink rxl = recv.value()->proxyLink();
  REQUIRE(txl.refs != nullptr);
  REQUIRE(rxl.dests != nullptr);
  CHECK(txl.wakeFd >= 0);
  constexpr uint32_t kPieces = 40;
  auto bytesOf = [](uint32_t i) { return uint32_t(i % 7 == 3 ? 0 : 1000 + 150 * i); };
  auto byteAt = [](uint32_t i, uint32_t b) { return static_cast<char>((i * 131 + b * 7) & 0x7f); };
  std::vector<std::vector<char>> source(kPieces), out(kPieces);
  for (uint32_t i = 0; i < kPieces; ++i) {
    source[i].resize(bytesOf(i));
    for (uint32_t b = 0; b < bytesOf(i); ++b) source[i][b] = byteAt(i, b);
    out[i].assign(bytesOf(i) + 1, 0);
  }
  // Every third piece goes straight into out[i]; every other piece leaves by reference.
  auto post = [&](uint32_t i) {
    if (i >= kPieces || i % 3 != 0 || bytesOf(i) == 0) return;
    rxl.destBytes[i % rx.nslots] = bytesOf(i);
    uintptr_t expected = 0;
    rxl.dests[i % rx.nslots].compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(out[i].data()));
  };
  for (uint32_t i = 0; i < rx.nslots; ++i) post(i);
  REQUIRE(rt->finishRecv(ctx, *recv.value(), 1, 9).isOk());
  std::thread producer([&] {
    for (uint32_t i = 0; i < kPieces; ++i) {
      while (!tx.hasSpace(i)) std::this_thread::yield();
      SlotHeader* h = tx.header(i);
      h->commId = 5;
      h->seq = i;
      h->step = 0;
      h->bytes = bytesOf(i);
      if (i % 2 == 0) {
        txl.refs[i % tx.nslots] = source[i].data();
      } else if (bytesOf(i) > 0) {
        std::memcpy(tx.payload(i), source[i].data(), bytesOf(i));
      }
      tx.publish(i + 1);
      txl.ring();
    }
  });
  uint32_t inPlace = 0;
  for (uint32_t i = 0; i < kPieces; ++i) {
    while (!rx.hasData(i)) {
      REQUIRE_FALSE(rx.closed());
      std::this_thread::yield();
    }
    const SlotHeader* h = rx.header(i);
    REQUIRE(h->seq == i);
    REQUIRE(h->bytes == bytesOf(i));
    const uintptr_t d = rxl.dests[i % rx.nslots].load();
    const char* got = rx.payload(i);
    if (d == reinterpret_cast<uintptr_t>(out[i].data())) {
      got = out[i].data();
      ++inPlace;
      CHECK(out[i][bytesOf(i)] == 0);  // not a byte past what was posted
    }
    for (uint32_t b = 0; b < bytesOf(i); ++b) REQUIRE(got[b] == byteAt(i, b));
    rxl.dests[i % rx.nslots].store(0);
    post(i + rx.nslots);
    rx.release(i + 1);
    rxl.ring();
  }
  producer.join();
  // Every piece whose destination was posted before its slot's receive lands in place.
  uint32_t posted = 0;
  for (uint32_t i = 0; i < kPieces; ++i) posted += i % 3 == 0 && bytesOf(i) > 0;
  CHECK(inPlace == posted);
  // Every slot published by reference was sent and released, and its reference cleared.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (tx.ctrl->head.load() != kPieces && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(tx.ctrl->head.load() == kPieces);
  for (uint32_t i = 0; i < tx.nslots; ++i) CHECK(txl.refs[i] == nullptr);
  st.reset();
  rt.reset();
  if (ib) CHECK(ib->uninstall() == 0);  // every queue pair, registration and context closed
}

TEST_CASE("CHORUS_NET chooses the built-in network: IB where a port is offered, else sockets", "[transport]") {
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  GonePeer oob;
  ConnectContext ctx = fifoContext(&oob, 4, 8192);
  std::vector<char> handle;
  {
    // No RDMA device here: sockets, unless IB is asked for by name, which fails the first
    // connection with a sentence that says what to do.
    CHECK(std::string(makeNetTransport(env)->name()) == "NET/Socket");
    env.netName = "IB";
    auto t = makeNetTransport(env);
    auto recv = t->setupRecv(ctx, 1, 9, &handle);
    REQUIRE_FALSE(recv.isOk());
    CHECK(recv.status().message().find("CHORUS_NET=IB asks for the IB network, which is not offered here") !=
          std::string::npos);
    CHECK(recv.status().message().find("Unset CHORUS_NET (or set it to Socket)") != std::string::npos);
  }
  fakeib::Installed ib({fakeib::ibDevice("mlx5_1", 3, 2)});
  env.netName = "";
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/IB");
  env.netName = "socket";
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/Socket");
  env.netName = "";
  ::setenv("CHORUS_IB_TIMEOUT", "40", 1);
  ib.reinstall();
  {
    auto t = makeNetTransport(env);
    auto recv = t->setupRecv(ctx, 1, 9, &handle);
    REQUIRE_FALSE(recv.isOk());
    CHECK(recv.status().message().find("CHORUS_IB_TIMEOUT") != std::string::npos);
  }
  ::unsetenv("CHORUS_IB_TIMEOUT");
  CHECK(ib.uninstall() == 0);
}

TEST_CASE("CHORUS_NET_PLUGIN is read as NCCL reads NCCL_NET_PLUGIN: a name finds libnccl-net-NAME.so",
          "[.][net_plugin_name]") {
  // Run by ctest with the test plugins' directory on LD_LIBRARY_PATH, where
  // libnccl-net-chorustest.so is the v11 test plugin.
  Logger log(LogLevel::kNone, kSubsysAll, 0);
  TransportEnv env;
  env.log = &log;
  env.connectTimeoutNs = 2'000'000'000;
  env.netPlugin = "chorustest";
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/ChorusSocketAsNccl");
  env.netPlugin = "libnccl-net-chorustest.so";  // the file's own name works too
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/ChorusSocketAsNccl");
  env.netPlugin = "nosuchnetwork";
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/Socket");
  // A list is tried in order; "none" (any case) is no plugin.
  env.netPlugin = "nosuchnetwork,chorustest";
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/ChorusSocketAsNccl");
  env.netPlugin = "None";
  CHECK(std::string(makeNetTransport(env)->name()) == "NET/Socket");
}
