#include "src/algo/cost.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace chorus {

const char* memKindName(MemKind m) { return m == MemKind::kDevice ? "device" : "host"; }

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

namespace {
std::atomic<const std::vector<TuningRow>*> testTable{nullptr};
}  // namespace

ScopedTuningTable::ScopedTuningTable(const std::vector<TuningRow>* rows) : saved_(testTable.exchange(rows)) {}
ScopedTuningTable::~ScopedTuningTable() { testTable.store(saved_); }

const TuningRow* tuningRow(MemKind mem, const char* algo, ProtoKind proto, int nranks) {
  const std::vector<TuningRow>* test = testTable.load(std::memory_order_acquire);
  const TuningRow* below = nullptr;  // measured at the most ranks up to nranks
  const TuningRow* any = nullptr;    // fitted over several
  const TuningRow* above = nullptr;  // measured at the fewest ranks past nranks
  for (const TuningRow& r : test ? *test : tuningTable()) {
    if (r.mem != mem || r.proto != proto || std::strcmp(r.algo, algo) != 0) continue;
    if (r.nranks == 0) {
      any = &r;
    } else if (r.nranks <= nranks) {
      if (!below || r.nranks > below->nranks) below = &r;
    } else if (!above || r.nranks < above->nranks) {
      above = &r;
    }
  }
  return below ? below : any ? any : above;
}

double costUs(const CostQuery& q, double steps, double latencyUs, double load) {
  double rate = kNever;
  if (q.row.gbs > 0) rate = q.row.gbs * (q.mem == MemKind::kDevice ? std::max(1, q.channels) : 1);
  if (q.row.maxGbs > 0) rate = std::min(rate, q.row.maxGbs);
  // The topology's bandwidth bounds host lanes, and device lanes between hosts; ranks on one GPU
  // or across NVLink move at what the table measured.
  if (q.model.bwGBs > 0 && (q.mem == MemKind::kHost || !q.singleHost)) rate = std::min(rate, q.model.bwGBs);
  const double move = rate == kNever ? 0 : q.bytes * load / (rate * 1e3);
  return q.row.callUs + steps * q.row.stepUs + latencyUs + move;
}

double ringCostUs(const CostQuery& q) {
  const double n = q.nranks;
  if (q.nranks < 2) return costUs(q, 0, 0, 0);
  const Collective& c = collective(q.coll);
  if (!c.onChannels) return kNever;
  const RingTraffic& t = c.ringTraffic;
  return costUs(q, t.steps * (n - 1), t.latency * q.model.ringLatencyUs,
                t.loadPerHopOverN * (n - 1) / n + t.loadPerHop * (n - 1) + t.loadFixed);
}

}  // namespace chorus
