// The tuner's choices (src/algo/tuner.h): the least estimate over the tuning table's rows
// (src/algo/cost.h), checked against each algorithm's own estimate at every size tried; forced
// settings; the direct all-reduce's cap on one host and across hosts; the slice all-reduce on one
// process or left to each rank's registered buffers; the device protocol and channels.
#include <catch2/catch.hpp>
#include <random>

#include "src/algo/tuner.h"
#include "src/device/launch_pack.h"

using namespace chorus;

namespace {

// Whether a call of choice `c` needs algorithm `a`'s connections.
bool needs(const Tuner::Choice& c, Algo a) { return (c.connections() & algoBit(a)) != 0; }

TunerFacts oneHost(int n) {
  TunerFacts f;
  f.nranks = n;
  f.singleHost = true;
  f.oneProcess = false;
  f.directMaxBytesSetting = 65536;
  f.model = AllReduceModel{n, 2.0 * (n - 1), 2.0 * (n - 1), 16};
  return f;
}

// A table every algorithm has rows in, with made-up costs: each wins somewhere.
const std::vector<TuningRow> kRows = {
    {MemKind::kHost, "ring", ProtoKind::kSimple, 1.0, 1.0, 5.0, 0},
    {MemKind::kHost, "tree", ProtoKind::kSimple, 3.0, 0.5, 4.0, 0},
    {MemKind::kHost, "direct", ProtoKind::kSimple, 0.5, 0.0, 4.0, 0},
    {MemKind::kHost, "slice", ProtoKind::kSimple, 8.0, 0.0, 9.0, 0},
    {MemKind::kDevice, "ring", ProtoKind::kLL, 5.0, 0.5, 10.0, 60.0},
    {MemKind::kDevice, "ring", ProtoKind::kSimple, 8.0, 3.0, 40.0, 0},
    {MemKind::kDevice, "tree", ProtoKind::kLL, 5.0, 0.5, 5.0, 60.0},
    {MemKind::kDevice, "tree", ProtoKind::kSimple, 8.0, 4.0, 30.0, 0},
    {MemKind::kDevice, "direct", ProtoKind::kLL, 5.0, 0.5, 10.0, 60.0},
    {MemKind::kDevice, "direct", ProtoKind::kSimple, 8.0, 3.0, 40.0, 0},
};

// The least estimate over every algorithm and protocol, computed here from the algorithms alone.
struct Best {
  Algo algo = Algo::kRing;
  ProtoKind proto = ProtoKind::kSimple;
  double us = kNever;
};
Best bruteForce(const TunerFacts& f, const Tuner& t, CollType coll, size_t bytes, MemKind mem, bool withSlice = true) {
  Best best;
  const size_t cap = f.nranks >= 2 && f.nranks <= Tuner::kDirectMaxRanks
                         ? (f.singleHost ? f.directMaxBytesSetting : f.directMaxBytesSetting / 2) / (f.nranks - 1)
                         : 0;
  for (int i = 0; i < algorithmCount(); ++i) {
    const Algorithm& a = algorithm(static_cast<Algo>(i));
    if (!a.runs(coll) || !a.runsOn(mem) || f.nranks > a.maxRanks()) continue;
    if (!withSlice && static_cast<Algo>(i) == Algo::kSlice) continue;
    for (ProtoKind p : {ProtoKind::kSimple, ProtoKind::kLL}) {
      if (p == ProtoKind::kLL && (mem == MemKind::kHost || !f.deviceLL)) continue;
      const TuningRow* row = tuningRow(mem, a.name(), p, f.nranks);
      if (!row) continue;
      CostQuery q;
      q.coll = coll;
      q.bytes = static_cast<double>(bytes);
      q.nranks = f.nranks;
      q.mem = mem;
      q.proto = p;
      q.singleHost = f.singleHost;
      q.oneProcess = f.oneProcess;
      q.directMaxBytes = cap;
      q.model = f.model;
      q.row = *row;
      q.channels = mem == MemKind::kDevice ? t.deviceChannels(bytes, p) : 1;
      const double us = a.estimateUs(q);
      if (us < best.us) best = Best{static_cast<Algo>(i), p, us};
    }
  }
  return best;
}

}  // namespace

TEST_CASE("the least estimate wins, at every size, for every memory kind and rank count", "[tuner]") {
  ScopedTuningTable table(&kRows);
  std::mt19937_64 rng(7);
  for (int n : {2, 3, 4, 8, 9}) {
    for (bool oneProcess : {false, true}) {
      for (bool singleHost : {true, false}) {
        TunerFacts f = oneHost(n);
        f.oneProcess = oneProcess && singleHost;
        f.singleHost = singleHost;
        if (!singleHost) f.model = AllReduceModel{n, 20.0 * (n - 1), 10.0 * std::ceil(std::log2(n)), 1.25};
        f.deviceChannels = 16;
        const Tuner t(f);
        // The host all-reduce's segments cover every size, in order.
        size_t from = 0;
        for (const Tuner::Segment& s : t.hostSegments()) {
          CHECK(s.maxBytes >= from);
          from = s.maxBytes == SIZE_MAX ? SIZE_MAX : s.maxBytes + 1;
        }
        CHECK(t.hostSegments().back().maxBytes == SIZE_MAX);
        std::vector<size_t> sizes;
        for (size_t b = 1; b < (size_t(1) << 32); b *= 2) sizes.insert(sizes.end(), {b - 1, b, b + 1});
        for (int k = 0; k < 200; ++k) sizes.push_back(rng() % (size_t(1) << 28));
        for (const Tuner::Segment& s : t.hostSegments()) {
          if (s.maxBytes != SIZE_MAX) sizes.insert(sizes.end(), {s.maxBytes, s.maxBytes + 1});
        }
        for (size_t bytes : sizes) {
          for (MemKind mem : {MemKind::kHost, MemKind::kDevice}) {
            for (CollType coll : {CollType::kAllReduce, CollType::kAllGather, CollType::kBroadcast, CollType::kReduce,
                                  CollType::kReduceScatter}) {
              INFO("ranks " << n << (f.oneProcess ? " threads" : " processes") << (singleHost ? " one host" : " hosts")
                            << " " << memKindName(mem) << " " << collName(coll) << " " << bytes << " B");
              Best want = bruteForce(f, t, coll, bytes, mem);
              const Tuner::Choice c = t.choose(coll, bytes, mem);
              if (want.algo == Algo::kSlice && !f.oneProcess) {
                // Between processes: the best of the rest, and where that is the ring, the slice
                // all-reduce where registered.
                want = bruteForce(f, t, coll, bytes, mem, false);
                CHECK(t.estimateUs(coll, bytes, mem) == Approx(want.us));
                CHECK(c.algo == want.algo);
                CHECK((c.alone == Algo::kSlice) == (want.algo == Algo::kRing));
                CHECK(needs(c, Algo::kSlice) == (want.algo == Algo::kRing));
                CHECK(needs(c, Algo::kRing) == (want.algo == Algo::kRing));
              } else {
                CHECK(t.estimateUs(coll, bytes, mem) == Approx(want.us));
                CHECK(c.algo == want.algo);
                CHECK_FALSE(c.alone);
                CHECK(needs(c, Algo::kSlice) == (want.algo == Algo::kSlice));
                CHECK(needs(c, Algo::kRing) == (want.algo == Algo::kRing));
              }
              if (mem == MemKind::kDevice) CHECK(c.proto == want.proto);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("the direct all-reduce: never past its share of CHORUS_DIRECT_MAX_BYTES, halved across hosts", "[tuner]") {
  // Direct costs nothing: it runs exactly up to its cap.
  std::vector<TuningRow> rows = kRows;
  for (TuningRow& r : rows) {
    if (std::string(r.algo) == "direct") r = TuningRow{r.mem, r.algo, r.proto, 0, 0, 0, 0};
  }
  ScopedTuningTable table(&rows);
  TunerFacts f = oneHost(4);
  f.model = AllReduceModel{4, 6, 6, 0};
  const Tuner t(f);
  CHECK(t.lastBytesOf(Algo::kDirect) == 65536 / 3);
  CHECK(t.choose(CollType::kAllReduce, 65536 / 3).algo == Algo::kDirect);
  CHECK_FALSE(needs(t.choose(CollType::kAllReduce, 65536 / 3), Algo::kRing));
  CHECK(t.choose(CollType::kAllReduce, 65536 / 3 + 1).algo != Algo::kDirect);
  CHECK(t.choose(CollType::kAllReduce, 65536 / 3, MemKind::kDevice).algo == Algo::kDirect);
  TunerFacts across = f;
  across.singleHost = false;
  CHECK(Tuner(across).lastBytesOf(Algo::kDirect) == 32768 / 3);
  TunerFacts many = oneHost(Tuner::kDirectMaxRanks + 1);
  CHECK(Tuner(many).lastBytesOf(Algo::kDirect) == 0);
  CHECK(Tuner(oneHost(1)).choose(CollType::kAllReduce, 8).algo == Algo::kRing);
  // "direct up to 21845 B, ..." in the log.
  CHECK(t.describeHostAllReduce().rfind("direct up to 21845 B, ", 0) == 0);
}

TEST_CASE("CHORUS_ALGO forces the all-reduce algorithm and nothing else", "[tuner]") {
  ScopedTuningTable table(&kRows);
  for (Algo a : {Algo::kRing, Algo::kDirect, Algo::kTree, Algo::kSlice}) {
    TunerFacts f = oneHost(4);
    f.forced = a;
    const Tuner t(f);
    for (size_t bytes : {size_t(8), size_t(1) << 20}) {
      const Tuner::Choice c = t.choose(CollType::kAllReduce, bytes);
      CHECK(c.algo == a);
      CHECK_FALSE(c.alone);
      CHECK(needs(c, Algo::kSlice) == (a == Algo::kSlice));
      CHECK(needs(c, Algo::kRing) == (a == Algo::kRing));
    }
    for (CollType other : {CollType::kBroadcast, CollType::kReduce, CollType::kAllGather, CollType::kReduceScatter}) {
      CHECK(t.choose(other, 8).algo == Algo::kRing);
    }
    CHECK(t.describeHostAllReduce() == std::string(algoName(a)) + " at every size");
  }
  auto bad = parseAlgoSetting("nvls");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("CHORUS_ALGO=nvls is not an algorithm") != std::string::npos);
}

TEST_CASE("an algorithm without a row runs only when forced; with no row at all, the ring", "[tuner]") {
  const std::vector<TuningRow> onlyRing = {{MemKind::kHost, "ring", ProtoKind::kSimple, 1, 1, 5, 0}};
  ScopedTuningTable table(&onlyRing);
  const Tuner t(oneHost(4));
  for (size_t bytes : {size_t(8), size_t(1) << 20}) {
    CHECK(t.choose(CollType::kAllReduce, bytes).algo == Algo::kRing);
    CHECK(t.choose(CollType::kAllReduce, bytes, MemKind::kDevice).algo == Algo::kRing);  // no device rows
  }
  CHECK(t.describeHostAllReduce() == "ring at every size");
  TunerFacts f = oneHost(4);
  f.forced = Algo::kTree;
  CHECK(Tuner(f).choose(CollType::kAllReduce, 8).algo == Algo::kTree);
}

TEST_CASE("the tuning table has a row for every algorithm on every memory it runs on, every protocol there",
          "[tuner]") {
  for (int i = 0; i < algorithmCount(); ++i) {
    const Algorithm& a = algorithm(static_cast<Algo>(i));
    INFO(a.name());
    // One-copy's blocks have no protocol: one row, measured on a GPU (docs/records/2026-11-29-gpu-runs.md, run 6).
    if (static_cast<Algo>(i) == Algo::kOneCopy) {
      CHECK(tuningRow(MemKind::kDevice, a.name(), ProtoKind::kSimple) != nullptr);
      continue;
    }
    if (a.runsOn(MemKind::kHost)) CHECK(tuningRow(MemKind::kHost, a.name(), ProtoKind::kSimple) != nullptr);
    if (a.runsOn(MemKind::kDevice)) {
      CHECK(tuningRow(MemKind::kDevice, a.name(), ProtoKind::kSimple) != nullptr);
      CHECK(tuningRow(MemKind::kDevice, a.name(), ProtoKind::kLL) != nullptr);
      CHECK(tuningRow(MemKind::kDevice, a.name(), ProtoKind::kLL128) != nullptr);
    }
  }
}

TEST_CASE("device protocols: CHORUS_PROTO forces any; Simple where LL cannot run; point-to-point by size", "[tuner]") {
  ScopedTuningTable table(&kRows);
  TunerFacts f = oneHost(2);
  f.deviceChannels = 16;
  const Tuner t(f);
  CHECK(t.choose(CollType::kAllReduce, 8, MemKind::kDevice).proto == ProtoKind::kLL);
  CHECK(t.choose(CollType::kAllReduce, size_t(1) << 28, MemKind::kDevice).proto == ProtoKind::kSimple);
  CHECK(t.p2pProto(Tuner::kP2pLLMaxBytes) == ProtoKind::kLL);
  CHECK(t.p2pProto(Tuner::kP2pLLMaxBytes + 1) == ProtoKind::kSimple);
  for (const char* name : {"simple", "ll", "ll128"}) {
    auto parsed = parseProtoSetting(name);
    REQUIRE(parsed.isOk());
    REQUIRE(parsed.value().has_value());
    TunerFacts g = f;
    g.forcedProto = parsed.value();
    g.deviceLL128Safe = true;
    const Tuner forced(g);
    const ProtoKind want = std::string(name) == "ll"      ? ProtoKind::kLL
                           : std::string(name) == "ll128" ? ProtoKind::kLL128
                                                          : ProtoKind::kSimple;
    for (size_t bytes : {size_t(8), size_t(1) << 26}) {
      CHECK(forced.choose(CollType::kAllReduce, bytes, MemKind::kDevice).proto == want);
      CHECK(forced.choose(CollType::kBroadcast, bytes, MemKind::kDevice).proto == want);
      CHECK(forced.p2pProto(bytes) == want);
    }
  }
  TunerFacts noLL = f;
  noLL.deviceLL = false;
  noLL.forcedProto = ProtoKind::kLL;
  const Tuner staged(noLL);
  CHECK(staged.choose(CollType::kAllReduce, 8, MemKind::kDevice).proto == ProtoKind::kSimple);
  CHECK(staged.p2pProto(8) == ProtoKind::kSimple);
  noLL.forcedProto = ProtoKind::kLL128;
  CHECK(Tuner(noLL).choose(CollType::kAllReduce, 1 << 20, MemKind::kDevice).proto == ProtoKind::kSimple);
  // Forced where it is not safe (FIFOs not all in one GPU's memory): LL, the nearest.
  TunerFacts unsafe = f;
  unsafe.forcedProto = ProtoKind::kLL128;
  const Tuner nearest(unsafe);
  CHECK(nearest.choose(CollType::kAllReduce, 1 << 20, MemKind::kDevice).proto == ProtoKind::kLL);
  CHECK(nearest.p2pProto(8) == ProtoKind::kLL);
  auto bad = parseProtoSetting("ll256");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("CHORUS_PROTO=ll256") != std::string::npos);
  CHECK(bad.status().message().find("ll128") != std::string::npos);
}

// LL128 is chosen only where CHORUS_LL128 allows it (TunerFacts::deviceLL128), and then by the
// least estimate over all three protocols: with the table's rows below, LL for the smallest,
// LL128 between, Simple for the largest, and never on host memory.
TEST_CASE("device protocols: LL128 only where allowed, then where its row gives the least estimate", "[tuner]") {
  std::vector<TuningRow> rows = kRows;
  rows.push_back({MemKind::kDevice, "ring", ProtoKind::kLL128, 6.0, 1.0, 36.0, 0});
  rows.push_back({MemKind::kDevice, "tree", ProtoKind::kLL128, 6.0, 1.0, 28.0, 0});
  rows.push_back({MemKind::kDevice, "direct", ProtoKind::kLL128, 6.0, 1.0, 36.0, 0});
  ScopedTuningTable table(&rows);
  TunerFacts f = oneHost(4);
  f.deviceChannels = 16;
  f.deviceLL128Safe = true;
  const Tuner off(f);
  f.deviceLL128 = true;
  const Tuner on(f);
  bool sawLL128 = false;
  for (size_t bytes = 8; bytes <= (size_t(1) << 30); bytes *= 2) {
    INFO("bytes " << bytes);
    CHECK(off.choose(CollType::kAllReduce, bytes, MemKind::kDevice).proto != ProtoKind::kLL128);
    CHECK(on.choose(CollType::kAllReduce, bytes, MemKind::kHost).proto == ProtoKind::kSimple);
    // The choice is the least estimate over every algorithm and all three protocols.
    double least = kNever;
    for (int i = 0; i < algorithmCount(); ++i) {
      const Algorithm& a = algorithm(static_cast<Algo>(i));
      if (static_cast<Algo>(i) == Algo::kOneCopy || !a.runsOn(MemKind::kDevice) || f.nranks > a.maxRanks()) continue;
      for (ProtoKind p : {ProtoKind::kSimple, ProtoKind::kLL, ProtoKind::kLL128}) {
        const TuningRow* row = tuningRow(MemKind::kDevice, a.name(), p, f.nranks);
        if (!row) continue;
        CostQuery q;
        q.coll = CollType::kAllReduce;
        q.bytes = static_cast<double>(bytes);
        q.nranks = f.nranks;
        q.mem = MemKind::kDevice;
        q.proto = p;
        q.singleHost = true;
        q.directMaxBytes = f.directMaxBytesSetting / (f.nranks - 1);
        q.model = f.model;
        q.row = *row;
        q.channels = on.deviceChannels(bytes, p);
        least = std::min(least, a.estimateUs(q));
      }
    }
    CHECK(on.estimateUs(CollType::kAllReduce, bytes, MemKind::kDevice) == Approx(least));
    sawLL128 = sawLL128 || on.choose(CollType::kAllReduce, bytes, MemKind::kDevice).proto == ProtoKind::kLL128;
  }
  CHECK(sawLL128);
  CHECK(on.choose(CollType::kAllReduce, 8, MemKind::kDevice).proto == ProtoKind::kLL);
  CHECK(on.choose(CollType::kAllReduce, size_t(1) << 30, MemKind::kDevice).proto == ProtoKind::kSimple);
  CHECK(on.deviceChannels(Tuner::kLL128ChannelBytes * 3, ProtoKind::kLL128) == 3);
}

TEST_CASE("the slice all-reduce: threads of one process take it, processes only where registered, hosts never",
          "[tuner]") {
  ScopedTuningTable table(&kRows);
  const size_t big = size_t(1) << 24;
  TunerFacts threads = oneHost(4);
  threads.oneProcess = true;
  const Tuner::Choice agreed = Tuner(threads).choose(CollType::kAllReduce, big);
  CHECK(agreed.algo == Algo::kSlice);
  CHECK(needs(agreed, Algo::kSlice));
  CHECK_FALSE(needs(agreed, Algo::kRing));
  const Tuner::Choice own = Tuner(oneHost(4)).choose(CollType::kAllReduce, big);
  CHECK(own.algo == Algo::kRing);
  CHECK(own.alone == Algo::kSlice);
  CHECK(needs(own, Algo::kSlice));
  CHECK(needs(own, Algo::kRing));
  TunerFacts across = oneHost(4);
  across.singleHost = false;
  CHECK_FALSE(needs(Tuner(across).choose(CollType::kAllReduce, big), Algo::kSlice));
  // Kernels never run it.
  CHECK(Tuner(threads).choose(CollType::kAllReduce, big, MemKind::kDevice).algo != Algo::kSlice);
}

TEST_CASE("device channels: half of each GPU's multiprocessors shared by its ranks, the fewest over the GPUs",
          "[tuner]") {
  auto seat = [](uint64_t gpu, int sms) {
    GpuSeat s;
    s.uuid[0] = gpu;
    s.uuid[1] = ~gpu;
    s.sms = sms;
    return s;
  };
  // One rank on an H100 (132 multiprocessors): 66, capped at the kernels' 32.
  CHECK(deviceChannelLimit(0, {seat(1, 132)}, true) == kMaxDeviceChannels);
  // Two, four and eight ranks on that GPU: 33, 16 and 8.
  CHECK(deviceChannelLimit(0, std::vector<GpuSeat>(2, seat(1, 132)), true) == 32);
  CHECK(deviceChannelLimit(0, std::vector<GpuSeat>(4, seat(1, 132)), true) == 16);
  CHECK(deviceChannelLimit(0, std::vector<GpuSeat>(8, seat(1, 132)), true) == 8);
  // Two GPUs, three ranks on the small one: its share decides for every rank.
  CHECK(deviceChannelLimit(0, {seat(1, 132), seat(2, 30), seat(2, 30), seat(2, 30)}, true) == 5);
  // More ranks than a GPU has pairs of multiprocessors: still one channel.
  CHECK(deviceChannelLimit(0, std::vector<GpuSeat>(40, seat(1, 16)), true) == 1);
  // A rank without a GPU (unknown) does not count; none known: 1.
  CHECK(deviceChannelLimit(0, {seat(1, 132), GpuSeat()}, true) == 32);
  CHECK(deviceChannelLimit(0, {GpuSeat(), GpuSeat()}, true) == 1);
  // Between hosts, a socket proxy carries each channel: at most kNetDeviceChannels.
  CHECK(deviceChannelLimit(0, {seat(1, 132), seat(2, 132)}, false) == kNetDeviceChannels);
  // CHORUS_DEVICE_NCHANNELS lowers the count, never raises it past what the GPUs allow.
  CHECK(deviceChannelLimit(3, {seat(1, 132)}, true) == 3);
  CHECK(deviceChannelLimit(32, std::vector<GpuSeat>(8, seat(1, 132)), true) == 8);
}

TEST_CASE("device channels per call: one block a pass of its threads, up to the communicator's most", "[tuner]") {
  TunerFacts f = oneHost(2);
  f.deviceChannels = 16;
  const Tuner t(f);
  CHECK(t.deviceChannelMax() == 16);
  CHECK(t.deviceChannels(8, ProtoKind::kLL) == 1);
  CHECK(t.deviceChannels(2 * Tuner::kLLChannelBytes - 1, ProtoKind::kLL) == 1);
  CHECK(t.deviceChannels(2 * Tuner::kLLChannelBytes, ProtoKind::kLL) == 2);
  CHECK(t.deviceChannels(64 * 1024, ProtoKind::kLL) == 16);
  CHECK(t.deviceChannels(Tuner::kSimpleChannelBytes, ProtoKind::kSimple) == 1);
  CHECK(t.deviceChannels(5 * Tuner::kSimpleChannelBytes + 1, ProtoKind::kSimple) == 5);
  CHECK(t.deviceChannels(size_t(1) << 30, ProtoKind::kSimple) == 16);
  // The default facts (no GPU): one channel at every size.
  CHECK(Tuner(oneHost(2)).deviceChannels(size_t(1) << 30, ProtoKind::kSimple) == 1);
}

TEST_CASE("device point-to-point channels: one per 128 KiB, an all-to-all's blocks within the channel limit",
          "[tuner]") {
  // 2 ranks, 32 device channels: a send and a receive per channel with the one peer, 8 at most.
  TunerFacts f = oneHost(2);
  f.deviceChannels = 32;
  const Tuner two(f);
  CHECK(two.p2pChannelMax() == kMaxP2pChannels);
  CHECK(two.p2pChannels(0) == 1);
  CHECK(two.p2pChannels(2 * Tuner::kP2pChannelBytes - 1) == 1);
  CHECK(two.p2pChannels(2 * Tuner::kP2pChannelBytes) == 2);
  CHECK(two.p2pChannels(size_t(1) << 30) == kMaxP2pChannels);
  // 4 ranks sharing one GPU (16 channels each): 3 peers both ways take 6 blocks a channel.
  f = oneHost(4);
  f.deviceChannels = 16;
  CHECK(Tuner(f).p2pChannelMax() == 2);
  CHECK(Tuner(f).p2pChannels(size_t(1) << 30) == 2);
  // 8 ranks with 8 channels each, and no GPU known (1 channel): never fewer than one.
  f = oneHost(8);
  f.deviceChannels = 8;
  CHECK(Tuner(f).p2pChannelMax() == 1);
  CHECK(Tuner(oneHost(2)).p2pChannels(size_t(1) << 30) == 1);
  CHECK(Tuner(oneHost(1)).p2pChannelMax() == 1);
  // The parts: 16-byte multiples but the last, covering the transfer once, none empty.
  for (size_t bytes : {size_t(0), size_t(1), size_t(256 * 1024), size_t(1 << 20) + 13, size_t(3 * 128 * 1024) + 17}) {
    for (int channels = 1; channels <= kMaxP2pChannels; ++channels) {
      if (channels > 1 && bytes < size_t(channels) * Tuner::kP2pChannelBytes) continue;  // never cut so
      size_t at = 0;
      for (int c = 0; c < channels; ++c) {
        const device::P2pSlice s = device::p2pSlice(bytes, channels, c);
        CHECK(s.offset == at);
        if (c + 1 < channels) CHECK(s.bytes % 16 == 0);
        if (bytes) CHECK(s.bytes > 0);
        at += s.bytes;
      }
      CHECK(at == bytes);
    }
  }
}

TEST_CASE("the one-copy collectives: offered beside the choice where the row wins, always, or never", "[tuner]") {
  // kRows and a one-copy row cheaper per byte and dearer per call than the ring's: it wins from
  // some size on.
  std::vector<TuningRow> rows = kRows;
  rows.push_back({MemKind::kDevice, "one-copy", ProtoKind::kSimple, 30.0, 0.0, 200.0, 0});
  ScopedTuningTable table(&rows);
  const size_t small = 8;
  const size_t big = size_t(256) << 20;
  for (int n : {2, 4, 8, 9}) {
    INFO(n << " ranks");
    TunerFacts f = oneHost(n);
    f.deviceChannels = 16;
    const Tuner t(f);
    // Without it: the same choice and estimate as a tuner never offering it.
    TunerFacts off = f;
    off.oneCopy = OneCopyMode::kNever;
    const Tuner never(off);
    CHECK(t.mayOfferIfAgreed(Algo::kOneCopy) == (n <= kOneCopyMaxRanks));
    CHECK_FALSE(never.mayOfferIfAgreed(Algo::kOneCopy));
    const CollType colls[] = {CollType::kAllReduce, CollType::kBroadcast, CollType::kReduce, CollType::kAllGather,
                              CollType::kReduceScatter};
    for (CollType coll : colls) {
      INFO(collName(coll));
      for (size_t bytes : {small, big}) {
        const Tuner::Choice c = t.choose(coll, bytes, MemKind::kDevice);
        const Tuner::Choice o = never.choose(coll, bytes, MemKind::kDevice);
        CHECK(c.algo == o.algo);  // what runs where the records disagree
        CHECK(c.proto == o.proto);
        CHECK_FALSE(o.ifAgreed.has_value());
        CHECK(c.algo != Algo::kOneCopy);
        // Its own estimate against the rest's.
        CostQuery q;
        q.coll = coll;
        q.bytes = static_cast<double>(bytes);
        q.nranks = n;
        q.mem = MemKind::kDevice;
        q.model = f.model;
        q.row = rows.back();
        const double mine = algorithm(Algo::kOneCopy).estimateUs(q);
        const double rest = never.estimateUs(coll, bytes, MemKind::kDevice);
        CHECK(mine < kNever);
        CHECK((c.ifAgreed == Algo::kOneCopy) == (n <= kOneCopyMaxRanks && mine < rest));
        CHECK(t.estimateUs(coll, bytes, MemKind::kDevice) == Approx(c.ifAgreed.has_value() ? mine : rest));
        // Never on host memory, nor for what runs point to point.
        CHECK_FALSE(t.choose(coll, bytes, MemKind::kHost).ifAgreed.has_value());
        CHECK_FALSE(t.choose(CollType::kAlltoAll, bytes, MemKind::kDevice).ifAgreed.has_value());
      }
      if (n <= kOneCopyMaxRanks) {
        CHECK_FALSE(t.choose(coll, small, MemKind::kDevice).ifAgreed.has_value());
        CHECK(t.choose(coll, big, MemKind::kDevice).ifAgreed == Algo::kOneCopy);
      }
    }
    // Per byte of the call, the all-gather and reduce-scatter move n - 1 blocks, the all-reduce
    // 2(n - 1)/n of the message, the broadcast (n - 1)/n and the reduce all of it.
    {
      CostQuery q;
      q.nranks = n;
      q.mem = MemKind::kDevice;
      q.model = f.model;
      q.row = rows.back();
      q.row.callUs = 0;
      q.bytes = double(size_t(1) << 30);
      auto moveUs = [&](CollType coll) {
        q.coll = coll;
        CostQuery none = q;
        none.bytes = 0;
        // The same blocks (oneCopyParts) for the sizes compared, so the rates are alike.
        return algorithm(Algo::kOneCopy).estimateUs(q) - algorithm(Algo::kOneCopy).estimateUs(none);
      };
      const double ar = moveUs(CollType::kAllReduce);
      CHECK(moveUs(CollType::kReduce) == Approx(ar * n / (2.0 * (n - 1))));
      CHECK(moveUs(CollType::kBroadcast) == Approx(ar / 2));
      // An all-gather of bytes/n a rank is the all-reduce's half.
      q.bytes /= n;
      CHECK(moveUs(CollType::kAllGather) * 2 == Approx(ar).epsilon(0.02));
      CHECK(moveUs(CollType::kReduceScatter) * 2 == Approx(ar).epsilon(0.02));
    }
    // CHORUS_ONECOPY=1, or CHORUS_ALGO=one-copy: every device all-reduce it can run; the host's
    // choice and the fallback stay the tuner's.
    for (bool byAlgo : {false, true}) {
      TunerFacts g = f;
      if (byAlgo) {
        g.forced = Algo::kOneCopy;
      } else {
        g.oneCopy = OneCopyMode::kAlways;
      }
      const Tuner always(g);
      for (size_t bytes : {small, big}) {
        for (CollType coll : colls) {
          const Tuner::Choice c = always.choose(coll, bytes, MemKind::kDevice);
          CHECK((c.ifAgreed == Algo::kOneCopy) == (n <= kOneCopyMaxRanks));
          CHECK(c.algo == never.choose(coll, bytes, MemKind::kDevice).algo);
        }
        CHECK_FALSE(always.choose(CollType::kAlltoAll, bytes, MemKind::kDevice).ifAgreed.has_value());
        CHECK(always.choose(CollType::kAllReduce, bytes, MemKind::kHost).algo ==
              never.choose(CollType::kAllReduce, bytes, MemKind::kHost).algo);
      }
    }
    // Across hosts, never.
    TunerFacts hosts = f;
    hosts.singleHost = false;
    hosts.oneCopy = OneCopyMode::kAlways;
    CHECK_FALSE(Tuner(hosts).choose(CollType::kAllReduce, big, MemKind::kDevice).ifAgreed.has_value());
    CHECK_FALSE(Tuner(hosts).mayOfferIfAgreed(Algo::kOneCopy));
  }
  {
    // By a table without a one-copy row: nothing to offer, no call asks.
    ScopedTuningTable none(&kRows);
    CHECK_FALSE(Tuner(oneHost(2)).mayOfferIfAgreed(Algo::kOneCopy));
    TunerFacts always = oneHost(2);
    always.oneCopy = OneCopyMode::kAlways;
    CHECK(Tuner(always).mayOfferIfAgreed(Algo::kOneCopy));
  }
}

TEST_CASE("a forced algorithm that does not run on the memory leaves the choice to the tuner", "[tuner]") {
  ScopedTuningTable table(&kRows);
  TunerFacts f = oneHost(4);
  f.deviceChannels = 16;
  TunerFacts forced = f;
  forced.forced = Algo::kSlice;  // host memory only
  for (size_t bytes : {size_t(8), size_t(1) << 20, size_t(256) << 20}) {
    CHECK(Tuner(forced).choose(CollType::kAllReduce, bytes, MemKind::kDevice).algo ==
          Tuner(f).choose(CollType::kAllReduce, bytes, MemKind::kDevice).algo);
    CHECK(Tuner(forced).choose(CollType::kAllReduce, bytes, MemKind::kHost).algo == Algo::kSlice);
  }
}
