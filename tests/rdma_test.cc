// The RDMA protocol (transports/net/rdma_proto.h) over a fake fabric that lands writes and reports
// completions in random order, the registration cache (transports/net/reg_cache.h), and the OFI
// network (transports/net/ofi_net.cc) through the plugin loader over libfabric's tcp provider on
// this host. "[rdma]", "[reg_cache]", "[ofi]".
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "tests/net_log.h"
#include "transports/net/net_plugin.h"
#include "transports/net/rdma_proto.h"
#include "transports/net/reg_cache.h"

using namespace chorus;

namespace {

// ---- a fabric in this process that reorders everything ----

struct FakeWire;
struct FakeFabric {
  struct Write {
    FakeWire* from;
    const char* buf;
    size_t len;
    uint64_t raddr;
    uint32_t imm;
    void* ctx;
  };
  std::mt19937 rng{1234};
  std::vector<Write> inflight;
  void deliverSome();
};

struct FakeWire final : rdma::Wire {
  FakeFabric* fab = nullptr;
  FakeWire* peer = nullptr;
  size_t maxW = 4096;
  bool broken = false;
  struct Event {
    bool local;
    void* ctx;
    uint32_t imm;
  };
  std::deque<Event> cq;
  uint64_t writes = 0;

  chorusResult_t write(const void* buf, size_t len, void*, uint64_t raddr, uint64_t, uint32_t imm, void* ctx) override {
    if (broken) return chorusRemoteError;
    ++writes;
    fab->inflight.push_back({this, static_cast<const char*>(buf), len, raddr, imm, ctx});
    return chorusSuccess;
  }
  chorusResult_t poll(Sink& sink) override {
    if (broken) return chorusRemoteError;
    fab->deliverSome();
    // Completions in random order too.
    std::shuffle(cq.begin(), cq.end(), fab->rng);
    while (!cq.empty()) {
      const Event e = cq.front();
      cq.pop_front();
      if (e.local) {
        sink.localDone(e.ctx);
      } else {
        sink.remoteWrite(e.imm);
      }
    }
    return chorusSuccess;
  }
  size_t maxWrite() const override { return maxW; }
  std::string why() const override { return "the fake wire broke"; }
};

void FakeFabric::deliverSome() {
  std::shuffle(inflight.begin(), inflight.end(), rng);
  const size_t n = inflight.empty() ? 0 : 1 + rng() % inflight.size();
  for (size_t i = 0; i < n; ++i) {
    const Write w = inflight.back();
    inflight.pop_back();
    if (w.len) std::memcpy(reinterpret_cast<void*>(w.raddr), w.buf, w.len);
    w.from->peer->cq.push_back({false, nullptr, w.imm});
    w.from->cq.push_back({true, w.ctx, 0});
  }
}

rdma::MemRef ref() { return rdma::MemRef{nullptr, 7, 0, true}; }

// A send Proto and a receive Proto joined by fake wires.
struct ProtoPair {
  FakeFabric fab;
  FakeWire sw, rw;
  rdma::ProtoMem smem{}, rmem{};
  rdma::MemRef sref = ref(), rref = ref();
  rdma::Proto send{&sw, &smem, sref, true};
  rdma::Proto recv{&rw, &rmem, rref, false};
  explicit ProtoPair(size_t maxWrite = 4096) {
    sw.fab = rw.fab = &fab;
    sw.peer = &rw;
    rw.peer = &sw;
    sw.maxW = rw.maxW = maxWrite;
    send.setPeer(reinterpret_cast<uintptr_t>(&rmem), 7);
    recv.setPeer(reinterpret_cast<uintptr_t>(&smem), 7);
  }
};

// Issues the sends (retrying while the receiver's entry is not in) and tests everything until done.
chorusResult_t run(ProtoPair& p, std::vector<void*>& recvs, const std::vector<std::pair<char*, size_t>>& msgs,
                   const std::vector<int>& tags, std::vector<std::vector<size_t>>* recvSizes) {
  std::vector<void*> sends(msgs.size(), nullptr);
  const rdma::MemRef mr = ref();
  size_t issued = 0;
  std::vector<bool> done(recvs.size(), false), sdone(msgs.size(), false);
  if (recvSizes) recvSizes->assign(recvs.size(), std::vector<size_t>(8, 0));
  for (int pass = 0; pass < 100000; ++pass) {
    while (issued < msgs.size()) {
      void* r = nullptr;
      const chorusResult_t rc = p.send.isend(msgs[issued].first, msgs[issued].second, tags[issued], &mr, &r);
      if (rc != chorusSuccess) return rc;
      if (!r) break;
      sends[issued++] = r;
    }
    bool all = issued == msgs.size();
    for (size_t i = 0; i < recvs.size(); ++i) {
      if (done[i]) continue;
      int d = 0;
      const chorusResult_t rc = rdma::Proto::testRequest(recvs[i], &d, recvSizes ? (*recvSizes)[i].data() : nullptr);
      if (rc != chorusSuccess) return rc;
      done[i] = d;
      all = all && d;
    }
    for (size_t i = 0; i < issued; ++i) {
      if (sdone[i]) continue;
      int d = 0;
      size_t sz = 0;
      const chorusResult_t rc = rdma::Proto::testRequest(sends[i], &d, &sz);
      if (rc != chorusSuccess) return rc;
      if (d && sz != msgs[i].second) return chorusInternalError;
      sdone[i] = d;
      all = all && d;
    }
    if (all) return chorusSuccess;
  }
  return chorusInternalError;
}

}  // namespace

TEST_CASE("the immediate packs kind slot message and inline size and unpacks them", "[rdma]") {
  for (uint32_t kind = 0; kind < 4; ++kind) {
    for (uint32_t slot : {0u, 1u, 17u, 31u}) {
      for (uint32_t msg : {0u, 3u, 7u}) {
        for (uint32_t size : {0u, 1u, 4096u, rdma::kInlineMaxBytes}) {
          const rdma::Imm in{static_cast<rdma::ImmKind>(kind), slot, msg, size};
          const rdma::Imm out = rdma::unpackImm(rdma::packImm(in));
          CHECK(out.kind == in.kind);
          CHECK(out.slot == slot);
          CHECK(out.msg == msg);
          CHECK(out.size == size);
        }
      }
    }
  }
}

TEST_CASE("grouped receives get every byte by tag when writes land and complete in any order", "[rdma]") {
  ProtoPair p(4096);  // messages over 4096 bytes go as a size record and segments
  std::mt19937 rng(99);
  const std::vector<size_t> choices = {0, 1, 100, 4095, 4096, 4097, 20000, 65536};
  for (int round = 0; round < 120; ++round) {
    // Up to 4 receives in flight, each a group of 1 to 8 messages with distinct tags.
    const int nrecv = 1 + int(rng() % 4);
    std::vector<std::vector<char>> in, out;
    std::vector<std::pair<char*, size_t>> msgs;
    std::vector<int> tags;
    std::vector<void*> recvs;
    std::vector<std::vector<size_t>> expect;
    in.reserve(64);
    out.reserve(64);
    for (int g = 0; g < nrecv; ++g) {
      const int n = 1 + int(rng() % 8);
      void* data[8];
      size_t room[8];
      int rtags[8];
      rdma::MemRef refs[8];
      rdma::MemRef* prefs[8];
      std::vector<size_t> sizes(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        sizes[size_t(i)] = choices[rng() % choices.size()];
        in.emplace_back(sizes[size_t(i)] + 16, char(0));
        data[i] = in.back().data();
        room[i] = in.back().size();
        rtags[i] = 100 * g + i;
        refs[i] = ref();
        prefs[i] = &refs[i];
      }
      void* r = nullptr;
      REQUIRE(p.recv.irecv(n, data, room, rtags, prefs, &r) == chorusSuccess);
      REQUIRE(r != nullptr);
      recvs.push_back(r);
      // The sends of the group in another order than its receives list them.
      std::vector<int> order(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) order[size_t(i)] = i;
      std::shuffle(order.begin(), order.end(), rng);
      for (int i : order) {
        out.emplace_back(sizes[size_t(i)]);
        for (size_t k = 0; k < sizes[size_t(i)]; ++k)
          out.back()[k] = char((k * 31 + size_t(round) * 7 + size_t(i)) & 0xff);
        msgs.push_back({out.back().data(), sizes[size_t(i)]});
        tags.push_back(rtags[i]);
      }
      expect.push_back(sizes);
    }
    std::vector<std::vector<size_t>> got;
    REQUIRE(run(p, recvs, msgs, tags, &got) == chorusSuccess);
    // Every message in its receive, whole, and the receive reports its size.
    size_t m = 0;
    size_t inAt = 0;
    for (size_t g = 0; g < expect.size(); ++g) {
      for (size_t i = 0; i < expect[g].size(); ++i) CHECK(got[g][i] == expect[g][i]);
      for (size_t k = 0; k < expect[g].size(); ++k, ++m) {
        // msgs[m] went to the receive whose tag it carries.
        const int tag = tags[m];
        const size_t idx = size_t(tag % 100);
        const std::vector<char>& dst = in[inAt + idx];
        REQUIRE(msgs[m].second <= dst.size());
        if (msgs[m].second) CHECK(std::memcmp(dst.data(), msgs[m].first, msgs[m].second) == 0);
      }
      inAt += expect[g].size();
    }
  }
  CHECK(p.sw.writes > 0);
}

TEST_CASE("a message longer than its receive fails both protocol ends", "[rdma]") {
  ProtoPair p;
  std::vector<char> src(300), dst(100);
  void* data = dst.data();
  size_t room = dst.size();
  int tag = 5;
  rdma::MemRef r0 = ref();
  rdma::MemRef* refs[1] = {&r0};
  void* r = nullptr;
  REQUIRE(p.recv.irecv(1, &data, &room, &tag, refs, &r) == chorusSuccess);
  std::vector<void*> recvs = {r};
  CHECK(run(p, recvs, {{src.data(), src.size()}}, {5}, nullptr) == chorusRemoteError);
  CHECK(p.send.failure() == "a message of 300 bytes is longer than the peer's receive of 100 bytes");
  // The receiver learns it from the size record.
  for (int i = 0; i < 100 && !p.recv.failed(); ++i) (void)p.recv.progress();
  CHECK(p.recv.failure() == "the peer sent 300 bytes to a receive of 100 bytes");
}

TEST_CASE("a send whose tag no open receive of the group has fails naming the tags", "[rdma]") {
  ProtoPair p;
  std::vector<char> src(10), dst(10);
  void* data[2] = {dst.data(), dst.data()};
  size_t room[2] = {10, 10};
  int tags[2] = {1, 2};
  rdma::MemRef r0 = ref();
  rdma::MemRef* refs[2] = {&r0, &r0};
  void* r = nullptr;
  REQUIRE(p.recv.irecv(2, data, room, tags, refs, &r) == chorusSuccess);
  std::vector<void*> recvs = {r};
  CHECK(run(p, recvs, {{src.data(), 10}, {src.data(), 10}}, {1, 1}, nullptr) == chorusRemoteError);
  CHECK(p.send.failure() == "a message tagged 1 matches no open receive of the peer's group (tags 1, 2)");
}

TEST_CASE("a goodbye fails the peer's open receive and a broken wire fails the requests", "[rdma]") {
  ProtoPair p;
  std::vector<char> dst(10);
  void* data = dst.data();
  size_t room = 10;
  int tag = 0;
  rdma::MemRef r0 = ref();
  rdma::MemRef* refs[1] = {&r0};
  void* r = nullptr;
  REQUIRE(p.recv.irecv(1, &data, &room, &tag, refs, &r) == chorusSuccess);
  bool left = false;
  for (int i = 0; i < 100 && !left; ++i) {
    left = p.send.sayGoodbye();
    (void)p.recv.progress();
  }
  CHECK(left);
  int done = 0;
  for (int i = 0; i < 100 && !p.recv.failed(); ++i) (void)rdma::Proto::testRequest(r, &done, nullptr);
  CHECK(done == 0);
  CHECK(rdma::Proto::testRequest(r, &done, nullptr) == chorusRemoteError);
  CHECK(p.recv.failure() == "the peer closed the connection");

  ProtoPair q;
  q.rw.broken = true;
  void* r2 = nullptr;
  CHECK(q.recv.irecv(1, &data, &room, &tag, refs, &r2) == chorusRemoteError);
  CHECK(q.recv.failure() == "the fake wire broke");
}

// ---- the registration cache ----

namespace {
struct CountingRegs {
  int regs = 0;
  int deregs = 0;
  std::vector<std::pair<uintptr_t, size_t>> ranges;
  RegCache::Ops ops() {
    RegCache::Ops o;
    o.reg = [this](void* base, size_t len, void** h) {
      ++regs;
      ranges.push_back({reinterpret_cast<uintptr_t>(base), len});
      *h = reinterpret_cast<void*>(uintptr_t(regs));
      return chorusSuccess;
    };
    o.dereg = [this](void*) { ++deregs; };
    return o;
  }
};
}  // namespace

TEST_CASE("the registration cache shares covering registrations whole pages at a time", "[reg_cache]") {
  CountingRegs c;
  std::vector<char> mem(1 << 20);
  RegCache cache(c.ops(), 4);
  RegCache::Entry* a = nullptr;
  REQUIRE(cache.acquire(mem.data() + 100, 70000, &a) == chorusSuccess);
  CHECK(c.regs == 1);
  CHECK(c.ranges[0].first % 4096 == 0);
  CHECK(c.ranges[0].first <= reinterpret_cast<uintptr_t>(mem.data() + 100));
  CHECK(c.ranges[0].first + c.ranges[0].second >= reinterpret_cast<uintptr_t>(mem.data() + 70100));
  RegCache::Entry* b = nullptr;
  REQUIRE(cache.acquire(mem.data() + 200, 1000, &b) == chorusSuccess);  // inside: shared
  CHECK(b == a);
  CHECK(c.regs == 1);
  RegCache::Entry* d = nullptr;
  REQUIRE(cache.acquire(mem.data() + 500000, 10, &d) == chorusSuccess);  // outside: its own
  CHECK(d != a);
  CHECK(c.regs == 2);
  cache.release(a);
  cache.release(b);
  cache.release(d);
  // Unused ones are kept: asking again registers nothing.
  RegCache::Entry* e = nullptr;
  REQUIRE(cache.acquire(mem.data() + 100, 70000, &e) == chorusSuccess);
  CHECK(e == a);
  CHECK(c.regs == 2);
  cache.release(e);
  const RegCache::Stats s = cache.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 2);
  CHECK(s.entries == 2);
  CHECK(s.unused == 2);
}

TEST_CASE("the registration cache keeps a bounded number unused and drops the least recent first", "[reg_cache]") {
  CountingRegs c;
  std::vector<char> mem(64 * 4096);
  RegCache cache(c.ops(), 2);
  std::vector<RegCache::Entry*> e(4);
  for (int i = 0; i < 4; ++i) REQUIRE(cache.acquire(mem.data() + 8192 * i + 4096, 10, &e[size_t(i)]) == chorusSuccess);
  for (int i = 0; i < 4; ++i) cache.release(e[size_t(i)]);
  CHECK(c.deregs == 2);  // the two used longest ago
  CHECK(cache.stats().evicted == 2);
  RegCache::Entry* again = nullptr;
  REQUIRE(cache.acquire(mem.data() + 8192 * 3 + 4096, 10, &again) == chorusSuccess);
  CHECK(c.regs == 4);  // still there
  cache.release(again);
  REQUIRE(cache.acquire(mem.data() + 4096, 10, &again) == chorusSuccess);
  CHECK(c.regs == 5);  // was dropped
  cache.release(again);

  // keepUnused 0: a registration goes with its last user.
  CountingRegs z;
  RegCache none(z.ops(), 0);
  RegCache::Entry* x = nullptr;
  REQUIRE(none.acquire(mem.data(), 10, &x) == chorusSuccess);
  none.release(x);
  CHECK(z.deregs == 1);
  CHECK(none.stats().entries == 0);
}

TEST_CASE("invalidating freed memory drops unused registrations at once and used ones at their last release",
          "[reg_cache]") {
  CountingRegs c;
  std::vector<char> mem(16 * 4096);
  char* base = mem.data() + (4096 - reinterpret_cast<uintptr_t>(mem.data()) % 4096);
  RegCache cache(c.ops(), 8);
  RegCache::Entry *used = nullptr, *idle = nullptr, *apart = nullptr;
  REQUIRE(cache.acquire(base, 4096, &used) == chorusSuccess);
  REQUIRE(cache.acquire(base + 2 * 4096, 4096, &idle) == chorusSuccess);
  REQUIRE(cache.acquire(base + 8 * 4096, 4096, &apart) == chorusSuccess);
  cache.release(idle);
  cache.release(apart);
  cache.invalidate(base, 4 * 4096);  // covers `used` and `idle`, not `apart`
  CHECK(c.deregs == 1);              // idle
  // A new request for the used range registers anew: the stale entry is not handed out.
  RegCache::Entry* fresh = nullptr;
  REQUIRE(cache.acquire(base + 10, 100, &fresh) == chorusSuccess);
  CHECK(fresh != used);
  CHECK(c.regs == 4);
  cache.release(used);
  CHECK(c.deregs == 2);
  cache.release(fresh);
  CHECK(cache.stats().invalidated == 2);
  CHECK(cache.stats().entries == 2);  // apart and fresh, unused
}

// ---- the OFI network over libfabric's tcp provider ----

#ifdef CHORUS_OFI_PLUGIN
namespace {
struct OfiLogTag {};
using OfiLog = testing::NetLog<OfiLogTag>;
const auto ofiLogger = &OfiLog::log;
bool ofiLogged(const std::string& part) { return OfiLog::has(part); }

const chorusNet_v1_t* ofi() {
  static const chorusNet_v1_t* n = [] {
    ::setenv("CHORUS_OFI_PROVIDER", "tcp", 0);
    Result<LoadedNetwork> l = loadNetPlugin(CHORUS_OFI_PLUGIN, ofiLogger);
    if (!l.isOk()) FAIL(l.status().message());
    return l.value().net;
  }();
  return n;
}

bool until(const std::function<bool()>& f, int tries = 2000000) {
  for (int i = 0; i < tries; ++i) {
    if (f()) return true;
  }
  return false;
}

struct OfiPair {
  const chorusNet_v1_t& net = *ofi();
  void* ctx = nullptr;
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  char handle[CHORUS_NET_HANDLE_MAXSIZE] = {};
  OfiPair() {
    REQUIRE(net.init(&ctx, 9, nullptr, ofiLogger) == chorusSuccess);
    REQUIRE(net.listen(ctx, 0, handle, &listen) == chorusSuccess);
    REQUIRE(until([&] {
      if (!send) REQUIRE(net.connect(ctx, 0, handle, &send) == chorusSuccess);
      if (!recv) REQUIRE(net.accept(listen, &recv) == chorusSuccess);
      return send && recv;
    }));
  }
  ~OfiPair() {
    if (send) net.closeSend(send);
    if (recv) net.closeRecv(recv);
    if (listen) net.closeListen(listen);
    if (ctx) CHECK(net.finalize(ctx) == chorusSuccess);
  }
  // Sends each message (retrying while its receive is not posted) and tests all until done.
  chorusResult_t exchange(std::vector<void*> recvs, const std::vector<std::pair<char*, size_t>>& msgs,
                          const std::vector<int>& tags, void* smr, std::vector<std::vector<size_t>>* got) {
    std::vector<void*> reqs = recvs;
    size_t issued = 0;
    std::vector<bool> done;
    if (got) got->assign(recvs.size() + msgs.size(), std::vector<size_t>(8, 0));
    for (int pass = 0; pass < 4000000; ++pass) {
      while (issued < msgs.size()) {
        void* s = nullptr;
        const chorusResult_t rc = net.isend(send, msgs[issued].first, msgs[issued].second, tags[issued], smr, &s);
        if (rc != chorusSuccess) return rc;
        if (!s) break;
        reqs.push_back(s);
        ++issued;
      }
      done.resize(reqs.size(), false);
      bool all = issued == msgs.size();
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (done[i]) continue;
        int d = 0;
        const chorusResult_t rc = net.test(reqs[i], &d, got ? (*got)[i].data() : nullptr);
        if (rc != chorusSuccess) return rc;
        done[i] = d;
        all = all && d;
      }
      if (all) return chorusSuccess;
    }
    return chorusInternalError;
  }
};
}  // namespace

TEST_CASE("the OFI network loads through the plugin loader and names its provider", "[ofi]") {
  const chorusNet_v1_t* n = ofi();
  CHECK(std::string(n->name) == "OFI");
  int ndev = 0;
  REQUIRE(n->devices(&ndev) == chorusSuccess);
  CHECK(ndev >= 1);
  chorusNetProperties_v1_t p{};
  REQUIRE(n->getProperties(0, &p) == chorusSuccess);
  CHECK(p.ptrSupport == CHORUS_NET_PTR_HOST);
  CHECK(p.maxRecvs == 8);
  OfiPair pr;  // init says which provider, and so does every connection
  const std::string provider = std::getenv("CHORUS_OFI_PROVIDER");
  CHECK(ofiLogged("OFI network: provider " + provider));
  CHECK(ofiLogged("through provider " + provider));
}

TEST_CASE("OFI: grouped tagged messages of every size arrive whole by tag", "[ofi]") {
  OfiPair pr;
  const std::vector<size_t> sizes = {0, 1000, 5u << 20};
  const std::vector<int> tags = {11, 22, 33};
  std::vector<char> sendArena(6u << 20), recvArena(6u << 20, 0);
  void *smr = nullptr, *rmr = nullptr;
  REQUIRE(pr.net.regMr(pr.send, sendArena.data(), sendArena.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
  REQUIRE(pr.net.regMr(pr.recv, recvArena.data(), recvArena.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
  std::vector<std::pair<char*, size_t>> msgs;
  char* rp[3];
  size_t at = 0;
  for (size_t i = 0; i < 3; ++i) {
    char* sp = sendArena.data() + at;
    rp[i] = recvArena.data() + at;
    for (size_t k = 0; k < sizes[i]; ++k) sp[k] = char((k * 131 + i * 7) & 0xff);
    msgs.push_back({sp, sizes[i]});
    at += sizes[i] + 64;
  }
  for (int round = 0; round < 3; ++round) {
    void* rdata[3] = {rp[2], rp[0], rp[1]};
    size_t rsizes[3] = {sizes[2] + 64, sizes[0] + 64, sizes[1] + 64};
    int rtags[3] = {tags[2], tags[0], tags[1]};
    void* rmrs[3] = {rmr, rmr, rmr};
    void* r = nullptr;
    REQUIRE(until([&] {
      REQUIRE(pr.net.irecv(pr.recv, 3, rdata, rsizes, rtags, rmrs, &r) == chorusSuccess);
      return r != nullptr;
    }));
    std::vector<std::vector<size_t>> got;
    std::memset(recvArena.data(), 0, recvArena.size());
    REQUIRE(pr.exchange({r}, msgs, tags, smr, &got) == chorusSuccess);
    CHECK(got[0][0] == sizes[2]);
    CHECK(got[0][1] == sizes[0]);
    CHECK(got[0][2] == sizes[1]);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(got[1 + i][0] == sizes[i]);
      if (sizes[i]) CHECK(std::memcmp(rp[i], msgs[i].first, sizes[i]) == 0);
    }
  }
  CHECK(pr.net.deregMr(pr.send, smr) == chorusSuccess);
  CHECK(pr.net.deregMr(pr.recv, rmr) == chorusSuccess);
}

TEST_CASE("OFI: 200 messages pass through one comm in order with at most 32 receives open", "[ofi]") {
  OfiPair pr;
  std::vector<uint32_t> src(200), dst(200 * 2, 0);
  for (uint32_t i = 0; i < 200; ++i) src[i] = 0x5000 + i;
  void *smr = nullptr, *rmr = nullptr;
  REQUIRE(pr.net.regMr(pr.send, src.data(), src.size() * 4, CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
  REQUIRE(pr.net.regMr(pr.recv, dst.data(), dst.size() * 4, CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
  size_t posted = 0, sent = 0, completed = 0, recvsOpen = 0;
  std::vector<std::pair<void*, bool>> open;  // request, is a receive
  for (int pass = 0; pass < 4000000 && completed < 400; ++pass) {
    if (posted < 200) {
      void* d = &dst[2 * posted];
      size_t n = 8;
      int tag = 1;
      void* r = nullptr;
      REQUIRE(pr.net.irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r) == chorusSuccess);
      if (r) {
        open.push_back({r, true});
        ++posted;
        ++recvsOpen;
        CHECK(recvsOpen <= size_t(CHORUS_NET_MAX_REQUESTS));
      } else {
        // Refused only while the slot it needs is taken: receives use their slots in order, and
        // some providers complete them out of order, so fewer than 32 may be open then.
        CHECK(recvsOpen > 0);
      }
    }
    if (sent < posted) {
      void* s = nullptr;
      REQUIRE(pr.net.isend(pr.send, &src[sent], 4, 1, smr, &s) == chorusSuccess);
      if (s) {
        open.push_back({s, false});
        ++sent;
      }
    }
    for (size_t i = 0; i < open.size();) {
      int d = 0;
      size_t sz = 0;
      REQUIRE(pr.net.test(open[i].first, &d, &sz) == chorusSuccess);
      if (!d) {
        ++i;
        continue;
      }
      CHECK(sz == 4);
      if (open[i].second) --recvsOpen;
      ++completed;
      open.erase(open.begin() + std::ptrdiff_t(i));
    }
  }
  REQUIRE(completed == 400);
  for (uint32_t i = 0; i < 200; ++i) CHECK(dst[2 * i] == 0x5000 + i);
  pr.net.deregMr(pr.send, smr);
  pr.net.deregMr(pr.recv, rmr);
}

TEST_CASE("OFI: a message longer than its receive fails both ends and a closed sender fails the receive", "[ofi]") {
  {
    OfiPair pr;
    std::vector<char> buf(4096), rbuf(100);
    void *smr = nullptr, *rmr = nullptr;
    REQUIRE(pr.net.regMr(pr.send, buf.data(), buf.size(), CHORUS_NET_PTR_HOST, &smr) == chorusSuccess);
    REQUIRE(pr.net.regMr(pr.recv, rbuf.data(), rbuf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
    void* d = rbuf.data();
    size_t n = 100;
    int tag = 5;
    void* r = nullptr;
    REQUIRE(pr.net.irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r) == chorusSuccess);
    REQUIRE(r != nullptr);
    CHECK(pr.exchange({r}, {{buf.data(), 4096}}, {5}, smr, nullptr) == chorusRemoteError);
    CHECK(ofiLogged("a message of 4096 bytes is longer than the peer's receive of 100 bytes"));
    int done = 0;
    chorusResult_t rc = chorusSuccess;
    REQUIRE(until([&] {
      rc = pr.net.test(r, &done, nullptr);
      return rc != chorusSuccess;
    }));
    CHECK(rc == chorusRemoteError);
    CHECK(ofiLogged("the peer sent 4096 bytes to a receive of 100 bytes"));
    pr.net.deregMr(pr.send, smr);
    pr.net.deregMr(pr.recv, rmr);
  }
  {
    OfiPair pr;
    std::vector<char> rbuf(64);
    void* rmr = nullptr;
    REQUIRE(pr.net.regMr(pr.recv, rbuf.data(), rbuf.size(), CHORUS_NET_PTR_HOST, &rmr) == chorusSuccess);
    void* d = rbuf.data();
    size_t n = 64;
    int tag = 0;
    void* r = nullptr;
    REQUIRE(pr.net.irecv(pr.recv, 1, &d, &n, &tag, &rmr, &r) == chorusSuccess);
    REQUIRE(pr.net.closeSend(pr.send) == chorusSuccess);
    pr.send = nullptr;
    int done = 0;
    chorusResult_t rc = chorusSuccess;
    REQUIRE(until([&] {
      rc = pr.net.test(r, &done, nullptr);
      return rc != chorusSuccess || done;
    }));
    CHECK(rc == chorusRemoteError);
    CHECK(ofiLogged("the peer closed the connection"));
    pr.net.deregMr(pr.recv, rmr);
  }
}
#endif
