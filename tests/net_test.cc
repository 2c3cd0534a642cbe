// The socket network through the network ABI (include/chorus/net.h), both ends in this thread over
// the host's interface: connect and accept made in steps that never block, tagged messages of
// several sizes into grouped receives by tag (every byte compared), shorter messages, the limit of
// requests in flight, and the errors a network must give: a message longer than its receive, a peer
// that closed, a listener that is gone, a stranger's connection, memory it cannot register.
// The message tests run on the socket network itself and, through the plugin loader
// (transports/net/net_plugin.h), on plugins built from it (tests/net_plugin/socket_plugin.cc):
// Chorus's interface, and NCCL's v11 and v8 behind the adapter. "[net_plugin]": the loader's
// choices and its refusals of broken plugins.
#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "src/bootstrap/socket.h"
#include "tests/net_log.h"
#include "transports/net/net_plugin.h"
#include "transports/net/socket_net.h"

namespace {

struct SocketLogTag {};
using Log = chorus::testing::NetLog<SocketLogTag>;
const auto logger = &Log::log;
bool logged(const std::string& part) { return Log::has(part); }

const chorusNet_v1_t* current = nullptr;
const chorusNet_v1_t& net() { return current ? *current : chorus::socketNetwork(); }

std::string pluginPath(const std::string& kind) {
  return std::string(CHORUS_TEST_NET_PLUGIN_DIR) + "/libchorus_test_net_" + kind + ".so";
}

// Network `which`: 0 the socket network, 1 as Chorus's plugin, 2 as NCCL's v11, 3 as NCCL's v8.
const chorusNet_v1_t* network(int which) {
  if (which == 0) return &chorus::socketNetwork();
  static const char* const kinds[] = {"", "v1", "v11", "v8"};
  chorus::Result<chorus::LoadedNetwork> n = chorus::loadNetPlugin(pluginPath(kinds[which]), logger);
  INFO(n.status().message());
  REQUIRE(n.isOk());
  return n.value().net;
}

// The rest of the test case runs once on each network.
#define ON_EVERY_NETWORK()                                                                                    \
  const int which_ = GENERATE(0, 1, 2, 3);                                                                    \
  INFO("network " << which_ << " (0 socket, 1 chorusNetPlugin_v1, 2 ncclNetPlugin_v11, 3 ncclNetPlugin_v8)"); \
  current = network(which_)

// Calls f until it says done, at most `tries` times (each call must return at once).
bool until(const std::function<bool()>& f, int tries = 200000) {
  for (int i = 0; i < tries; ++i) {
    if (f()) return true;
  }
  return false;
}

// A connected pair: listen, then connect and accept in turns from this one thread.
struct Pair {
  void* ctx = nullptr;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  char handle[CHORUS_NET_HANDLE_MAXSIZE] = {};

  Pair() {
    REQUIRE(net().init(&ctx, 7, nullptr, logger) == chorusSuccess);
    REQUIRE(net().listen(ctx, 0, handle, &listen) == chorusSuccess);
    const bool made = until([&] {
      if (!send) REQUIRE(net().connect(ctx, 0, handle, &send) == chorusSuccess);
      if (!recv) REQUIRE(net().accept(listen, &recv) == chorusSuccess);
      return send && recv;
    });
    REQUIRE(made);
  }
  ~Pair() {
    if (send) net().closeSend(send);
    if (recv) net().closeRecv(recv);
    if (listen) net().closeListen(listen);
    if (ctx) CHECK(net().finalize(ctx) == chorusSuccess);
  }
};

// Tests every request until all are done (or one fails: its result).
chorusResult_t drain(std::vector<void*>& reqs, std::vector<std::vector<size_t>>* sizes = nullptr) {
  if (sizes) sizes->assign(reqs.size(), std::vector<size_t>(8, 0));
  std::vector<bool> done(reqs.size(), false);
  for (int pass = 0; pass < 2000000; ++pass) {
    bool all = true;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (done[i]) continue;
      int d = 0;
      const chorusResult_t rc = net().test(reqs[i], &d, sizes ? (*sizes)[i].data() : nullptr);
      if (rc != chorusSuccess) return rc;
      done[i] = d != 0;
      all = all && done[i];
    }
    if (all) return chorusSuccess;
  }
  return chorusInternalError;
}

}  // namespace

TEST_CASE("the socket network describes its one device and fits its handle in 128 bytes", "[net]") {
  current = nullptr;
  int ndev = -1;
  REQUIRE(net().devices(&ndev) == chorusSuccess);
  REQUIRE(ndev == 1);
  chorusNetProperties_v1_t p{};
  REQUIRE(net().getProperties(0, &p) == chorusSuccess);
  CHECK(std::string(net().name) == "Socket");
  CHECK(p.name != nullptr);
  CHECK(p.ptrSupport == CHORUS_NET_PTR_HOST);
  CHECK(p.maxRecvs == 8);
  CHECK(p.speed > 0);
  CHECK(net().getProperties(1, &p) == chorusInvalidArgument);
  CHECK(net().regMrDmaBuf == nullptr);
}

TEST_CASE("tagged messages reach a grouped receive by tag and every byte arrives", "[net]") {
  ON_EVERY_NETWORK();
  Pair pr;
  // Three messages: empty, 1000 bytes, 5 MiB (many partial sends and receives).
  const std::vector<size_t> sizes = {0, 1000, 5u << 20};
  const std::vector<int> tags = {11, 22, 33};
  std::vector<std::vector<char>> out(3), in(3);
  for (size_t i = 0; i < 3; ++i) {
    out[i].resize(sizes[i]);
    for (size_t k = 0; k < sizes[i]; ++k) out[i][k] = char((k * 131 + i * 7) & 0xff);
    in[i].assign(sizes[i] + 64, 0);  // receives larger than their messages
  }
  std::vector<char> sendArena(6u << 20), recvArena(6u << 20);
  void *smr = nullptr, *rmr = nullptr;
  REQUIRE(net().regMr(pr.send, sendArena.data(), sendArena.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
  REQUIRE(net().regMr(pr.recv, recvArena.data(), recvArena.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
  // Messages and receives live in the registered arenas.
  char* sp[3];
  char* rp[3];
  size_t at = 0;
  for (size_t i = 0; i < 3; ++i) {
    sp[i] = sendArena.data() + at;
    rp[i] = recvArena.data() + at;
    if (sizes[i]) std::memcpy(sp[i], out[i].data(), sizes[i]);
    at += sizes[i] + 64;
  }
  // The group lists the tags in another order than the messages come: each lands by its tag.
  void* rdata[3] = {rp[2], rp[0], rp[1]};
  size_t rsizes[3] = {sizes[2] + 64, sizes[0] + 64, sizes[1] + 64};
  int rtags[3] = {tags[2], tags[0], tags[1]};
  void* rmrs[3] = {rmr, rmr, rmr};
  std::vector<void*> reqs;
  void* r = nullptr;
  REQUIRE(net().irecv(pr.recv, 3, rdata, rsizes, rtags, rmrs, &r) == chorusSuccess);
  REQUIRE(r != nullptr);
  reqs.push_back(r);
  for (size_t i = 0; i < 3; ++i) {
    void* s = nullptr;
    REQUIRE(net().isend(pr.send, sp[i], sizes[i], tags[i], smr, &s) == chorusSuccess);
    REQUIRE(s != nullptr);
    reqs.push_back(s);
  }
  std::vector<std::vector<size_t>> got;
  REQUIRE(drain(reqs, &got) == chorusSuccess);
  // The receive reports each message's size in its group's order; sends report theirs.
  CHECK(got[0][0] == sizes[2]);
  CHECK(got[0][1] == sizes[0]);
  CHECK(got[0][2] == sizes[1]);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(got[1 + i][0] == sizes[i]);
    if (sizes[i]) CHECK(std::memcmp(rp[i], out[i].data(), sizes[i]) == 0);
  }
  // Flushing host memory has nothing to do.
  void* f = reinterpret_cast<void*>(1);
  CHECK(net().iflush(pr.recv, 1, rdata, rsizes, rmrs, &f) == chorusSuccess);
  CHECK(f == nullptr);
  CHECK(net().deregMr(pr.send, smr) == chorusSuccess);
  CHECK(net().deregMr(pr.recv, rmr) == chorusSuccess);
}

TEST_CASE("no more than the requests a comm holds are taken at once and the rest wait their turn", "[net]") {
  ON_EVERY_NETWORK();
  Pair pr;
  std::vector<char> buf(64);
  void *smr = nullptr, *rmr = nullptr;
  std::vector<char> rbuf(64 * CHORUS_NET_MAX_REQUESTS);
  REQUIRE(net().regMr(pr.send, buf.data(), buf.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
  REQUIRE(net().regMr(pr.recv, rbuf.data(), rbuf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
  std::vector<void*> sends;
  for (int i = 0; i < CHORUS_NET_MAX_REQUESTS; ++i) {
    void* s = nullptr;
    REQUIRE(net().isend(pr.send, buf.data(), buf.size(), i, smr, &s) == chorusSuccess);
    REQUIRE(s != nullptr);
    sends.push_back(s);
  }
  void* extra = reinterpret_cast<void*>(1);
  REQUIRE(net().isend(pr.send, buf.data(), buf.size(), 99, smr, &extra) == chorusSuccess);
  CHECK(extra == nullptr);  // full: called again later
  std::vector<void*> recvs;
  for (int i = 0; i < CHORUS_NET_MAX_REQUESTS; ++i) {
    void* d = rbuf.data() + 64 * i;
    size_t n = 64;
    int tag = i;
    void* r = nullptr;
    REQUIRE(net().irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r) == chorusSuccess);
    REQUIRE(r != nullptr);
    recvs.push_back(r);
  }
  // Requests progress when tested (the sends too): all of them together.
  std::vector<void*> all = sends;
  all.insert(all.end(), recvs.begin(), recvs.end());
  REQUIRE(drain(all) == chorusSuccess);
  // Slots are free again.
  void* again = nullptr;
  REQUIRE(net().isend(pr.send, buf.data(), buf.size(), 1, smr, &again) == chorusSuccess);
  CHECK(again != nullptr);
  net().deregMr(pr.send, smr);
  net().deregMr(pr.recv, rmr);
}

TEST_CASE("a message longer than its receive fails both ends' requests and says so", "[net]") {
  ON_EVERY_NETWORK();
  Pair pr;
  std::vector<char> buf(4096), rbuf(100);
  void *smr = nullptr, *rmr = nullptr;
  REQUIRE(net().regMr(pr.send, buf.data(), buf.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
  REQUIRE(net().regMr(pr.recv, rbuf.data(), rbuf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
  void* s = nullptr;
  REQUIRE(net().isend(pr.send, buf.data(), 4096, 5, smr, &s) == chorusSuccess);
  void* d = rbuf.data();
  size_t n = 100;
  int tag = 5;
  void* r = nullptr;
  REQUIRE(net().irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r) == chorusSuccess);
  std::vector<void*> rr = {s, r};  // the send leaves when tested
  CHECK(drain(rr) == chorusRemoteError);
  CHECK(logged("a message of 4096 bytes arrived for a receive of 100 bytes (tag 5)"));
  // Every later call on the failed comm fails.
  void* r2 = nullptr;
  CHECK(net().irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r2) == chorusRemoteError);
  net().deregMr(pr.send, smr);
  net().deregMr(pr.recv, rmr);
}

TEST_CASE("a message whose tag no receive of the group has is an error naming the rule", "[net]") {
  ON_EVERY_NETWORK();
  Pair pr;
  std::vector<char> buf(16), rbuf(16);
  void *smr = nullptr, *rmr = nullptr;
  REQUIRE(net().regMr(pr.send, buf.data(), buf.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
  REQUIRE(net().regMr(pr.recv, rbuf.data(), rbuf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
  void* s = nullptr;
  REQUIRE(net().isend(pr.send, buf.data(), 16, 3, smr, &s) == chorusSuccess);
  void* d = rbuf.data();
  size_t n = 16;
  int tag = 4;
  void* r = nullptr;
  REQUIRE(net().irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r) == chorusSuccess);
  std::vector<void*> rr = {s, r};  // the send leaves when tested
  CHECK(drain(rr) == chorusRemoteError);
  CHECK(logged("a message tagged 3 arrived where none of the 1 receives left in the group has that tag"));
  net().deregMr(pr.send, smr);
  net().deregMr(pr.recv, rmr);
}

TEST_CASE("a receive whose peer closed fails instead of waiting", "[net]") {
  ON_EVERY_NETWORK();
  Pair pr;
  std::vector<char> rbuf(64);
  void* rmr = nullptr;
  REQUIRE(net().regMr(pr.recv, rbuf.data(), rbuf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
  REQUIRE(net().closeSend(pr.send) == chorusSuccess);
  pr.send = nullptr;
  void* d = rbuf.data();
  size_t n = 64;
  int tag = 0;
  void* r = nullptr;
  REQUIRE(net().irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r) == chorusSuccess);
  std::vector<void*> rr = {r};
  CHECK(drain(rr) == chorusRemoteError);
  CHECK(logged("the peer closed the connection while this side was receiving a message header"));
  net().deregMr(pr.recv, rmr);
}

TEST_CASE("connecting to a listener that is gone fails and a stranger's connection is turned away", "[net]") {
  current = nullptr;
  void* ctx = nullptr;
  REQUIRE(net().init(&ctx, 9, nullptr, logger) == chorusSuccess);
  char handle[CHORUS_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  REQUIRE(net().listen(ctx, 0, handle, &listen) == chorusSuccess);
  // A stranger: a plain TCP connection to the listener that sends other bytes than the hello.
  // (The handle holds the listener's address after its magic and nonce, 16 bytes.)
  chorus::SockAddr addr;
  std::memcpy(&addr, handle + 16, sizeof(addr));
  {
    auto fd = chorus::connectTo(addr, chorus::nowNs() + 5'000'000'000LL, "the listener");
    REQUIRE(fd.isOk());
    const char junk[16] = "not a hello....";
    REQUIRE(::send(fd.value().get(), junk, sizeof(junk), MSG_NOSIGNAL) == ssize_t(sizeof(junk)));
    void* recv = nullptr;
    REQUIRE(until([&] {
      REQUIRE(net().accept(listen, &recv) == chorusSuccess);
      return logged("did not come from this listener's handle");
    }));
    CHECK(recv == nullptr);
  }
  // The listener goes; connecting to its handle fails within a few calls, never hangs.
  char copy[CHORUS_NET_HANDLE_MAXSIZE];
  std::memcpy(copy, handle, sizeof(copy));
  REQUIRE(net().closeListen(listen) == chorusSuccess);
  void* send = nullptr;
  chorusResult_t rc = chorusSuccess;
  REQUIRE(until([&] {
    rc = net().connect(ctx, 0, copy, &send);
    return rc != chorusSuccess || send != nullptr;
  }));
  CHECK(rc == chorusRemoteError);
  CHECK(send == nullptr);
  CHECK(logged("the listener is gone"));
  // A handle of another network (or garbage) is refused.
  char junk[CHORUS_NET_HANDLE_MAXSIZE] = {1, 2, 3};
  CHECK(net().connect(ctx, 0, junk, &send) == chorusInvalidArgument);
  CHECK(net().finalize(ctx) == chorusSuccess);
}

TEST_CASE("the socket network registers host memory only and finalize wants its comms closed", "[net]") {
  current = nullptr;
  Pair pr;
  char b[8];
  void* mr = nullptr;
  CHECK(net().regMr(pr.send, b, sizeof(b), CHORUS_NET_PTR_CUDA, &mr) == chorusInvalidArgument);
  CHECK(logged("moves host memory only"));
  // A send outside its registration is refused.
  REQUIRE(net().regMr(pr.send, b, 4, CHORUS_NET_PTR_HOST, &mr) == chorusSuccess);
  void* s = nullptr;
  CHECK(net().isend(pr.send, b, 8, 0, mr, &s) == chorusInvalidArgument);
  net().deregMr(pr.send, mr);
  CHECK(net().finalize(pr.ctx) == chorusInvalidUsage);
  CHECK(logged("finalize with 3 comms still open"));
}

TEST_CASE("the loader takes the newest interface a plugin exports and names what is wrong with the rest",
          "[net][net_plugin]") {
  current = nullptr;
  auto v1 = chorus::loadNetPlugin(pluginPath("v1"), logger);
  REQUIRE(v1.isOk());
  CHECK(v1.value().symbol == "chorusNetPlugin_v1");
  CHECK_FALSE(v1.value().adapted);
  CHECK(std::string(v1.value().net->name) == "Socket");
  // A library with NCCL's v11 and v8: v11 is taken.
  auto v11 = chorus::loadNetPlugin(pluginPath("v11"), logger);
  REQUIRE(v11.isOk());
  CHECK(v11.value().symbol == "ncclNetPlugin_v11");
  CHECK(v11.value().adapted);
  CHECK(std::string(v11.value().net->name) == "ChorusSocketAsNccl");
  auto v8 = chorus::loadNetPlugin(pluginPath("v8"), logger);
  REQUIRE(v8.isOk());
  CHECK(v8.value().symbol == "ncclNetPlugin_v8");
  // Properties come through the adapter (v8 has no largest-message field: INT_MAX).
  chorusNetProperties_v1_t p{};
  REQUIRE(v8.value().net->getProperties(0, &p) == chorusSuccess);
  CHECK(p.maxRecvs == 8);
  CHECK(p.maxP2pBytes == size_t(INT_MAX));
  CHECK(p.ptrSupport == CHORUS_NET_PTR_HOST);
  // Loaded once: the same table again.
  auto again = chorus::loadNetPlugin(pluginPath("v11"), logger);
  REQUIRE(again.isOk());
  CHECK(again.value().net == v11.value().net);

  auto none = chorus::loadNetPlugin(pluginPath("none"), logger);
  REQUIRE_FALSE(none.isOk());
  CHECK_THAT(none.status().message(),
             Catch::Contains("exports none of chorusNetPlugin_v1 and ncclNetPlugin_v12 to ncclNetPlugin_v8"));
  auto missing = chorus::loadNetPlugin(pluginPath("missing"), logger);
  REQUIRE_FALSE(missing.isOk());
  CHECK_THAT(missing.status().message(), Catch::Contains("exports ncclNetPlugin_v11 without isend"));
  auto badInit = chorus::loadNetPlugin(pluginPath("bad_init"), logger);
  REQUIRE_FALSE(badInit.isOk());
  CHECK(badInit.status().code() == chorusSystemError);
  CHECK_THAT(badInit.status().message(),
             Catch::Contains("(ncclNetPlugin_v11, \"ChorusSocketAsNccl\") failed to initialise"));
  auto absent = chorus::loadNetPlugin(pluginPath("no_such_plugin"), logger);
  REQUIRE_FALSE(absent.isOk());
  CHECK_THAT(absent.status().message(), Catch::Contains("cannot load the net plugin"));
  // A plugin whose connect never completes is found by the self-test, within its deadline.
  const int64_t t0 = chorus::nowNs();
  auto hang = chorus::loadNetPlugin(pluginPath("hang"), logger, 300'000'000);
  REQUIRE_FALSE(hang.isOk());
  CHECK(chorus::nowNs() - t0 < 5'000'000'000LL);
  CHECK_THAT(hang.status().message(),
             Catch::Contains("failed its self-test, a connection of device 0 to itself: connect did not complete "
                             "within 300 ms"));
}
