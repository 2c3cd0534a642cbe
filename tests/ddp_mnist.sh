#!/usr/bin/env bash
# The DDP trainer (examples/ddp_mnist.cc) on Fashion-MNIST, checked end to end:
#  1. 2 ranks under chorusrun: weights identical on every rank after every step, buckets rebuilt,
#     test accuracy well above chance (0.10);
#  2. 4 ranks with batch 16 against one rank whose batch is the union of the 4 shards: weights
#     within relative 1e-5 after 5 steps;
#  3. checkpoints: a run that saves after step 20 (rank 0 writes, all wait, all load) and a run
#     resumed from that file end with the same bits as an uninterrupted run;
#  4. the fp16 compression hook keeps the ranks identical;
#  5. 4 ranks under mpirun.
# Usage: ddp_mnist.sh BUILD_DIR
set -euo pipefail
build=$1
run="$build/chorusrun"
trainer="$build/examples/ddp_mnist"
data=/usr/share/datasets/fashion-mnist
if [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
  echo "FAIL: $data is missing: install dataset-fashion-mnist (tools/setup.sh does)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=(--bucket-cap-mb 0.25 --first-bucket-mb 0.05)  # several buckets for this 0.9 MiB model

echo "== 1. two ranks, 300 steps"
"$run" -n 2 -- "$trainer" --steps 300 --log-every 100 --check-sync --min-accuracy 0.70 "${small[@]}" | tee "$tmp/1.log"
grep -q "weights identical on all 2 ranks after each of 300 steps" "$tmp/1.log"
grep -q "rebuilt in ready order" "$tmp/1.log"

echo "== 2. four ranks of batch 16 against one rank of batch 64 (the union, in rank order)"
"$run" -n 4 -- "$trainer" --steps 5 --batch 16 --no-eval --log-every 0 --dump "$tmp/w4.bin" "${small[@]}"
"$trainer" --emulate-ranks 4 --steps 5 --batch 16 --no-eval --log-every 0 --compare "$tmp/w4.bin" --rtol 1e-5

echo "== 3. checkpoint: save after step 20 and go on; resume from the file"
common=(--steps 40 --no-eval --log-every 0 "${small[@]}")
"$run" -n 2 -- "$trainer" "${common[@]}" --dump "$tmp/straight.bin"
"$run" -n 2 -- "$trainer" "${common[@]}" --save "$tmp/ck" --save-at 20 --dump "$tmp/saved.bin"
"$run" -n 2 -- "$trainer" "${common[@]}" --resume "$tmp/ck" --dump "$tmp/resumed.bin"
cmp "$tmp/straight.bin" "$tmp/saved.bin"
cmp "$tmp/straight.bin" "$tmp/resumed.bin"
echo "same bits after 40 steps: straight, saved and reloaded, resumed"

echo "== 4. fp16 compression hook"
"$run" -n 2 -- "$trainer" --steps 50 --hook fp16 --check-sync --no-eval --log-every 0 "${small[@]}" | tee "$tmp/4.log"
grep -q "weights identical on all 2 ranks after each of 50 steps" "$tmp/4.log"

if command -v mpirun > /dev/null; then
  echo "== 5. four ranks under mpirun"
  # No CHORUS_COMM_ID: on one host the root's address comes from mpirun's job id.
  mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,tcp "$trainer" --steps 60 --check-sync --log-every 0 --min-accuracy 0.5 | tee "$tmp/5.log"
  grep -q "weights identical on all 4 ranks after each of 60 steps" "$tmp/5.log"
fi
echo "PASS"
