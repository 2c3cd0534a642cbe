#!/usr/bin/env bash
# The slice all-reduce against the ring, in alternating rounds (noise on a shared machine hits
# both alike): processes under mpirun with unregistered buffers (the ring) and registered ones
# (-R 1: the slice schedule, peers read each other's buffers in place); ranks as threads with
# CHORUS_ALGO=ring and with the default (slice). Prints one line per row:
#   proc|thr  ranks  variant  round  bytes  out-of-place-us  in-place-us
# Run from the repository root after building; docs/PERFORMANCE.md has the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
for round in 1 2 3 4 5 6 7; do
  for np in 2 4; do
    for R in 0 1; do
      mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np build/perf/all_reduce_perf -b 64K -e 64M -f 4 -n 20 -w 5 -a 3 -R $R 2>&1 \
        | grep -E "^ +[0-9]" | awk -v np=$np -v R=$R -v round=$round '{print "proc", np, R, round, $1, $6, $10}'
    done
    for A in ring default; do
      if [ $A = ring ]; then export CHORUS_ALGO=ring; else unset CHORUS_ALGO; fi
      build/perf/all_reduce_perf -t $np -b 64K -e 64M -f 4 -n 20 -w 5 -a 3 2>&1 \
        | grep -E "^ +[0-9]" | awk -v np=$np -v R=$A -v round=$round '{print "thr", np, R, round, $1, $6, $10}'
      unset CHORUS_ALGO
    done
  done
done
