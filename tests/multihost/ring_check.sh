#!/usr/bin/env bash
# Ranks 0..3 on two fake hosts, interleaved (0 and 2 on one, 1 and 3 on the other): every rank
# must log the ring "0 2 1 3" (each host's ranks together, entered once), rank 0 must dump the
# same in CHORUS_TOPO_DUMP_FILE with trees over both hosts, and the all-reduce must be right.
#   ring_check.sh CHORUSRUN PERF_BINARY
set -uo pipefail
chorusrun=$1
perf=$2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT CHORUS_TOPO_DUMP_FILE="$dir/topo.json" \
  "$chorusrun" -n 4 -- bash "$here/fake_hosts.sh" 2 -- "$perf" -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 \
  > "$dir/out" 2> "$dir/err" || { cat "$dir/out" "$dir/err"; echo "FAIL: the run failed"; exit 1; }
status=0
n=$(grep -c "Channel 00/01 : 0 2 1 3 " "$dir/err")
[ "$n" -eq 4 ] || { echo "FAIL: $n of 4 ranks logged the ring 0 2 1 3"; grep "Channel 00" "$dir/err"; status=1; }
grep -q "Out of bounds values : 0 OK" "$dir/out" || { echo "FAIL: wrong results"; cat "$dir/out"; status=1; }
python3 - "$dir/topo.json" <<'PY' || status=1
import json, sys
t = json.load(open(sys.argv[1]))
assert t["nranks"] == 4, t
assert [h["ranks"] for h in t["hosts"]] == [[0, 2], [1, 3]], t["hosts"]
assert t["channels"][0]["ring"] == [0, 2, 1, 3], t["channels"]
assert t["channels"][0]["bottleneck"] == "network", t["channels"]
for tree in t["trees"]:
    parent = tree["parent"]
    assert parent[tree["root"]] == -1
    assert sorted(parent).count(-1) == 1, tree
    # within a host the second rank hangs below the first; across hosts only first ranks link
    assert parent[2] == 0 and parent[3] == 1, tree
print("topology dump as expected")
PY
[ $status -eq 0 ] && echo "ring 0 2 1 3 on every rank, results correct"
exit $status
