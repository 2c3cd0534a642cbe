#!/usr/bin/env bash
# The perf tools as nccl-tests users drive them:
#  - every nccl-tests flag is accepted, long and short; GPU-only ones are noted and ignored;
#  - bad sizes and values are refused with a message and exit code 2, before anything runs;
#  - NCCL_TESTS_MIN_BW fails a run whose average bus bandwidth is below 90% of it;
#  - -J streams rows in nccl-tests' JSON layout: a run killed partway leaves a valid file with
#    the rows it finished; an existing file is not overwritten; secrets stay out of it;
#  - the header has the version and one line per rank; the count column is the call's count;
#  - -N repeats the sweep; tools/plot_perf.py draws one line per type/op/root of an -o all file,
#    in one panel per op and root (a line per type), and refuses a panel of too many lines.
#   perf_check.sh CHORUSRUN PERF_DIR SOURCE_DIR
set -uo pipefail
run=$1
perf=$2
src=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
ar=$perf/all_reduce_perf

# Every flag of nccl-tests 2.19, short form.
"$ar" -t 2 -g 1 -b 8 -e 1K -i 8 -f 4 -n 4 -m 1 -w 1 -N 1 -p 1 -I 1 -K 1 -c 2 -o sum -d float -r 0 -z 3 -y 0 \
  -T 60 -G 2 -C 0 -a 1 -R 2 -x 1 -D 1 -V 8 -J "$dir/all.json" -S 1 -M 1 -u 1 > "$dir/all" 2>&1 ||
  fail "every flag: exit $?: $(tail -3 "$dir/all")"
for note in "-G 2 (CUDA graphs)" "-x (CTA policy)" "-D (device implementation)" "-V (device CTA count)" "-R 2 (symmetric"; do
  grep -qF -- "# Note: $note" "$dir/all" || fail "no note for $note"
done
grep -q "Parallel Init Enabled" "$dir/all" || fail "-p 1 not reported"
grep -q "Host memory usage" "$dir/all" || fail "-M 1 printed no memory line"
grep -q "i_p99" "$dir/all" || fail "-I 1 printed no per-iteration columns"
grep -Eq "^ +8 +2 +float +sum +-1 .* [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}$" "$dir/all" || fail "-S 1 printed no timestamp"
# Long forms.
"$ar" --nthreads 2 --ngpus 1 --minbytes 64 --maxbytes 256 --stepfactor 2 --iters 2 --agg_iters 2 --warmup_iters 1 \
  --run_cycles 1 --parallel_init 0 --check 1 --op max --datatype int32 --root 0 --blocking 1 --stream_null 1 \
  --timeout 60 --cudagraph 0 --report_cputime 1 --report_timestamps 0 --average 3 --local_register 1 \
  --memory 0 --unalign 0 --per_iter_timing 0 --per_iter_skip 0 > "$dir/long" 2>&1 ||
  fail "long options: exit $?: $(tail -3 "$dir/long")"
grep -q "cputime" "$dir/long" || fail "-C 1 did not label the time column cputime"

# Refused before anything runs, exit 2, with what to fix.
refused() {
  local want=$1
  shift
  "$ar" -t 2 "$@" > "$dir/bad" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] || fail "'$*' exited $rc, not 2"
  grep -qF -- "$want" "$dir/bad" || fail "'$*' did not say '$want': $(cat "$dir/bad")"
  grep -q "size.*count.*type" "$dir/bad" && fail "'$*' printed a table"
}
refused "invalid size 'foo' for -b" -b foo
refused "invalid size '1X' for -e" -e 1X
refused "invalid size '-4' for -i" -i -4
refused "-b 67108864 is more than -e 1048576" -b 64M -e 1M
refused "-n (iters) must be at least 1" -n 0
refused "unknown -d floaty" -d floaty
refused "unknown -o mulsum" -o mulsum
refused "-z (blocking) must be 0, 1, 2 or 3" -z 4
NCCL_TESTS_MIN_BW=fast refused "NCCL_TESTS_MIN_BW=fast is not a bandwidth"

# NCCL_TESTS_MIN_BW: below 90% fails (exit 3), met passes.
NCCL_TESTS_MIN_BW=100000 "$ar" -t 2 -b 1K -e 4K -f 2 -n 2 -w 1 -J "$dir/minbw.json" > "$dir/minbw" 2>&1
rc=$?
[ "$rc" -eq 3 ] || fail "NCCL_TESTS_MIN_BW above the bandwidth: exit $rc, not 3"
grep -q "Avg bus bandwidth .* FAILED" "$dir/minbw" || fail "NCCL_TESTS_MIN_BW: no FAILED on the bandwidth line"
NCCL_TESTS_MIN_BW=0 "$ar" -t 2 -b 1K -e 4K -f 2 -n 2 -w 1 > "$dir/minbw0" 2>&1 || fail "NCCL_TESTS_MIN_BW=0 failed"
grep -q "Avg bus bandwidth .* OK" "$dir/minbw0" || fail "NCCL_TESTS_MIN_BW=0: no OK on the bandwidth line"

# The header under chorusrun: the version, and a line per rank with its own pid.
"$run" -n 3 -- "$perf/all_gather_perf" -b 1K -e 1K -n 2 -w 1 > "$dir/ranks" 2>&1 || fail "all_gather_perf under chorusrun failed"
grep -Eq "^# Chorus perf tests .*chorus-library=[0-9]+\.[0-9]+\.[0-9]+$" "$dir/ranks" || fail "no version in the header"
pids=$(grep -E "^#  Rank +[0-2] Group +0 Pid +[0-9]+ on .* device host" "$dir/ranks" | awk '{print $7}' | sort -u | wc -l)
[ "$pids" -eq 3 ] || fail "the header has $pids distinct rank lines, not 3: $(grep Rank "$dir/ranks")"
# nccl-tests' count column is the call's count: 1 KiB of floats gathered from 3 ranks, 85 each.
grep -Eq "^ +1020 +85 +float +none +-1 " "$dir/ranks" || fail "all_gather's count column is not the call's count"

# -N 2 runs the sweep twice.
"$ar" -t 2 -b 8 -e 64 -f 8 -n 2 -w 0 -N 2 > "$dir/cycles" 2>&1 || fail "-N 2 failed"
rows=$(grep -cE "^ +(8|64) +" "$dir/cycles")
[ "$rows" -eq 4 ] || fail "-N 2 over 2 sizes printed $rows rows, not 4"

python3 - "$dir" <<'PY' || fail "the JSON files"
import json, sys
d = sys.argv[1]
run = json.load(open(f"{d}/all.json"))
for key in ("version", "start_time", "args", "env", "config", "results", "out_of_bounds", "average_bus_bandwidth",
            "errors", "end_time"):
    assert key in run, f"all.json lacks {key}"
assert run["version"] == 3 and run["config"]["nthreads"] == 2 and len(run["config"]["devices"]) == 2
sizes = [r["size"] for r in run["results"]]
assert sizes == [8, 32, 128, 512], sizes
r = run["results"][0]
assert r["root"] == "    -1" and r["redop"] == "sum" and r["count"] == 2, r
for col in ("out_of_place", "in_place"):
    assert set(r[col]) == {"time", "alg_bw", "bus_bw", "nwrong"} and r[col]["nwrong"] == 0, r[col]
    per = r[col + "_per_iter"]
    assert per["skipped_iterations"] == 1 and len(per["times_us"]) == 4, per
assert run["out_of_bounds"] == {"count": 0, "okay": "true"}, run["out_of_bounds"]
assert run["average_bus_bandwidth"]["okay"] == "unchecked"
low = json.load(open(f"{d}/minbw.json"))
assert low["average_bus_bandwidth"]["okay"] == "false", low["average_bus_bandwidth"]
PY

# Streaming: a run killed partway leaves a valid file with the rows it finished.
CHORUS_COMM_SECRET=hunter2 "$ar" -t 2 -b 8 -e 8K -f 2 -n 2 -w 0 -N 0 -J "$dir/stream.json" > "$dir/stream" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  python3 -c "import json,sys; sys.exit(len(json.load(open(sys.argv[1]))['results']) < 20)" "$dir/stream.json" \
    2> /dev/null && break
  sleep 0.1
done
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
python3 - "$dir/stream.json" <<'PY' || fail "the file of a killed run"
import json, sys
run = json.load(open(sys.argv[1]))
assert len(run["results"]) >= 20, len(run["results"])
assert "end_time" not in run
env = [e for e in run["env"] if e.startswith("CHORUS_COMM_SECRET=")]
assert env == ["CHORUS_COMM_SECRET=<redacted>"], env
PY
# An existing file is kept: the next run writes FILE.0.
"$ar" -t 2 -b 8 -e 8 -n 1 -w 0 -J "$dir/stream.json" > "$dir/again" 2>&1 || fail "a second -J run failed"
grep -qF "Writing JSON output to $dir/stream.json.0" "$dir/again" || fail "an existing -J file was not kept"

# plot_perf.py: one line per type/op/root of an -o all -d all file (its grouping needs no matplotlib).
"$perf/reduce_perf" -t 2 -b 8 -e 64 -f 8 -n 1 -w 0 -c 0 -d all -o all -r -1 -J "$dir/reduce.json" > /dev/null 2>&1 ||
  fail "reduce_perf -o all -d all failed"
python3 - "$src/tools" "$dir/reduce.json" <<'PY' || fail "plot_perf.py's lines"
import json, sys
sys.path.insert(0, sys.argv[1])
import plot_perf
series = plot_perf.perf_series(json.load(open(sys.argv[2])), "out_of_place", "reduce")
assert len(series) == 12 * 5 * 2, len(series)  # types x ops x roots
assert all(len(pts) == 2 for pts in series.values())
assert "reduce half avg root 1" in series, sorted(series)[:5]
groups = plot_perf.perf_groups(json.load(open(sys.argv[2])), "out_of_place")
split = plot_perf.panels([("reduce", groups)])
assert sorted(split) == sorted((op, r) for op in ("avg", "max", "min", "prod", "sum") for r in ("0", "1")), sorted(split)
assert all(len(lines) == 12 and "half" in lines for lines in split.values())
assert len(plot_perf.panels([("a", groups), ("b", groups)])[("sum", "0")]) == 24
try:
    plot_perf.panels([(l, groups) for l in "abc"])
    raise SystemExit("36 lines in a panel were not refused")
except ValueError as e:
    assert "36 lines in the panel of op avg, root 0" in str(e), e
PY

[ "$failures" -eq 0 ] || exit 1
echo "perf check passed"
