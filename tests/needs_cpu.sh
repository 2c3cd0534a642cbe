#!/usr/bin/env bash
# Runs a test only on a CPU with every listed feature (as /proc/cpuinfo's flags name them);
# elsewhere it says which is missing and exits 77, which ctest shows as skipped.
#   needs_cpu.sh FLAG[,FLAG...] -- PROGRAM [ARGS...]
set -uo pipefail
flags=$1
shift
[ "${1:-}" = "--" ] && shift
have=$(grep -m1 '^flags' /proc/cpuinfo 2> /dev/null)
for f in ${flags//,/ }; do
  if ! grep -qw -- "$f" <<< "$have"; then
    echo "SKIP: this CPU has no $f; the test needs it"
    exit 77
  fi
done
exec "$@"
