#include "src/algo/tuner.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "src/algo/coll.h"

namespace chorus {

Tuner::Tuner(const TunerFacts& facts) : f_(facts) {
  nalgos_ = std::min(algorithmCount(), kAlgoSlots);
  for (int a = 0; a < nalgos_; ++a) algos_[a] = &algorithm(static_cast<Algo>(a));
  // Forcing an algorithm taken where the ranks agree (one-copy) offers it on every device
  // collective on channels; the rest is chosen.
  if (f_.forced && static_cast<int>(*f_.forced) < nalgos_ &&
      algos_[static_cast<int>(*f_.forced)]->taken() == Algorithm::Taken::kIfAgreed) {
    f_.forced.reset();
    if (f_.oneCopy != OneCopyMode::kNever) f_.oneCopy = OneCopyMode::kAlways;
  }
  for (MemKind mem : {MemKind::kHost, MemKind::kDevice}) {
    for (int a = 0; a < nalgos_; ++a) {
      for (ProtoKind p : {ProtoKind::kSimple, ProtoKind::kLL, ProtoKind::kLL128}) {
        const TuningRow* row = tuningRow(mem, algos_[a]->name(), p, f_.nranks);
        if (row) rows_[static_cast<int>(mem)][a][protoSlot(p)] = *row;
      }
    }
  }
  // Direct sends the whole message to each peer; the ring sends 2(n-1)/n of it in total. The
  // setting bounds what a rank sends: message x (n - 1). Across hosts it is half that: direct takes
  // one network hop instead of the ring's 2(n-1), which halved the time up to 16 KiB between two
  // hosts and tied at 32 KiB, but at 64 KiB it lost
  // (docs/records/2026-11-22-perf-host-baseline.md).
  if (f_.nranks >= 2 && f_.nranks <= kDirectMaxRanks) {
    const size_t limit = f_.singleHost ? f_.directMaxBytesSetting : f_.directMaxBytesSetting / 2;
    directCap_ = limit / static_cast<size_t>(f_.nranks - 1);
  }
  // Every host collective on channels by size, once: where each choice ends, found by doubling
  // and then by halving the interval (the estimates are lines in the size, so each choice holds
  // an interval). Calls then look their choice up instead of asking every algorithm.
  constexpr size_t kTop = size_t(1) << 46;
  auto same = [](const Choice& a, const Choice& b) {
    return a.algo == b.algo && a.alone == b.alone && a.ifAgreed == b.ifAgreed;
  };
  for (int c = 0; c < kChannelColls; ++c) {
    const auto coll = static_cast<CollType>(c);
    std::vector<Segment>& segments = hostSegments_[c];
    size_t from = 0;
    while (true) {
      const Choice here = compute(coll, from, MemKind::kHost);
      auto stays = [&](size_t b) { return same(here, compute(coll, b, MemKind::kHost)); };
      size_t hi = std::max<size_t>(1, from * 2);
      while (hi < kTop && stays(hi)) hi *= 2;
      if (hi >= kTop) {
        segments.push_back(Segment{SIZE_MAX, here});
        break;
      }
      size_t lo = from;  // stays(lo), !stays(hi)
      while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        (stays(mid) ? lo : hi) = mid;
      }
      segments.push_back(Segment{lo, here});
      from = hi;
    }
  }
}

Tuner::Choice Tuner::choose(CollType coll, size_t bytes, MemKind mem) const {
  const int c = static_cast<int>(coll);
  if (mem == MemKind::kHost && c < kChannelColls && !hostSegments_[c].empty()) {
    for (const Segment& s : hostSegments_[c]) {
      if (bytes <= s.maxBytes) return s.choice;
    }
  }
  return compute(coll, bytes, mem);
}

double Tuner::estimateUs(CollType coll, size_t bytes, MemKind mem) const {
  double us = 0;
  (void)compute(coll, bytes, mem, &us);
  return us;
}

Tuner::Choice Tuner::compute(CollType coll, size_t bytes, MemKind mem, double* us) const {
  Choice best;
  double bestUs = 0;
  if (us) *us = 0;
  if (f_.nranks < 2) return best;  // one rank: nothing crosses (the device path copies: planOneRank)
  const Protos protos = protosOn(mem);
  const bool forcing = f_.forced && coll == CollType::kAllReduce && algos_[static_cast<int>(*f_.forced)]->runsOn(mem);
  CostQuery q;
  q.coll = coll;
  q.bytes = static_cast<double>(bytes);
  q.nranks = f_.nranks;
  q.mem = mem;
  q.singleHost = f_.singleHost;
  q.oneProcess = f_.oneProcess;
  q.directMaxBytes = directCap_;
  q.model = f_.model;
  // The least estimate over every candidate, and the least but those a rank takes alone (which
  // between processes run only where a rank's buffers are registered: Algorithm::Taken::kAlone).
  bool found = false;
  bool foundOther = false;
  double otherUs = 0;
  Choice other;
  for (int i = 0; i < nalgos_; ++i) {
    const Algo a = static_cast<Algo>(i);
    const Algorithm& algo = *algos_[i];
    if (algo.taken() == Algorithm::Taken::kIfAgreed) continue;  // offered beside the choice, below
    if (!algo.runs(coll) || !algo.runsOn(mem) || f_.nranks > algo.maxRanks()) continue;
    if (forcing && a != *f_.forced) continue;
    for (int pi = 0; pi < protos.n; ++pi) {
      const ProtoKind p = protos.p[pi];
      const std::optional<TuningRow>& row = rows_[static_cast<int>(mem)][i][protoSlot(p)];
      if (!row && !forcing) continue;  // not measured: taken only where forced
      q.proto = p;
      q.row = row ? *row : TuningRow{};
      q.channels = mem == MemKind::kDevice ? deviceChannels(bytes, p) : 1;
      const double t = algo.estimateUs(q);
      // A forced algorithm runs whatever its estimate; otherwise the least estimate wins, the
      // registry's order breaking ties.
      if (t == kNever && !forcing) continue;
      if (algo.taken() != Algorithm::Taken::kAlone && (!foundOther || t < otherUs)) {
        foundOther = true;
        other.algo = a;
        other.proto = p;
        otherUs = t;
      }
      if (found && t >= bestUs) continue;
      found = true;
      best.algo = a;
      best.proto = p;
      bestUs = t;
    }
  }
  if (!found) {  // nothing measured runs it: the ring, which runs every collective on channels,
    // with the protocol CHORUS_PROTO forces (where it may run), else Simple
    q.proto = protos.n == 1 ? protos.p[0] : ProtoKind::kSimple;
    q.row = TuningRow{};
    best.algo = kDefaultAlgo;
    best.alone.reset();
    best.ifAgreed.reset();
    best.proto = q.proto;
    bestUs = ringCostUs(q);
  }
  const Algorithm& won = *algos_[static_cast<int>(best.algo)];
  if (won.taken() == Algorithm::Taken::kAlone && !f_.oneProcess && !forcing && foundOther) {
    // Between processes only registered memory is readable in place (the slice estimate assumes
    // it); without it the slice schedule moves as many bytes as the ring and was measured no faster
    // (docs/records/2026-11-22-perf-host-baseline.md). Where the algorithm it goes beside is the
    // best of the rest, that runs and a rank whose buffers are registered takes this one instead,
    // as NCCL expects registration on every rank (a rank alone in it meets its neighbours' first
    // slot, so both connect); where another is, that one runs.
    const Algo alone = best.algo;
    best = other;
    bestUs = otherUs;
    if (won.aloneBeside() == other.algo) best.alone = alone;
  }
  // An algorithm taken where the ranks agree runs only where every rank's buffers agree at
  // enqueue: offered where it is estimated least (or CHORUS_ONECOPY=1), beside the choice that
  // runs otherwise.
  for (int i = 0; i < nalgos_ && !forcing; ++i) {
    const Algorithm& agreed = *algos_[i];
    if (agreed.taken() != Algorithm::Taken::kIfAgreed || !agreed.runs(coll) || !agreed.runsOn(mem) ||
        !mayOfferIfAgreed(static_cast<Algo>(i))) {
      continue;
    }
    const std::optional<TuningRow>& row = rows_[static_cast<int>(mem)][i][0];
    if (f_.oneCopy == OneCopyMode::kAlways) {
      best.ifAgreed = static_cast<Algo>(i);
    } else if (row) {
      q.proto = ProtoKind::kSimple;
      q.row = *row;
      const double t = agreed.estimateUs(q);
      if (t < bestUs) {
        best.ifAgreed = static_cast<Algo>(i);
        bestUs = t;
      }
    }
  }
  if (us) *us = bestUs;
  return best;
}

Tuner::Protos Tuner::protosOn(MemKind mem) const {
  const ProtoKind simple = ProtoKind::kSimple;
  if (mem == MemKind::kHost || !f_.deviceLL) return Protos{{simple, simple, simple}, 1};
  if (f_.forcedProto) return Protos{{forcedDeviceProto(), simple, simple}, 1};
  if (f_.deviceLL128) return Protos{{simple, ProtoKind::kLL, ProtoKind::kLL128}, 3};
  return Protos{{simple, ProtoKind::kLL, simple}, 2};
}

ProtoKind Tuner::forcedDeviceProto() const {
  return *f_.forcedProto == ProtoKind::kLL128 && !f_.deviceLL128Safe ? ProtoKind::kLL : *f_.forcedProto;
}

size_t Tuner::lastBytesOf(Algo a) const {
  size_t last = 0;
  for (const Segment& s : hostSegments()) {
    if (s.choice.algo == a && !s.choice.alone) last = s.maxBytes;
  }
  return last;
}

std::string Tuner::describeHostAllReduce() const {
  std::string s;
  const std::vector<Segment>& segments = hostSegments();
  for (size_t i = 0; i < segments.size(); ++i) {
    const Choice& c = segments[i].choice;
    if (!s.empty()) s += ", ";
    s += algoName(c.algo);
    if (c.alone) s += std::string(" (") + algoName(*c.alone) + " where registered)";
    if (segments[i].maxBytes != SIZE_MAX) {
      s += " up to " + std::to_string(segments[i].maxBytes) + " B";
    } else {
      s += i ? " beyond" : " at every size";
    }
  }
  return s;
}

bool Tuner::mayOfferIfAgreed(Algo a) const {
  const int i = static_cast<int>(a);
  if (f_.oneCopy == OneCopyMode::kNever || !f_.singleHost || f_.nranks < 2) return false;
  return f_.nranks <= algos_[i]->maxRanks() &&
         (f_.oneCopy == OneCopyMode::kAlways || rows_[static_cast<int>(MemKind::kDevice)][i][0].has_value());
}

ProtoKind Tuner::p2pProto(size_t bytes) const {
  if (!f_.deviceLL) return ProtoKind::kSimple;
  if (f_.forcedProto) return forcedDeviceProto();
  return bytes <= kP2pLLMaxBytes ? ProtoKind::kLL : ProtoKind::kSimple;
}

int Tuner::p2pChannelMax() const {
  if (f_.nranks < 2) return 1;
  const int each = std::max(1, f_.deviceChannels) / (2 * (f_.nranks - 1));
  return std::clamp(each, 1, kMaxP2pChannels);
}

int Tuner::p2pChannels(size_t bytes) const {
  const size_t wanted = std::max<size_t>(1, bytes / kP2pChannelBytes);
  return static_cast<int>(std::min<size_t>(wanted, static_cast<size_t>(p2pChannelMax())));
}

int Tuner::deviceChannels(size_t bytes, ProtoKind proto) const {
  const size_t per = proto == ProtoKind::kLL      ? kLLChannelBytes
                     : proto == ProtoKind::kLL128 ? kLL128ChannelBytes
                                                  : kSimpleChannelBytes;
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
  if (value == "ll128") return std::optional<ProtoKind>(ProtoKind::kLL128);
  return invalidArgument("CHORUS_PROTO=" + value +
                         " is not a protocol this build has (simple, ll, ll128); unset it to let Chorus choose");
}

}  // namespace chorus
