#!/usr/bin/env bash
# Runs tests/net_fault.cc as a job across namespace hosts (netns_run.sh) and checks what its ranks
# say: every rank that was not meant to die printed one OUTCOME line, all the same (never one rank
# completing while another fails), never "wrong", and the one EXPECTed; every such rank exited 0.
#
#   net_fault.sh [--timeout S] [--host-lost] [--want TEXT] LAYOUT EXPECT -- PROGRAM [ARGS...]
#
# EXPECT: completed, failed, or either. --host-lost: the ranks of the last host are killed by the
# fault, so they print nothing and their exit codes are not asked. --want: some rank's output
# must contain TEXT (the error that names the fault). Needs root, `ip` and `nft`:
# otherwise says so and exits 77 (ctest: skipped).
set -uo pipefail

timeout=300
lost=0
want=""
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) timeout=$2; shift 2 ;;
    --host-lost) lost=1; shift ;;
    --want) want=$2; shift 2 ;;
    *) break ;;
  esac
done
layout=${1:?usage: net_fault.sh [--timeout S] [--host-lost] LAYOUT EXPECT -- PROGRAM [ARGS...]}
expect=${2:?EXPECT: completed, failed or either}
shift 2
[ "${1:-}" = "--" ] && shift
command -v nft > /dev/null || { echo "net_fault.sh: needs nftables (nft; tools/setup.sh deps installs it)"; exit 77; }

here=$(dirname "$0")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
IFS=, read -r -a perhost <<< "$layout"
nhosts=${#perhost[@]}
nranks=0
for c in "${perhost[@]}"; do nranks=$((nranks + c)); done
lastFirst=$((nranks - perhost[nhosts - 1]))

start=$(date +%s.%N)
NET_FAULT_DIR=$dir bash "$here/netns_run.sh" --timeout "$timeout" "$layout" -- "$@" > "$dir/log" 2>&1
rc=$?
cat "$dir/log"
[ $rc -eq 77 ] && exit 77
echo "net_fault.sh: the job took $(echo "$(date +%s.%N) - $start" | bc) s"

status=0
seen=""
for r in $(seq 0 $((nranks - 1))); do
  if [ $lost -eq 1 ] && [ "$r" -ge $lastFirst ]; then continue; fi
  outcome=$(grep -E "^\[host [0-9]+ rank $r\] OUTCOME " "$dir/log" | awk '{print $NF}')
  code=$(grep -E "^rank $r \(host [0-9]+\) exited with code" "$dir/log" | awk '{print $NF}')
  if [ -z "$outcome" ]; then
    echo "net_fault.sh: rank $r printed no outcome" >&2
    status=1
  elif [ "$outcome" = wrong ]; then
    echo "net_fault.sh: rank $r saw a wrong result" >&2
    status=1
  elif [ -n "$seen" ] && [ "$outcome" != "$seen" ]; then
    echo "net_fault.sh: rank $r $outcome while another rank $seen" >&2
    status=1
  fi
  [ -z "$seen" ] && seen=$outcome
  if [ -n "$code" ]; then
    echo "net_fault.sh: rank $r exited with code $code" >&2
    status=1
  fi
done
if [ "$expect" != either ] && [ "$seen" != "$expect" ]; then
  echo "net_fault.sh: expected every rank to have $expect, they have ${seen:-nothing}" >&2
  status=1
fi
if [ -n "$want" ] && ! grep -qF -- "$want" "$dir/log"; then
  echo "net_fault.sh: no rank said '$want'" >&2
  status=1
fi
[ $status -eq 0 ] && echo "net_fault.sh: every rank ${seen} ($layout, $*)"
exit $status
