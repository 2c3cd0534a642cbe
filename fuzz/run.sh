#!/usr/bin/env bash
# Runs one fuzz target: first over every seed, then for a while from them.
#   run.sh <fuzzer> <seed corpus> <work dir> <seconds>
# New inputs land in <work dir>/corpus; a crash leaves its input in <work dir> and fails.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus"
cd "$work"
# Every seed once, so a regression in a committed input fails even if the timed run misses it.
"$fuzzer" -runs=0 "$seeds"
exec "$fuzzer" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/" corpus "$seeds"
