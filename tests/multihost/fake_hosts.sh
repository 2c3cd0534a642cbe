#!/usr/bin/env bash
# Runs PROGRAM as if rank r were on host (r mod HOSTS): sets CHORUS_HOSTID, so ranks of different
# "hosts" talk over sockets (through the default interface) and the rings group each host's
# ranks, which interleaved like this are not in rank order. For launchers that set CHORUS_RANK.
#   fake_hosts.sh HOSTS -- PROGRAM [ARGS...]
set -euo pipefail
hosts=$1
shift
[ "${1:-}" = "--" ] && shift
export CHORUS_HOSTID="fakehost$((CHORUS_RANK % hosts))"
exec "$@"
