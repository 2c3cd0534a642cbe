// The tuner: which algorithm runs a collective, chosen from what every rank knows alike (the
// call, the settings, where the ranks are), so all ranks agree without talking. It owns the
// all-reduce cost model (docs/topology.md, "The tuner"); the topology layer measures the model's
// inputs.
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
// collectives on channels run the ring (chain for the rooted ones).

// The all-reduce cost model: a schedule's time is its latency (the hops its data crosses one
// after another) plus the bytes the busiest rank sends over the slowest link. The ring takes
// 2(n-1) steps, and a step's data has crossed one ring hop, so its latency is 2(n-1)/n of a lap's
// hop latencies; each rank sends 2(n-1)/n of the message. The double tree goes up and down the
// deeper tree (latency twice its deepest path); a rank inner in one tree is a leaf of the other
// and sends twice the message in all.
struct AllReduceModel {
  int nranks = 0;
  double ringLatencyUs = 0;
  double treeLatencyUs = 0;
  double bwGBs = 0;  // the slowest hop's bandwidth, which both schedules cross
};
double ringAllReduceUs(const AllReduceModel& m, double bytes);
double treeAllReduceUs(const AllReduceModel& m, double bytes);
// The largest message the tree is estimated faster for (the two lines cross there); 0 if never.
size_t treeMaxBytes(const AllReduceModel& m);

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
  // The most channels a device collective runs (deviceChannelLimit): every rank has the same.
  int deviceChannels = 1;
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

// CHORUS_PROTO's value (lower case): none, "simple" or "ll".
Result<std::optional<ProtoKind>> parseProtoSetting(const std::string& value);

class Tuner {
 public:
  // Direct all-reduce costs a connection per peer pair; past this many ranks the ring's 2(n-1)
  // steps are cheaper than n-1 sends of the whole buffer from every rank anyway.
  static constexpr int kDirectMaxRanks = 8;
  // Below this the slice all-reduce's three exchanges (descriptors, results, done) cost more than
  // the ring's copies save (docs/PERFORMANCE.md).
  static constexpr size_t kSliceMinBytes = 128 * 1024;

  Tuner() = default;
  explicit Tuner(const TunerFacts& facts);

  struct Choice {
    Algo algo = Algo::kRing;
    // Ring chosen, but a rank whose buffers are registered between processes may run the slice
    // all-reduce instead (it then checks that its neighbours did the same).
    bool sliceIfRegistered = false;
    // The slice all-reduce is possible for this call (forced, or eligible): its connections are
    // made whichever algorithm runs, so every rank connects alike.
    bool sliceConnections = false;
    // The ring's connections are needed: it runs, or a rank may run the slice all-reduce on its
    // own (its hello to the next rank goes over the ring).
    bool ringConnections = true;
  };
  // The algorithm of a collective of `bytes` on channels (runsOnChannels(coll)).
  Choice choose(CollType coll, size_t bytes) const;

  // Device lanes (kernels) run LL up to these sizes, Simple beyond. LL stores 16 bytes for every
  // 8 it carries and its slots hold 8 KiB, so it loses on bandwidth; it wins on latency, since a
  // piece is ready when its lines are, with no fence and no counter round trip before the data.
  // A collective's bytes are one rank's message; a send's or receive's, that message (NCCL's
  // point-to-point LL threshold is 16 KiB too). Not yet measured on a GPU (docs/GPU.md).
  static constexpr size_t kLLMaxBytes = 64 * 1024;
  static constexpr size_t kP2pLLMaxBytes = 16 * 1024;
  // The protocol of a device lane moving `bytes` (a collective's, or with p2p a send's or
  // receive's); Simple whatever CHORUS_PROTO says where LL cannot run (TunerFacts::deviceLL).
  // Each end of a send decides from its own size, so a receive of another size (the program's
  // error) may run the other protocol; the kernels fail it as a mismatch all the same
  // (src/device/lane_exec.h).
  ProtoKind deviceProto(size_t bytes, bool p2p) const;

  // The channels a device collective of `bytes` (one rank's message) runs, from 1 up to
  // TunerFacts::deviceChannels: a channel is one block, and a block takes at least a whole pass
  // of its threads (kLaunchThreads, each moving kMoveUnroll 16-byte vectors under Simple, one
  // 8-byte word under LL), as NCCL cuts its channels for small messages. Ranks agree: the bytes
  // are the same on every rank for every collective.
  static constexpr size_t kSimpleChannelBytes = 32 * 1024;
  static constexpr size_t kLLChannelBytes = 4 * 1024;
  int deviceChannels(size_t bytes, ProtoKind proto) const;
  int deviceChannelMax() const { return f_.deviceChannels; }

  // The largest all-reduce (bytes) the direct algorithm takes unforced; 0 when it never does.
  size_t directMaxBytes() const { return directMax_; }
  // All-reduces past the direct sizes and up to this take the tree unforced.
  size_t treeMaxBytes() const { return treeMax_; }
  std::optional<Algo> forced() const { return f_.forced; }
  const AllReduceModel& model() const { return f_.model; }

 private:
  TunerFacts f_;
  size_t directMax_ = 0;
  size_t treeMax_ = 0;
};

}  // namespace chorus
