#!/usr/bin/env bash
# Nsight Compute on the device path's kernels that wait on no other kernel (`gpu_bench profile`:
# the copy and reduce-copy lanes on 64 blocks over 256 MiB, a one-rank all-reduce of 256 MiB):
# achieved memory throughput against the chip's peak, where warps stall, registers and occupancy:
# what limits the lanes when they fall short of cudaMemcpyAsync (docs/GPU.md, "Performance").
# Ranks that wait on each other are not profiled: ncu replays one kernel at a time, and a rank's
# kernel would wait for its peer's until the deadline.
#   tools/ncu_profile.sh DIR     DIR: the folder of the built programs (tools/gpu_check.sh's)
# Exits 77 (skipped) where there is no ncu or it cannot read the counters.
set -uo pipefail
dir=${1:?usage: ncu_profile.sh DIR}
ncu=$(command -v ncu || true)
if [ -z "$ncu" ]; then
  for c in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [ -x "$c" ] && ncu=$c && break
  done
fi
if [ -z "$ncu" ]; then
  echo "SKIP: no ncu (Nsight Compute) on this machine"
  exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# --clock-control none: the clocks stay as the machine sets them, as every other figure has them.
"$ncu" --clock-control none --target-processes all \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section LaunchStats --section Occupancy \
  "$dir/bin/gpu_bench" profile > "$out" 2>&1
code=$?
cat "$out"
if grep -q "Failed to initialize the profiler\|ERR_NVGPUCTRPERM\|not supported on this device" "$out"; then
  echo "SKIP: ncu cannot read this machine's counters (above)"
  exit 77
fi
if [ "$code" -ne 0 ] || ! grep -q "profile: one-rank all-reduce of" "$out"; then
  echo "FAIL: gpu_bench profile under ncu exited $code or did not finish its checks"
  exit 1
fi
echo "ncu_profile: $(grep -c '^  [A-Za-z_].*(.*)x(.*)' "$out" || true) kernel reports above"
