// The tuning table: what each algorithm costs per memory kind and protocol beyond the links the
// topology models (src/algo/cost.h). The tuner takes the least estimate over these rows; an
// algorithm without a row is run only when forced (CHORUS_ALGO). Refill from measurements:
//
//   host:    python3 tools/tuning_fit.py host --build build --np 2,3,4 --rounds 3
//   device:  gpu_bench > gpu_bench.log  (on the GPU machine: its "all-reduce by algorithm" tables),
//            then python3 tools/tuning_fit.py device gpu_bench.log --channels 2:32,4:16
//
// and paste the rows it prints. Columns: memory, algorithm, protocol, cost per call (us), cost per
// step (us), rate of the busiest rank's bytes (GB/s; per channel on device memory), the call's
// most (GB/s; 0: none).
#include "src/algo/cost.h"

namespace chorus {

const std::vector<TuningRow>& tuningTable() {
  static const std::vector<TuningRow> rows = {
      // Host rows, one per algorithm and rank count: fitted on 2026-11-26 on this project's 2-core
      // machine (ranks as processes over shm; the slice all-reduce as threads of one process, as
      // it reads registered buffers in place) by tools/tuning_fit.py host --np 2,3,4 --rounds 3.
      {MemKind::kHost, "ring", ProtoKind::kSimple, 0.00, 0.00, 6.41, 0, 2},
      {MemKind::kHost, "ring", ProtoKind::kSimple, 4.42, 0.00, 3.36, 0, 3},
      {MemKind::kHost, "ring", ProtoKind::kSimple, 4.97, 0.00, 2.83, 0, 4},
      {MemKind::kHost, "tree", ProtoKind::kSimple, 4.17, 0.00, 4.89, 0, 3},
      {MemKind::kHost, "tree", ProtoKind::kSimple, 7.46, 0.00, 3.78, 0, 4},
      {MemKind::kHost, "direct", ProtoKind::kSimple, 0.25, 0.00, 5.91, 0, 2},
      {MemKind::kHost, "direct", ProtoKind::kSimple, 3.12, 0.00, 3.69, 0, 3},
      {MemKind::kHost, "direct", ProtoKind::kSimple, 3.09, 0.00, 3.52, 0, 4},
      {MemKind::kHost, "slice", ProtoKind::kSimple, 0.64, 0.00, 10.51, 0, 2},
      {MemKind::kHost, "slice", ProtoKind::kSimple, 5.45, 0.00, 5.69, 0, 3},
      {MemKind::kHost, "slice", ProtoKind::kSimple, 10.61, 0.00, 5.77, 0, 4},

      // Device rows: provisional, never measured for Chorus. NCCL 2.28's constants for Hopper over
      // NVLink (src/graph/tuning.cc: base latency per call, hardware latency per step, the LL
      // ceiling llMaxBws, the tree's per-channel rate), with 40 GB/s per channel for Simple and
      // half that for LL; the direct all-reduce takes the ring's. The next GPU run's gpu_bench
      // ("all-reduce by algorithm") refills them.
      {MemKind::kDevice, "ring", ProtoKind::kLL, 6.6, 0.6, 20.0, 141.0},
      {MemKind::kDevice, "ring", ProtoKind::kSimple, 8.4, 3.4, 40.0, 0},
      {MemKind::kDevice, "tree", ProtoKind::kLL, 6.8, 0.6, 10.2, 141.0},
      {MemKind::kDevice, "tree", ProtoKind::kSimple, 8.4, 4.0, 35.6, 0},
      {MemKind::kDevice, "direct", ProtoKind::kLL, 6.6, 0.6, 20.0, 141.0},
      {MemKind::kDevice, "direct", ProtoKind::kSimple, 8.4, 3.4, 40.0, 0},
      // LL128 (taken only with CHORUS_LL128=1): NCCL 2.28's ring and tree LL128 latencies on
      // NVLink and its per-channel LL128 ceiling for Hopper (perChMaxRingLL128Bws 36.7 GB/s; the
      // tree's 7/9 of it on one node).
      {MemKind::kDevice, "ring", ProtoKind::kLL128, 14.0, 1.9, 36.7, 0},
      {MemKind::kDevice, "tree", ProtoKind::kLL128, 14.0, 1.25, 28.5, 0},
      {MemKind::kDevice, "direct", ProtoKind::kLL128, 14.0, 1.9, 36.7, 0},
  };
  return rows;
}

}  // namespace chorus
