#!/usr/bin/env bash
# tools/gpu_check.sh on a machine without a GPU: every check shows as skipped, none as passed (a
# host-only check would pass there), and the script exits 77; without prepared programs it says
# what to run. On a machine with a GPU this check itself skips.
#   gpu_check_nogpu.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: gpu_check_nogpu.sh SOURCE_DIR}
if nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  echo "SKIP: this machine has a GPU"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
bash "$src/tools/gpu_check.sh" run "$tmp/out" "$tmp/none" > "$tmp/unprepared" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "tools/gpu_check.sh prepare" "$tmp/unprepared"; then
  echo "FAIL: without prepared programs: exit $rc, and no hint to run prepare:"
  cat "$tmp/unprepared"
  failed=1
fi
mkdir -p "$tmp/dir/bin"
bash "$src/tools/gpu_check.sh" run "$tmp/out" "$tmp/dir" > "$tmp/run" 2>&1
rc=$?
lines=$(grep -c . "$tmp/out/summary.txt")
skipped=$(grep -c "skipped (no GPU on this machine)" "$tmp/out/summary.txt")
if [ $rc -ne 77 ] || [ "$lines" -lt 2 ] || [ "$skipped" -ne $((lines - 1)) ] || grep -q " passed" "$tmp/out/summary.txt"; then
  echo "FAIL: without a GPU: exit $rc (want 77), $skipped of $((lines - 1)) checks skipped:"
  cat "$tmp/out/summary.txt"
  failed=1
fi
# The next run's three groups: each its own summary and logs (no device.txt beside them), every
# named check skipped, exit 77.
bash "$src/tools/gpu_check.sh" next "$tmp/next" "$tmp/dir" > "$tmp/nextrun" 2>&1
rc=$?
files=$(cd "$tmp/next" && find . -type f | sort | tr '\n' ' ')
want="./a/logs.tgz ./a/summary.txt ./b/logs.tgz ./b/summary.txt ./c/logs.tgz ./c/summary.txt "
nextSkipped=$(cat "$tmp"/next/*/summary.txt | grep -c "skipped (no GPU on this machine)")
# The checks the groups name ("budget|group|check check ..." in the script's `next`).
nextWant=$(sed -n '/^    groups=(/,/^    )/p' "$src/tools/gpu_check.sh" | grep -o '"[0-9]*|[a-z]|[^"]*"' | cut -d'|' -f3 |
  tr -d '"' | wc -w)
if [ $rc -ne 77 ] || [ "$files" != "$want" ] || [ "$nextWant" -lt 1 ] || [ "$nextSkipped" -ne "$nextWant" ] ||
  grep -q " passed" "$tmp"/next/*/summary.txt; then
  echo "FAIL: next without a GPU: exit $rc (want 77), files '$files' (want '$want'), $nextSkipped of $nextWant checks skipped:"
  cat "$tmp/nextrun"
  failed=1
fi
[ $failed -eq 0 ] && echo "PASSED: without a GPU every one of the $skipped checks shows as skipped (exit 77), and the next run's $nextWant in its three groups; unprepared, it says to run prepare"
exit $failed
