#!/usr/bin/env bash
# Two jobs started on one CHORUS_COMM_ID without CHORUS_COMM_SECRET must not merge: the secret
# comes from the launcher's job id (here SLURM_JOB_ID), so a rank of job B that reaches job A's
# root is refused at once with a sentence that says why, and job A still completes with its own
# ranks.
#   job_identity.sh EXAMPLE   (the chorus_example_allreduce binary)
set -uo pipefail
example=$1
# A port nothing listens on now (the kernel's choice, so concurrent tests do not collide).
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export CHORUS_COMM_ID=127.0.0.1:$port CHORUS_NRANKS=2 CHORUS_TIMEOUT=20
unset CHORUS_COMM_SECRET OMPI_MCA_ess_base_jobid PMIX_NAMESPACE TORCHELASTIC_RUN_ID
dir=$(mktemp -d)
trap 'rm -rf "$dir"; kill $(jobs -p) 2>/dev/null' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*; do echo "== $f"; cat "$f"; done; exit 1; }

SLURM_JOB_ID=111 SLURM_STEP_ID=0 CHORUS_RANK=0 "$example" > "$dir/a0" 2>&1 &
a0=$!
sleep 0.5
start=$(date +%s%3N)
SLURM_JOB_ID=222 SLURM_STEP_ID=0 CHORUS_RANK=1 timeout 30 "$example" > "$dir/b1" 2>&1
rc=$?
took=$(( $(date +%s%3N) - start ))
[ $rc -ne 0 ] || fail "job B's rank joined job A"
grep -q "serves another job" "$dir/b1" || fail "job B's rank was not told why"
(( took < 5000 )) || fail "job B's rank took $took ms to fail"
echo "job B's rank 1 refused after $took ms: $(grep -o 'serves another job.*' "$dir/b1" | head -1)"

SLURM_JOB_ID=111 SLURM_STEP_ID=0 CHORUS_RANK=1 timeout 30 "$example" > "$dir/a1" 2>&1 || fail "job A's rank 1 failed"
wait $a0 || fail "job A's rank 0 failed"
grep -q "all-reduce correct" "$dir/a0" || fail "job A's rank 0 printed no result"
grep -q "all-reduce correct" "$dir/a1" || fail "job A's rank 1 printed no result"
echo "job A completed with its own ranks"
