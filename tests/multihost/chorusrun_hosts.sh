#!/usr/bin/env bash
# chorusrun across hosts, as mpirun users start jobs: two namespace hosts (netns_hosts.sh, named
# by their addresses) reached through the remote-shell template "ip netns exec {host} sh -c {cmd}".
#  - -H host:slots and a hostfile place ranks slot by slot; -n defaults to the slots; more ranks
#    than slots is refused unless --oversubscribe;
#  - each rank gets its rank, local rank and size, -x variables (VAR=VALUE and VAR), and the
#    secret through its input, never its arguments;
#  - a real job across the hosts checks every element, over shm inside a host and TCP across;
#  - a rank's exit code and signal become chorusrun's; the other hosts' ranks are stopped, also
#    when chorusrun itself is stopped; a template that cannot run is named.
#   chorusrun_hosts.sh CHORUSRUN ALL_REDUCE_PERF
set -uo pipefail
run=$1
perf=$2
. "$(dirname "$0")/netns_hosts.sh"
dir=$(mktemp -d)
cleanup() {
  netns_remove
  rm -rf "$dir"
}
trap cleanup EXIT
netns_hosts 2 --by-address
a=${NETNS_NAMES[0]}
b=${NETNS_NAMES[1]}
rsh='ip netns exec {host} sh -c {cmd}'
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
# What each rank sees: rank, local rank/size, -x variables, its host's address, and how many
# processes carry the secret in their arguments.
show='echo "$CHORUS_COMM_SECRET" > /tmp/.s$$; n=$(grep -lFf /tmp/.s$$ /proc/[0-9]*/cmdline 2>/dev/null | wc -l); rm -f /tmp/.s$$
echo "rank $CHORUS_RANK local $CHORUS_LOCAL_RANK/$CHORUS_LOCAL_SIZE mark $MARK/$MARK2 at $(ip -4 -o addr show eth0 | awk "{print \$4}") secret-in-argv $n"'

MARK2=inherited "$run" -H "$a:2,$b:1" --rsh "$rsh" -x MARK=set -x MARK2 -- sh -c "$show" > "$dir/env" 2>&1 ||
  fail "-H $a:2,$b:1: exit $?: $(cat "$dir/env")"
want="rank 0 local 0/2 mark set/inherited at $a/24 secret-in-argv 0
rank 1 local 1/2 mark set/inherited at $a/24 secret-in-argv 0
rank 2 local 0/1 mark set/inherited at $b/24 secret-in-argv 0"
[ "$(sort "$dir/env")" = "$want" ] || fail "-H: the ranks saw
$(sort "$dir/env")
not
$want"

cat > "$dir/hostfile" <<HOSTS
# the two namespace hosts
$a slots=1   # rank 0
$b slots=2 max_slots=4
HOSTS
"$run" --hostfile "$dir/hostfile" --rsh "$rsh" -x MARK=f -- sh -c "$show" > "$dir/hf" 2>&1 ||
  fail "--hostfile: exit $?: $(cat "$dir/hf")"
[ "$(sort "$dir/hf" | awk '{print $2, $4, $8}' | tr '\n' ' ')" = "0 0/1 $a/24 1 0/2 $b/24 2 1/2 $b/24 " ] ||
  fail "--hostfile placed the ranks as: $(sort "$dir/hf")"

"$run" -np 4 -H "$a,$b" --rsh "$rsh" -- true > "$dir/few" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -q "4 ranks but the hosts have 2 slots" "$dir/few" || fail "too few slots: exit $rc: $(cat "$dir/few")"
"$run" -np 4 -H "$a,$b" --oversubscribe --rsh "$rsh" -x MARK=o -- sh -c "$show" > "$dir/over" 2>&1 ||
  fail "--oversubscribe: exit $?: $(cat "$dir/over")"
[ "$(sort "$dir/over" | awk '{print $2, $8}' | tr '\n' ' ')" = "0 $a/24 1 $b/24 2 $a/24 3 $b/24 " ] ||
  fail "--oversubscribe placed the ranks as: $(sort "$dir/over")"

# A real job: 2 + 2 ranks, every element checked; shm inside a host, sockets across.
"$run" -np 4 -H "$a:2,$b:2" --rsh "$rsh" --tag-output -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT \
  -- "$perf" -b 8 -e 1M -f 8 -n 2 -w 1 -c 1 > "$dir/job" 2>&1 || fail "all_reduce_perf across hosts: exit $?"
grep -q "Out of bounds values : 0 OK" "$dir/job" || fail "all_reduce_perf across hosts: $(tail -5 "$dir/job")"
for r in 0 1 2 3; do
  for p in 0 1 2 3; do
    [ "$p" -eq "$r" ] && continue
    want=NET/Socket
    [ $((p / 2)) -eq $((r / 2)) ] && want=shm
    grep -q "^\[1,$r\]<stderr>:.*peer rank $p (.*) via $want" "$dir/job" || fail "rank $r does not reach rank $p via $want"
  done
done

# A rank's exit code and signal; the other ranks do not outlive the job.
start=$(date +%s)
"$run" -H "$a:2,$b:2" --rsh "$rsh" --grace 2 -- sh -c '[ "$CHORUS_RANK" = 3 ] && exit 7; sleep 60' > "$dir/exit" 2>&1
rc=$?
[ "$rc" -eq 7 ] || fail "rank 3's exit code 7 came back as $rc: $(cat "$dir/exit")"
[ $(($(date +%s) - start)) -lt 20 ] || fail "a failed rank took $(($(date +%s) - start)) s to end the job"
"$run" -H "$a,$b" --rsh "$rsh" -- sh -c '[ "$CHORUS_RANK" = 1 ] && kill -SEGV $$; sleep 60' > /dev/null 2>&1
rc=$?
[ "$rc" -eq $((128 + 11)) ] || fail "rank 1's SIGSEGV on $b came back as $rc, not 139"
"$run" -H "$a,$b" --rsh "$rsh" --grace 2 -- sleep 60 > /dev/null 2>&1 &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
rc=$?
[ "$rc" -eq $((128 + 15)) ] || fail "chorusrun stopped by SIGTERM exited $rc, not 143"
left=""
for _ in $(seq 1 50); do
  left="$(ip netns pids "$a") $(ip netns pids "$b")"
  [ -z "$(echo $left)" ] && break
  sleep 0.1
done
[ -z "$(echo $left)" ] || fail "processes left on the hosts after the job: $(for p in $left; do tr "\\0" " " < /proc/$p/cmdline; echo; done)"

"$run" -H "$a,$b" --rsh "no-such-rsh {host} {cmd}" -- true > "$dir/norsh" 2>&1
rc=$?
[ "$rc" -eq 127 ] && grep -q "cannot run no-such-rsh (the --rsh template, to reach host $a)" "$dir/norsh" ||
  fail "a missing remote shell: exit $rc: $(cat "$dir/norsh")"

[ "$failures" -eq 0 ] || exit 1
echo "PASS: chorusrun starts jobs across hosts"
