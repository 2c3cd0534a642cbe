#!/usr/bin/env bash
# Runs one program as a job across several "hosts" made of network namespaces on this machine:
# each host is a namespace with its own loopback and one veth into a bridge (in a namespace of its
# own), so ranks of one host share memory and ranks of different hosts talk TCP between real
# addresses (198.18.0.0/24, the benchmarking range). Removes every namespace it made on exit,
# whatever happened. Needs root and `ip`; otherwise it says so and exits 77 (ctest: skipped).
#
#   netns_run.sh [--check-transports] [--timeout S] LAYOUT -- PROGRAM [ARGS...]
#
# LAYOUT lists ranks per host: "2,2" (2 hosts x 2 ranks), "1,1,1", "2,1". Ranks are numbered host
# by host. Each host has its own network, PID and UTS namespaces (hostname "hostH"). Each rank runs PROGRAM with CHORUS_RANK, CHORUS_NRANKS and CHORUS_COMM_ID (rank 0's
# address) set, as chorusrun would, plus NETNS_HOST (the host index), NETNS_ADDR (that host's
# address), NETNS_LAYOUT, NETNS_PORT (the port of CHORUS_COMM_ID, free for other uses once it is) and NETNS_TAG
# (the namespaces' prefix: host h is "${NETNS_TAG}h$h", the switch "${NETNS_TAG}sw", which a fault
# test reaches with `ip netns exec`); its output is prefixed "[host h rank r]". With
# --check-transports every rank also logs its INIT and NET lines, and the script checks that each pair
# of ranks uses shm inside a host and the net transport across hosts, exactly, over the network
# NETNS_WANT_NET names (default Socket; the plugin's name when CHORUS_NET_PLUGIN is set), and, when
# every rank exited 0, that no rank logged a receive as failed (the connections closing at the
# end of a clean run are no failure).
set -uo pipefail

check=0
timeout=600
while [ $# -gt 0 ]; do
  case "$1" in
    --check-transports) check=1; shift ;;
    --timeout) timeout=$2; shift 2 ;;
    *) break ;;
  esac
done
layout=${1:-}
shift || true
[ "${1:-}" = "--" ] && shift
if [ -z "$layout" ] || [ $# -eq 0 ]; then
  echo "usage: netns_run.sh [--check-transports] [--timeout S] LAYOUT -- PROGRAM [ARGS...]" >&2
  exit 2
fi

. "$(dirname "$0")/netns_hosts.sh"

IFS=, read -r -a perhost <<< "$layout"
nhosts=${#perhost[@]}
nranks=0
for c in "${perhost[@]}"; do nranks=$((nranks + c)); done

tag="ch$$"
logdir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done
  netns_remove
  rm -rf "$logdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_hosts "$nhosts" "$tag"

port=$((20000 + $$ % 20000))
# Each host also gets its own PID and UTS namespaces (its own hostname, "hostH", and /proc), as a
# separate machine would: its ranks can watch each other's processes, not those of other hosts.
rank=0
hostOf=()
hostPids=()
for h in $(seq 0 $((nhosts - 1))); do
  script=""
  for _ in $(seq 1 "${perhost[$h]}"); do
    hostOf+=("$h")
    extra=""
    [ $check -eq 1 ] && extra="CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT,NET"
    script+="( env CHORUS_RANK=$rank CHORUS_NRANKS=$nranks CHORUS_COMM_ID=198.18.0.1:$port NETNS_HOST=$h"
    script+=" NETNS_ADDR=198.18.0.$((h + 1)) NETNS_PORT=$port NETNS_TAG=$tag NETNS_LAYOUT=$layout $extra timeout -k 5 $timeout \"\$@\""
    script+=" > $logdir/$rank.out 2> $logdir/$rank.err; echo \$? > $logdir/$rank.rc ) & "
    rank=$((rank + 1))
  done
  ip netns exec "${tag}h$h" unshare --pid --fork --kill-child --mount-proc --uts \
    bash -c "hostname host$h; $script wait" bash "$@" &
  pids+=($!)
  hostPids+=($!)
done

status=0
for p in "${hostPids[@]}"; do wait "$p"; done
for r in $(seq 0 $((nranks - 1))); do
  rc=$(cat "$logdir/$r.rc" 2> /dev/null || echo 255)
  sed "s/^/[host ${hostOf[$r]} rank $r] /" "$logdir/$r.out"
  if [ $check -eq 1 ]; then
    grep -v "CHORUS INFO" "$logdir/$r.err" | sed "s/^/[host ${hostOf[$r]} rank $r] /" >&2
  else
    sed "s/^/[host ${hostOf[$r]} rank $r] /" "$logdir/$r.err" >&2
  fi
  if [ "$rc" -ne 0 ]; then
    echo "rank $r (host ${hostOf[$r]}) exited with code $rc" >&2
    status=1
  fi
done

if [ $check -eq 1 ]; then
  # Every rank logs "peer rank P (host pid N) via KIND" for each peer at init.
  for r in $(seq 0 $((nranks - 1))); do
    for p in $(seq 0 $((nranks - 1))); do
      [ "$p" -eq "$r" ] && continue
      want=NET/${NETNS_WANT_NET:-Socket}
      [ "${hostOf[$p]}" = "${hostOf[$r]}" ] && want=shm
      got=$(grep -o "peer rank $p ([^)]*) via [A-Za-z0-9/_-]*" "$logdir/$r.err" | head -1 | awk '{print $NF}')
      if [ "$got" != "$want" ]; then
        echo "rank $r reaches rank $p via '${got:-nothing logged}', expected $want" >&2
        status=1
      fi
    done
  done
  if [ $status -eq 0 ]; then
    for r in $(seq 0 $((nranks - 1))); do
      if grep -q "a receive failed" "$logdir/$r.err"; then
        echo "rank $r logged a failed receive in a clean run:" >&2
        grep "a receive failed" "$logdir/$r.err" | sed "s/^/[host ${hostOf[$r]} rank $r] /" >&2
        status=1
      fi
    done
  fi
  [ $status -eq 0 ] && echo "transports as expected: shm inside each host, NET/${NETNS_WANT_NET:-Socket} across ($layout)"
fi
exit $status
