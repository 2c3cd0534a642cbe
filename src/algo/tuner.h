// The tuner: which algorithm runs a collective, and with which protocol and channels on device
// memory, chosen from what every rank knows alike (the call, the settings, where the ranks are,
// the tuning table), so all ranks agree without talking. It takes the least of the registered
// algorithms' estimates (src/algo/cost.h; docs/topology.md, "The tuner"); it names no algorithm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/algo/algorithm.h"
#include "src/algo/coll.h"
#include "src/common/status.h"

namespace chorus {

// An all-reduce runs one of the registered algorithms (src/algo/algorithm.h); the other
// collectives on channels run the ring (chain for the rooted ones). On device memory any of them
// may be offered the one-copy algorithm beside that choice (Choice::ifAgreed).

// CHORUS_ONECOPY: where the one-copy collectives (device memory) may run. kByTable (unset): where
// the estimate is the least, from the one-copy tuning-table row; kAlways (1, or
// CHORUS_ALGO=one-copy): every device collective on channels it can run; kNever (0).
enum class OneCopyMode : unsigned char { kByTable, kAlways, kNever };

// What the tuner decides from.
struct TunerFacts {
  int nranks = 1;
  bool singleHost = true;                // every rank on one host
  bool oneProcess = false;               // every rank a thread of one process
  size_t directMaxBytesSetting = 65536;  // CHORUS_DIRECT_MAX_BYTES
  std::optional<Algo> forced;            // CHORUS_ALGO
  std::optional<ProtoKind> forcedProto;  // CHORUS_PROTO (device lanes)
  // LL may run on device lanes: no device connection goes through a socket proxy, which moves
  // whole slots behind the tail and never lines.
  bool deviceLL = true;
  // LL128 is safe on device lanes (every FIFO in the memory of the one GPU every rank runs on),
  // and may be chosen there by estimate (CHORUS_LL128 too). CHORUS_PROTO=ll128 forces it where it
  // is safe; elsewhere LL runs instead.
  bool deviceLL128Safe = false;
  bool deviceLL128 = false;
  // The most channels a device collective runs (deviceChannelLimit): every rank has the same.
  int deviceChannels = 1;
  OneCopyMode oneCopy = OneCopyMode::kByTable;
  AllReduceModel model;
};

// Where a rank's kernels run, as its init record tells every rank: its GPU (UUID) and that GPU's
// multiprocessors (0: no GPU bound).
struct GpuSeat {
  uint64_t uuid[2] = {0, 0};
  int sms = 0;
};

// The most channels (blocks) a device collective of this communicator runs, the same on every
// rank: on each GPU, half of its multiprocessors shared among the ranks that run on it, the
// fewest over the GPUs, at most kMaxDeviceChannels and at most CHORUS_DEVICE_NCHANNELS when set
// (`setting`, 0 unset). A rank's blocks wait on its peers' blocks, so every rank's blocks must be
// resident together: ranks sharing a GPU split it, and the other half leaves room for the
// program's own kernels; a setting can lower the count, never raise it past that. Between hosts
// a channel's FIFOs cross a socket proxy, which gains nothing from more than kNetDeviceChannels.
// No GPU known on any rank: 1.
constexpr int kMaxDeviceChannels = 32;  // device::DeviceCommState::kMaxChannels
constexpr int kNetDeviceChannels = 4;
int deviceChannelLimit(int setting, const std::vector<GpuSeat>& seats, bool singleHost);

// CHORUS_PROTO's value (lower case): none, "simple", "ll" or "ll128".
Result<std::optional<ProtoKind>> parseProtoSetting(const std::string& value);

class Tuner {
 public:
  // Direct all-reduce costs a connection per peer pair; past this many ranks the ring's 2(n-1)
  // steps are cheaper than n-1 sends of the whole buffer from every rank anyway.
  static constexpr int kDirectMaxRanks = 8;

  Tuner() = default;
  explicit Tuner(const TunerFacts& facts);

  struct Choice {
    Algo algo = kDefaultAlgo;
    // The protocol of device lanes (host lanes run their algorithm's own).
    ProtoKind proto = ProtoKind::kSimple;
    // An algorithm a rank whose buffers are registered runs in place of `algo` on its own
    // (Algorithm::Taken::kAlone); it then checks that its neighbours did the same.
    std::optional<Algo> alone;
    // An algorithm every rank runs in place of `algo` where their records agree at enqueue
    // (Algorithm::Taken::kIfAgreed; OneCopyExchange::exchange); its connections are `algo`'s.
    std::optional<Algo> ifAgreed;
    // The algorithms (a bit each) whose connections a call needs, whichever of them runs, so that
    // every rank connects alike.
    uint32_t connections() const { return algoBit(algo) | (alone ? algoBit(*alone) : 0u); }
  };
  // The algorithm (and on device memory the protocol) of a collective of `bytes` (one rank's
  // message) on channels (runsOnChannels(coll)): the least estimate over every registered
  // algorithm that runs it on that memory and every protocol the memory allows, each estimate
  // from its tuning-table row (src/algo/cost.h); an algorithm with no row is taken only when
  // forced. CHORUS_ALGO forces the all-reduce's algorithm on the memory it runs on (elsewhere the
  // tuner chooses), CHORUS_PROTO the device protocol. An algorithm taken where the ranks agree
  // (the one-copy collectives) is offered beside the choice (Choice::ifAgreed), as
  // TunerFacts::oneCopy says. Host collectives are
  // looked up in segments computed once per collective (hostSegments: the all-reduce's).
  Choice choose(CollType coll, size_t bytes, MemKind mem = MemKind::kHost) const;
  // The chosen algorithm's estimate for the call (0 with one rank; kNever for a forced algorithm
  // past its means, such as the direct all-reduce past its setting).
  double estimateUs(CollType coll, size_t bytes, MemKind mem = MemKind::kHost) const;

  // A point-to-point device lane's protocol (a send's or a receive's bytes): LL up to
  // kP2pLLMaxBytes (NCCL's point-to-point threshold; not yet measured), Simple beyond, or
  // CHORUS_PROTO's; Simple wherever LL cannot run (TunerFacts::deviceLL). Each end decides from
  // its own size, so a receive of another size (the program's error) may run the other protocol;
  // the kernels fail it as a mismatch all the same (src/device/lane_protocols.h).
  static constexpr size_t kP2pLLMaxBytes = 16 * 1024;
  ProtoKind p2pProto(size_t bytes) const;
  // The channels a point-to-point device transfer of `bytes` is cut over (device::p2pSlice): one per
  // kP2pChannelBytes, up to p2pChannelMax(). One block moves one part through its own FIFO (one
  // block per peer and direction reached 6 GB/s on an H200 whatever the size); both ends cut
  // alike, from the same bytes.
  static constexpr size_t kP2pChannelBytes = 128 * 1024;
  int p2pChannels(size_t bytes) const;
  // The most: an all-to-all's blocks (a send and a receive per peer and channel) within the
  // device channel limit (TunerFacts::deviceChannels, the blocks a rank's launch may keep
  // resident beside its peers'), up to kMaxP2pChannels; at least 1. The same on every rank: a
  // rank connects that many channels with a peer at its first device transfer with it.
  int p2pChannelMax() const;

  // The channels a device collective of `bytes` (one rank's message) runs, from 1 up to
  // TunerFacts::deviceChannels: a channel is one block, and a block takes at least a whole pass
  // of its threads (kLaunchThreads, each moving kMoveUnroll 16-byte vectors under Simple, one
  // 8-byte word under LL, and under LL128 16 bytes of a 128-byte line, 15 KiB of data a pass),
  // as NCCL cuts its channels for small messages. Ranks agree: the bytes are the same on every
  // rank for every collective.
  static constexpr size_t kSimpleChannelBytes = 32 * 1024;
  static constexpr size_t kLLChannelBytes = 4 * 1024;
  static constexpr size_t kLL128ChannelBytes = 16 * 1024;
  int deviceChannels(size_t bytes, ProtoKind proto) const;
  int deviceChannelMax() const { return f_.deviceChannels; }
  // Whether any device collective may be offered algorithm `a` (Algorithm::Taken::kIfAgreed: the
  // one-copy collectives) where the ranks agree: the setting, one host, its ranks, and under
  // kByTable its row.
  bool mayOfferIfAgreed(Algo a) const;

  // The host all-reduce's choice by size: segment i holds sizes up to maxBytes (inclusive) past
  // the previous one's; the last reaches SIZE_MAX.
  struct Segment {
    size_t maxBytes = 0;
    Choice choice;
  };
  const std::vector<Segment>& hostSegments() const { return hostSegments_[static_cast<int>(CollType::kAllReduce)]; }
  // "direct up to 21845 B, ring (or slice where registered) beyond", for the log.
  std::string describeHostAllReduce() const;
  // The largest host all-reduce (bytes) algorithm `a` takes unforced (not on its own, as the slice
  // where registered); 0 when it never does, SIZE_MAX when it takes every size past some.
  size_t lastBytesOf(Algo a) const;
  std::optional<Algo> forced() const { return f_.forced; }
  const AllReduceModel& model() const { return f_.model; }

 private:
  Choice compute(CollType coll, size_t bytes, MemKind mem, double* us = nullptr) const;

  // The protocols `mem` allows this communicator, in the order tried.
  struct Protos {
    ProtoKind p[3];
    int n = 0;
  };
  Protos protosOn(MemKind mem) const;
  // CHORUS_PROTO's protocol where LL may run: LL in place of LL128 where that is not safe.
  ProtoKind forcedDeviceProto() const;

  TunerFacts f_;
  size_t directCap_ = 0;                 // CHORUS_DIRECT_MAX_BYTES over n - 1 (halved across hosts)
  static constexpr int kAlgoSlots = 32;  // algorithm.cc's bound on the registry
  // Every host collective on channels by size (CollType's first kChannelColls values are those).
  std::vector<Segment> hostSegments_[kChannelColls];
  // The registry, looked up once: calls ask no function for an algorithm.
  const Algorithm* algos_[kAlgoSlots] = {};
  int nalgos_ = 0;
  // Each algorithm's table row for this rank count, looked up once (no row: not set), by memory
  // kind, algorithm and protocol (Simple, LL, LL128: protoSlot): calls read them without
  // searching the table.
  std::optional<TuningRow> rows_[2][kAlgoSlots][3];
  static int protoSlot(ProtoKind p) { return p == ProtoKind::kLL ? 1 : p == ProtoKind::kLL128 ? 2 : 0; }
};

}  // namespace chorus
