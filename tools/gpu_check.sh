#!/usr/bin/env bash
# Every GPU check of the project in one script, in two halves: build here, run on a GPU machine.
#
#   tools/gpu_check.sh prepare [DIR]      on a machine with the CUDA toolkit (no GPU needed): builds
#                                         the GPU checks for sm_90 in DIR/build (default: gpu-check),
#                                         copies the stripped programs to DIR/bin and the shared
#                                         libraries a bare machine lacks to DIR/lib; with
#                                         NCCL_TESTS_SRC (an nccl-tests checkout or git directory,
#                                         never part of this repository) also nccl-tests, built
#                                         against the NCCL drop-in and the MPI shim, in DIR/nccl-tests
#   tools/gpu_check.sh run OUT [DIR [NAME...]]
#                                         on the GPU machine: runs every check (or the NAMEd ones)
#                                         with DIR's programs, writes each one's full log and the
#                                         device's description under OUT, and prints a table last;
#                                         exits 1 if any failed
#
# DIR/bin and DIR/lib are what travels (the build tree stays behind). A check that finds no GPU
# exits 77 and shows as "skipped", never as passed.
set -uo pipefail
cd "$(dirname "$0")/.."

# The checks: name, then the program and its arguments (from DIR/bin); "@" starts a command run
# from the repository root instead, where DIR stands for the folder of the built programs.
# cuda_coll is cut by rank count so that no run is longer than one command on the device machine
# may be; gpu_bench measures (docs/GPU.md, "Measurements") and passes whenever it ran.
checks=(
  "device_test|device_test"
  "cuda_host_only|api_test [nocuda]"
  "cuda_api|api_test [cuda]~[nocuda]"
  "gpu_bench|gpu_bench"
  "cuda_coll_2|cuda_coll_test --ranks 2"
  "cuda_coll_3|cuda_coll_test --ranks 3"
  "cuda_coll_4|cuda_coll_test --ranks 4"
  "cuda_proc_2|cuda_proc_test grid 2"
  "cuda_proc_4|cuda_proc_test grid 4 --quick"
  "cuda_proc_staged|cuda_proc_test grid 2 --staged --quick"
  "cuda_proc_hosts|cuda_proc_test grid 4 --hosts 2 --quick"
  "cuda_onecopy_2|cuda_proc_test onecopy 2"
  "cuda_onecopy_4|cuda_proc_test onecopy 4"
  "cuda_kill|cuda_proc_test kill 4"
  "nccl_torch|@python3 tools/nccl_torch_check.py DIR/nccl/libnccl.so.2 --world 2"
  "nccl_tests_2|@bash tools/nccl_tests_check.sh DIR 2"
  "nccl_tests_4|@bash tools/nccl_tests_check.sh DIR 4"
  "cuda_kill_hosts|cuda_proc_test kill 4 --hosts 2"
)

mode=${1:-}
case "$mode" in
  prepare)
    dir=${2:-gpu-check}
    set -e
    cmake -S . -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_ENABLE_CUDA=ON \
      -DCHORUS_CUDA_ARCHITECTURES=90 > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
    rm -f "$dir.configure.log"
    targets=()
    for c in "${checks[@]}"; do
      prog=${c#*|}
      [[ $prog == @* ]] && continue
      t=${prog%% *}
      [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t")
    done
    targets+=(chorusrun)
    cmake --build "$dir/build" --target "${targets[@]}" chorus_nccl chorus_mpi_shim
    mkdir -p "$dir/bin" "$dir/lib" "$dir/nccl" "$dir/mpi/include" "$dir/mpi/lib"
    # The NCCL drop-in, for the checks that load it (it finds libchorus.so in DIR/lib), and the
    # MPI shim nccl-tests is built against.
    cp -L "$dir/build/nccl/libnccl.so.2" "$dir/nccl/libnccl.so.2"
    cp -L "$dir/build/mpi_shim/lib/libmpi.so" "$dir/mpi/lib/libmpi.so"
    cp tests/nccl/mpi_shim/mpi.h "$dir/mpi/include/mpi.h"
    if [ -n "${NCCL_TESTS_SRC:-}" ]; then
      src="$dir/nccl-tests-src"
      rm -rf "$src" && mkdir -p "$src"
      if [ -d "$NCCL_TESTS_SRC/src" ]; then
        cp -r "$NCCL_TESTS_SRC/." "$src/"
      else
        git --git-dir="$NCCL_TESTS_SRC" archive HEAD | tar -x -C "$src"
      fi
      cuda=${CUDA_HOME:-/usr/local/cuda}
      home="$PWD/$dir/nccl-home"
      mkdir -p "$home/include" "$home/lib"
      cp "$cuda/include/nccl.h" "$home/include/"
      ln -sf "$PWD/$dir/nccl/libnccl.so.2" "$home/lib/libnccl.so"
      make -C "$src" -j"$(nproc)" MPI=1 MPI_HOME="$PWD/$dir/mpi" NCCL_HOME="$home" \
        CUDA_HOME="$cuda" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
        BUILDDIR="$PWD/$dir/nccl-tests-build" > "$dir/nccl-tests.build.log" 2>&1 ||
        { tail -30 "$dir/nccl-tests.build.log"; exit 1; }
      mkdir -p "$dir/nccl-tests"
      cp "$dir"/nccl-tests-build/*_perf "$dir/nccl-tests/"
      strip "$dir"/nccl-tests/*_perf
    fi
    for t in "${targets[@]}"; do
      found=$(find "$dir/build" -type f -name "$t" -perm -u+x | head -1)
      [ -n "$found" ] || { echo "gpu_check: $t was not built"; exit 1; }
      cp "$found" "$dir/bin/$t"
      strip "$dir/bin/$t"
      # Every shared library but the C runtime's and the driver's goes along.
      ldd "$dir/bin/$t" | awk '/=> \// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
          libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libcuda.so.*) ;;
          *) cp -L "$lib" "$dir/lib/" ;;
        esac
      done
    done
    du -sh "$dir/bin" "$dir/lib"
    ;;
  run)
    out=${2:?usage: tools/gpu_check.sh run OUT [DIR [NAME...]]}
    dir=${3:-gpu-check}
    only=("${@:4}")
    mkdir -p "$out"
    export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # Whether MPS runs: without it, processes sharing the GPU take turns on it (docs/GPU.md).
    mps="not running"
    pgrep -x nvidia-cuda-mps-control > /dev/null 2>&1 && mps=running
    { date -u; nvidia-smi 2>&1; echo "MPS: $mps"; } > "$out/device.txt"
    results=()
    failed=0
    for c in "${checks[@]}"; do
      name=${c%%|*}
      prog=${c#*|}
      if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
      start=$(date +%s)
      if [[ $prog == @* ]]; then
        cmd=${prog#@}
        timeout -k 10 600 bash -c "${cmd//DIR/$dir}" > "$out/$name.log" 2>&1
        rc=$?
      else
        # shellcheck disable=SC2086
        timeout -k 10 600 "$dir/bin/"$prog > "$out/$name.log" 2>&1
        rc=$?
      fi
      took=$(($(date +%s) - start))
      case $rc in
        0) verdict=passed ;;
        77) verdict=skipped ;;
        *) verdict="FAILED (exit $rc)"; failed=1 ;;
      esac
      results+=("$(printf '%-24s %-20s %5s s  %s' "$name" "$verdict" "$took" "$(tail -1 "$out/$name.log")")")
    done
    echo "== GPU checks ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1))"
    printf '%s\n' "${results[@]}"
    exit $failed
    ;;
  *)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
