#!/usr/bin/env bash
# The OFI network (libchorus-net-ofi.so over libfabric's tcp provider) against the socket network
# and against iperf3, between two hosts made of network namespaces (tests/multihost/netns_run.sh,
# one rank each, real TCP between 198.18.0.1 and 198.18.0.2), in one run. Each round measures, in
# this order and between the same two namespaces: iperf3 --bidir with one stream each way,
# sendrecv_perf and all_reduce_perf (float sum, 8 B to 64 MiB) over sockets, and the same two over
# the OFI network (CHORUS_NET_PLUGIN=<the plugin>, CHORUS_OFI_PROVIDER, default tcp). Prints one
# line per measurement and then the medians with OFI's ratio to sockets, and the largest size's
# bus bandwidth against iperf3's rate. Needs root; run after building (BUILD_DIR, default build).
#
#   bash tools/bench_ofi_netns.sh [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}

if [ "${1:-}" = --rank ]; then
  # One rank of one round, inside its namespace.
  round=$2
  out=$3
  iport=$((NETNS_PORT + 1))
  if [ "$NETNS_HOST" = 0 ]; then
    iperf3 -s -1 -p "$iport" > /dev/null
  else
    sleep 0.5
    iperf3 -c 198.18.0.1 -p "$iport" --bidir -t 4 -f g > "$out/iperf.$round" || exit 1
  fi
  args=(-b 8 -e 64M -f 4 -n 20 -w 5)
  for net in socket ofi; do
    plugin=""
    [ $net = ofi ] && plugin=$root/$build/libchorus-net-ofi.so
    for coll in sendrecv all_reduce; do
      CHORUS_NET_PLUGIN=$plugin CHORUS_OFI_PROVIDER=${CHORUS_OFI_PROVIDER:-tcp} \
        "$root/$build/perf/${coll}_perf" "${args[@]}" > "$out/$net.$coll.$round.$NETNS_HOST" || exit 1
    done
  done
  exit 0
fi

rounds=${1:-5}
bash tools/setup.sh bench > /dev/null
[ -x "$build/perf/all_reduce_perf" ] && [ -f "$build/libchorus-net-ofi.so" ] ||
  { echo "build first (BUILD_DIR=$build): bash tools/setup.sh build" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq 1 "$rounds"); do
  bash tests/multihost/netns_run.sh --timeout 900 1,1 -- bash "$root/tools/bench_ofi_netns.sh" --rank "$round" "$out" \
    > "$out/run.$round" 2>&1 || { cat "$out/run.$round"; exit 1; }
  awk -v r="$round" '/\[TX-C\].*receiver/ {tx=$(NF-2)} /\[RX-C\].*receiver/ {rx=$(NF-2)}
    END {print "iperf", r, tx, rx}' "$out/iperf.$round"
  for net in socket ofi; do
    for coll in sendrecv all_reduce; do
      grep -E "^ +[0-9]" "$out/$net.$coll.$round.0" | awk -v n=$net -v c=$coll -v r="$round" '{print n, c, r, $1, $6}'
    done
  done
done | tee "$out/all"
python3 - "$out/all" <<'PYEOF'
import statistics, sys
from collections import defaultdict
t = defaultdict(list)
iperf = []
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == "iperf":
        iperf.append((float(f[2]), float(f[3])))
    elif f and f[0] in ("socket", "ofi"):
        t[(f[0], f[1], int(f[3]))].append(float(f[4]))
med = statistics.median
print(f"\n{len(iperf)} rounds; medians of rank 0's out-of-place time (us); 2 ranks on 2 namespace hosts")
for coll in ("sendrecv", "all_reduce"):
    print(f"\n{coll}\n| bytes | sockets | OFI | OFI / sockets |\n|---:|---:|---:|---:|")
    for b in sorted({k[2] for k in t if k[1] == coll}):
        s, o = med(t[("socket", coll, b)]), med(t[("ofi", coll, b)])
        print(f"| {b} | {s:.1f} | {o:.1f} | {o / s:.2f} |")
if iperf:
    tx = med(x[0] for x in iperf)
    rx = med(x[1] for x in iperf)
    big = max(k[2] for k in t)
    print(f"\niperf3 --bidir, one stream each way: {tx:.2f} / {rx:.2f} Gbit/s ({tx / 8:.2f} / {rx / 8:.2f} GB/s)")
    for coll in ("sendrecv", "all_reduce"):
        for net in ("socket", "ofi"):
            us = med(t[(net, coll, big)])
            # sendrecv moves the message each way; a 2-rank all-reduce's bus bandwidth is bytes / time.
            gbs = big / 1e3 / us
            print(f"{coll} {net} at {big} B: {gbs:.2f} GB/s each way = {100 * gbs / (min(tx, rx) / 8):.0f}% of iperf3")
PYEOF
