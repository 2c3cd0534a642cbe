#!/usr/bin/env bash
# The NCCL drop-in exports exactly what NCCL's own libnccl.so.2 exports: the functions each
# defines (nm -D --defined-only), by name and binding (T: the pnccl* functions, W: the nccl* weak
# aliases a profiler may interpose), compared as two sorted lists. Any entry missing from ours, or
# any entry ours has that NCCL's has not, fails the test and is listed; the one exception is the
# functions NCCL 2.29 added that take a communicator or window, which ours exports to refuse them
# (docs/nccl.md, "Newer NCCL"). (NCCL exports no data.)
#   symbols.sh OURS REFERENCE
set -uo pipefail
ours=$1
ref=$2
if [ ! -e "$ref" ]; then
  echo "SKIP: no reference libnccl.so.2 at $ref (the CUDA toolkit's)"
  exit 77
fi
list() { nm -D --defined-only "$1" | awk '$2 ~ /^[TtWwVv]$/ {print $3, $2}' | sed 's/@[^ ]*//' | sort -u; }
a=$(list "$ours") || exit 1
b=$(list "$ref") || exit 1
newer="ncclCommGetUniqueId ncclCommGrow ncclCommMemStats ncclCommResume ncclCommSuspend ncclPutSignal ncclSignal
ncclWaitSignal ncclWinGetUserPtr"
newer=$(for n in $newer; do echo "$n W"; echo "p$n T"; done | sort)
missing=$(comm -13 <(echo "$a") <(echo "$b"))
refused=$(comm -12 <(comm -23 <(echo "$a") <(echo "$b")) <(echo "$newer"))
extra=$(comm -23 <(comm -23 <(echo "$a") <(echo "$b")) <(echo "$newer"))
if [ "$(echo "$refused" | grep -c .)" -ne "$(echo "$newer" | grep -c .)" ]; then
  echo "NCCL 2.29's functions that ours should export (to refuse them), missing or with another binding:"
  comm -13 <(echo "$refused") <(echo "$newer") | sed 's/^/  /'
  missing="$missing${missing:+
}(see above)"
fi
echo "ours: $(echo "$a" | wc -l) functions ($ours); NCCL's: $(echo "$b" | wc -l) ($ref)"
status=0
if [ -n "$missing" ]; then
  echo "missing from ours:"; echo "$missing" | sed 's/^/  /'
  status=1
fi
if [ -n "$extra" ]; then
  echo "ours has, NCCL's has not:"; echo "$extra" | sed 's/^/  /'
  status=1
fi
[ $status -eq 0 ] && echo "the same names, each with the same binding, and NCCL 2.29's $(echo "$refused" | grep -c .) refused ones"
# Our library must be the drop-in by its soname, as loaders look it up.
soname=$(objdump -p "$ours" | awk '/SONAME/ {print $2}')
if [ "$soname" != "libnccl.so.2" ]; then
  echo "SONAME is '$soname', not libnccl.so.2"
  status=1
fi
exit $status
