// What a collective costs: the inputs every algorithm's estimate reads (the tuner takes the least
// estimate, src/algo/tuner.h). Two parts meet here:
// - the topology's model of the machine (AllReduceModel: hop latencies and the slowest hop's
//   bandwidth, measured by src/topo), the same on every rank;
// - the tuning table (tuning_table.cc): per memory kind, algorithm and protocol, what Chorus's own
//   code costs on top of the links, fitted from benchmarks (tools/tuning_fit.py says how).
// An algorithm's estimate is its schedule's shape over those: a fixed cost per call, a cost per
// step times its steps, the hop latencies its data crosses one after another, and the bytes its
// busiest rank moves over the slower of the link and the table's rate (costUs).
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "src/algo/coll.h"
#include "src/algo/prims.h"

namespace chorus {

// Where a collective's buffers are: host memory (host lanes) or device memory (kernels).
enum class MemKind : unsigned char { kHost, kDevice };
const char* memKindName(MemKind m);

// The topology's all-reduce model: a ring lap's hop latencies scaled to the all-reduce's 2(n-1)
// steps (each step's data crosses one hop: 2(n-1)/n of a lap), the double tree's deepest path up
// and down, and the slowest hop's bandwidth, which every schedule crosses.
struct AllReduceModel {
  int nranks = 0;
  double ringLatencyUs = 0;
  double treeLatencyUs = 0;
  double bwGBs = 0;  // the slowest hop's bandwidth, which both schedules cross
};
// The model alone (no tuning table): the ring's and the tree's all-reduce, and the largest
// message the tree is estimated faster for (the two lines cross there; 0 if never).
double ringAllReduceUs(const AllReduceModel& m, double bytes);
double treeAllReduceUs(const AllReduceModel& m, double bytes);
size_t treeMaxBytes(const AllReduceModel& m);

// One row of the tuning table: what one algorithm costs on one memory kind with one protocol,
// beyond the links the topology models, measured at `nranks` ranks (0: fitted over several).
// `gbs` is the rate the busiest rank's bytes move at (per channel on device memory, where a
// channel is one block), at most `maxGbs` for the whole call; 0: no bound of its own.
struct TuningRow {
  MemKind mem = MemKind::kHost;
  const char* algo = "";  // Algorithm::name()
  ProtoKind proto = ProtoKind::kSimple;
  double callUs = 0;  // once per call
  double stepUs = 0;  // per step of its schedule
  double gbs = 0;
  double maxGbs = 0;
  int nranks = 0;
};
// The table's rows (tuning_table.cc), and the one for (mem, algo, proto) at `nranks` ranks: the
// row measured at the most ranks up to `nranks`, else the one fitted over several (nranks 0), else
// the one measured at the fewest; null when not measured. Host rows are the algorithm's own
// protocol and are listed as kSimple.
const std::vector<TuningRow>& tuningTable();
const TuningRow* tuningRow(MemKind mem, const char* algo, ProtoKind proto, int nranks = 0);
// Tests: tuners built while it lives read `rows` in place of the table.
class ScopedTuningTable {
 public:
  explicit ScopedTuningTable(const std::vector<TuningRow>* rows);
  ~ScopedTuningTable();
  ScopedTuningTable(const ScopedTuningTable&) = delete;
  ScopedTuningTable& operator=(const ScopedTuningTable&) = delete;

 private:
  const std::vector<TuningRow>* saved_;
};

constexpr double kNever = std::numeric_limits<double>::infinity();

// One estimate asked of an algorithm.
struct CostQuery {
  CollType coll = CollType::kAllReduce;
  double bytes = 0;  // one rank's message
  int nranks = 1;
  int channels = 1;  // the channels it would run (device memory: the tuner's count for the size)
  MemKind mem = MemKind::kHost;
  ProtoKind proto = ProtoKind::kSimple;
  bool singleHost = true;
  bool oneProcess = false;
  size_t directMaxBytes = 0;  // the most bytes the direct all-reduce may take (its setting)
  AllReduceModel model;
  TuningRow row;
  // One hop of the ring: its lap's latency shared by its n hops.
  double hopUs() const { return nranks > 1 ? model.ringLatencyUs / (2.0 * (nranks - 1)) : 0; }
};

// The common shape: row.callUs + steps x row.stepUs + latencyUs + bytes x load over the rate, the
// rate being the table's (times the channels on device memory) bounded by the link's.
double costUs(const CostQuery& q, double steps, double latencyUs, double load);

// The ring's (and chain's) shape for each collective on channels, used by the ring algorithm and
// by the estimates of collectives no other algorithm runs: steps, latency and load as costUs
// takes them.
double ringCostUs(const CostQuery& q);

}  // namespace chorus
