#!/usr/bin/env bash
# chorusrun takes mpirun's habits and keeps its own exit codes:
#  - -np N, a command with or without "--", -x VAR=VALUE and -x VAR;
#  - no command is a usage error (exit 2); a rank's exit code and signal become chorusrun's;
#  - stopping the job stops what each rank started (a process group per rank).
#   chorusrun_check.sh CHORUSRUN EXAMPLE
set -uo pipefail
run=$1
example=$2
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
out=$("$run" -np 2 "$example" 2>&1) || fail "-np 2 without --: $out"
[ "$(grep -c "all-reduce correct" <<< "$out")" -eq 2 ] || fail "-np 2 without --: $out"
out=$("$run" -n 3 -- "$example" 2>&1) || fail "-n 3 --: $out"
[ "$(grep -c "of 3: all-reduce correct" <<< "$out")" -eq 3 ] || fail "-n 3 --: $out"
out=$(PASS_ME=yes "$run" -np 2 -x FOO=bar -x PASS_ME bash -c 'echo "$CHORUS_RANK $FOO $PASS_ME"' 2>&1)
[ "$(sort <<< "$out" | tr '\n' ' ')" = "0 bar yes 1 bar yes " ] || fail "-x: got '$out'"
"$run" -n 2 > /dev/null 2>&1
[ $? -eq 2 ] || fail "no command: not a usage error"
"$run" -np 2 bash -c 'exit $((CHORUS_RANK * 3))' > /dev/null 2>&1
[ $? -eq 3 ] || fail "a rank's exit code 3 was not passed on"
"$run" -np 2 bash -c '[ "$CHORUS_RANK" = 1 ] && kill -SEGV $$; sleep 5' > /dev/null 2>&1
[ $? -eq $((128 + 11)) ] || fail "a rank's SIGSEGV was not passed on as 139"
# Entries naming this host are one machine: local ranks 0, 1, 2 of 3. Ranks read /dev/null.
out=$("$run" -n 3 -H localhost:2,127.0.0.1:1 -- sh -c 'read -r line; echo "$CHORUS_LOCAL_RANK/$CHORUS_LOCAL_SIZE ${line:-eof}"' 2>&1)
[ "$(sort <<< "$out" | tr '\n' ' ')" = "0/3 eof 1/3 eof 2/3 eof " ] || fail "-H with two names of this host: got '$out'"
# What a rank started goes with it: the other rank's child (a shell's sleep) is stopped too.
"$run" -np 2 sh -c '[ "$CHORUS_RANK" = 1 ] && exit 4; sleep 61.25' > /dev/null 2>&1
[ $? -eq 4 ] || fail "a rank's exit code 4 was not passed on"
sleep 0.2
pgrep -f "sleep 61.25" > /dev/null && fail "a rank's child outlived the job: $(pgrep -af "sleep 61.25")"
[ $failures -eq 0 ] && echo "PASS: chorusrun takes mpirun's habits" || exit 1
