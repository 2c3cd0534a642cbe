#!/usr/bin/env bash
# Interface selection across two namespace hosts (run by ctest as root; exits 77 where namespaces
# cannot be made):
#  1. default: each rank listens on the interface toward the root (eth0, 198.18.0.x), never lo;
#  2. CHORUS_SOCKET_IFNAME=lo on both hosts: init fails at once on every rank, saying loopback
#     cannot be reached from another host, instead of timing out;
#  3. CHORUS_SOCKET_IFNAME naming no interface: the error lists the interfaces found, each once
#     with all its addresses.
#   ifname_check.sh PERF_BINARY
set -uo pipefail
perf=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
run() { bash "$here/netns_run.sh" --timeout 60 1,1 -- env "$@" CHORUS_TIMEOUT=20 "$perf" -b 8 -e 8 -n 1 -w 0 > "$out" 2>&1; }

run CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=BOOTSTRAP
rc=$?
[ $rc -eq 77 ] && { cat "$out"; exit 77; }
for r in 0 1; do
  grep -q "rank $r listens on 198.18.0.$((r + 1)):[0-9]* (eth0, the interface toward the root)" "$out" ||
    { echo "FAIL: rank $r did not listen on eth0 toward the root"; status=1; }
done
[ $rc -eq 0 ] || { echo "FAIL: the default run failed"; status=1; }

start=$(date +%s)
run CHORUS_SOCKET_IFNAME=lo
rc=$?
took=$(($(date +%s) - start))
[ $rc -ne 0 ] || { echo "FAIL: ranks on two hosts listening on lo did not fail"; status=1; }
[ "$(grep -c "listen on loopback, which ranks on other hosts cannot reach" "$out")" -ge 2 ] ||
  { echo "FAIL: not every rank said why"; status=1; }
[ $took -lt 15 ] || { echo "FAIL: took ${took}s, not at once"; status=1; }

run CHORUS_SOCKET_IFNAME==nosuch0
[ $? -ne 0 ] && grep -qE "interfaces found: lo \(up\) 127\.0\.0\.1( [][0-9a-f:.]+)*, eth0 \(up\) 198\.18\.0\.[12]( [][0-9a-f:.]+)*\. Set" "$out" ||
  { echo "FAIL: an unmatched CHORUS_SOCKET_IFNAME did not list the interfaces"; cat "$out"; status=1; }
[ "$(grep -m1 "interfaces found" "$out" | grep -o "eth0 (" | wc -l)" -eq 1 ] ||
  { echo "FAIL: eth0 is listed more than once"; cat "$out"; status=1; }

[ $status -eq 0 ] && echo "interface selection as expected"
exit $status
