#!/usr/bin/env bash
# The job's secret stays out of everything Chorus writes (docs/launching.md): two ranks of
# EXAMPLE (an all-reduce through chorusCommInitFromEnv) share a known CHORUS_COMM_SECRET and run at
# TRACE with every subsystem, their log in a file and on stderr, the topology and flight recorder
# dumped; a third process with another secret tries to join and is refused. The secret must appear
# in no output and no file, the log must say it was set (redacted), and every file Chorus wrote must
# be readable by its owner only (0600).
#   secret_check.sh EXAMPLE
set -uo pipefail
example=${1:?usage: secret_check.sh EXAMPLE}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
other=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
port=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768 up), where connections take ports
common=(CHORUS_NRANKS=2 CHORUS_COMM_ID=127.0.0.1:$port CHORUS_DEBUG=TRACE CHORUS_DEBUG_SUBSYS=ALL
  CHORUS_TOPO_DUMP_FILE=$dir/topo.json CHORUS_FLIGHT_DUMP=$dir/flight CHORUS_FLIGHT_TRACE=1
  CHORUS_TIMEOUT=60 CHORUS_INIT_TIMEOUT=60)
# Rank 0 logs to a file, rank 1 to stderr.
env "${common[@]}" CHORUS_RANK=0 CHORUS_COMM_SECRET="$secret" CHORUS_DEBUG_FILE="$dir/log.%h.%p" \
  timeout -k 5 90 "$example" > "$dir/out.0" 2>&1 &
r0=$!
env "${common[@]}" CHORUS_RANK=1 CHORUS_COMM_SECRET="$secret" timeout -k 5 90 "$example" > "$dir/out.1" 2>&1 &
r1=$!
# A process of another job (its own secret) at the same address: refused, saying why.
sleep 0.5
env "${common[@]}" CHORUS_RANK=1 CHORUS_COMM_SECRET="$other" CHORUS_INIT_TIMEOUT=5 timeout -k 5 30 "$example" \
  > "$dir/out.stranger" 2>&1
wait $r0
rc0=$?
wait $r1
rc1=$?
failed=0
if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then
  echo "FAIL: the ranks exited with $rc0 and $rc1"
  tail -5 "$dir"/out.0 "$dir"/out.1
  failed=1
fi
if grep -rl -e "$secret" -e "$other" "$dir"; then
  echo "FAIL: a secret appears in the files above"
  failed=1
fi
if ! grep -qh "CHORUS_COMM_SECRET set by environment (value redacted)" "$dir"/log.* "$dir/out.1"; then
  echo "FAIL: no TRACE log says the secret was set (redacted)"
  failed=1
fi
written=$(find "$dir" -type f ! -name 'out.*')
if [ -z "$written" ]; then
  echo "FAIL: Chorus wrote no file (log, topology, flight dump)"
  failed=1
fi
for f in $written; do
  mode=$(stat -c %a "$f")
  if [ "$mode" != 600 ]; then
    echo "FAIL: $f is mode $mode, not 600"
    failed=1
  fi
done
echo "files written: $(echo "$written" | xargs -n1 basename | tr '\n' ' ')"
[ $failed -eq 0 ] && echo "PASSED: the secret appears nowhere in $(cat "$dir"/out.* "$dir"/log.* | wc -l) lines of output at TRACE, and every file is 0600"
exit $failed
