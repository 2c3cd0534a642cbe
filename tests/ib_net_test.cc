// The ibverbs network (transports/ib/ib_net.h) end to end on the fake libibverbs of
// tests/fake_verbs.h: ports offered and chosen, connect/accept over real TCP with queue pairs
// brought up by the fake's state machine, data checked byte by byte across RoCE and InfiniBand
// ports, queue pairs shared and split, adaptive routing, a full send queue, iflush, and failures.
// Nothing here touches a NIC: docs/network.md says what that leaves unverified. "[ib_net]".
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/bootstrap/socket.h"
#include "tests/fake_verbs.h"
#include "tests/net_log.h"
#include "transports/ib/ib_net.h"

using namespace chorus;

namespace {

struct IbLogTag {};
using Log = testing::NetLog<IbLogTag>;
const auto logger = &Log::log;
bool logged(const std::string& part) { return Log::has(part); }

// Environment variables set for one test and put back after it.
class Env {
 public:
  ~Env() {
    for (auto& [name, old] : saved_) {
      if (old.second) {
        ::setenv(name.c_str(), old.first.c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  void set(const std::string& name, const std::string& value) {
    if (saved_.find(name) == saved_.end()) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = {old ? old : "", old != nullptr};
    }
    ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::map<std::string, std::pair<std::string, bool>> saved_;
};

fakeib::DeviceSpec roceDevice() { return fakeib::roceDevice("mlx5_0", "10.0.0.1", 0x1111); }
fakeib::DeviceSpec ibDevice() { return fakeib::ibDevice("mlx5_1", 7, 0x2222); }

// A fake fabric the network runs on for one test; closing everything leaves nothing open.
class Fixture {
 public:
  explicit Fixture(std::vector<fakeib::DeviceSpec> devices, bool dmabuf = false)
      : installed_(std::move(devices), dmabuf), fab(&installed_.fab()) {
    Log::clear();
  }
  ~Fixture() { CHECK(installed_.uninstall() == 0); }
  void reinstall() { installed_.reinstall(); }

 private:
  fakeib::Installed installed_;

 public:
  fakeib::Fabric* fab;
  const chorusNet_v1_t& net = ib::ibNetwork();
};

using Clock = std::chrono::steady_clock;

struct Pair {
  const chorusNet_v1_t* net = nullptr;
  void* ctx = nullptr;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  void close() {
    if (send) CHECK(net->closeSend(send) == chorusSuccess);
    if (recv) CHECK(net->closeRecv(recv) == chorusSuccess);
    if (listen) CHECK(net->closeListen(listen) == chorusSuccess);
    if (ctx) CHECK(net->finalize(ctx) == chorusSuccess);
    send = recv = listen = ctx = nullptr;
  }
};

// A connected pair on device `dev`, connect and accept called in turn as a proxy would.
Pair connectPair(const chorusNet_v1_t& net, int dev) {
  Pair p;
  p.net = &net;
  REQUIRE(net.init(&p.ctx, 1, nullptr, logger) == chorusSuccess);
  char handle[CHORUS_NET_HANDLE_MAXSIZE] = {};
  REQUIRE(net.listen(p.ctx, dev, handle, &p.listen) == chorusSuccess);
  const auto until = Clock::now() + std::chrono::seconds(20);
  while ((!p.send || !p.recv) && Clock::now() < until) {
    if (!p.send) REQUIRE(net.connect(p.ctx, dev, handle, &p.send) == chorusSuccess);
    if (!p.recv) REQUIRE(net.accept(p.listen, &p.recv) == chorusSuccess);
  }
  REQUIRE(p.send != nullptr);
  REQUIRE(p.recv != nullptr);
  return p;
}

unsigned char pattern(size_t i, int seed) {
  return static_cast<unsigned char>((i * 131 + size_t(seed) * 7 + 3) & 0xff);
}

// Sends the messages `sizes` (tagged 100 + i, in reverse order) into one grouped receive of
// rooms `rooms`, and checks what each carried byte by byte.
void exchange(Pair& p, const std::vector<size_t>& sizes, const std::vector<size_t>& rooms, int seed) {
  const int n = int(sizes.size());
  const size_t un = sizes.size();
  std::vector<std::vector<unsigned char>> out(un), in(un);
  std::vector<void*> sendMr(un), recvMr(un);
  for (int i = 0; i < n; ++i) {
    out[size_t(i)].resize(std::max<size_t>(sizes[size_t(i)], 1));
    in[size_t(i)].assign(std::max<size_t>(rooms[size_t(i)], 1), 0xee);
    for (size_t k = 0; k < sizes[size_t(i)]; ++k) out[size_t(i)][k] = pattern(k, seed + i);
    REQUIRE(p.net->regMr(p.send, out[size_t(i)].data(), out[size_t(i)].size(), CHORUS_NET_PTR_HOST,
                         &sendMr[size_t(i)]) == chorusSuccess);
    REQUIRE(p.net->regMr(p.recv, in[size_t(i)].data(), in[size_t(i)].size(), CHORUS_NET_PTR_HOST, &recvMr[size_t(i)]) ==
            chorusSuccess);
  }
  std::vector<void*> data(un);
  std::vector<size_t> room(rooms);
  std::vector<int> tags(un);
  for (int i = 0; i < n; ++i) {
    data[size_t(i)] = in[size_t(i)].data();
    tags[size_t(i)] = 100 + i;
  }
  void* rreq = nullptr;
  std::vector<void*> sreq(size_t(n), nullptr);
  std::vector<int> sdone(size_t(n), 0);
  int rdone = 0;
  std::vector<size_t> got(size_t(n), 0);
  const auto until = Clock::now() + std::chrono::seconds(30);
  while ((!rdone || std::find(sdone.begin(), sdone.end(), 0) != sdone.end()) && Clock::now() < until) {
    if (!rreq) {
      REQUIRE(p.net->irecv(p.recv, n, data.data(), room.data(), tags.data(), recvMr.data(), &rreq) == chorusSuccess);
    }
    for (int j = n - 1; j >= 0; --j) {
      if (!sreq[size_t(j)]) {
        REQUIRE(p.net->isend(p.send, out[size_t(j)].data(), sizes[size_t(j)], 100 + j, sendMr[size_t(j)],
                             &sreq[size_t(j)]) == chorusSuccess);
      } else if (!sdone[size_t(j)]) {
        REQUIRE(p.net->test(sreq[size_t(j)], &sdone[size_t(j)], nullptr) == chorusSuccess);
      }
    }
    if (rreq && !rdone) REQUIRE(p.net->test(rreq, &rdone, got.data()) == chorusSuccess);
  }
  REQUIRE(rdone == 1);
  for (int i = 0; i < n; ++i) {
    INFO("message " << i << " of " << sizes[size_t(i)] << " bytes");
    CHECK(sdone[size_t(i)] == 1);
    REQUIRE(got[size_t(i)] == sizes[size_t(i)]);
    size_t bad = 0;
    for (size_t k = 0; k < sizes[size_t(i)]; ++k) bad += in[size_t(i)][k] != pattern(k, seed + i);
    CHECK(bad == 0);
    if (rooms[size_t(i)] > sizes[size_t(i)]) CHECK(in[size_t(i)][sizes[size_t(i)]] == 0xee);  // nothing past it
    CHECK(p.net->deregMr(p.send, sendMr[size_t(i)]) == chorusSuccess);
    CHECK(p.net->deregMr(p.recv, recvMr[size_t(i)]) == chorusSuccess);
  }
}

void exchangeOne(Pair& p, size_t size, int seed) { exchange(p, {size}, {size}, seed); }

}  // namespace

TEST_CASE("the IB network offers the active ports its HCA list selects with their GIDs", "[ib_net]") {
  Env env;
  Fixture f({roceDevice(), ibDevice()});
  std::string why;
  auto offered = ib::ibOffered(&why);
  REQUIRE(offered.isOk());
  REQUIRE(offered.value());
  int ndev = 0;
  REQUIRE(f.net.devices(&ndev) == chorusSuccess);
  REQUIRE(ndev == 2);  // mlx5_0 port 1 (port 2 is down) and mlx5_1 port 1
  chorusNetProperties_v1_t props{};
  REQUIRE(f.net.getProperties(0, &props) == chorusSuccess);
  CHECK(std::string(props.name) == "mlx5_0");
  CHECK(props.port == 1);
  CHECK(props.guid == 0x1111);
  CHECK(props.speed == 100000);  // EDR x4
  CHECK(props.ptrSupport == CHORUS_NET_PTR_HOST);
  CHECK(props.regIsGlobal == 1);
  REQUIRE(f.net.getProperties(1, &props) == chorusSuccess);
  CHECK(std::string(props.name) == "mlx5_1");
  void* ctx = nullptr;
  REQUIRE(f.net.init(&ctx, 1, nullptr, logger) == chorusSuccess);
  // RoCE: the IPv4 RoCE v2 GID (index 2), not the link-local one nor the v1 twin.
  CHECK(logged("mlx5_0:1 (RoCE v2, GID 2 10.0.0.1)"));
  CHECK(logged("mlx5_1:1 (InfiniBand, LID 7, GID 0"));
  CHECK(logged("adaptive routing"));  // on for the InfiniBand port by default
  CHECK(f.net.finalize(ctx) == chorusSuccess);

  env.set("CHORUS_IB_HCA", "=mlx5_1");
  f.reinstall();
  REQUIRE(f.net.devices(&ndev) == chorusSuccess);
  CHECK(ndev == 1);
  REQUIRE(f.net.getProperties(0, &props) == chorusSuccess);
  CHECK(std::string(props.name) == "mlx5_1");

  env.set("CHORUS_IB_HCA", "^mlx5_1");
  f.reinstall();
  REQUIRE(f.net.getProperties(0, &props) == chorusSuccess);
  CHECK(std::string(props.name) == "mlx5_0");
  CHECK(f.net.getProperties(1, &props) == chorusInvalidArgument);

  env.set("CHORUS_IB_HCA", "mlx5_0:2");  // the port that is down
  f.reinstall();
  offered = ib::ibOffered(&why);
  REQUIRE(offered.isOk());
  CHECK_FALSE(offered.value());
  CHECK(why.find("no active port of a selected RDMA device (devices: mlx5_0, mlx5_1)") != std::string::npos);

  env.set("CHORUS_IB_HCA", "");
  env.set("CHORUS_IB_DISABLE", "1");
  f.reinstall();
  offered = ib::ibOffered(&why);
  REQUIRE(offered.isOk());
  CHECK_FALSE(offered.value());
  CHECK(why == "CHORUS_IB_DISABLE=1");

  env.set("CHORUS_IB_DISABLE", "0");
  env.set("CHORUS_IB_QPS_PER_CONNECTION", "17");
  f.reinstall();
  offered = ib::ibOffered(&why);
  REQUIRE_FALSE(offered.isOk());
  CHECK(offered.status().message().find("CHORUS_IB_QPS_PER_CONNECTION") != std::string::npos);
  CHECK(f.net.init(&ctx, 1, nullptr, logger) == chorusInvalidArgument);
  env.set("CHORUS_IB_QPS_PER_CONNECTION", "1");
  env.set("CHORUS_IB_HCA", "mlx5_0:x");
  f.reinstall();
  offered = ib::ibOffered(&why);
  REQUIRE_FALSE(offered.isOk());
  CHECK(offered.status().message().find("CHORUS_IB_HCA") != std::string::npos);
  env.set("CHORUS_IB_HCA", "");
  f.reinstall();
}

TEST_CASE("messages of every size cross a RoCE and an InfiniBand port intact", "[ib_net]") {
  Env env;
  Fixture f({roceDevice(), ibDevice()});
  for (int dev = 0; dev < 2; ++dev) {
    INFO("device " << dev);
    Pair p = connectPair(f.net, dev);
    CHECK(logged("IB network: connected to"));
    CHECK(logged("IB network: accepted"));
    int seed = 0;
    for (size_t size : {size_t(0), size_t(1), size_t(4095), size_t(65536), size_t(1) << 20, size_t(5) << 20}) {
      exchangeOne(p, size, ++seed);
    }
    // A group of three into rooms larger than what comes, sent in reverse order.
    exchange(p, {1000, 0, 70000}, {4096, 16, 1 << 17}, ++seed);
    f.fab->setReorder(true, 7);
    for (int round = 0; round < 20; ++round) exchange(p, {size_t(round) * 977, 33}, {size_t(round) * 977, 64}, ++seed);
    f.fab->setReorder(false);
    p.close();
  }
  CHECK(f.fab->stats().cqOverflows == 0);
}

TEST_CASE("IB queue pairs share the writes and split messages across them", "[ib_net]") {
  Env env;
  env.set("CHORUS_IB_QPS_PER_CONNECTION", "4");
  SECTION("round-robin per write") {
    Fixture f({roceDevice()});
    Pair p = connectPair(f.net, 0);
    for (int i = 0; i < 8; ++i) exchangeOne(p, 4096, i);
    const fakeib::Stats s = f.fab->stats();
    p.close();
    // 8 data writes from the send comm and 8 clear-to-send writes from the receive comm, each
    // side's spread over its four queue pairs (a probe, should one go, adds a write).
    CHECK(s.writesByQp.size() == 8);
    for (const auto& [qp, n] : s.writesByQp) CHECK(n >= 2);
  }
  SECTION("split, each message one write per queue pair") {
    env.set("CHORUS_IB_SPLIT_DATA_ON_QPS", "1");
    Fixture f({roceDevice()});
    Pair p = connectPair(f.net, 0);
    const fakeib::Stats before = f.fab->stats();
    exchangeOne(p, (1 << 20) + 1, 1);  // a size record and four segments
    const fakeib::Stats after = f.fab->stats();
    // The clear-to-send, the record and four segments (a probe, should one go, adds a write), the
    // segments on four queue pairs.
    CHECK(after.writes - before.writes >= 6);
    int grew = 0;
    for (const auto& [qp, n] : after.writesByQp) {
      const auto it = before.writesByQp.find(qp);
      grew += n > (it == before.writesByQp.end() ? 0 : it->second);
    }
    CHECK(grew >= 5);
    f.fab->setReorder(true, 3);
    for (int i = 0; i < 10; ++i) exchange(p, {size_t(i) * 12345 + 1, 512}, {size_t(i) * 12345 + 1, 512}, i);
    p.close();
  }
}

TEST_CASE("adaptive routing sends a large write as a plain write and an empty one with immediate", "[ib_net]") {
  Env env;
  SECTION("on by default on InfiniBand") {
    Fixture f({ibDevice()});
    Pair p = connectPair(f.net, 0);
    exchangeOne(p, 8192, 1);  // not above the threshold
    CHECK(f.fab->stats().plainWrites == 0);
    exchangeOne(p, 8193, 2);
    CHECK(f.fab->stats().plainWrites == 1);
    p.close();
  }
  SECTION("off by default on RoCE, and the threshold moves") {
    Fixture f({roceDevice()});
    Pair p = connectPair(f.net, 0);
    exchangeOne(p, 1 << 16, 1);
    CHECK(f.fab->stats().plainWrites == 0);
    p.close();
    env.set("CHORUS_IB_ADAPTIVE_ROUTING", "1");
    env.set("CHORUS_IB_AR_THRESHOLD", "100000");
    f.reinstall();
    p = connectPair(f.net, 0);
    exchangeOne(p, 1 << 16, 2);
    CHECK(f.fab->stats().plainWrites == 0);
    exchangeOne(p, 100001, 3);
    CHECK(f.fab->stats().plainWrites == 1);
    p.close();
  }
}

TEST_CASE("a full IB send queue keeps writes back and a missing receive makes them wait", "[ib_net]") {
  Env env;
  fakeib::DeviceSpec d = roceDevice();
  d.maxQpWr = 8;  // eight sends and eight receives per queue pair
  Fixture f({d});
  Pair p = connectPair(f.net, 0);
  // 32 messages at once (the most a comm takes): more than the send queue holds, and more writes
  // with immediate than the receive queue has receives posted.
  const int n = 32;
  std::vector<std::vector<unsigned char>> out(n, std::vector<unsigned char>(4096)),
      in(n, std::vector<unsigned char>(4096));
  std::vector<void*> smr(n), rmr(n), sreq(n), rreq(n);
  std::vector<int> sdone(n), rdone(n);
  for (int i = 0; i < n; ++i) {
    for (size_t k = 0; k < 4096; ++k) out[size_t(i)][k] = pattern(k, i);
    REQUIRE(f.net.regMr(p.send, out[size_t(i)].data(), 4096, CHORUS_NET_PTR_HOST, &smr[size_t(i)]) == chorusSuccess);
    REQUIRE(f.net.regMr(p.recv, in[size_t(i)].data(), 4096, CHORUS_NET_PTR_HOST, &rmr[size_t(i)]) == chorusSuccess);
  }
  int tag = 5;
  size_t room = 4096;
  // Every receive posted while the fabric holds its deliveries: 32 clear-to-send writes for a send
  // queue of 8. Released, they find 8 receives posted at the sender.
  f.fab->setHold(true);
  for (int i = 0; i < n; ++i) {
    void* data = in[size_t(i)].data();
    REQUIRE(f.net.irecv(p.recv, 1, &data, &room, &tag, &rmr[size_t(i)], &rreq[size_t(i)]) == chorusSuccess);
    REQUIRE(rreq[size_t(i)] != nullptr);
  }
  f.fab->setHold(false);
  const auto until = Clock::now() + std::chrono::seconds(30);
  int doneCount = 0;
  while (doneCount < 2 * n && Clock::now() < until) {
    for (int i = 0; i < n; ++i) {
      if (!sreq[size_t(i)] && (i == 0 || sreq[size_t(i - 1)])) {
        REQUIRE(f.net.isend(p.send, out[size_t(i)].data(), 4096, tag, smr[size_t(i)], &sreq[size_t(i)]) ==
                chorusSuccess);
      }
    }
    for (int i = 0; i < n; ++i) {
      if (sreq[size_t(i)] && !sdone[size_t(i)]) {
        REQUIRE(f.net.test(sreq[size_t(i)], &sdone[size_t(i)], nullptr) == chorusSuccess);
        doneCount += sdone[size_t(i)];
      }
      if (rreq[size_t(i)] && !rdone[size_t(i)]) {
        REQUIRE(f.net.test(rreq[size_t(i)], &rdone[size_t(i)], nullptr) == chorusSuccess);
        doneCount += rdone[size_t(i)];
      }
    }
  }
  REQUIRE(doneCount == 2 * n);
  for (int i = 0; i < n; ++i) {
    CHECK(in[size_t(i)] == out[size_t(i)]);
    CHECK(f.net.deregMr(p.send, smr[size_t(i)]) == chorusSuccess);
    CHECK(f.net.deregMr(p.recv, rmr[size_t(i)]) == chorusSuccess);
  }
  const fakeib::Stats s = f.fab->stats();
  CHECK(s.maxSendInFlight == 8);  // the send queue filled, and held no more
  CHECK(s.rnrWaits > 0);          // writes waited for receives to be posted again
  CHECK(s.cqOverflows == 0);
  p.close();
}

TEST_CASE("iflush of IB device memory reads a byte back through a loopback queue pair", "[ib_net]") {
  Env env;
  Fixture f({roceDevice()}, /*dmabuf=*/true);
  chorusNetProperties_v1_t props{};
  REQUIRE(f.net.getProperties(0, &props) == chorusSuccess);
  CHECK((props.ptrSupport & CHORUS_NET_PTR_DMABUF) != 0);
  Pair p = connectPair(f.net, 0);
  std::vector<unsigned char> out(10000), in(10000, 0);
  for (size_t k = 0; k < out.size(); ++k) out[k] = pattern(k, 9);
  const int fd = ::open("/dev/null", O_RDONLY);  // the fake takes any file as the dma-buf
  REQUIRE(fd >= 0);
  void* smr = nullptr;
  void* rmr = nullptr;
  REQUIRE(f.net.regMr(p.send, out.data(), out.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
  REQUIRE(f.net.regMrDmaBuf(p.recv, in.data(), in.size(), CHORUS_NET_PTR_DMABUF, 0, fd, &rmr) == chorusSuccess);
  void* data = in.data();
  size_t size = in.size();
  int tag = 1;
  void *sreq = nullptr, *rreq = nullptr;
  int sdone = 0, rdone = 0;
  const auto until = Clock::now() + std::chrono::seconds(20);
  while ((!sdone || !rdone) && Clock::now() < until) {
    if (!rreq) REQUIRE(f.net.irecv(p.recv, 1, &data, &size, &tag, &rmr, &rreq) == chorusSuccess);
    if (!sreq) REQUIRE(f.net.isend(p.send, out.data(), out.size(), tag, smr, &sreq) == chorusSuccess);
    if (sreq && !sdone) REQUIRE(f.net.test(sreq, &sdone, nullptr) == chorusSuccess);
    if (rreq && !rdone) REQUIRE(f.net.test(rreq, &rdone, nullptr) == chorusSuccess);
  }
  REQUIRE(rdone == 1);
  CHECK(in == out);
  void* freq = nullptr;
  REQUIRE(f.net.iflush(p.recv, 1, &data, &size, &rmr, &freq) == chorusSuccess);
  REQUIRE(freq != nullptr);
  int fdone = 0;
  while (!fdone && Clock::now() < until) REQUIRE(f.net.test(freq, &fdone, nullptr) == chorusSuccess);
  CHECK(fdone == 1);
  CHECK(f.fab->stats().reads == 1);
  size_t empty = 0;
  REQUIRE(f.net.iflush(p.recv, 1, &data, &empty, &rmr, &freq) == chorusSuccess);
  CHECK(freq == nullptr);  // nothing received: nothing to flush
  CHECK(f.net.deregMr(p.send, smr) == chorusSuccess);
  CHECK(f.net.deregMr(p.recv, rmr) == chorusSuccess);
  ::close(fd);
  p.close();
}

TEST_CASE("IB failures: too long a message, a silent peer, a dead queue pair, strangers", "[ib_net]") {
  Env env;
  Fixture f({roceDevice()});
  std::vector<unsigned char> buf(1 << 16, 1);
  SECTION("a message longer than its receive fails both comms") {
    Pair p = connectPair(f.net, 0);
    void *smr = nullptr, *rmr = nullptr;
    REQUIRE(f.net.regMr(p.send, buf.data(), buf.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
    REQUIRE(f.net.regMr(p.recv, buf.data(), buf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
    void* data = buf.data();
    size_t room = 100;
    int tag = 3;
    void *sreq = nullptr, *rreq = nullptr;
    REQUIRE(f.net.irecv(p.recv, 1, &data, &room, &tag, &rmr, &rreq) == chorusSuccess);
    chorusResult_t src = chorusSuccess, rrc = chorusSuccess;
    int done = 0;
    const auto until = Clock::now() + std::chrono::seconds(20);
    while ((src == chorusSuccess || rrc == chorusSuccess) && Clock::now() < until) {
      if (src == chorusSuccess) src = f.net.isend(p.send, buf.data(), 1000, tag, smr, &sreq);
      if (rrc == chorusSuccess) rrc = f.net.test(rreq, &done, nullptr);
    }
    CHECK(src == chorusRemoteError);
    CHECK(rrc == chorusRemoteError);
    CHECK(logged("a message of 1000 bytes is longer than the peer's receive of 100 bytes"));
    CHECK(f.net.deregMr(p.send, smr) == chorusSuccess);
    CHECK(f.net.deregMr(p.recv, rmr) == chorusSuccess);
    p.close();
  }
  SECTION("a peer whose process ends without a word fails the comm once its connection closes") {
    Pair p = connectPair(f.net, 0);
    f.fab->setSwallow(true);  // its goodbye never arrives
    REQUIRE(f.net.closeRecv(p.recv) == chorusSuccess);
    p.recv = nullptr;
    chorusResult_t rc = chorusSuccess;
    void* sreq = nullptr;
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (rc == chorusSuccess && Clock::now() < until) rc = f.net.isend(p.send, buf.data(), 0, 1, nullptr, &sreq);
    CHECK(rc == chorusRemoteError);
    CHECK(logged("closed its connection"));
    f.fab->setSwallow(false);
    p.close();
  }
  SECTION("a queue pair that stops answering fails the write with the retry error") {
    Pair p = connectPair(f.net, 0);
    f.fab->kill(f.fab->newestQp());  // the receive comm's
    void* rmr = nullptr;
    REQUIRE(f.net.regMr(p.recv, buf.data(), buf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
    void* data = buf.data();
    size_t room = buf.size();
    int tag = 3;
    void* rreq = nullptr;
    REQUIRE(f.net.irecv(p.recv, 1, &data, &room, &tag, &rmr, &rreq) == chorusSuccess);
    void* sreq = nullptr;
    chorusResult_t rc = chorusSuccess;
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (rc == chorusSuccess && !sreq && Clock::now() < until)
      rc = f.net.isend(p.send, buf.data(), 0, 3, nullptr, &sreq);
    int done = 0;
    while (rc == chorusSuccess && sreq && !done && Clock::now() < until) rc = f.net.test(sreq, &done, nullptr);
    CHECK(rc == chorusRemoteError);
    CHECK(logged("transport retry counter exceeded"));
    CHECK(logged("CHORUS_IB_TIMEOUT"));
    CHECK(f.net.deregMr(p.recv, rmr) == chorusSuccess);
    p.close();
  }
  SECTION("a silent stranger and one with another listener's nonce do not keep the peer out") {
    void* ctx = nullptr;
    REQUIRE(f.net.init(&ctx, 1, nullptr, logger) == chorusSuccess);
    char handle[CHORUS_NET_HANDLE_MAXSIZE] = {};
    char stranger[CHORUS_NET_HANDLE_MAXSIZE] = {};
    void* listen = nullptr;
    REQUIRE(f.net.listen(ctx, 0, handle, &listen) == chorusSuccess);
    std::memcpy(stranger, handle, sizeof handle);
    stranger[8] ^= 1;  // the nonce follows the 8-byte magic
    // And one that connects and says nothing, open all along (the listener's address follows the
    // nonce): the listener must not wait on it.
    SockAddr listener;
    std::memcpy(static_cast<void*>(&listener), handle + 16, sizeof listener);
    REQUIRE(listener.valid());
    const int silent = ::socket(listener.storage.ss_family, SOCK_STREAM, 0);
    REQUIRE(silent >= 0);
    REQUIRE(::connect(silent, reinterpret_cast<const sockaddr*>(&listener.storage), listener.len) == 0);
    void *bad = nullptr, *send = nullptr, *recv = nullptr;
    chorusResult_t badRc = chorusSuccess;
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (badRc == chorusSuccess && !bad && Clock::now() < until) {
      badRc = f.net.connect(ctx, 0, stranger, &bad);
      REQUIRE(f.net.accept(listen, &recv) == chorusSuccess);
      REQUIRE(recv == nullptr);
    }
    CHECK(badRc == chorusRemoteError);  // the listener hung up on it
    CHECK(logged("wrong nonce"));
    while ((!send || !recv) && Clock::now() < until) {
      if (!send) REQUIRE(f.net.connect(ctx, 0, handle, &send) == chorusSuccess);
      if (!recv) REQUIRE(f.net.accept(listen, &recv) == chorusSuccess);
    }
    REQUIRE(send != nullptr);
    REQUIRE(recv != nullptr);
    Pair p;
    p.net = &f.net;
    p.ctx = ctx;
    p.listen = listen;
    p.send = send;
    p.recv = recv;
    exchangeOne(p, 3000, 1);
    p.close();
    ::close(silent);
  }
  SECTION("a listener that is gone and a handle of another network are refused") {
    void* ctx = nullptr;
    REQUIRE(f.net.init(&ctx, 1, nullptr, logger) == chorusSuccess);
    char handle[CHORUS_NET_HANDLE_MAXSIZE] = {};
    void* listen = nullptr;
    REQUIRE(f.net.listen(ctx, 0, handle, &listen) == chorusSuccess);
    REQUIRE(f.net.closeListen(listen) == chorusSuccess);
    void* send = nullptr;
    chorusResult_t rc = chorusSuccess;
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (rc == chorusSuccess && !send && Clock::now() < until) rc = f.net.connect(ctx, 0, handle, &send);
    CHECK(rc == chorusRemoteError);
    CHECK(logged("cannot reach the listener"));
    char other[CHORUS_NET_HANDLE_MAXSIZE] = {};
    CHECK(f.net.connect(ctx, 0, other, &send) == chorusInvalidArgument);
    CHECK(f.net.finalize(ctx) == chorusSuccess);
  }
  INFO(Log::text());
}
