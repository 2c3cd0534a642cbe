#!/usr/bin/env bash
# nccl-tests through Chorus's libnccl.so.2 beside NCCL itself, on one GPU, one rank (docs/GPU.md,
# "Performance"): each *_perf binary that tools/gpu_check.sh prepare built runs twice with the same
# arguments, once with NCCL's libnccl.so.2 first on the library path (the nvidia-nccl-cu13 package
# beside PyTorch, or NCCL_LIB_DIR) and once with the drop-in, under chorusrun -n 1 (the binaries are
# built against the MPI shim). NCCL allows one rank per GPU, so one rank is the only shape both can
# run on a one-GPU machine; ranks sharing a GPU are gpu_bench's. Prints both tables and a summary of
# the out-of-place times at a few sizes with their ratio. A measurement: it fails only when a run
# fails or reports wrong values.
#   tools/nccl_tests_bench.sh DIR [BINARY...]     (default: all_reduce_perf all_gather_perf
#                                                  reduce_scatter_perf broadcast_perf)
set -uo pipefail
dir=${1:?usage: nccl_tests_bench.sh DIR [BINARY...]}
shift
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf)
# shellcheck source=tools/nccl_tests_lib.sh
source "$(dirname "$0")/nccl_tests_lib.sh"
nccl_tests_require "$dir"
dir=$(cd "$dir" && pwd)
nccl=$(nccl_find_lib)
if [ -z "$nccl" ]; then
  echo "SKIP: NCCL itself was not found (pip package nvidia-nccl-cu13, or set NCCL_LIB_DIR)"
  exit 77
fi
common="$dir/mpi/lib:$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
failed=0
summary=()
for b in "${bins[@]}"; do
  t="$dir/nccl-tests/$b"
  [ -x "$t" ] || { echo "== $b: not built"; failed=1; continue; }
  for lib in nccl chorus; do
    if [ $lib = nccl ]; then path="$nccl:$common"; else path="$dir/nccl:$common"; fi
    echo "# $b, one rank, $([ $lib = nccl ] && echo "NCCL ($nccl)" || echo "Chorus's drop-in ($dir/nccl)")"
    out=$(LD_LIBRARY_PATH=$path NCCL_DEBUG=VERSION timeout -k 10 120 "$dir/bin/chorusrun" -n 1 \
      -x NCCL_TESTS_DEVICE=0 -- "$t" -b 8 -e 128M -f 4 -g 1 -c 1 -n 20 -w 5 2>&1)
    rc=$?
    echo "$out"
    if [ $rc -ne 0 ] || ! echo "$out" | grep -q "Out of bounds values : 0 OK"; then
      echo "== $b with $lib: FAILED (exit $rc)"
      failed=1
      continue
    fi
    if [ $lib = chorus ] && ! echo "$out" | grep -q "Chorus version"; then
      echo "== $b with $lib: FAILED (no \"Chorus version\" line)"
      failed=1
      continue
    fi
    # size -> out-of-place time (us): the table's rows start with the size in bytes.
    declare -A "t_$lib=()"
    while read -r size time; do
      eval "t_$lib[$size]=$time"
    done < <(echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 12 {print $1, $6}')
  done
  for size in 8 32768 2097152 33554432 134217728; do
    a=${t_nccl[$size]:-}
    c=${t_chorus[$size]:-}
    [ -n "$a" ] && [ -n "$c" ] || continue
    summary+=("$(printf '%-20s %10s B  NCCL %10s us  Chorus %10s us  Chorus/NCCL %s' "$b" "$size" "$a" "$c" \
      "$(awk -v a="$a" -v c="$c" 'BEGIN { if (a > 0) printf "%.1fx", c / a; else print "-" }')")")
  done
  unset t_nccl t_chorus
done
echo "== out-of-place time per call, one rank, same binary and arguments"
printf '%s\n' "${summary[@]}"
[ $failed -eq 0 ] && echo "MEASURED: nccl-tests with NCCL and with the drop-in, one rank ($(printf '%s ' "${bins[@]}"))"
exit $failed
