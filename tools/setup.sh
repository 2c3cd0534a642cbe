#!/usr/bin/env bash
# Chorus's one entry point for a fresh Debian 12 machine:
#
#   bash tools/setup.sh run    install what is missing, build what the main job needs, run it (an
#                              all-reduce with a rank per core printing an nccl-tests table, then
#                              memcpy's rates on this machine)
#   bash tools/setup.sh test   install what is missing, build, run the default test tier
#                              (CHORUS_TEST_TIER=extended runs everything)
#   bash tools/setup.sh deps   install what is missing, nothing more
#   bash tools/setup.sh build  install what is missing and build (BUILD_DIR), without running
#   bash tools/setup.sh plots  install matplotlib for tools/plot_perf.py (not needed to build or test)
#   bash tools/setup.sh bench  install iperf3 and Gloo for tools/bench_netns.sh and tools/compare_peers.py
#
# Environment: BUILD_DIR (default build), CHORUS_JOBS (build jobs, default nproc),
# CHORUS_CUDA_ARCHITECTURES (the device code's GPU architectures; default: below), CHORUS_TORCH_VENV
# (where build and test put PyTorch 2.11 from PyPI for the backend, default .torch-venv; an empty
# value skips PyTorch and the backend).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
mode=${1:-}
case "$mode" in
  run|test|deps|build|plots|bench) ;;
  *)
    echo "usage: bash tools/setup.sh run|test|deps|build|plots|bench (the header of tools/setup.sh says what each does)" >&2
    exit 2
    ;;
esac

packages=(build-essential cmake ninja-build ccache pkg-config git
          libhwloc-dev libibverbs-dev libspdlog-dev libfmt-dev catch2 libcli11-dev nlohmann-json3-dev
          openmpi-bin libopenmpi-dev iproute2 nftables bc python3 clang-format clang-14 libclang-rt-14-dev
          zlib1g-dev libfabric-dev dataset-fashion-mnist python3-dev python3-venv libgloo-dev)
[ "$mode" = plots ] && packages=(python3-matplotlib)
[ "$mode" = bench ] && packages=(iperf3 libgloo-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
[ "$mode" = deps ] || [ "$mode" = plots ] || [ "$mode" = bench ] && exit 0

# PyTorch for the backend (python/chorus_torch) and its tests: the version pinned here, from PyPI, in
# a virtual environment of its own (the CUDA build, 2.6 GB of wheels; it runs on CPU tensors here),
# with numpy (the examples) and expecttest (torch's own test base, tools/torch_dist_suite.py).
# Kept between runs; pip brings an existing environment to that version when it holds another.
# The install (mostly download and unpacking) runs beside the build; the backend is configured and
# built once both are done.
torch_version=2.11.0
torch_venv=${CHORUS_TORCH_VENV-$PWD/.torch-venv}
torch_args=()
torch_pid=""
if [ "$mode" != run ] && [ -n "$torch_venv" ]; then
  torch_args=(-DCHORUS_TORCH_PYTHON="$torch_venv/bin/python")
  if ! "$torch_venv/bin/python" -c "import sys, torch, numpy, expecttest; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    torch_log=${BUILD_DIR:-build}.torch-venv.log
    echo "== installing PyTorch $torch_version, numpy and expecttest from PyPI into $torch_venv, beside the build"
    echo "   (log: $torch_log)"
    (
      start=$(date +%s)
      [ -x "$torch_venv/bin/python" ] || python3 -m venv "$torch_venv"
      "$torch_venv/bin/pip" install -q "torch==$torch_version" numpy expecttest
      echo "   (PyTorch installed in $(($(date +%s) - start)) s, $(du -sh "$torch_venv" | cut -f1))"
    ) > "$torch_log" 2>&1 &
    torch_pid=$!
    trap 'kill "$torch_pid" 2>/dev/null || true' EXIT
    torch_args=(-DCHORUS_TORCH_PYTHON=)
  fi
fi

build=${BUILD_DIR:-build}
jobs=${CHORUS_JOBS:-$(nproc)}

# The device code is the longest compile (minutes of one core per GPU architecture), so the build
# compiles what this machine runs. With a GPU: device code for it (cmake/cuda.cmake asks
# nvidia-smi). Without one, `run` builds for host memory only (its all-reduce is on host memory)
# and `test` and `build` compile the device code to PTX for sm_90 without ptxas: the check that it
# compiles, which is all a machine without a GPU can do with it. CHORUS_CUDA_ARCHITECTURES names
# others ("75;80;90": a library for those GPUs).
cuda_args=()
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  cuda_args=(-DCHORUS_ENABLE_CUDA=ON "-DCHORUS_CUDA_ARCHITECTURES=${CHORUS_CUDA_ARCHITECTURES-}")
  device_note="device code for this machine's GPUs"
elif [ "$mode" = run ] && [ -z "${CHORUS_CUDA_ARCHITECTURES-}" ]; then
  cuda_args=(-DCHORUS_ENABLE_CUDA=OFF)
  device_note="no GPU here: host memory only"
else
  cuda_args=(-DCHORUS_ENABLE_CUDA=ON "-DCHORUS_CUDA_ARCHITECTURES=${CHORUS_CUDA_ARCHITECTURES-90-virtual}")
  device_note="no GPU here: device code as PTX for sm_90, the check that it compiles"
  [ -n "${CHORUS_CUDA_ARCHITECTURES-}" ] && device_note="device code for $CHORUS_CUDA_ARCHITECTURES"
fi
# What `run` runs, and no more; `test` and `build` build everything.
targets=()
what="every target"
if [ "$mode" = run ]; then
  targets=(--target chorusrun all_reduce_perf copy_paths)
  what="the library, chorusrun, all_reduce_perf and copy_paths"
fi

echo "== configuring and building in $build: $what ($device_note)"
case "$mode" in
  run) echo "   (2 to 4 minutes on 2 cores from nothing; ccache makes a rebuild seconds)" ;;
  *) echo "   (5 to 15 minutes on 2 cores from nothing, by the machine; ccache makes a rebuild seconds)" ;;
esac
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda_args[@]}" "${torch_args[@]}" \
  > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
rm -f "$build.configure.log"
cmake --build "$build" -j "$jobs" "${targets[@]}"
echo "   (built in $(($(date +%s) - start)) s)"
if [ -n "$torch_pid" ]; then
  echo "== the PyTorch backend, once PyTorch is installed"
  if ! wait "$torch_pid"; then
    cat "$torch_log"
    echo "installing PyTorch into $torch_venv failed (above); remove $torch_venv and run again, or set CHORUS_TORCH_VENV= to build without the backend" >&2
    exit 1
  fi
  trap - EXIT
  cat "$torch_log"
  rm -f "$torch_log"
  start=$(date +%s)
  cmake -S . -B "$build" -DCHORUS_TORCH_PYTHON="$torch_venv/bin/python" > "$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
  rm -f "$build.configure.log"
  cmake --build "$build" -j "$jobs"
  echo "   (built in $(($(date +%s) - start)) s)"
fi
[ "$mode" = build ] && exit 0

# The main job: an all-reduce with a rank per core (2 to 8), then what memcpy does on this machine
# at the same sizes, the rate the all-reduce's copies run at (README, "The main job").
if [ "$mode" = run ]; then
  ranks=$(nproc)
  ranks=$((ranks < 2 ? 2 : ranks > 8 ? 8 : ranks))
  echo "== all-reduce, $ranks local ranks (a rank per core, chorusrun), float sum, 8 B to 64 MiB"
  "$build/chorusrun" -n "$ranks" -- "$build/perf/all_reduce_perf" -b 8 -e 64M -f 2 -n 20 -w 5 -c 1
  echo "== the copy limit: memcpy within a process, and process_vm_readv from another, 64 KiB to 64 MiB"
  exec "$build/perf/copy_paths" -b 65536 -e 67108864 -n 20
fi

# Runs a command (ctest) in a build tree; when it fails, the output ends with each failed test's
# failed checks, so that the tail of a CI log says what failed.
in_tree() {
  local dir=$1
  shift
  (cd "$dir" && "$@") && return 0
  python3 tools/ctest_failures.py "$dir"
  return 1
}

echo "== tests (tier: ${CHORUS_TEST_TIER:-default})"
in_tree "$build" ctest -j 2 --output-on-failure --timeout 3600

# The sanitizer builds, with clang 14, each in a build tree of its own (neither runs under mpirun).
#  - AddressSanitizer + UndefinedBehaviorSanitizer: the unit tests, the API and DDP-layer tests, a thread-per-rank
#    subset of the grid, and the fuzz targets (fuzz/), every finding fatal.
#  - ThreadSanitizer: the thread-per-rank tests, and the device executor on blocks of host threads.
# The extended tier adds the full thread grid under ASan and fuzzes each target for 5 minutes.
# Both at -O1 with line tables only, as the sanitizers' own documentation advises: a report still
# names file and line of every frame, inlined ones too, and the build takes about an eighth less.
sanitized() {
  local dir=$1 sanitizer=$2 fuzz=$3
  shift 3
  echo "== $sanitizer build in $dir"
  start=$(date +%s)
  local flags="-O1 -gline-tables-only -DNDEBUG"
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
    -DCHORUS_SANITIZER="$sanitizer" -DCHORUS_BUILD_FUZZERS="$fuzz" -DCHORUS_ENABLE_CUDA=OFF > "$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; exit 1; }
  rm -f "$dir.configure.log"
  cmake --build "$dir" -j "$jobs" --target "$@"
  echo "   (built in $(($(date +%s) - start)) s)"
}
threads='grid_threads_(streams|shm|socket|nchannels2|direct|slice|tree|workers)'
[ "${CHORUS_TEST_TIER:-default}" = extended ] && threads='grid_threads_.*'

sanitized "${build}-asan" address,undefined ON unit_test api_test ddp_test grid_test strangers \
  fuzz_bootstrap_reader fuzz_socket_stream fuzz_unique_id fuzz_machine
# Not under UBSan: running a process out of descriptors (api_test's [fds] case). UBSan's vptr
# check opens a pipe to probe memory it has not seen, and with no descriptor left it reports a
# valid object as having an invalid vptr; the plain build and TSan run that case.
# hwloc loads its PCI plugin, and with it libpciaccess, for every topology and unloads it after:
# what libpciaccess keeps in its globals then looks leaked from an unknown module. Loaded once for
# the whole run, it stays reachable.
in_tree "${build}-asan" env LD_PRELOAD="$(ls /usr/lib/*/libpciaccess.so.0 | head -1)" \
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest -j 2 --output-on-failure -R "^(unit_test(_avx2|_avx512|_f16c)?|device_lane|net_threads|api_test:.*|ddp_test|strangers|strangers_flood|$threads|fuzz_.*)\$" \
  -E "^api_test:running out of descriptors"

sanitized "${build}-tsan" thread OFF unit_test api_test ddp_test grid_test
in_tree "${build}-tsan" env TSAN_OPTIONS=halt_on_error=1 ctest -j 2 --output-on-failure \
  -R "^(device_lane|net_threads|api_test:.*|ddp_test|$threads)\$"
t=$(($(date +%s) - t0))
echo "== every test passed ($((t / 60)) min $((t % 60)) s in all)"
