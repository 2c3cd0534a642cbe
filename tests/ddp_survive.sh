#!/usr/bin/env bash
# Training that survives a lost rank (examples/ddp_mnist.cc --survive), on Fashion-MNIST:
#  1. 3 ranks under chorusrun, half an epoch, uninterrupted: the accuracy to compare with;
#  2. the same with rank 2 killed (SIGKILL) as step 100 begins (chorusrun --keep-going lets the
#     others go on): both survivors shrink the communicator, rebuild the reducer, agree to go on
#     from step 100 and finish the half epoch on 2 ranks, their weights identical after every
#     step; the accuracy within 0.03 of the uninterrupted run's;
#  3. the same across namespace hosts (2 ranks on host 0, the victim alone on host 1), over the
#     socket network; skipped where namespaces cannot be made.
# Usage: ddp_survive.sh BUILD_DIR
set -uo pipefail
build=$1
here=$(dirname "$0")
run="$build/chorusrun"
trainer="$build/examples/ddp_mnist"
data=/usr/share/datasets/fashion-mnist
if [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
  echo "FAIL: $data is missing: install dataset-fashion-mnist (tools/setup.sh does)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--epochs 0.5 --check-sync --log-every 100 --min-accuracy 0.70)
fail() { echo "FAIL: $*"; exit 1; }
accuracy() { grep -o "test accuracy [0-9.]*" "$1" | awk '{print $3}'; }

echo "== 1. three ranks, half an epoch, uninterrupted"
"$run" -n 3 -- "$trainer" "${common[@]}" | tee "$tmp/1.log" || fail "the uninterrupted run failed"
a0=$(accuracy "$tmp/1.log")

check_survived() {  # LOG: the survivors' lines
  grep -q "lost rank 2 in step 100: 2 of 3 ranks go on from step 100" "$1" || fail "no survivor said it went on"
  grep -q "weights identical on all 2 ranks" "$1" || fail "the survivors' weights were not checked identical"
  local a1
  a1=$(accuracy "$1")
  [ -n "$a1" ] || fail "no accuracy after the loss"
  echo "accuracy: uninterrupted $a0, after losing rank 2 at step 100: $a1"
  awk -v a="$a0" -v b="$a1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.03) }' ||
    fail "the accuracy after the loss ($a1) is more than 0.03 from the uninterrupted run's ($a0)"
}

echo "== 2. rank 2 killed as step 100 begins; the others go on"
"$run" -n 3 --keep-going -- "$trainer" "${common[@]}" --survive --kill-rank 2 --kill-at 100 | tee "$tmp/2.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 137 ] || fail "chorusrun exited $rc, expected 137 (the victim's SIGKILL, the others clean)"
check_survived "$tmp/2.log"

echo "== 3. the same across namespace hosts (2,1)"
bash "$here/multihost/netns_run.sh" --timeout 300 2,1 -- \
  "$trainer" "${common[@]}" --survive --kill-rank 2 --kill-at 100 > "$tmp/3.log" 2>&1
rc=$?
cat "$tmp/3.log"
if [ $rc -eq 77 ]; then
  echo "SKIP 3: network namespaces cannot be made here"
else
  grep -q "rank 2 (host 1) exited with code 137" "$tmp/3.log" || fail "the victim did not die as asked"
  grep -q "rank [01] (host 0) exited" "$tmp/3.log" && fail "a survivor failed"
  check_survived "$tmp/3.log"
fi
echo "PASS"
