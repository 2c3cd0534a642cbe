#!/usr/bin/env bash
# Logging settings behave as NCCL users expect (two ranks under chorusrun, the example program
# and all_reduce_perf):
#  - CHORUS_DEBUG and CHORUS_DEBUG_SUBSYS match in any case; unknown levels and subsystems are
#    reported and ignored, never fatal;
#  - CHORUS_DEBUG=INFO shows init, bootstrap and environment lines, not a line per operation, with
#    the version line and "X set by environment to Y"; VERSION shows the version line alone;
#  - an unknown CHORUS_* variable (a typo) is warned about with the nearest known name;
#  - CHORUS_DEBUG_FILE writes the log to a file (%h host, %p pid) instead of stderr;
#  - error messages carry no source paths, unless CHORUS_DEBUG=TRACE (then relative ones);
#  - the tuner's INFO line says when CHORUS_ALGO forces an algorithm;
#  - a program started with no launcher runs as a job of one rank (chorusCommInitFromEnv).
#   settings_check.sh CHORUSRUN EXAMPLE ALL_REDUCE_PERF
set -uo pipefail
run=$1
example=$2
perf=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# ok NAME ENV... : the example must succeed; its output goes to $dir/NAME.
ok() {
  local name=$1
  shift
  env "$@" "$run" -n 2 -- "$example" > "$dir/$name" 2>&1 || fail "$name: the job failed: $(tail -3 "$dir/$name")"
}

ok info_case CHORUS_DEBUG=Info CHORUS_DEBUG_SUBSYS=init
grep -q "CHORUS INFO" "$dir/info_case" || fail "CHORUS_DEBUG=Info showed no INFO line"
ok subsys_nccl CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT,TUNING
ok subsys_unknown CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=init,bogus
grep -q "CHORUS_DEBUG_SUBSYS names BOGUS" "$dir/subsys_unknown" || fail "an unknown subsystem was not reported"
ok level_unknown CHORUS_DEBUG=LOUD
grep -q "CHORUS_DEBUG=LOUD is not one of" "$dir/level_unknown" || fail "an unknown level was not reported"

env CHORUS_DEBUG=INFO "$run" -n 2 -- "$perf" -b 8 -e 64K -f 2 -n 20 -w 2 > "$dir/info" 2>&1 || fail "all_reduce_perf with INFO failed"
lines=$(grep -c "CHORUS INFO" "$dir/info")
echo "CHORUS_DEBUG=INFO: $lines INFO lines for a 14-size sweep of 22 operations each on 2 ranks"
[ "$lines" -lt 200 ] || fail "CHORUS_DEBUG=INFO printed $lines lines: a line per operation?"
grep -q "CHORUS INFO Chorus version" "$dir/info" || fail "no version line"
grep -q "CHORUS_DEBUG set by environment to INFO" "$dir/info" || fail "no 'set by environment' line"

ok version CHORUS_DEBUG=version
grep -q "Chorus version" "$dir/version" || fail "CHORUS_DEBUG=VERSION printed no version line"
others=$(grep "CHORUS INFO" "$dir/version" | grep -vc "Chorus version")
[ "$others" -eq 0 ] || fail "CHORUS_DEBUG=VERSION printed $others INFO lines besides the version"

ok typo CHORUS_ALG=ring
grep -q "CHORUS_ALG is not a Chorus setting and is ignored; did you mean CHORUS_ALGO?" "$dir/typo" ||
  fail "the typo CHORUS_ALG was not reported"

ok to_file CHORUS_DEBUG=INFO "CHORUS_DEBUG_FILE=$dir/log.%h.%p"
files=$(ls "$dir"/log.* 2> /dev/null | wc -l)
[ "$files" -eq 2 ] || fail "CHORUS_DEBUG_FILE made $files files, not one per rank"
grep -qs "CHORUS INFO" "$dir"/log.* || fail "the debug files hold no INFO line"
grep -q "CHORUS INFO" "$dir/to_file" && fail "INFO lines still went to stderr with CHORUS_DEBUG_FILE"

env CHORUS_ALGO=bogus "$run" -n 2 -- "$example" > "$dir/error" 2>&1 && fail "CHORUS_ALGO=bogus did not fail"
grep -q "CHORUS_ALGO=bogus is not an algorithm" "$dir/error" || fail "the error does not name CHORUS_ALGO"
grep -E "\.(cc|h):[0-9]+\]" "$dir/error" && fail "the error message carries source paths"
env CHORUS_ALGO=bogus CHORUS_DEBUG=TRACE "$run" -n 2 -- "$example" > "$dir/error_trace" 2>&1
grep -q "\[src/core/" "$dir/error_trace" || fail "CHORUS_DEBUG=TRACE shows no relative source path"
grep -q "\[/" "$dir/error_trace" && fail "an absolute source path in a message"

ok tuner CHORUS_DEBUG=INFO CHORUS_ALGO=ring
grep -q "Tuner: all-reduce runs ring at every size (CHORUS_ALGO)" "$dir/tuner" || fail "the tuner line ignores CHORUS_ALGO"

# No launcher at all: chorusCommInitFromEnv makes a job of one rank.
env -u CHORUS_RANK -u CHORUS_NRANKS -u CHORUS_COMM_ID -u OMPI_COMM_WORLD_RANK -u RANK -u SLURM_PROCID \
  "$example" > "$dir/alone" 2>&1 || fail "the example alone failed: $(cat "$dir/alone")"
grep -q "rank 0 of 1: all-reduce correct" "$dir/alone" || fail "the example alone did not run as one rank"

[ $failures -eq 0 ] && echo "PASS: logging settings and a program started alone" || exit 1
