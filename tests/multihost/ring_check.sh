#!/usr/bin/env bash
# Ranks 0..3 on two fake hosts, interleaved (0 and 2 on one, 1 and 3 on the other): every rank
# must log the ring "0 2 1 3" (each host's ranks together, entered once), rank 0 must dump the
# same in CHORUS_TOPO_DUMP_FILE with trees over both hosts, the tuner must send each size to the
# schedule its estimates choose (direct, then tree, then ring), and the all-reduce must be right.
# A dump must read back through CHORUS_TOPO_FILE into the same topology.
#   ring_check.sh CHORUSRUN PERF_BINARY
set -uo pipefail
chorusrun=$1
perf=$2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT,COLL CHORUS_TOPO_DUMP_FILE="$dir/topo.json" \
  "$chorusrun" -n 4 -- bash "$here/fake_hosts.sh" 2 -- "$perf" -b 8 -e 2M -f 64 -n 2 -w 1 -c 1 \
  > "$dir/out" 2> "$dir/err" || { cat "$dir/out" "$dir/err"; echo "FAIL: the run failed"; exit 1; }
status=0
n=$(grep -c "Channel 00/01 : 0 2 1 3 " "$dir/err")
[ "$n" -eq 4 ] || { echo "FAIL: $n of 4 ranks logged the ring 0 2 1 3"; grep "Channel 00" "$dir/err"; status=1; }
grep -q "Out of bounds values : 0 OK" "$dir/out" || { echo "FAIL: wrong results"; cat "$dir/out"; status=1; }
# Sizes 8, 512, 32768 and 2097152 B: across hosts 2 x 2 ranks send at most 64 KiB / 2 / 3 = 10922 B
# direct (CHORUS_DIRECT_MAX_BYTES, halved across hosts), and the tree's estimate (two 20 us
# network hops fewer than the ring's) beats the ring's up to about 50 KiB: the exact end moves with
# the tuning table's host rows (docs/topology.md, "The tuner").
grep -Eq "Tuner: host all-reduce direct up to 10922 B, tree up to [3-6][0-9]{4} B, ring beyond" "$dir/err" ||
  { echo "FAIL: no tuner line with the expected limits"; grep Tuner "$dir/err"; status=1; }
for want in "count 2 datatype float32 algo direct" "count 128 datatype float32 algo direct" \
            "count 8192 datatype float32 algo tree" "count 524288 datatype float32 algo ring"; do
  n=$(grep -c "AllReduce opCount [0-9]* $want" "$dir/err")
  [ "$n" -ge 4 ] || { echo "FAIL: $n lines of '$want' (want one per rank at least)"; status=1; }
done
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
tuner = t["tuner"]
assert tuner["allReduceDirectMaxBytes"] == 10922 and 32768 < tuner["allReduceTreeMaxBytes"] < 70000, tuner
print("topology dump as expected")
PY
# The dump reads back: a job on a replayed machine (hwloc XML) dumps its topology; the same job on
# that dump (CHORUS_TOPO_FILE) builds the same machine, rings, trees and tuner limits.
xml="$here/../data/topologies/32em64t-2n8c2t-pci-normalio.xml"
CHORUS_TOPO_FILE=$xml CHORUS_TOPO_DUMP_FILE="$dir/d1.json" "$chorusrun" -n 4 -- "$perf" -b 8 -e 8 -n 1 -w 0 \
  > "$dir/d1.out" 2>&1 || { echo "FAIL: the run on $xml failed"; cat "$dir/d1.out"; status=1; }
CHORUS_TOPO_FILE="$dir/d1.json" CHORUS_TOPO_DUMP_FILE="$dir/d2.json" "$chorusrun" -n 4 -- "$perf" -b 8 -e 8 -n 1 -w 0 \
  > "$dir/d2.out" 2>&1 || { echo "FAIL: the run on its dump failed"; cat "$dir/d2.out"; status=1; }
cmp -s "$dir/d1.json" "$dir/d2.json" || { echo "FAIL: the topology read back from a dump differs"; diff "$dir/d1.json" "$dir/d2.json" | head; status=1; }
grep -q '"gpus": \[' "$dir/d2.json" && python3 -c "import json,sys; sys.exit(len(json.load(open('$dir/d2.json'))['hosts'][0]['gpus']) != 3)" ||
  { echo "FAIL: the dump lost the replayed machine's 3 GPUs"; status=1; }
echo '{"not": "a dump"}' > "$dir/other.json"
CHORUS_TOPO_FILE="$dir/other.json" "$chorusrun" -n 2 -- "$perf" -b 8 -e 8 -n 1 -w 0 > "$dir/other.out" 2>&1 &&
  { echo "FAIL: a JSON file that is no dump was accepted"; status=1; }
grep -q "other.json (CHORUS_TOPO_FILE) is JSON but not a topology CHORUS_TOPO_DUMP_FILE wrote" "$dir/other.out" ||
  { echo "FAIL: a JSON file that is no dump was not named"; cat "$dir/other.out"; status=1; }
[ $status -eq 0 ] && echo "ring 0 2 1 3 on every rank, sizes tuned as estimated, results correct"
exit $status
