#!/usr/bin/env bash
# Ranks whose plan-changing settings differ must all fail at init with an error that names the
# setting and the ranks, instead of cutting data differently. For each setting, rank 1 of two
# (under chorusrun) gets another value. Both ranks reach the same verdict, but chorusrun stops
# the job at the first rank that exits, sometimes before the other has printed: at least one
# rank must carry the sentence, and the job must fail.
#   init_mismatch.sh CHORUSRUN ALL_REDUCE_PERF
set -uo pipefail
run=$1 perf=$2
fail=0
for setting in CHORUS_ALGO=ring CHORUS_NCHANNELS=2 CHORUS_DEVICE_NCHANNELS=4 CHORUS_DEVICE_SLOT_BYTES=8192 CHORUS_SLOT_BYTES=8192 CHORUS_SLOTS=16 \
               CHORUS_P2P_SLOT_BYTES=8192 CHORUS_DIRECT_MAX_BYTES=128 CHORUS_CHECK=1 CHORUS_ONECOPY=1 \
               CHORUS_LL128=1 CHORUS_PROTO=simple; do
  name=${setting%%=*}
  out=$(timeout 60 "$run" -n 2 --tag-output -- bash -c \
        'if [ "$CHORUS_RANK" = 1 ]; then export '"$setting"'; fi; exec "$0" -b 8 -e 8 -n 1 -w 0' "$perf" 2>&1)
  code=$?
  want="$name differs between ranks: rank 0 has"
  hits=$(grep -c "$want" <<< "$out")
  if [ "$code" -eq 0 ] || [ "$hits" -lt 1 ] || ! grep -q "rank 1 has" <<< "$out"; then
    echo "FAIL: $setting on rank 1 only: exit $code, $hits ranks said '$want ... rank 1 has ...'"
    echo "$out" | tail -5
    fail=1
  else
    echo "ok: $setting on rank 1 only: init failed naming $name and rank 1 ($hits of 2 ranks printed it)"
  fi
done
exit $fail
