#!/usr/bin/env bash
# Runs the NCCL host test (nccl_host_test.c) under a launcher with one libnccl.so.2 chosen by
# LD_LIBRARY_PATH, as a user would choose it, and judges what came out:
#   host_run.sh pass    LIBDIR -- COMMAND...   every check passed, the library came from LIBDIR, and
#                                              it warned of nothing (every call there is as asked)
#   host_run.sh refuses LIBDIR -- COMMAND...   the library refused cleanly (exit 3 from the ranks,
#                                              no signal), and came from LIBDIR
set -uo pipefail
want=$1
libdir=$2
shift 3
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=$("$@" 2>&1)
rc=$?
echo "$out"
echo "exit code $rc"
real=$(cd "$libdir" && pwd -P)
if ! echo "$out" | grep -q "libnccl.so.2 loaded from $real/\|libnccl.so.2 loaded from $libdir/"; then
  echo "FAIL: libnccl.so.2 did not come from $libdir"
  exit 1
fi
if echo "$out" | grep -qiE "segmentation fault|exited on signal|core dumped"; then
  echo "FAIL: a rank crashed"
  exit 1
fi
case "$want" in
  pass)
    if echo "$out" | grep -q "CHORUS WARN"; then
      echo "FAIL: warnings in a run where nothing went wrong (the revoke was asked for)"
      exit 1
    fi
    [ $rc -eq 0 ] && echo "$out" | grep -q "every element as expected" && exit 0
    echo "FAIL: expected every check to pass"
    exit 1 ;;
  refuses)
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && echo "$out" | grep -q "the library refused"; then
      echo "$out" | grep -m1 "returned" || true
      echo "NCCL's own library refused cleanly (without a GPU at its first call, with one at the first host" \
        "buffer), as expected: the other runs load Chorus's"
      exit 0
    fi
    echo "FAIL: expected a clean refusal"
    exit 1 ;;
esac
echo "usage: host_run.sh pass|refuses LIBDIR -- COMMAND..."
exit 2
