#!/usr/bin/env bash
# "cpu:chorus,cuda:nccl" on a GPU machine (gpu_check.sh's nccl_torch_mixed): builds chorus_torch for
# that machine's python3 and the PyTorch 2.x in it (its Python is not this project's .torch-venv,
# so the extension is compiled there, against DIR/lib's libchorus and the source tree's headers),
# then runs tools/nccl_torch_check.py --mixed with the drop-in: CUDA tensors through
# ProcessGroupNCCL and DIR/nccl/libnccl.so.2, CPU tensors through chorus_torch, in one group.
#   torch_mixed_check.sh DIR      (DIR: gpu_check.sh's folder of built programs)
set -euo pipefail
dir=$1
python=${PYTHON:-python3}
"$python" -c "import torch" 2> /dev/null || { echo "SKIP: no PyTorch for $python"; exit 77; }
pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
mkdir -p "$pkg/chorus_torch"
mapfile -t info < <("$python" - <<'PYEOF'
import os, sysconfig, torch
from torch.utils import cpp_extension
print(" ".join("-isystem " + p for p in cpp_extension.include_paths()))
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX"))
PYEOF
)
lib=$(cd "$dir/lib" && pwd)
# DIR/lib holds the library by its soname only (libchorus.so.0, what the programs load), not the
# libchorus.so a -lchorus would look for: link that file by name.
chorus_so=$(find "$lib" -maxdepth 1 -name 'libchorus.so*' | sort | head -1)
[ -n "$chorus_so" ] || { echo "FAIL: no libchorus.so* in $lib"; exit 1; }
start=$(date +%s)
# shellcheck disable=SC2086  # info[0] is a list of flags
g++ -O2 -shared -fPIC -std=c++17 -fvisibility=hidden -D_GLIBCXX_USE_CXX11_ABI="${info[2]}" \
  -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C -I include ${info[0]} -isystem "${info[3]}" \
  python/chorus_torch/csrc/process_group.cc -o "$pkg/chorus_torch/_C${info[4]}" \
  "$chorus_so" -Wl,-rpath,"$lib" -L "${info[1]}" -ltorch -ltorch_cpu -lc10 -ltorch_python
cp python/chorus_torch/__init__.py "$pkg/chorus_torch/"
echo "chorus_torch built for $("$python" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)') in $(($(date +%s) - start)) s"
PYTHONPATH="$pkg" "$python" tools/nccl_torch_check.py "$dir/nccl/libnccl.so.2" --world 2 --mixed
