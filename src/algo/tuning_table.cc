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

      // Device rows, one per algorithm, protocol and rank count: fitted on 2026-11-27 from run 6's
      // gpu_bench on one H200 (docs/records/2026-11-27-h200-run6/gpu_bench.log, ranks as
      // threads sharing the GPU, every algorithm and protocol forced) by
      // tools/tuning_fit.py device gpu_bench.log --channels 2:32,4:16. The tool fits the tree from 3
      // ranks up, so at 2 ranks the tree takes its 4-rank row; one-copy's rows let the
      // tuner offer it by estimate where every rank's buffers are registered.
      {MemKind::kDevice, "direct", ProtoKind::kLL, 31.13, 0.00, 0.92, 0.0, 2},
      {MemKind::kDevice, "direct", ProtoKind::kLL, 69.54, 0.00, 0.85, 0.0, 4},
      {MemKind::kDevice, "direct", ProtoKind::kLL128, 32.50, 0.00, 1.24, 0.0, 2},
      {MemKind::kDevice, "direct", ProtoKind::kLL128, 70.33, 0.00, 1.24, 0.0, 4},
      {MemKind::kDevice, "direct", ProtoKind::kSimple, 27.52, 0.00, 2.96, 2.5, 2},
      {MemKind::kDevice, "direct", ProtoKind::kSimple, 69.46, 0.00, 2.74, 2.5, 4},
      {MemKind::kDevice, "one-copy", ProtoKind::kSimple, 97.97, 0.00, 14.05, 0.0, 2},
      {MemKind::kDevice, "one-copy", ProtoKind::kSimple, 525.16, 0.00, 21.77, 0.0, 4},
      {MemKind::kDevice, "ring", ProtoKind::kLL, 35.63, 0.00, 0.71, 19.6, 2},
      {MemKind::kDevice, "ring", ProtoKind::kLL, 73.87, 0.00, 0.80, 0.0, 4},
      {MemKind::kDevice, "ring", ProtoKind::kLL128, 36.56, 0.00, 1.24, 28.1, 2},
      {MemKind::kDevice, "ring", ProtoKind::kLL128, 72.18, 0.00, 1.85, 0.0, 4},
      {MemKind::kDevice, "ring", ProtoKind::kSimple, 34.42, 0.00, 4.31, 0.0, 2},
      {MemKind::kDevice, "ring", ProtoKind::kSimple, 77.78, 0.00, 5.24, 0.0, 4},
      {MemKind::kDevice, "tree", ProtoKind::kLL, 86.97, 0.00, 0.57, 0.0, 4},
      {MemKind::kDevice, "tree", ProtoKind::kLL128, 114.75, 0.00, 0.97, 0.0, 4},
      {MemKind::kDevice, "tree", ProtoKind::kSimple, 89.16, 0.00, 1.81, 0.0, 4},
  };
  return rows;
}

}  // namespace chorus
