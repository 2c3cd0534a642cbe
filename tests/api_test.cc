// The C API beyond the grid: misuse returns the right code with a message, groups driven by one
// thread, streams, events and callbacks, split, non-blocking init, point-to-point in any order
// (disagreeing ranks: api_check_test.cc).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "include/chorus/chorus.h"
#include "include/chorus/chorus_cuda.h"
#include "tests/test_util.h"

using chorus::test::hasMessage;
using chorus::test::onRanks;
using chorus::test::World;

TEST_CASE("version, error strings and unique ids", "[api]") {
  int v = 0;
  REQUIRE(chorusGetVersion(&v) == chorusSuccess);
  CHECK(v == CHORUS_VERSION_CODE);
  CHECK(chorusGetVersion(nullptr) == chorusInvalidArgument);
  CHECK(hasMessage());
  for (int r = 0; r < chorusNumResults; ++r)
    CHECK(std::strlen(chorusGetErrorString(static_cast<chorusResult_t>(r))) > 0);
  chorusUniqueId a;
  chorusUniqueId b;
  REQUIRE(chorusGetUniqueId(&a) == chorusSuccess);
  REQUIRE(chorusGetUniqueId(&b) == chorusSuccess);
  CHECK(std::memcmp(&a, &b, sizeof(a)) != 0);
}

TEST_CASE("bad arguments return the right code with a message and touch nothing", "[api][misuse]") {
  World w(2);
  REQUIRE(w.ok());
  chorusComm_t c = w.comm(0);
  float buf[4] = {1, 2, 3, 4};
  float out[4] = {0, 0, 0, 0};
  CHECK(chorusAllReduce(buf, out, 4, static_cast<chorusDataType_t>(99), chorusSum, c, nullptr) ==
        chorusInvalidArgument);
  CHECK(hasMessage());
  CHECK(chorusAllReduce(buf, out, 4, chorusFloat32, static_cast<chorusRedOp_t>(77), c, nullptr) ==
        chorusInvalidArgument);
  CHECK(chorusAllReduce(nullptr, out, 4, chorusFloat32, chorusSum, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusAllReduce(buf, nullptr, 4, chorusFloat32, chorusSum, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusAllReduce(buf, out, SIZE_MAX / 2, chorusFloat32, chorusSum, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusBroadcast(buf, out, 4, chorusFloat32, 2, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusBroadcast(buf, out, 4, chorusFloat32, -1, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusSend(buf, 4, chorusFloat32, 5, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusAllReduce(buf, out, 4, chorusFloat32, chorusSum, nullptr, nullptr) == chorusInvalidArgument);
  CHECK(std::string(chorusGetLastError(nullptr)).find("comm is NULL") != std::string::npos);
  CHECK(chorusGroupEnd() == chorusInvalidUsage);
  CHECK(chorusCommInitRank(nullptr, 2, chorusUniqueId{}, 0) == chorusInvalidArgument);
  chorusComm_t bad = nullptr;
  chorusUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  CHECK(chorusCommInitRank(&bad, 2, garbage, 0) == chorusInvalidArgument);
  CHECK(chorusCommInitRank(&bad, 2, garbage, 2) == chorusInvalidArgument);
  CHECK(chorusCommInitRank(&bad, 0, garbage, 0) == chorusInvalidArgument);
  for (float x : out) CHECK(x == 0.0f);  // nothing was written by the failed calls
  int count = 0;
  CHECK(chorusCommCount(c, nullptr) == chorusInvalidArgument);
  CHECK(chorusCommCount(c, &count) == chorusSuccess);
  CHECK(count == 2);

  // A custom op after destroy, or with another type, or on another communicator.
  float scalar = 2.0f;
  chorusRedOp_t op;
  REQUIRE(chorusRedOpCreatePreMulSum(&op, &scalar, chorusFloat32, chorusScalarHostImmediate, c) == chorusSuccess);
  CHECK(chorusAllReduce(buf, out, 4, chorusInt32, op, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusAllReduce(buf, out, 4, chorusFloat32, op, w.comm(1), nullptr) == chorusInvalidArgument);
  CHECK(chorusRedOpDestroy(op, c) == chorusSuccess);
  CHECK(chorusAllReduce(buf, out, 4, chorusFloat32, op, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusRedOpDestroy(op, c) == chorusInvalidArgument);
  CHECK(chorusRedOpDestroy(chorusSum, c) == chorusInvalidArgument);

  // The bitwise operators are for integer types; they are built in, not destroyed.
  for (chorusRedOp_t bitwise : {chorusBand, chorusBor, chorusBxor}) {
    CHECK(chorusAllReduce(buf, out, 4, chorusFloat32, bitwise, c, nullptr) == chorusInvalidArgument);
    CHECK(std::string(chorusGetLastError(c)).find("reduces integer types only, not float32") != std::string::npos);
    CHECK(chorusRedOpDestroy(bitwise, c) == chorusInvalidArgument);
  }
  CHECK(chorusAllReduce(buf, out, 4, chorusFloat32, static_cast<chorusRedOp_t>(chorusBxor + 1), c, nullptr) ==
        chorusInvalidArgument);

  // A group with a bad call launches nothing and says so at the end.
  REQUIRE(chorusGroupStart() == chorusSuccess);
  CHECK(chorusAllReduce(nullptr, out, 4, chorusFloat32, chorusSum, c, nullptr) == chorusInvalidArgument);
  CHECK(chorusGroupEnd() == chorusInvalidArgument);  // the failed call's own code, as NCCL's group returns
  CHECK(std::string(chorusGetLastError(nullptr)).find("nothing in the group was launched") != std::string::npos);
}

// NCCL copies a pre-multiplied sum's operator when the call is made: destroying it before the
// group ends, and a new operator taking its number, leave the call as it was made.
TEST_CASE("a call keeps its operator when it is destroyed before the group ends", "[api][group][redop]") {
  const int n = 2;
  World w(n);
  REQUIRE(w.ok());
  std::vector<std::vector<float>> data(n, std::vector<float>(1000));
  for (int r = 0; r < n; ++r) std::iota(data[r].begin(), data[r].end(), float(r));
  std::vector<chorusRedOp_t> ops(n);
  float two = 2.0f;
  float five = 5.0f;
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < n; ++r) {
    REQUIRE(chorusRedOpCreatePreMulSum(&ops[r], &two, chorusFloat32, chorusScalarHostImmediate, w.comm(r)) ==
            chorusSuccess);
    // A host-resident pointer scalar is read when the call is made, too.
    REQUIRE(chorusAllReduce(data[r].data(), data[r].data(), 1000, chorusFloat32, ops[r], w.comm(r), nullptr) ==
            chorusSuccess);
    REQUIRE(chorusRedOpDestroy(ops[r], w.comm(r)) == chorusSuccess);
    chorusRedOp_t again;
    REQUIRE(chorusRedOpCreatePreMulSum(&again, &five, chorusFloat32, chorusScalarDevice, w.comm(r)) == chorusSuccess);
    CHECK(again == ops[r]);  // the freed number, reused
  }
  five = 7.0f;
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  for (int r = 0; r < n; ++r) {
    size_t bad = 0;
    for (int i = 0; i < 1000; ++i) bad += data[r][i] != 2.0f * (2 * i + 1);
    CHECK(bad == 0);
    CHECK(chorusRedOpDestroy(ops[r], w.comm(r)) == chorusSuccess);
  }
}

TEST_CASE("one thread drives every rank inside a group, nested", "[api][group]") {
  for (int n : {2, 4}) {
    World w(n);
    REQUIRE(w.ok());
    std::vector<std::vector<int64_t>> data(n, std::vector<int64_t>(1000));
    for (int r = 0; r < n; ++r) std::iota(data[r].begin(), data[r].end(), r);
    REQUIRE(chorusGroupStart() == chorusSuccess);
    REQUIRE(chorusGroupStart() == chorusSuccess);
    for (int r = 0; r < n; ++r) {
      REQUIRE(chorusAllReduce(data[r].data(), data[r].data(), 1000, chorusInt64, chorusSum, w.comm(r), nullptr) ==
              chorusSuccess);
    }
    REQUIRE(chorusGroupEnd() == chorusSuccess);
    REQUIRE(chorusGroupEnd() == chorusSuccess);
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < 1000; ++i) REQUIRE(data[r][i] == int64_t(n) * i + n * (n - 1) / 2);
    }
  }
}

TEST_CASE("sends and receives in any order inside a group complete", "[api][p2p]") {
  const int n = 4;
  World w(n);
  REQUIRE(w.ok());
  // Every rank sends to every other rank twice (two messages each way) and posts receives in
  // reverse order of peers; nothing deadlocks, and per-pair order is kept.
  auto rc = onRanks(n, [&](int r) -> chorusResult_t {
    std::vector<std::vector<int32_t>> send(n, std::vector<int32_t>(5000));
    std::vector<std::vector<int32_t>> recv(2 * n, std::vector<int32_t>(5000, -1));
    for (int p = 0; p < n; ++p) std::fill(send[p].begin(), send[p].end(), r * 100 + p);
    chorusGroupStart();
    for (int p = n - 1; p >= 0; --p) {
      if (p == r) continue;
      chorusRecv(recv[2 * p].data(), 5000, chorusInt32, p, w.comm(r), nullptr);
      chorusRecv(recv[2 * p + 1].data(), 2500, chorusInt32, p, w.comm(r), nullptr);
    }
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      chorusSend(send[p].data(), 5000, chorusInt32, p, w.comm(r), nullptr);
      chorusSend(send[p].data(), 2500, chorusInt32, p, w.comm(r), nullptr);
    }
    chorusResult_t e = chorusGroupEnd();
    if (e != chorusSuccess) return e;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      for (int i = 0; i < 5000; ++i) {
        if (recv[2 * p][i] != p * 100 + r) return chorusInternalError;
      }
      for (int i = 0; i < 2500; ++i) {
        if (recv[2 * p + 1][i] != p * 100 + r) return chorusInternalError;
      }
    }
    return chorusSuccess;
  });
  for (auto x : rc) CHECK(x == chorusSuccess);
}

TEST_CASE("a send then a receive between two ranks, as separate calls on one stream, complete", "[api][p2p]") {
  // What torch's batch_isend_irecv issues when the backend does not coalesce: both ranks of a
  // pair send first and receive after, each a call of its own on one in-order stream. The
  // messages fit the FIFOs, so the sends complete without their receives. (A ring of such calls
  // over three or more ranks can still deadlock while connecting, as in NCCL: group them.)
  for (int n : {2, 4}) {
    setenv("CHORUS_TIMEOUT", "10", 1);
    World w(n);
    unsetenv("CHORUS_TIMEOUT");
    REQUIRE(w.ok());
    std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(100)), in(n, std::vector<int32_t>(100, -1));
    auto rc = onRanks(n, [&](int r) {
      chorusStream_t s = nullptr;
      chorusResult_t e = chorusStreamCreate(&s);
      for (int i = 0; i < 100; ++i) out[r][i] = r * 1000 + i;
      const int partner = r ^ 1;
      if (e == chorusSuccess) e = chorusSend(out[r].data(), 100, chorusInt32, partner, w[r], s);
      if (e == chorusSuccess) e = chorusRecv(in[r].data(), 100, chorusInt32, partner, w[r], s);
      if (e == chorusSuccess) e = chorusStreamSynchronize(s);
      chorusStreamDestroy(s);
      return e;
    });
    for (int r = 0; r < n; ++r) {
      INFO(n << " ranks, rank " << r << ": " << rc[r]);
      REQUIRE(rc[r] == chorusSuccess);
      for (int i = 0; i < 100; ++i) REQUIRE(in[r][i] == (r ^ 1) * 1000 + i);
    }
  }
}

TEST_CASE("a receive shorter than the matching send is an error, not an overflow", "[api][p2p][misuse]") {
  World w(2);
  REQUIRE(w.ok());
  std::vector<int32_t> big(100, 7);
  std::vector<int32_t> small(60, -1);  // guard area past the 50 elements we ask for
  auto rc = onRanks(2, [&](int r) -> chorusResult_t {
    if (r == 0) return chorusSend(big.data(), 100, chorusInt32, 1, w.comm(0), nullptr);
    return chorusRecv(small.data(), 50, chorusInt32, 0, w.comm(1), nullptr);
  });
  CHECK(rc[1] == chorusInvalidUsage);
  for (int i = 50; i < 60; ++i) CHECK(small[i] == -1);
}

TEST_CASE("chorusRecvAny receives from whichever rank sends, each sender's messages in order", "[api][p2p][any]") {
  // Ranks 1-3 each send rank 0 two messages of 5000 int32 (more than the FIFO holds), first on a
  // fresh communicator (no connection exists: the first send asks to connect), then again on the
  // same one (the connections exist), the second time received on a host stream. Every message
  // is told apart by its values, checked element by element.
  constexpr int kRanks = 4, kPerSender = 2, kCount = 5000;
  World w(kRanks);
  REQUIRE(w.ok());
  auto value = [](int sender, int msg, int i) { return sender * 1000000 + msg * 10000 + i; };
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    const int total = (kRanks - 1) * kPerSender;
    std::vector<std::vector<int32_t>> got(total, std::vector<int32_t>(kCount, -1));
    std::vector<int> source(total, -1);
    auto rc = onRanks(kRanks, [&](int r) -> chorusResult_t {
      if (r != 0) {
        std::vector<int32_t> out(kCount);
        for (int m = 0; m < kPerSender; ++m) {
          for (int i = 0; i < kCount; ++i) out[i] = value(r, m, i);
          chorusResult_t e = chorusSend(out.data(), kCount, chorusInt32, 0, w[r], nullptr);
          if (e != chorusSuccess) return e;
        }
        return chorusSuccess;
      }
      if (round == 0) {
        for (int k = 0; k < total; ++k) {
          chorusResult_t e = chorusRecvAny(got[k].data(), kCount, chorusInt32, &source[k], w[0], nullptr);
          if (e != chorusSuccess) return e;
        }
        return chorusSuccess;
      }
      chorusStream_t s = nullptr;
      chorusResult_t e = chorusStreamCreate(&s);
      for (int k = 0; k < total && e == chorusSuccess; ++k) {
        e = chorusRecvAny(got[k].data(), kCount, chorusInt32, &source[k], w[0], s);
      }
      if (e == chorusSuccess) e = chorusStreamSynchronize(s);
      chorusStreamDestroy(s);
      return e;
    });
    for (int r = 0; r < kRanks; ++r) {
      INFO("rank " << r << ": " << chorusGetLastError(w[r]));
      REQUIRE(rc[r] == chorusSuccess);
    }
    std::vector<int> seen(kRanks, 0);
    for (int k = 0; k < total; ++k) {
      INFO("receive " << k << " from " << source[k]);
      REQUIRE(source[k] >= 1);
      REQUIRE(source[k] < kRanks);
      const int msg = seen[source[k]]++;  // a sender's messages come in the order it sent them
      for (int i = 0; i < kCount; ++i) REQUIRE(got[k][i] == value(source[k], msg, i));
    }
    for (int r = 1; r < kRanks; ++r) CHECK(seen[r] == kPerSender);
  }
}

TEST_CASE("chorusRecvAny refuses what it cannot do, and times out naming the wait", "[api][p2p][any][misuse]") {
  int32_t x[4] = {0, 0, 0, 0};
  int src = -7;
  {
    World one(1);
    REQUIRE(one.ok());
    CHECK(chorusRecvAny(x, 4, chorusInt32, &src, one[0], nullptr) == chorusInvalidUsage);
    CHECK(std::string(chorusGetLastError(one[0])).find("one rank") != std::string::npos);
    CHECK(src == -7);
  }
  setenv("CHORUS_TIMEOUT", "2", 1);
  World w(2);
  unsetenv("CHORUS_TIMEOUT");
  REQUIRE(w.ok());
  CHECK(chorusRecvAny(x, 4, chorusInt32, nullptr, w[0], nullptr) == chorusInvalidArgument);
  CHECK(chorusRecvAny(nullptr, 4, chorusInt32, &src, w[0], nullptr) == chorusInvalidArgument);
  CHECK(chorusRecvAny(x, 4, static_cast<chorusDataType_t>(99), &src, w[0], nullptr) == chorusInvalidArgument);
  REQUIRE(chorusGroupStart() == chorusSuccess);
  CHECK(chorusRecvAny(x, 4, chorusInt32, &src, w[0], nullptr) == chorusInvalidUsage);
  CHECK(std::string(chorusGetLastError(nullptr)).find("cannot be part of a group") != std::string::npos);
  CHECK(chorusGroupEnd() != chorusSuccess);  // the group failed with it, and launches nothing
  CHECK(src == -7);
  // Nobody sends: the timeout ends the wait and says what it waited for.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(chorusRecvAny(x, 4, chorusInt32, &src, w[0], nullptr) == chorusSystemError);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(took >= 1.9);
  CHECK(took < 15.0);
  CHECK(std::string(chorusGetLastError(w[0])).find("no rank sent to rank 0") != std::string::npos);
  CHECK(src == -7);
}

TEST_CASE("streams, events and host callbacks run in order", "[api][stream]") {
  const int n = 3;
  World w(n);
  REQUIRE(w.ok());
  auto rc = onRanks(n, [&](int r) -> chorusResult_t {
    chorusStream_t s;
    chorusEvent_t e;
    if (chorusStreamCreate(&s) != chorusSuccess || chorusEventCreate(&e) != chorusSuccess) return chorusInternalError;
    std::vector<float> a(100000, float(r + 1));
    std::vector<float> b(100000, 1.0f);
    std::atomic<int> calls{0};
    auto cb = [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); };
    chorusAllReduce(a.data(), a.data(), a.size(), chorusFloat32, chorusSum, w.comm(r), s);
    chorusEventRecord(e, s);
    chorusLaunchHostFunc(s, cb, &calls);
    chorusAllReduce(b.data(), b.data(), b.size(), chorusFloat32, chorusMax, w.comm(r), s);
    if (chorusEventSynchronize(e) != chorusSuccess) return chorusInternalError;
    if (chorusEventQuery(e) != chorusSuccess) return chorusInternalError;
    if (a[0] != 6.0f || a[99999] != 6.0f) return chorusInternalError;  // 1+2+3, done when the event is
    chorusResult_t st = chorusStreamSynchronize(s);
    if (st != chorusSuccess) return st;
    if (chorusStreamQuery(s) != chorusSuccess || calls.load() != 1 || b[5] != 1.0f) return chorusInternalError;
    // A second stream waits for an event of the first.
    chorusStream_t s2;
    chorusStreamCreate(&s2);
    chorusAllReduce(a.data(), a.data(), a.size(), chorusFloat32, chorusSum, w.comm(r), s);
    chorusEventRecord(e, s);
    chorusStreamWaitEvent(s2, e);
    chorusLaunchHostFunc(s2, cb, &calls);
    chorusStreamSynchronize(s2);
    if (calls.load() != 2 || a[0] != 18.0f) return chorusInternalError;
    chorusStreamDestroy(s2);
    chorusEventDestroy(e);
    return chorusStreamDestroy(s);
  });
  for (auto x : rc) CHECK(x == chorusSuccess);
}

TEST_CASE("comm init per thread, blocking and non-blocking, and split", "[api][init]") {
  const int n = 4;
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  std::vector<chorusComm_t> comms(n);
  auto rc = onRanks(n, [&](int r) -> chorusResult_t {
    chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
    cfg.blocking = r % 2;  // half the ranks non-blocking
    chorusResult_t e = chorusCommInitRankConfig(&comms[r], n, id, r, &cfg);
    if (e == chorusInProgress) {
      chorusResult_t a = chorusInProgress;
      while (a == chorusInProgress) {
        chorusCommGetAsyncError(comms[r], &a);
        std::this_thread::yield();
      }
      e = a;
    }
    if (e != chorusSuccess) return e;
    // Split into evens and odds, reversed by key; rank 3 opts out.
    chorusComm_t sub = nullptr;
    const int color = r == 3 ? CHORUS_SPLIT_NOCOLOR : r % 2;
    e = chorusCommSplit(comms[r], color, -r, &sub, nullptr);
    if (e != chorusSuccess) return e;
    if (r == 3) return sub == nullptr ? chorusSuccess : chorusInternalError;
    int subRank = -1;
    int subSize = 0;
    chorusCommUserRank(sub, &subRank);
    chorusCommCount(sub, &subSize);
    const int wantSize = r % 2 == 0 ? 2 : 1;
    const int wantRank = r % 2 == 0 ? (r == 2 ? 0 : 1) : 0;
    if (subSize != wantSize || subRank != wantRank) return chorusInternalError;
    int32_t v = r;
    e = chorusAllReduce(&v, &v, 1, chorusInt32, chorusSum, sub, nullptr);
    if (e != chorusSuccess) return e;
    if (v != (r % 2 == 0 ? 2 : 1)) return chorusInternalError;
    chorusCommDestroy(sub);
    e = chorusCommFinalize(comms[r]);
    if (e != chorusSuccess) return e;
    // As NCCL: a second finalize is an invalid argument.
    return chorusCommFinalize(comms[r]) == chorusInvalidArgument ? chorusSuccess : chorusInternalError;
  });
  for (int r = 0; r < n; ++r) CHECK(rc[r] == chorusSuccess);
  for (auto c : comms) CHECK(chorusCommDestroy(c) == chorusSuccess);
}

// NCCL runs a split inside a group at ncclGroupEnd, so one thread may split the communicators of
// several ranks (its documented pattern for single-process multi-GPU code); Chorus split at once
// and the first rank's split waited for the others, on the same thread, until the timeout.
TEST_CASE("splits inside a group from one thread, and inits beside operations", "[api][init][group]") {
  const int n = 4;
  World w(n);
  REQUIRE(w.ok());
  std::vector<chorusComm_t> sub(n, nullptr);
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < n; ++r) {
    // Ranks 0 and 2 in one half, 1 in the other, 3 in none.
    const int color = r == 3 ? CHORUS_SPLIT_NOCOLOR : r % 2;
    REQUIRE(chorusCommSplit(w.comm(r), color, r, &sub[r], nullptr) == chorusSuccess);
    if (r == 3) CHECK(sub[r] == nullptr);
    if (r != 3) CHECK(sub[r] != nullptr);
  }
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  for (int r = 0; r < 3; ++r) {
    int count = 0;
    int rank = -1;
    REQUIRE(chorusCommCount(sub[r], &count) == chorusSuccess);
    REQUIRE(chorusCommUserRank(sub[r], &rank) == chorusSuccess);
    CHECK(count == (r % 2 == 0 ? 2 : 1));
    CHECK(rank == (r == 2 ? 1 : 0));
  }
  std::vector<int32_t> v{10, 20, 30};
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < 3; ++r) REQUIRE(chorusAllReduce(&v[r], &v[r], 1, chorusInt32, chorusSum, sub[r], nullptr) == 0);
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  CHECK(v[0] == 40);
  CHECK(v[1] == 20);
  CHECK(v[2] == 40);
  for (int r = 0; r < 3; ++r) CHECK(chorusCommDestroy(sub[r]) == chorusSuccess);

  // Inits and operations (on communicators made before the group) in one group: the inits run
  // first, then the operations, as in NCCL.
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  std::vector<chorusComm_t> fresh(2, nullptr);
  std::vector<double> d(n, 2.5);
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < 2; ++r) REQUIRE(chorusCommInitRank(&fresh[r], 2, id, r) == chorusSuccess);
  for (int r = 0; r < n; ++r)
    REQUIRE(chorusAllReduce(&d[r], &d[r], 1, chorusFloat64, chorusSum, w.comm(r), nullptr) == 0);
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  for (int r = 0; r < n; ++r) CHECK(d[r] == 10.0);
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < 2; ++r)
    REQUIRE(chorusAllReduce(&d[r], &d[r], 1, chorusFloat64, chorusSum, fresh[r], nullptr) == 0);
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  CHECK(d[0] == 20.0);
  CHECK(d[1] == 20.0);
  for (auto c : fresh) CHECK(chorusCommDestroy(c) == chorusSuccess);
}

// NCCL joins the CUDA streams of one communicator's ops in a group (cuda_coll_test checks that);
// host streams have nothing to join with, so that stays refused, with why.
TEST_CASE("one communicator's ops on two host streams in one group are refused", "[api][group]") {
  World w(1);
  REQUIRE(w.ok());
  chorusStream_t s1 = nullptr;
  chorusStream_t s2 = nullptr;
  REQUIRE(chorusStreamCreate(&s1) == chorusSuccess);
  REQUIRE(chorusStreamCreate(&s2) == chorusSuccess);
  float x = 1.0f;
  float y = 2.0f;
  REQUIRE(chorusGroupStart() == chorusSuccess);
  REQUIRE(chorusAllReduce(&x, &x, 1, chorusFloat32, chorusSum, w.comm(0), s1) == chorusSuccess);
  REQUIRE(chorusAllReduce(&y, &y, 1, chorusFloat32, chorusSum, w.comm(0), s2) == chorusSuccess);
  CHECK(chorusGroupEnd() == chorusInvalidUsage);
  INFO(chorusGetLastError(nullptr));
  CHECK(std::string(chorusGetLastError(nullptr)).find("unless all are CUDA streams") != std::string::npos);
  CHECK(chorusStreamDestroy(s1) == chorusSuccess);
  CHECK(chorusStreamDestroy(s2) == chorusSuccess);
}

TEST_CASE("inits inside a group from one thread", "[api][init][group]") {
  const int n = 3;
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  std::vector<chorusComm_t> comms(n);
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < n; ++r) REQUIRE(chorusCommInitRank(&comms[r], n, id, r) == chorusSuccess);
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  std::vector<double> v(n, 1.5);
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < n; ++r) chorusAllReduce(&v[r], &v[r], 1, chorusFloat64, chorusSum, comms[r], nullptr);
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  for (int r = 0; r < n; ++r) CHECK(v[r] == 4.5);
  for (auto c : comms) CHECK(chorusCommDestroy(c) == chorusSuccess);
}

TEST_CASE("abort frees a communicator without waiting on peers", "[api][abort]") {
  World w(2);
  REQUIRE(w.ok());
  // Rank 0 waits for a message rank 1 never sends; aborting rank 0 ends that wait. One exchange
  // first: the first send or receive between two ranks connects them both ways, and returns once
  // the peer has taken part (as NCCL's connection setup).
  std::vector<int> buf(10);
  REQUIRE(chorusGroupStart() == chorusSuccess);
  REQUIRE(chorusSend(buf.data(), 10, chorusInt32, 0, w.comm(1), nullptr) == chorusSuccess);
  REQUIRE(chorusRecv(buf.data(), 10, chorusInt32, 1, w.comm(0), nullptr) == chorusSuccess);
  REQUIRE(chorusGroupEnd() == chorusSuccess);
  chorusStream_t s;
  REQUIRE(chorusStreamCreate(&s) == chorusSuccess);
  REQUIRE(chorusRecv(buf.data(), 10, chorusInt32, 1, w.comm(0), s) == chorusSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(chorusStreamQuery(s) == chorusInProgress);
  chorusComm_t c0 = w.comm(0);
  const_cast<std::vector<chorusComm_t>&>(w.comms())[0] = nullptr;
  CHECK(chorusCommAbort(c0) == chorusSuccess);
  CHECK(chorusStreamSynchronize(s) == chorusRemoteError);
  chorusStreamDestroy(s);
}

TEST_CASE("abort ends a non-blocking init in progress at once", "[api][abort]") {
  // Rank 0 of two starts a non-blocking init; rank 1 never comes. Aborting rank 0 ends the
  // init's wait for rank 1, not its 60 s timeout.
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.timeoutSeconds = 60;  // the init's too, unless CHORUS_INIT_TIMEOUT says otherwise
  chorusComm_t c = nullptr;
  REQUIRE(chorusCommInitRankConfig(&c, 2, id, 0, &cfg) == chorusInProgress);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  chorusResult_t state = chorusSuccess;
  CHECK(chorusCommGetAsyncError(c, &state) == chorusSuccess);
  CHECK(state == chorusInProgress);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(chorusCommAbort(c) == chorusSuccess);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}

TEST_CASE("memory from chorusMemAlloc works in collectives", "[api][mem]") {
  World w(2);
  REQUIRE(w.ok());
  void* p[2];
  for (auto& x : p) REQUIRE(chorusMemAlloc(&x, 1 << 20) == chorusSuccess);
  auto rc = onRanks(2, [&](int r) -> chorusResult_t {
    auto* f = static_cast<float*>(p[r]);
    for (int i = 0; i < (1 << 18); ++i) f[i] = 1.0f;
    return chorusAllReduce(f, f, 1 << 18, chorusFloat32, chorusSum, w.comm(r), nullptr);
  });
  CHECK(rc[0] == chorusSuccess);
  CHECK(static_cast<float*>(p[1])[12345] == 2.0f);
  for (auto x : p) CHECK(chorusMemFree(x) == chorusSuccess);
  int local = 0;
  CHECK(chorusMemFree(&local) == chorusInvalidArgument);
}

TEST_CASE("a timeout names the peer that did not answer", "[api][timeout]") {
  // A 2 s timeout. First both ranks run a collective (connections exist); then only rank 0 calls
  // one: it fails, naming rank 1 and what each channel was doing. Joining gets a minute of its own:
  // on a loaded machine, two ranks' start may take longer than the timeout under test.
  setenv("CHORUS_TIMEOUT", "2", 1);
  setenv("CHORUS_INIT_TIMEOUT", "60", 1);
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  std::vector<chorusComm_t> c(2);
  auto rc = onRanks(2, [&](int r) { return chorusCommInitRank(&c[r], 2, id, r); });
  unsetenv("CHORUS_TIMEOUT");
  unsetenv("CHORUS_INIT_TIMEOUT");
  REQUIRE(rc[0] == chorusSuccess);
  REQUIRE(rc[1] == chorusSuccess);
  std::vector<float> x(2, 1.0f);
  rc = onRanks(2, [&](int r) { return chorusAllReduce(&x[r], &x[r], 1, chorusFloat32, chorusSum, c[r], nullptr); });
  REQUIRE(rc[0] == chorusSuccess);
  CHECK(x[0] == 2.0f);
  CHECK(chorusAllReduce(&x[0], &x[0], 1, chorusFloat32, chorusSum, c[0], nullptr) == chorusSystemError);
  const std::string msg = chorusGetLastError(c[0]);
  CHECK(msg.find("rank 1") != std::string::npos);
  CHECK(msg.find("channel 0: operation #2") != std::string::npos);
  chorusResult_t async;
  CHECK(chorusCommGetAsyncError(c[0], &async) == chorusSuccess);
  CHECK(async == chorusSystemError);
  // The communicator is broken now: later calls fail at once with the same story.
  CHECK(chorusAllReduce(&x[0], &x[0], 1, chorusFloat32, chorusSum, c[0], nullptr) == chorusSystemError);
  CHECK(chorusCommAbort(c[0]) == chorusSuccess);
  CHECK(chorusCommDestroy(c[1]) == chorusSuccess);
}

namespace {

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Sends this thread's process's stderr to a file while alive (the log's sink writes to fd 2).
class StderrToFile {
 public:
  explicit StderrToFile(const std::string& path) : path_(path) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrToFile() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
  }

 private:
  std::string path_;
  int saved_;
};

}  // namespace

TEST_CASE("a hang is explained: stall warning, flight recorder dumps on request, signal and failure",
          "[api][timeout][flight]") {
  char dir[] = "/tmp/chorus-flight-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string prefix = std::string(dir) + "/fr";
  setenv("CHORUS_TIMEOUT", "3", 1);
  setenv("CHORUS_INIT_TIMEOUT", "60", 1);  // joining is not what this test times
  setenv("CHORUS_WARN_AFTER_MS", "300", 1);
  setenv("CHORUS_FLIGHT_DUMP", prefix.c_str(), 1);
  setenv("CHORUS_FLIGHT_TRACE", "1", 1);
  // SIGUSR1 blocked in this thread and so in every thread it starts, the ranks' included, as
  // launchers and programs often leave it: the dump must still come on `kill -USR1 PID`.
  sigset_t usr1, savedMask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &usr1, &savedMask) == 0);
  chorusUniqueId id;
  REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  std::vector<chorusComm_t> c(2);
  auto rc = onRanks(2, [&](int r) {
    chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
    config.commName = "hang";
    return chorusCommInitRankConfig(&c[r], 2, id, r, &config);
  });
  for (const char* v :
       {"CHORUS_TIMEOUT", "CHORUS_INIT_TIMEOUT", "CHORUS_WARN_AFTER_MS", "CHORUS_FLIGHT_DUMP", "CHORUS_FLIGHT_TRACE"}) {
    unsetenv(v);
  }
  REQUIRE(rc[0] == chorusSuccess);
  REQUIRE(rc[1] == chorusSuccess);

  // Three operations both ranks run (collectives share one sequence), then an all-reduce only rank 0 calls, on a
  // stream.
  std::vector<std::vector<float>> x(2, std::vector<float>(1000, 1.0f));
  rc = onRanks(2, [&](int r) {
    chorusResult_t a = chorusAllReduce(x[r].data(), x[r].data(), 1000, chorusFloat32, chorusSum, c[r], nullptr);
    chorusResult_t b = chorusBroadcast(x[r].data(), x[r].data(), 10, chorusFloat32, 1, c[r], nullptr);
    chorusResult_t g = chorusAllGather(x[r].data(), x[r].data() + 100, 5, chorusFloat32, c[r], nullptr);
    return a != chorusSuccess ? a : b != chorusSuccess ? b : g;
  });
  REQUIRE(rc[0] == chorusSuccess);
  REQUIRE(rc[1] == chorusSuccess);
  chorusStream_t s;
  REQUIRE(chorusStreamCreate(&s) == chorusSuccess);
  const std::string logPath = std::string(dir) + "/stderr";
  const std::string asked = std::string(dir) + "/asked.txt";
  chorusResult_t hung;
  {
    StderrToFile redirect(logPath);
    REQUIRE(chorusAllReduce(x[0].data(), x[0].data(), 1000, chorusFloat32, chorusMax, c[0], s) == chorusSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    // On request, from another thread while the operation hangs.
    CHECK(chorusCommDumpState(c[0], asked.c_str()) == chorusSuccess);
    // On a signal to the process (CHORUS_FLIGHT_SIGNAL, SIGUSR1 by default).
    ::kill(::getpid(), SIGUSR1);
    for (int i = 0; i < 100 && readFile(prefix + ".hang.0.txt").find("== signal") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    hung = chorusStreamSynchronize(s);
  }
  CHECK(hung == chorusSystemError);
  const std::string log = readFile(logPath);
  INFO(log);
  // The warning, before the timeout: the collective, its sequence number, the step, the peer.
  CHECK(log.find("AllReduce #4 (count 1000 float32, algo") != std::string::npos);
  CHECK(log.find("has made no progress for ") != std::string::npos);
  CHECK(log.find("data from rank 1 (host") != std::string::npos);
  CHECK(log.find("channel 0: operation #4 step") != std::string::npos);

  const std::string dump = readFile(asked);
  INFO(dump);
  CHECK(dump.find("Chorus communicator") != std::string::npos);
  CHECK(dump.find("(hang) rank 0 of 2") != std::string::npos);
  CHECK(dump.find("#1 AllReduce seq 1 count 1000 type 7 op 0 algo") != std::string::npos);
  CHECK(dump.find("#2 Broadcast seq 2 count 10 type 7 root 1 algo") != std::string::npos);
  CHECK(dump.find("#3 AllGather seq 3 count 5 type 7 algo") != std::string::npos);
  CHECK(dump.find("#4 AllReduce seq 4 count 1000 type 7 op 2 algo") != std::string::npos);
  // Only the last one runs; the three before it are done.
  const size_t running = dump.find("running for");
  CHECK(running != std::string::npos);
  CHECK(running > dump.find("#4 AllReduce"));
  CHECK(dump.find("running for", running + 1) == std::string::npos);

  const std::string auto_ = readFile(prefix + ".hang.0.txt");
  INFO(auto_);
  CHECK(auto_.find("== signal") != std::string::npos);
  CHECK(auto_.find("== failure: rank 0 waited") != std::string::npos);
  CHECK(auto_.find("failed in") != std::string::npos);
  CHECK(auto_.find("failed in") > auto_.find("#4 AllReduce"));

  // The Chrome trace: a JSON array with one complete ("X") event per operation.
  const nlohmann::json trace = nlohmann::json::parse(readFile(prefix + ".hang.0.json"));
  REQUIRE(trace.is_array());
  int spans = 0;
  for (const auto& e : trace) {
    if (e["ph"] == "X") {
      ++spans;
      CHECK(e["dur"].get<double>() >= 0);
    }
  }
  CHECK(spans == 4);
  CHECK(trace.back()["args"]["state"] == "failed");

  CHECK(chorusStreamDestroy(s) == chorusSuccess);
  CHECK(chorusCommAbort(c[0]) == chorusSuccess);
  CHECK(chorusCommDestroy(c[1]) == chorusSuccess);
  // Destroy writes the final trace of rank 1 too.
  CHECK(nlohmann::json::parse(readFile(prefix + ".hang.1.json")).size() == 5);
  REQUIRE(::pthread_sigmask(SIG_SETMASK, &savedMask, nullptr) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("NCCL 2.28's newer calls: scalable init, revoke, windows, simulated groups", "[api][nccl228]") {
  // Scalable init: every rank gets the same two ids; the first carries the bootstrap.
  std::vector<chorusUniqueId> ids(2);
  for (auto& id : ids) REQUIRE(chorusGetUniqueId(&id) == chorusSuccess);
  std::vector<chorusComm_t> comms(2, nullptr);
  const auto rc =
      onRanks(2, [&](int r) { return chorusCommInitRankScalable(&comms[r], 2, r, 2, ids.data(), nullptr); });
  REQUIRE(rc[0] == chorusSuccess);
  REQUIRE(rc[1] == chorusSuccess);
  chorusComm_t bad = nullptr;
  CHECK(chorusCommInitRankScalable(&bad, 2, 0, 0, ids.data(), nullptr) == chorusInvalidArgument);
  CHECK(hasMessage());
  CHECK(chorusCommInitRankScalable(&bad, 2, 0, 1, nullptr, nullptr) == chorusInvalidArgument);
  chorusUniqueId junk;
  std::memset(&junk, 0x5a, sizeof(junk));
  std::vector<chorusUniqueId> withJunk = {ids[0], junk};
  CHECK(chorusCommInitRankScalable(&bad, 2, 0, 2, withJunk.data(), nullptr) == chorusInvalidArgument);
  CHECK(bad == nullptr);

  // A simulated group runs nothing and estimates its time.
  std::vector<std::vector<float>> data(2, std::vector<float>(1 << 16, 1.0f));
  chorusSimInfo_t sim = CHORUS_SIM_INFO_INITIALIZER;
  REQUIRE(chorusGroupStart() == chorusSuccess);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(chorusAllReduce(data[r].data(), data[r].data(), data[r].size(), chorusFloat32, chorusSum, comms[r],
                            nullptr) == chorusSuccess);
  }
  REQUIRE(chorusGroupSimulateEnd(&sim) == chorusSuccess);
  CHECK(sim.estimatedTime > 0);
  for (int r = 0; r < 2; ++r) CHECK(data[r][12345] == 1.0f);  // not run
  chorusSimInfo_t unset;
  std::memset(&unset, 0, sizeof(unset));
  REQUIRE(chorusGroupStart() == chorusSuccess);
  CHECK(chorusGroupSimulateEnd(&unset) == chorusInvalidArgument);
  // Still open after the refused call, which failed the group as any failed call inside one does,
  // and the group returns that call's code.
  CHECK(chorusGroupEnd() == chorusInvalidArgument);
  CHECK(chorusGroupSimulateEnd(&sim) == chorusInvalidUsage);  // no group
  // A simulated group in which a call failed returns that call's code too, as NCCL's.
  REQUIRE(chorusGroupStart() == chorusSuccess);
  CHECK(chorusAllReduce(nullptr, data[0].data(), 4, chorusFloat32, chorusSum, comms[0], nullptr) ==
        chorusInvalidArgument);
  CHECK(chorusGroupSimulateEnd(&sim) == chorusInvalidArgument);
  // The communicators still work: the simulated group left nothing behind.
  const auto ran = onRanks(2, [&](int r) {
    return chorusAllReduce(data[r].data(), data[r].data(), data[r].size(), chorusFloat32, chorusSum, comms[r], nullptr);
  });
  REQUIRE(ran[0] == chorusSuccess);
  REQUIRE(ran[1] == chorusSuccess);
  CHECK(data[0][12345] == 2.0f);

  // Windows: a local registration by another name.
  chorusWindow_t win = nullptr;
  CHECK(chorusCommWindowRegister(comms[0], data[0].data(), 4096, nullptr, CHORUS_WIN_DEFAULT) == chorusInvalidArgument);
  CHECK(chorusCommWindowRegister(comms[0], data[0].data(), 4096, &win, 7) == chorusInvalidArgument);
  REQUIRE(chorusCommWindowRegister(comms[0], data[0].data(), 4096, &win, CHORUS_WIN_COLL_SYMMETRIC) == chorusSuccess);
  REQUIRE(win != nullptr);
  CHECK(chorusCommWindowDeregister(comms[0], win) == chorusSuccess);
  CHECK(chorusCommWindowDeregister(comms[0], win) == chorusInvalidArgument);  // twice

  // Revoke: bad flags refused; then operations are refused, the error says revoked, and the
  // communicator can still be shrunk and destroyed.
  CHECK(chorusCommRevoke(comms[0], 1) == chorusInvalidArgument);
  const auto revoked = onRanks(2, [&](int r) { return chorusCommRevoke(comms[r], CHORUS_REVOKE_DEFAULT); });
  REQUIRE(revoked[0] == chorusSuccess);
  REQUIRE(revoked[1] == chorusSuccess);
  chorusResult_t async = chorusSuccess;
  REQUIRE(chorusCommGetAsyncError(comms[0], &async) == chorusSuccess);
  CHECK(async == chorusRemoteError);
  CHECK(std::string(chorusGetLastError(comms[0])).find("revoked") != std::string::npos);
  CHECK(chorusAllReduce(data[0].data(), data[0].data(), 16, chorusFloat32, chorusSum, comms[0], nullptr) !=
        chorusSuccess);
  CHECK(std::string(chorusGetLastError(comms[0])).find("revoked") != std::string::npos);
  std::vector<chorusComm_t> shrunk(2, nullptr);
  int none = 0;
  const auto sh = onRanks(
      2, [&](int r) { return chorusCommShrink(comms[r], &none, 0, &shrunk[r], nullptr, CHORUS_SHRINK_DEFAULT); });
  REQUIRE(sh[0] == chorusSuccess);
  REQUIRE(sh[1] == chorusSuccess);
  const auto again = onRanks(2, [&](int r) {
    return chorusAllReduce(data[r].data(), data[r].data(), 16, chorusFloat32, chorusSum, shrunk[r], nullptr);
  });
  CHECK(again[0] == chorusSuccess);
  CHECK(again[1] == chorusSuccess);
  CHECK(data[1][3] == 4.0f);
  for (int r = 0; r < 2; ++r) {
    CHECK(chorusCommDestroy(shrunk[r]) == chorusSuccess);
    CHECK(chorusCommDestroy(comms[r]) == chorusSuccess);
  }
  // Where a pointer points: host memory is -1 (device memory needs a GPU: cuda_api_test).
  int device = 7;
  CHECK(chorusPointerGetDevice(data[0].data(), &device) == chorusSuccess);
  CHECK(device == -1);
  CHECK(chorusPointerGetDevice(data[0].data(), nullptr) == chorusInvalidArgument);
  chorusResetDebugInit();  // reopens the log where CHORUS_DEBUG_FILE says (here: stderr)
}

// A pre-multiplied sum's scalar is each rank's own: every algorithm must multiply a rank's input
// by that rank's scalar, including the slice all-reduce, which otherwise reads peers' inputs in
// place (threads of one process).
TEST_CASE("a pre-multiplied sum with a scalar per rank: every algorithm in place and not", "[api][redop]") {
  const int n = 3;
  const size_t count = 40000;  // 160 KB: past the sizes where slice offers its buffers
  for (const char* algo : {"", "ring", "direct", "tree", "slice"}) {
    if (*algo) setenv("CHORUS_ALGO", algo, 1);
    World w(n);
    unsetenv("CHORUS_ALGO");
    REQUIRE(w.ok());
    for (bool inPlace : {false, true}) {
      INFO("CHORUS_ALGO=" << algo << (inPlace ? " in place" : " out of place"));
      std::vector<std::vector<float>> in(n, std::vector<float>(count));
      std::vector<std::vector<float>> out(n, std::vector<float>(count, -1.0f));
      std::vector<float> scalar(n);
      std::vector<chorusRedOp_t> ops(n);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) in[r][i] = float(int((i * 7 + r * 3) % 11) - 5);
        if (inPlace) out[r] = in[r];
        scalar[r] = float(r + 1);
        REQUIRE(chorusRedOpCreatePreMulSum(&ops[r], &scalar[r], chorusFloat32, chorusScalarHostImmediate, w[r]) ==
                chorusSuccess);
      }
      REQUIRE(chorusGroupStart() == chorusSuccess);
      for (int r = 0; r < n; ++r) {
        REQUIRE(chorusAllReduce(inPlace ? out[r].data() : in[r].data(), out[r].data(), count, chorusFloat32, ops[r],
                                w[r], nullptr) == chorusSuccess);
      }
      REQUIRE(chorusGroupEnd() == chorusSuccess);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          float want = 0;  // small integers: exact in any order
          for (int q = 0; q < n; ++q) want += float(int((i * 7 + q * 3) % 11) - 5) * float(q + 1);
          if (out[r][i] != want) FAIL("rank " << r << " element " << i << ": " << out[r][i] << ", want " << want);
        }
        CHECK(chorusRedOpDestroy(ops[r], w[r]) == chorusSuccess);
      }
    }
  }
}
