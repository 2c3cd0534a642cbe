#!/usr/bin/env bash
# The DDP trainer on a GPU (examples/ddp_mnist.cc --device cuda), ranks as processes sharing one GPU
# (tools/gpu_check.sh step ddp_mnist_gpu):
#  1. 2 and 4 ranks: weights identical on every rank after every step (5 steps); one rank trained on
#     the union of their batches ends within relative 1e-5 of them; the host trainer with the same
#     ranks, data and seeds ends within relative 1e-5 of the device trainer;
#  2. the fp16 hook on device gradients keeps 2 ranks identical;
#  3. step time with overlap (small buckets, each all-reduced as backward produces it) and without
#     (one bucket after the backward), 2 ranks: the medians and the part of communication hidden.
# Usage: ddp_gpu_check.sh DIR   (DIR/bin: chorusrun and ddp_mnist; DIR/data: the data set, or
#                                /usr/share/datasets/fashion-mnist)
set -euo pipefail
dir=$1
run="$dir/bin/chorusrun"
trainer="$dir/bin/ddp_mnist"
data="$dir/data"
[ -e "$data/train-images-idx3-ubyte.gz" ] || data=/usr/share/datasets/fashion-mnist
if ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  echo "SKIP: no GPU on this machine"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small=(--bucket-cap-mb 0.25 --first-bucket-mb 0.05)
for n in 2 4; do
  echo "== 1. $n ranks on the GPU, 5 steps of batch 16"
  "$run" -n "$n" -- "$trainer" --device cuda --data "$data" --steps 5 --batch 16 --check-sync --no-eval \
    --log-every 1 --dump "$tmp/gpu$n.bin" "${small[@]}" | tee "$tmp/gpu$n.log"
  grep -q "weights identical on all $n ranks after each of 5 steps" "$tmp/gpu$n.log"
  echo "-- one rank on the union of the $n batches, on the GPU"
  "$trainer" --device cuda --data "$data" --emulate-ranks "$n" --steps 5 --batch 16 --no-eval --log-every 0 \
    --compare "$tmp/gpu$n.bin" --rtol 1e-5
  echo "-- the host trainer, $n ranks, same data and seeds"
  "$run" -n "$n" -- "$trainer" --device host --data "$data" --steps 5 --batch 16 --no-eval --log-every 0 \
    --compare "$tmp/gpu$n.bin" --rtol 1e-5 "${small[@]}"
done
echo "== 2. the fp16 hook on device gradients"
"$run" -n 2 -- "$trainer" --device cuda --data "$data" --steps 30 --hook fp16 --check-sync --no-eval --log-every 0 \
  "${small[@]}" | tee "$tmp/fp16.log"
grep -q "weights identical on all 2 ranks after each of 30 steps" "$tmp/fp16.log"
echo "== 3. step time, 2 ranks, batch 64: overlap (buckets) and none (one bucket after the backward)"
for b in bucketed single; do
  "$run" -n 2 -- "$trainer" --device cuda --data "$data" --steps 80 --batch 64 --bench --bench-warmup 20 \
    --buckets "$b" --no-eval --log-every 0 "${small[@]}" | grep '^bench'
done
echo "PASS"
