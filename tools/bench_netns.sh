#!/usr/bin/env bash
# Two hosts made of network namespaces (tests/multihost/netns_run.sh), one rank each, real TCP
# between 198.18.0.1 and 198.18.0.2. Each round measures, in this order and between the same two
# namespaces: what iperf3 -P 4 --bidir moves each way, Chorus's all_reduce_perf (float sum, 8 B to
# 64 MiB), and Gloo's all-reduce (perf/peers/gloo_allreduce.cc, built here against libgloo-dev,
# which `bash tools/setup.sh bench` installs). Rounds alternate so bursts of noise on a shared machine hit all three alike. Prints one
# line per measurement:
#   iperf  round  tx-Gbit/s  rx-Gbit/s
#   chorus round  bytes  out-of-place-us  in-place-us
#   gloo   round  bytes  us
#   steal  round  percent of the CPU time the hypervisor took for others during the round
# and then the medians (tools/bench_netns_summary.py). Needs root; run after building.
#
#   bash tools/bench_netns.sh [ROUNDS]       extra environment (CHORUS_*) reaches every Chorus rank
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${1:-}" = --rank ]; then
  # One rank of one round, inside its namespace (NETNS_* and CHORUS_* come from netns_run.sh).
  round=$2
  out=$3
  iport=$((NETNS_PORT + 1))
  if [ "$NETNS_HOST" = 0 ]; then
    iperf3 -s -1 -p "$iport" > /dev/null
  else
    sleep 0.5
    iperf3 -c 198.18.0.1 -p "$iport" -P 4 --bidir -t 5 -f g > "$out/iperf.$round" || exit 1
  fi
  "$root/build/perf/all_reduce_perf" -b 8 -e 64M -f 2 -n 20 -w 5 > "$out/chorus.$round.$NETNS_HOST" || exit 1
  if [ -x "$out/gloo_allreduce" ]; then
    "$out/gloo_allreduce" -b 8 -e 67108864 -f 2 -n 20 -w 5 -s "$out/store.$round" -H "$NETNS_ADDR" \
      > "$out/gloo.$round.$NETNS_HOST" || exit 1
  fi
  exit 0
fi

rounds=${1:-5}
bash tools/setup.sh bench
[ -x build/perf/all_reduce_perf ] || { echo "build first: bash tools/setup.sh build" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -O3 -std=c++17 perf/peers/gloo_allreduce.cc -o "$out/gloo_allreduce" -lgloo -lpthread ||
  { echo "building perf/peers/gloo_allreduce.cc failed" >&2; exit 1; }
steal() { awk '/^cpu / {print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
for round in $(seq 1 "$rounds"); do
  mkdir -p "$out/store.$round"
  read -r s0 t0 < <(steal)
  bash tests/multihost/netns_run.sh --timeout 600 1,1 -- bash "$root/tools/bench_netns.sh" --rank "$round" "$out" \
    > "$out/run.$round" 2>&1 || { cat "$out/run.$round"; exit 1; }
  read -r s1 t1 < <(steal)
  # Time the hypervisor gave to others during the round (a shared machine's noise).
  echo "steal $round $(awk -v a=$((s1 - s0)) -v b=$((t1 - t0)) 'BEGIN {printf "%.1f", b ? 100 * a / b : 0}')"
  awk -v r="$round" '/SUM.*\[TX-C\].*receiver/ {tx=$(NF-2)} /SUM.*\[RX-C\].*receiver/ {rx=$(NF-2)}
    END {print "iperf", r, tx, rx}' "$out/iperf.$round"
  grep -E "^ +[0-9]" "$out/chorus.$round.0" | awk -v r="$round" '{print "chorus", r, $1, $6, $10}'
  [ -f "$out/gloo.$round.0" ] && grep -E "^ +[0-9]" "$out/gloo.$round.0" | awk -v r="$round" '{print "gloo", r, $1, $6}'
done | tee "$out/all"
python3 tools/bench_netns_summary.py "$out/all"
