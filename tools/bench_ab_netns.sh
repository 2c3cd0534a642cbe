#!/usr/bin/env bash
# Two builds of all_reduce_perf, A and B, between two hosts made of network namespaces
# (tests/multihost/netns_run.sh, one rank each, real TCP between 198.18.0.1 and .2), run in
# alternation (A, B, A, B, ...) so that the noise of a shared machine hits both alike. Prints, per
# size, the median time of rank 0 out of place and in place for each build and B's ratio to A.
# Needs root.
#
#   bash tools/bench_ab_netns.sh BIN_A BIN_B [ROUNDS] [-- all_reduce_perf arguments]
#   (default arguments: -b 8 -e 32M -f 4 -n 20 -w 5)
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench_ab_netns.sh BIN_A BIN_B [ROUNDS] [-- ARGS]" >&2; exit 2; }
a=$1
b=$2
shift 2
rounds=6
if [ $# -gt 0 ] && [ "$1" != -- ]; then rounds=$1; shift; fi
[ "${1:-}" = -- ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-b 8 -e 32M -f 4 -n 20 -w 5)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq 1 "$rounds"); do
  for v in A B; do
    bin=$a
    [ $v = B ] && bin=$b
    bash tests/multihost/netns_run.sh --timeout 600 1,1 -- "$bin" "${args[@]}" > "$out/$v.$round" 2>&1 ||
      { cat "$out/$v.$round"; exit 1; }
  done
done
python3 - "$out" <<'PYEOF'
import glob, re, statistics, sys
rows = {}
for f in glob.glob(sys.argv[1] + "/[AB].*"):
    v = f.rsplit("/", 1)[1][0]
    for line in open(f):
        m = re.match(r"\[host 0 rank 0\]\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+([\d.]+)", line)
        if m:
            rows.setdefault((v, int(m.group(1))), []).append((float(m.group(2)), float(m.group(3))))
print("%10s %12s %12s %12s %12s %8s %8s" % ("bytes", "A out us", "A in us", "B out us", "B in us", "B/A out", "B/A in"))
for size in sorted({k[1] for k in rows}):
    a, b = rows.get(("A", size), []), rows.get(("B", size), [])
    if not a or not b:
        continue
    ao, ai = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
    bo, bi = statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)
    print("%10d %12.1f %12.1f %12.1f %12.1f %8.2f %8.2f" % (size, ao, ai, bo, bi, bo / ao, bi / ai))
PYEOF
