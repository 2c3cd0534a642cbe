#!/usr/bin/env bash
# nccl-tests through Chorus's libnccl.so.2 on one GPU (docs/nccl.md): every *_perf binary that
# tools/gpu_check.sh prepare built from an nccl-tests checkout (with MPI=1 against the MPI shim of
# tests/nccl/mpi_shim), run as NRANKS processes on GPU 0 under chorusrun, with data checking
# (-c 1). A run passes when it exits 0 within 2 minutes, reports "Out of bounds values : 0 OK" and
# shows, with NCCL_DEBUG=VERSION, that the library it loaded is Chorus's ("Chorus version").
#   tools/nccl_tests_check.sh DIR NRANKS
set -uo pipefail
dir=${1:?usage: nccl_tests_check.sh DIR NRANKS}
n=${2:?usage: nccl_tests_check.sh DIR NRANKS}
# shellcheck source=tools/nccl_tests_lib.sh
source "$(dirname "$0")/nccl_tests_lib.sh"
nccl_tests_require "$dir"
dir=$(cd "$dir" && pwd)
export LD_LIBRARY_PATH="$dir/nccl:$dir/mpi/lib:$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
failed=0
for t in "$dir"/nccl-tests/*_perf; do
  name=$(basename "$t")
  out=$(NCCL_DEBUG=VERSION timeout -k 10 120 "$dir/bin/chorusrun" -n "$n" -x NCCL_TESTS_DEVICE=0 -- \
    "$t" -b 8 -e 8M -f 8 -g 1 -c 1 -n 5 -w 2 2>&1)
  rc=$?
  echo "$out"
  if [ $rc -ne 0 ]; then
    echo "== $name on $n ranks: FAILED (exit $rc$([ $rc -eq 124 ] && echo ', timed out after 120 s'))"
    failed=1
  elif ! echo "$out" | grep -q "Chorus version"; then
    echo "== $name on $n ranks: FAILED (no \"Chorus version\" line: it did not load $dir/nccl/libnccl.so.2)"
    failed=1
  elif ! echo "$out" | grep -q "Out of bounds values : 0 OK"; then
    echo "== $name on $n ranks: FAILED (wrong results)"
    failed=1
  else
    echo "== $name on $n ranks: ok"
  fi
done
[ $failed -eq 0 ] && echo "PASSED: every nccl-tests binary on $n ranks through $dir/nccl/libnccl.so.2"
exit $failed
