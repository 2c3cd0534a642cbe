// The tuner's choices (src/algo/tuner.h): forced settings, the direct sizes on one host and
// across hosts, the cost model's tree crossing, and the slice all-reduce on one process or left
// to each rank's registered buffers.
#include <catch2/catch.hpp>

#include "src/algo/tuner.h"

using namespace chorus;

namespace {

TunerFacts oneHost(int n) {
  TunerFacts f;
  f.nranks = n;
  f.singleHost = true;
  f.oneProcess = false;
  f.directMaxBytesSetting = 65536;
  return f;
}

}  // namespace

TEST_CASE("CHORUS_ALGO forces the all-reduce algorithm and nothing else", "[tuner]") {
  for (Algo a : {Algo::kRing, Algo::kDirect, Algo::kTree, Algo::kSlice}) {
    TunerFacts f = oneHost(4);
    f.forced = a;
    const Tuner t(f);
    for (size_t bytes : {size_t(8), size_t(1) << 20}) {
      const Tuner::Choice c = t.choose(CollType::kAllReduce, bytes);
      CHECK(c.algo == a);
      CHECK_FALSE(c.sliceIfRegistered);
      CHECK(c.sliceConnections == (a == Algo::kSlice));
      CHECK(c.ringConnections == (a == Algo::kRing));
    }
    for (CollType other : {CollType::kBroadcast, CollType::kReduce, CollType::kAllGather, CollType::kReduceScatter}) {
      CHECK(t.choose(other, 8).algo == Algo::kRing);
    }
  }
  auto bad = parseAlgoSetting("nvls");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("CHORUS_ALGO=nvls is not an algorithm") != std::string::npos);
}

TEST_CASE("unforced: direct up to its share of CHORUS_DIRECT_MAX_BYTES, halved across hosts", "[tuner]") {
  const Tuner t(oneHost(4));
  CHECK(t.directMaxBytes() == 65536 / 3);
  CHECK(t.choose(CollType::kAllReduce, 65536 / 3).algo == Algo::kDirect);
  CHECK_FALSE(t.choose(CollType::kAllReduce, 65536 / 3).ringConnections);
  CHECK(t.choose(CollType::kAllReduce, 65536 / 3 + 1).algo == Algo::kRing);
  TunerFacts across = oneHost(4);
  across.singleHost = false;
  CHECK(Tuner(across).directMaxBytes() == 32768 / 3);
  TunerFacts many = oneHost(Tuner::kDirectMaxRanks + 1);
  CHECK(Tuner(many).directMaxBytes() == 0);
  CHECK(Tuner(oneHost(1)).choose(CollType::kAllReduce, 8).algo == Algo::kRing);
}

TEST_CASE("unforced: the tree between the direct sizes and the model's crossing", "[tuner]") {
  TunerFacts f = oneHost(4);
  f.singleHost = false;
  // Ring latency 100 us, tree 40 us, 1 GB/s: the lines cross at 60 us * 4 * 1e3 / 2 = 120000 B.
  f.model = AllReduceModel{4, 100, 40, 1};
  const Tuner t(f);
  CHECK(t.treeMaxBytes() == 120000);
  CHECK(t.choose(CollType::kAllReduce, 8).algo == Algo::kDirect);
  CHECK(t.choose(CollType::kAllReduce, 60000).algo == Algo::kTree);
  CHECK(t.choose(CollType::kAllReduce, 120000).algo == Algo::kTree);
  CHECK(t.choose(CollType::kAllReduce, 120001).algo == Algo::kRing);
  CHECK(ringAllReduceUs(f.model, 120000) == Approx(treeAllReduceUs(f.model, 120000)));
}

TEST_CASE("unforced: the slice all-reduce on one host, by agreement or by registration", "[tuner]") {
  const size_t big = size_t(1) << 20;
  TunerFacts threads = oneHost(4);
  threads.oneProcess = true;
  const Tuner::Choice agreed = Tuner(threads).choose(CollType::kAllReduce, big);
  CHECK(agreed.algo == Algo::kSlice);
  CHECK(agreed.sliceConnections);
  CHECK_FALSE(agreed.ringConnections);
  const Tuner::Choice own = Tuner(oneHost(4)).choose(CollType::kAllReduce, big);
  CHECK(own.algo == Algo::kRing);
  CHECK(own.sliceIfRegistered);
  CHECK(own.sliceConnections);
  CHECK(own.ringConnections);
  // Below its minimum, or across hosts, the slice all-reduce is not considered.
  const Tuner::Choice small = Tuner(threads).choose(CollType::kAllReduce, Tuner::kSliceMinBytes - 4);
  CHECK(small.algo == Algo::kRing);
  CHECK_FALSE(small.sliceConnections);
  TunerFacts across = oneHost(4);
  across.singleHost = false;
  CHECK_FALSE(Tuner(across).choose(CollType::kAllReduce, big).sliceConnections);
}

TEST_CASE("device lanes: LL up to its sizes, Simple beyond, and CHORUS_PROTO forces either", "[tuner]") {
  const Tuner t(oneHost(4));
  CHECK(t.deviceProto(8, false) == ProtoKind::kLL);
  CHECK(t.deviceProto(Tuner::kLLMaxBytes, false) == ProtoKind::kLL);
  CHECK(t.deviceProto(Tuner::kLLMaxBytes + 1, false) == ProtoKind::kSimple);
  CHECK(t.deviceProto(Tuner::kP2pLLMaxBytes, true) == ProtoKind::kLL);
  CHECK(t.deviceProto(Tuner::kP2pLLMaxBytes + 1, true) == ProtoKind::kSimple);
  for (const char* name : {"simple", "ll"}) {
    auto parsed = parseProtoSetting(name);
    REQUIRE(parsed.isOk());
    REQUIRE(parsed.value().has_value());
    TunerFacts f = oneHost(2);
    f.forcedProto = parsed.value();
    const Tuner forced(f);
    const ProtoKind want = std::string(name) == "ll" ? ProtoKind::kLL : ProtoKind::kSimple;
    for (size_t bytes : {size_t(8), size_t(1) << 26}) {
      CHECK(forced.deviceProto(bytes, false) == want);
      CHECK(forced.deviceProto(bytes, true) == want);
    }
  }
  auto unset = parseProtoSetting("");
  REQUIRE(unset.isOk());
  CHECK_FALSE(unset.value().has_value());
  auto bad = parseProtoSetting("ll128");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.status().message().find("simple, ll") != std::string::npos);
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
  CHECK(t.deviceChannels(Tuner::kLLMaxBytes, ProtoKind::kLL) == 16);
  CHECK(t.deviceChannels(Tuner::kSimpleChannelBytes, ProtoKind::kSimple) == 1);
  CHECK(t.deviceChannels(5 * Tuner::kSimpleChannelBytes + 1, ProtoKind::kSimple) == 5);
  CHECK(t.deviceChannels(size_t(1) << 30, ProtoKind::kSimple) == 16);
  // The default facts (no GPU): one channel at every size.
  CHECK(Tuner(oneHost(2)).deviceChannels(size_t(1) << 30, ProtoKind::kSimple) == 1);
}
