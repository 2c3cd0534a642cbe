#!/usr/bin/env bash
# tools/compare_peers.py end to end, small: it builds the peers (perf/peers/), runs Chorus, Open
# MPI and Gloo at 2 ranks from 8 B to 256 KiB for one round, and must exit 0 (each contender
# answered every size with no wrong element); its JSON must hold every contender at every size
# and the copy limit from 64 KiB, and its table the ratio columns. Skips (77) without Gloo's
# headers (libgloo-dev; tools/setup.sh installs it). Its first sweep is the quick look's
# (--help: 8:64K:8, which stops at 32 KiB): no command may fail there either, the copy limit
# included (it once asked copy_limit for -b 256K -e 64K and the run still exited 0). Then
# --stream null and --before, small.
#   compare_peers_check.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1
build=$2
if [ ! -f /usr/include/gloo/allreduce.h ]; then
  echo "skipped: libgloo-dev is not installed (bash tools/setup.sh bench installs it)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$src/tools/compare_peers.py" --build "$build" --np 2 --rounds 1 --sweeps 8:64K:8,64K:256K:4 --iters 5 \
  --json "$dir/out.json" > "$dir/table" 2> "$dir/log"
rc=$?
cat "$dir/table"
[ $rc -eq 0 ] || { echo "FAIL: compare_peers.py exited $rc"; tail -n 30 "$dir/log"; exit 1; }
if grep -E "^compare_peers.py: (exit|timed out)" "$dir/log"; then
  echo "FAIL: a command failed and compare_peers.py still exited 0"
  exit 1
fi
grep -q "^| size | Chorus | Open MPI | Gloo | Chorus busbw | limit | x Open MPI | x Gloo |$" "$dir/table" ||
  { echo "FAIL: no side-by-side table"; exit 1; }
python3 - "$dir/out.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
sizes = [8, 64, 512, 4096, 32768, 65536, 262144]
for s in sizes:
    med = d["2"][str(s)]["median"]
    want = {"chorus", "openmpi", "gloo"} | ({"limit"} if s >= 65536 else set())
    assert set(med) == want, (s, sorted(med))
    for who, (us, busbw, wrong) in med.items():
        assert us > 0 and busbw > 0 and wrong == 0, (s, who, med[who])
assert set(d["2"]) == {str(s) for s in sizes}, sorted(d["2"])
assert d["meta"]["rounds"] == 1
PY
# The NULL stream, with the same build as an earlier one beside it (--before): its column and
# ratio are there and it answered every size.
python3 "$src/tools/compare_peers.py" --build "$build" --before "$build" --stream null --np 2 --rounds 1 \
  --sweeps 8:512:8 --iters 5 --peers openmpi --json "$dir/null.json" > "$dir/null" 2> "$dir/log"
rc=$?
cat "$dir/null"
[ $rc -eq 0 ] || { echo "FAIL: compare_peers.py --stream null --before exited $rc"; tail -n 30 "$dir/log"; exit 1; }
grep -q "Chorus on the NULL stream" "$dir/null" || { echo "FAIL: the table does not say the NULL stream"; exit 1; }
grep -q "^| size | Chorus | Chorus before | Open MPI | Chorus busbw | x Chorus before | x Open MPI |$" "$dir/null" ||
  { echo "FAIL: no 'Chorus before' columns"; exit 1; }
python3 - "$dir/null.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
assert d["meta"]["stream"] == "null", d["meta"]
for s in (8, 64, 512):
    med = d["2"][str(s)]["median"]
    assert set(med) == {"chorus", "before", "openmpi"}, (s, sorted(med))
    assert all(m[0] > 0 and m[2] == 0 for m in med.values()), (s, med)
PY
echo "compare_peers.py: every contender at every size, no wrong element"

