#!/usr/bin/env bash
# Time per training step of examples/ddp_mnist with the gradients reduced four ways, in alternating
# rounds (the machine is shared: each configuration's median over rounds of its per-run median):
#   bucketed   PyTorch's default caps (25 MiB, first bucket 1 MiB)
#   bucketed1  1 MiB buckets, first 0.25 MiB
#   single     one all-reduce after the whole backward
#   per-param  one all-reduce per parameter
# Usage: tools/bench_ddp.sh [BUILD_DIR] [ROUNDS] [RANKS...]   (default: build 3 2 4)
# Model: MLP 784-1024-1024-10 (1.86M parameters, 7.1 MiB of fp32 gradients), batch 16 per rank,
# 5 warm-up steps and 30 timed.
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
ranks=("$@")
[ ${#ranks[@]} -eq 0 ] && ranks=(2 4)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
configs=("bucketed|--buckets bucketed" "bucketed1|--buckets bucketed --bucket-cap-mb 1 --first-bucket-mb 0.25"
         "single|--buckets single" "per-param|--buckets per-param")
for ((round = 1; round <= rounds; ++round)); do
  for n in "${ranks[@]}"; do
    for c in "${configs[@]}"; do
      name=${c%%|*}
      args=${c#*|}
      # shellcheck disable=SC2086
      line=$("$build/chorusrun" -n "$n" -- "$build/examples/ddp_mnist" --hidden 1024,1024 --batch 16 --steps 35 \
        --bench --bench-warmup 5 --no-eval --log-every 0 $args | grep '^bench' || true)
      echo "round $round ranks $n $name: $line" >&2
      echo "$n $name $line" >> "$out"
    done
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    n, name, rest = line.split(" ", 2)
    kv = dict(re.findall(r"(\w+)=([\d.]+)", rest))
    if not kv:
        continue
    rows.setdefault((int(n), name), []).append(kv)
print("| ranks | reduction | buckets | ms/step (median) | comm ms/step | exposed ms/step | hidden |")
print("|---:|---|---:|---:|---:|---:|---:|")
for (n, name), runs in sorted(rows.items(), key=lambda x: (x[0][0], ["bucketed", "bucketed1", "single", "per-param"].index(x[0][1]))):
    med = lambda k: statistics.median(float(r[k]) for r in runs)
    print(f"| {n} | {name} | {int(med('buckets'))} | {med('median_ms_per_step'):.1f} | {med('comm_ms_per_step'):.1f} | "
          f"{med('exposed_ms_per_step'):.1f} | {med('hidden_fraction'):.2f} |")
PY
