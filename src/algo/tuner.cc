#include "src/algo/tuner.h"

#include <algorithm>

namespace chorus {

double ringAllReduceUs(const AllReduceModel& m, double bytes) {
  if (m.nranks < 2) return 0;
  return m.ringLatencyUs + 2.0 * (m.nranks - 1) / m.nranks * bytes / (m.bwGBs * 1e3);
}

double treeAllReduceUs(const AllReduceModel& m, double bytes) {
  if (m.nranks < 2) return 0;
  return m.treeLatencyUs + 2.0 * bytes / (m.bwGBs * 1e3);
}

size_t treeMaxBytes(const AllReduceModel& m) {
  // ring - tree = (ringLatency - treeLatency) - bytes * 2 / (n * bw): positive below the crossing.
  const double gain = m.ringLatencyUs - m.treeLatencyUs;
  if (m.nranks < 3 || gain <= 0 || m.bwGBs <= 0) return 0;
  return static_cast<size_t>(gain * m.nranks * m.bwGBs * 1e3 / 2);
}

Tuner::Tuner(const TunerFacts& facts) : f_(facts), treeMax_(chorus::treeMaxBytes(facts.model)) {
  // Direct sends the whole message to each peer; the ring sends 2(n-1)/n of it in total. The
  // threshold bounds what a rank sends: message x (n - 1). Across hosts it is half that: direct
  // takes one network hop instead of the ring's 2(n-1), which halved the time up to 16 KiB
  // between two hosts and tied at 32 KiB, but at 64 KiB it lost (docs/PERFORMANCE.md).
  if (f_.nranks >= 2 && f_.nranks <= kDirectMaxRanks) {
    const size_t limit = f_.singleHost ? f_.directMaxBytesSetting : f_.directMaxBytesSetting / 2;
    directMax_ = limit / static_cast<size_t>(f_.nranks - 1);
  }
}

Tuner::Choice Tuner::choose(CollType coll, size_t bytes) const {
  Choice c;
  if (coll != CollType::kAllReduce || f_.nranks < 2) return c;  // the ring (a chain when rooted)
  if (f_.forced) {
    c.algo = *f_.forced;
    c.sliceConnections = c.algo == Algo::kSlice;
    c.ringConnections = c.algo == Algo::kRing;
    return c;
  }
  if (bytes <= directMax_) {
    c.algo = Algo::kDirect;
    c.ringConnections = false;
    return c;
  }
  // One reducer per slice, reading every rank's input in place where it can: on one host, for
  // few enough ranks, past the sizes where its exchanges cost more than they save.
  c.sliceConnections = f_.singleHost && f_.nranks <= kDirectMaxRanks && bytes >= kSliceMinBytes;
  const bool sliceOnItsOwn = c.sliceConnections && !f_.oneProcess;
  // The cost model's crossing decides between tree and the rest.
  if (bytes <= treeMax_) {
    c.algo = Algo::kTree;
    c.ringConnections = sliceOnItsOwn;
    return c;
  }
  if (c.sliceConnections) {
    // Ranks that are threads of this process can read every buffer. Between processes only
    // registered memory is readable, and without it the slice schedule moves as many bytes as
    // the ring and was measured no faster (docs/PERFORMANCE.md): a rank takes it when its own
    // buffers are registered, as NCCL expects registration on every rank.
    if (f_.oneProcess) {
      c.algo = Algo::kSlice;
      c.ringConnections = false;
    } else {
      c.sliceIfRegistered = true;
    }
  }
  return c;
}

ProtoKind Tuner::deviceProto(size_t bytes, bool p2p) const {
  if (!f_.deviceLL) return ProtoKind::kSimple;
  if (f_.forcedProto) return *f_.forcedProto;
  return bytes <= (p2p ? kP2pLLMaxBytes : kLLMaxBytes) ? ProtoKind::kLL : ProtoKind::kSimple;
}

int Tuner::deviceChannels(size_t bytes, ProtoKind proto) const {
  const size_t per = proto == ProtoKind::kLL ? kLLChannelBytes : kSimpleChannelBytes;
  const size_t wanted = std::max<size_t>(1, bytes / per);
  return static_cast<int>(std::min<size_t>(wanted, static_cast<size_t>(std::max(1, f_.deviceChannels))));
}

int deviceChannelLimit(int setting, const std::vector<GpuSeat>& seats, bool singleHost) {
  int limit = setting > 0 ? std::min(setting, kMaxDeviceChannels) : kMaxDeviceChannels;
  bool any = false;
  for (const GpuSeat& s : seats) {
    if (s.sms <= 0) continue;
    any = true;
    int sharing = 0;
    for (const GpuSeat& t : seats) sharing += t.sms > 0 && t.uuid[0] == s.uuid[0] && t.uuid[1] == s.uuid[1];
    limit = std::min(limit, s.sms / (2 * sharing));
  }
  if (!any) return 1;
  if (!singleHost) limit = std::min(limit, kNetDeviceChannels);
  return std::max(1, limit);
}

Result<std::optional<ProtoKind>> parseProtoSetting(const std::string& value) {
  if (value.empty()) return std::optional<ProtoKind>();
  if (value == "simple") return std::optional<ProtoKind>(ProtoKind::kSimple);
  if (value == "ll") return std::optional<ProtoKind>(ProtoKind::kLL);
  return invalidArgument("CHORUS_PROTO=" + value +
                         " is not a protocol this build has (simple, ll); unset it to let Chorus choose");
}

}  // namespace chorus
