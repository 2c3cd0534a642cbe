# Sourced by tools/nccl_tests_check.sh and tools/nccl_tests_bench.sh: what both need before they
# run nccl-tests from DIR (tools/gpu_check.sh prepare), or a skip (exit 77) saying what is missing.
#   nccl_tests_require DIR
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
