#!/usr/bin/env bash
# `pip install .` end to end: the project's build backend (python/chorus_build.py) makes a wheel of
# chorus_torch from the build under test, pip installs it into an empty directory, and a program
# run from elsewhere, with only that directory on its path, must find the installed package, load
# the libchorus inside it (not the build tree's) and train the DDP tutorial's model on 2 ranks.
# First, a build tree configured in another venv of the same interpreter (its python resolves to
# the same binary as PYTHON's) must be refused, by name, before anything is built or packaged.
#   wheel_check.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src=$1
build=$(cd "$2" && pwd)
python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv --without-pip "$work/other-venv"
other=$("$python" -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' "$work/other-venv")
mkdir "$work/other-build"
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
cat > "$work/other-build/CMakeCache.txt" <<CACHE
CHORUS_TORCH_PYTHON:FILEPATH=$work/other-venv/bin/python
CHORUS_TORCH_VERSION:INTERNAL=$torch_version
CHORUS_TORCH_DIR:INTERNAL=$other/lib/python3/site-packages/torch
CHORUS_TORCH_PREFIX:INTERNAL=$other
CACHE
if "$python" -m pip wheel -q --no-deps -w "$work/refused" --config-settings "build-dir=$work/other-build" "$src" \
  > "$work/refused.log" 2>&1; then
  echo "FAIL: a wheel was packaged from a build tree configured in another venv"
  exit 1
fi
grep -q "was configured for the torch of $work/other-venv/bin/python, not the one" "$work/refused.log" ||
  { echo "FAIL: no refusal naming the other venv's build tree:"; tail -n 20 "$work/refused.log"; exit 1; }
echo "refused: a build tree made in another venv of the same interpreter"
"$python" -m pip wheel -q --no-deps -w "$work/wheel" --config-settings "build-dir=$build" "$src"
wheel=$(ls "$work"/wheel/chorus_torch-*.whl)
echo "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
"$python" -m pip install -q --no-deps --target "$work/site" "$wheel"
cd "$work"
PYTHONPATH="$work/site" "$python" - "$work/site" <<'PYEOF'
import os
import sys

import chorus_torch

site = sys.argv[1]
assert chorus_torch.__file__.startswith(site), chorus_torch.__file__
libs = {line.split()[-1] for line in open("/proc/self/maps") if "libchorus.so" in line}
assert libs == {os.path.join(site, "chorus_torch", "libchorus.so.0")}, libs
print(f"import chorus_torch: {chorus_torch.__file__}, libchorus from {libs.pop()}")
PYEOF
PYTHONPATH="$work/site" PYTHONWARNINGS=ignore "$python" "$src/python/examples/ddp_tutorial.py" --spawn 2
echo "PASS: the wheel installs and runs"
