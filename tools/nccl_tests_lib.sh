# Sourced by tools/nccl_tests_check.sh, tools/nccl_tests_bench.sh and tools/gpu_check.sh: what they
# need before they run nccl-tests from DIR (tools/gpu_check.sh prepare), or a skip (exit 77) saying
# what is missing; and where NCCL itself is.
#   nccl_tests_require DIR
#   nccl_find_lib         prints the directory of NCCL's own libnccl.so.2 (NCCL_LIB_DIR, else the
#                         nvidia-nccl-cu13 package beside PyTorch), or nothing
nccl_tests_require() {
  if ! ls "$1"/nccl-tests/*_perf > /dev/null 2>&1; then
    echo "SKIP: nccl-tests were not built (tools/gpu_check.sh prepare needs NCCL_TESTS_SRC)"
    exit 77
  fi
  if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi > /dev/null 2>&1; then
    echo "SKIP: no GPU"
    exit 77
  fi
}

nccl_find_lib() {
  local found=${NCCL_LIB_DIR:-}
  if [ -z "$found" ]; then
    found=$(python3 - 2> /dev/null <<'EOF'
import os
try:
    import nvidia.nccl as n
    for p in list(n.__path__):
        if os.path.exists(os.path.join(p, "lib", "libnccl.so.2")):
            print(os.path.join(p, "lib"))
            break
except Exception:
    pass
EOF
)
  fi
  [ -z "$found" ] && found=$(find / -xdev -path '*nvidia/nccl/lib/libnccl.so.2' 2> /dev/null | head -1 | xargs -r dirname)
  if [ -n "$found" ] && [ -f "$found/libnccl.so.2" ]; then echo "$found"; fi
}
