#!/usr/bin/env bash
# Startup problems are named on every rank within seconds where the facts allow it, and otherwise
# at CHORUS_WARN_AFTER_MS and at the init timeout (CHORUS_INIT_TIMEOUT), never after a silent
# half hour. Ranks are the example program started by hand with chorusrun's variables:
#  - 3 of 4 ranks started: each hears from the root which rank is missing (warning), and fails at
#    the init timeout naming it;
#  - ranks given different CHORUS_NRANKS: both fail at once, naming the setting;
#  - two processes given CHORUS_RANK=0: the second says another process holds the port (a second
#    rank 0), the first fails at the init timeout naming the rank that never came;
#  - a foreign program listening on the CHORUS_COMM_ID port: the rank says it is no Chorus root;
#  - a rank given the wrong port: it warns that it cannot reach the root, and rank 0's root warns
#    that it waits for that rank;
#  - a rank that sleeps before its first collective: the other warns at CHORUS_WARN_AFTER_MS,
#    naming it, while the first operation connects them.
#   startup_check.sh EXAMPLE CHORUSRUN IDLE_WAIT
set -uo pipefail
usage="usage: bash tests/startup_check.sh EXAMPLE CHORUSRUN IDLE_WAIT (build/examples/chorus_example_allreduce build/chorusrun build/tests/idle_wait)"
example=${1:?$usage}
chorusrun=${2:?$usage}
idle=${3:?$usage}
dir=$(mktemp -d)
pids=()
trap 'kill ${pids[@]} 2> /dev/null; rm -rf "$dir"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# A port nothing listens on now, drawn at random below the ephemeral range (so neither concurrent
# tests nor connections' source ports take it before the rank listens).
port() { /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../python/examples/ports.py"; }
export CHORUS_WARN_AFTER_MS=1000 CHORUS_INIT_TIMEOUT=4 CHORUS_TIMEOUT=60
unset CHORUS_COMM_SECRET OMPI_COMM_WORLD_RANK RANK SLURM_PROCID
# rank R NRANKS PORT NAME: one rank in the background, its output in $dir/NAME, its pid in $!.
rank() {
  CHORUS_RANK=$1 CHORUS_NRANKS=$2 CHORUS_COMM_ID=127.0.0.1:$3 "$example" > "$dir/$4" 2>&1 &
  pids+=($!)
}
ms() { date +%s%3N; }
# waitfor PID NAME LIMIT_MS: the rank must end within the limit, with a failure.
waitfor() {
  local t0=$(ms)
  wait "$1"
  local rc=$? took=$(($(ms) - t0))
  [ $rc -ne 0 ] || fail "$2 succeeded"
  echo "$2: exit $rc after $took ms: $(grep -o 'failed: .*' "$dir/$2" | head -1 | cut -c1-220)"
}

# 3 of 4.
p=$(port)
for r in 0 1 2; do rank $r 4 "$p" missing$r; done
t0=$(ms)
for r in 0 1 2; do wait "${pids[$r]}"; done
took=$(($(ms) - t0))
[ $took -lt 9000 ] || fail "3 of 4: the ranks took $took ms (the init timeout is 4 s)"
for r in 0 1 2; do
  grep -q "still waiting for ranks 3" "$dir/missing$r" || fail "3 of 4: rank $r was not told that rank 3 is missing"
  grep -q "ranks 3 never did" "$dir/missing$r" || fail "3 of 4: rank $r's error does not name rank 3"
done
echo "3 of 4 ranks: all failed within $took ms naming rank 3"
pids=()

# Different CHORUS_NRANKS.
p=$(port)
rank 0 2 "$p" nr0
rank 1 3 "$p" nr1
t0=$(ms)
wait "${pids[0]}"
wait "${pids[1]}"
took=$(($(ms) - t0))
[ $took -lt 3000 ] || fail "different NRANKS: took $took ms"
for r in 0 1; do grep -q "was given nranks=" "$dir/nr$r" || fail "different NRANKS: rank $r does not name the setting"; done
echo "different CHORUS_NRANKS: both failed within $took ms"
pids=()

# Two rank 0s.
p=$(port)
rank 0 2 "$p" zero_a
sleep 0.3
rank 0 2 "$p" zero_b
wait "${pids[1]}"
grep -q "a second rank 0" "$dir/zero_b" || fail "two rank 0s: the second does not say so"
wait "${pids[0]}"
grep -q "ranks 1 never did" "$dir/zero_a" || fail "two rank 0s: the first does not name the missing rank 1"
echo "two rank 0s: the second named the port's holder, the first the missing rank 1"
pids=()

# A foreign listener.
p=$(port)
/usr/bin/python3 -c "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $p)); s.listen(8)
c, _ = s.accept(); time.sleep(30)" &
pids+=($!)
sleep 0.5
t0=$(ms)
CHORUS_RANK=1 CHORUS_NRANKS=2 CHORUS_COMM_ID=127.0.0.1:$p CHORUS_INIT_TIMEOUT=30 "$example" > "$dir/foreign" 2>&1
took=$(($(ms) - t0))
grep -q "did not answer as a Chorus bootstrap root" "$dir/foreign" || fail "a foreign listener was not recognised"
[ $took -lt 8000 ] || fail "a foreign listener: took $took ms"
echo "a foreign listener: recognised after $took ms"
kill "${pids[0]}" 2> /dev/null
pids=()

# The wrong port on rank 1.
p=$(port)
rank 0 2 "$p" right
rank 1 2 $((p + 1)) wrong
wait "${pids[1]}"
wait "${pids[0]}"
grep -q "cannot reach the bootstrap root" "$dir/wrong" || fail "the wrong port: rank 1 did not warn"
grep -q "still waiting for ranks 1" "$dir/right" || fail "the wrong port: rank 0 did not say it waits for rank 1"
echo "the wrong port: rank 1 warned it cannot reach the root, rank 0 that it waits for rank 1"

# A rank away before its first collective. What this run checks is the warning; the CPU share of
# its 10 ms waits is too short a window to measure on a loaded machine (idle_wait checks it).
CHORUS_WARN_AFTER_MS=500 IDLE_WAIT_FIRST_MS=2000 IDLE_WAIT_MS=10 IDLE_WAIT_MAX_PCT=1000000 \
  "$chorusrun" -n 2 -- "$idle" > "$dir/late" 2>&1 || fail "a late first collective failed: $(tail -3 "$dir/late")"
grep -q "rank 0 has waited [0-9.]* s for .* from rank 1" "$dir/late" ||
  fail "a rank away before its first collective was not warned about"
echo "a late first collective: $(grep -o 'rank 0 has waited.*from rank 1 ([^)]*)' "$dir/late" | head -1)"

[ $failures -eq 0 ] && echo "PASS: startup problems are named" || exit 1
