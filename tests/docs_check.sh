#!/usr/bin/env bash
# Runs the commands the docs show, as written: every fenced shell block in README.md and docs/*.md
# that follows a line "<!-- doc-test -->" (or "<!-- doc-test timeout=S -->", default 300 s) runs
# with bash -e from a directory of links to the source tree's entries and its .torch-venv (so what
# a block writes at its top level stays out of the tree) whose build/ is the build under test, so
# paths like build/perf/all_reduce_perf work unchanged. A block that fails is reported with its file and line;
# one that uses the PyTorch backend (build/python) or the NCCL drop-in (build/nccl) is skipped, saying
# so, in a build without it.
# The blocks run in the environment a reader has: Open MPI's variables that allow root and more
# ranks than cores are removed, so a documented mpirun command passes only when it says on its
# line what it needs (--allow-run-as-root, --oversubscribe).
#   docs_check.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for entry in "$src"/* "$src"/.torch-venv; do
  [ -e "$entry" ] || continue
  [ "$(basename "$entry")" = build ] || ln -s "$entry" "$work/$(basename "$entry")"
done
ln -s "$build" "$work/build"
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe
ran=0
failures=0
mkdir -p "$work/blocks"
for md in "$src"/README.md "$src"/docs/*.md; do
  rel=${md#"$src"/}
  # Emits "LINE TIMEOUT FILE" for each marked block and writes its text to FILE.
  while read -r line limit file; do
    if grep -q "build/python" "$file" && [ ! -d "$build/python/chorus_torch" ]; then
      echo "skip: $rel:$line (the PyTorch backend is not built here)"
      continue
    fi
    if grep -q "build/nccl" "$file" && [ ! -e "$build/nccl/libnccl.so.2" ]; then
      echo "skip: $rel:$line (the NCCL drop-in is not built here: no nccl.h)"
      continue
    fi
    ran=$((ran + 1))
    start=$(date +%s)
    (cd "$work" && timeout -k 10 "$limit" bash -e "$file") > "$work/out" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    if [ "$rc" -ne 0 ]; then
      failures=$((failures + 1))
      echo "FAIL: $rel:$line (exit $rc after ${took} s):"
      sed 's/^/    /' "$file"
      echo "  output (last 15 lines):"
      tail -n 15 "$work/out" | sed 's/^/    /'
    else
      echo "ok: $rel:$line (${took} s)"
    fi
  done < <(awk -v dir="$work/blocks" -v tag="$(basename "$md" .md)" '
    /^<!-- doc-test( timeout=[0-9]+)? -->$/ { limit = 300; if (match($0, /timeout=[0-9]+/)) limit = substr($0, RSTART + 8, RLENGTH - 8); want = 1; next }
    want && /^```(sh|bash)$/ { n++; file = dir "/" tag "-" n ".sh"; printf "" > file; start = NR; inside = 1; want = 0; next }
    inside && /^```$/ { close(file); print start, limit, file; inside = 0; next }
    inside { print >> file; next }
    { want = 0 }' "$md")
done
echo "$ran doc blocks run, $failures failed"
[ "$ran" -gt 0 ] || { echo "FAIL: no block is marked <!-- doc-test -->"; exit 1; }
[ "$failures" -eq 0 ]
