#!/usr/bin/env bash
# Every GPU check of the project in one script, in two halves: build here, run on a GPU machine.
#
#   tools/gpu_check.sh prepare [DIR]      on a machine with the CUDA toolkit (no GPU needed): builds
#                                         the GPU checks for sm_90 in DIR/build (default: gpu-check),
#                                         copies the stripped programs to DIR/bin and the shared
#                                         libraries a bare machine lacks to DIR/lib; with
#                                         NCCL_TESTS_SRC (an nccl-tests checkout or git directory,
#                                         never part of this repository) also nccl-tests, built
#                                         against the NCCL drop-in and the MPI shim, in DIR/nccl-tests;
#                                         packs all that into DIR/pack/gpu-check.tgz (what travels)
#   tools/gpu_check.sh run OUT [DIR [NAME...]]
#                                         on the GPU machine: unpacks DIR/pack/gpu-check.tgz when DIR
#                                         has no bin/, runs the default checks (or the NAMEd ones, the
#                                         full grids included) with DIR's programs, each under its own
#                                         time limit and all within GPU_CHECK_BUDGET seconds
#                                         (default 480); after every check it appends the check's line
#                                         to OUT/summary.txt and repacks every log into OUT/logs.tgz
#                                         (OUT holds those and device.txt, nothing else),
#                                         so a run cut short still returns what ran; prints the table
#                                         last; exits 1 if any check failed or did not run
#   tools/gpu_check.sh next OUT [DIR]     on the GPU machine: the next run's checks (docs/records/
#                                         2026-11-29-gpu-next.md) as `run` in three groups, each with a
#                                         budget of its own and its own OUT/a, OUT/b, OUT/c, so that
#                                         the first answers come back whatever happens to the rest;
#                                         570 s in all, under ten minutes; each group
#                                         leaves summary.txt and logs.tgz (device.txt is inside),
#                                         six files in all; exits 1 if any group failed, 77 if every
#                                         group found no GPU
#
# A check that finds no GPU exits 77 and shows as "skipped", never as passed; on a machine where
# nvidia-smi lists no GPU every check shows so, and the script exits 77. Checks whose ranks are
# processes run as clients of the MPS control daemon when it could be started (as root): without
# it, processes sharing the GPU take turns on it in time slices (docs/GPU.md); device.txt says
# whether it ran, and a process check that fails under MPS runs once more without it.
set -uo pipefail
cd "$(dirname "$0")/.."

# The checks: name|limit in seconds|where (default: in a run without names; full: by name only)|
# how (thread: one process; proc: ranks are processes, MPS helps)|the program and its arguments
# (from DIR/bin); "@" starts a command run from the repository root instead, where DIR stands for the
# folder of the built programs; "env VAR=value DIR/bin/..." sets a variable for one check. The
# default list runs in about 5 minutes on an H100 or H200, the sampled thread grid late so that a
# slow one leaves the rest their time; the full grids (about 3 minutes per rank count) are for a
# call of their own. gpu_bench measures (docs/GPU.md, "Performance"; its tables stop at
# GPU_BENCH_BUDGET seconds, saying so) and passes whenever it ran.
checks=(
  "device_test|60|default|thread|device_test"
  "cuda_host_only|30|default|thread|env CHORUS_TEST_EXPECT_LIBCUDA=1 DIR/bin/api_test [nocuda]"
  "cuda_api|60|default|thread|api_test [cuda]~[nocuda]"
  "cuda_flight|30|default|thread|cuda_flight_test"
  "nccl_initall|30|default|thread|nccl_env_test initall-devices"
  "torch_colls|60|default|proc|@python3 tools/torch_coll_check.py DIR/nccl/libnccl.so.2 --world 2"
  "nccl_torch|150|default|proc|@python3 tools/nccl_torch_check.py DIR/nccl/libnccl.so.2 --world 2"
  "nccl_torch_mixed|200|default|proc|@bash tools/torch_mixed_check.sh DIR"
  "nccl_tests_2|60|default|proc|@bash tools/nccl_tests_check.sh DIR 2"
  "cuda_proc_2|60|default|proc|cuda_proc_test grid 2 --quick"
  "cuda_proc_staged|60|default|proc|cuda_proc_test grid 2 --staged --quick"
  "cuda_proc_legacy|60|default|proc|env CHORUS_CUMEM_ENABLE=0 DIR/bin/cuda_proc_test grid 2 --quick"
  "cuda_proc_hosts|60|default|proc|cuda_proc_test grid 4 --hosts 2 --quick"
  "cuda_onecopy_2|60|default|proc|cuda_proc_test onecopy 2"
  "cuda_kill|30|default|proc|cuda_proc_test kill 4"
  "cuda_kill_hosts|30|default|proc|cuda_proc_test kill 4 --hosts 2"
  "cuda_proc_4|90|default|proc|cuda_proc_test grid 4 --quick"
  "cuda_onecopy_4|90|default|proc|cuda_proc_test onecopy 4"
  "nccl_tests_4|90|default|proc|@bash tools/nccl_tests_check.sh DIR 4"
  "cuda_queue_32|30|default|thread|cuda_queue_test 32"
  "cuda_queue_1|30|default|thread|cuda_queue_test 1"
  "cuda_ddp|60|default|thread|cuda_ddp_test"
  "cuda_ddp_8ch|60|default|thread|env CHORUS_DEVICE_NCHANNELS=8 DIR/bin/cuda_ddp_test"
  "ddp_mnist_gpu|90|default|proc|@bash tools/ddp_gpu_check.sh DIR"
  "cuda_coll|150|default|thread|cuda_coll_test --quick"
  "gpu_bench|200|default|thread|env GPU_BENCH_BUDGET=170 DIR/bin/gpu_bench"
  "gpu_bench_ll128|120|full|thread|env CHORUS_LL128=1 GPU_BENCH_BUDGET=100 DIR/bin/gpu_bench"
  "nccl_bench|60|default|thread|@bash tools/nccl_tests_bench.sh DIR"
  "ncu_profile|90|default|thread|@bash tools/ncu_profile.sh DIR"
  "cuda_coll_full_2|400|full|thread|cuda_coll_test --ranks 2"
  "cuda_coll_full_3|400|full|thread|cuda_coll_test --ranks 3"
  "cuda_coll_full_4|400|full|thread|cuda_coll_test --ranks 4"
  "cuda_proc_full_2|300|full|proc|cuda_proc_test grid 2"
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
      IFS='|' read -r _ _ _ _ prog <<< "$c"
      [[ $prog == @* ]] && continue
      [[ $prog == env\ * ]] && prog=${prog##*DIR/bin/}
      t=${prog%% *}
      [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t")
    done
    targets+=(chorusrun ddp_mnist)
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
    strip --strip-unneeded "$dir"/lib/libchorus.so* "$dir/nccl/libnccl.so.2" 2> /dev/null || true
    # A part of Fashion-MNIST for ddp_mnist_gpu (the GPU machine has no dataset-fashion-mnist):
    # the first 8192 training and 2000 test images, as idx files of those sizes.
    mkdir -p "$dir/data"
    python3 tools/mnist_subset.py /usr/share/datasets/fashion-mnist "$dir/data" 8192 2000
    mkdir -p "$dir/pack"
    parts=(bin lib nccl mpi data)
    [ -d "$dir/nccl-tests" ] && parts+=(nccl-tests)
    tar -czf "$dir/pack/gpu-check.tgz" -C "$dir" "${parts[@]}"
    du -sh "$dir/bin" "$dir/lib" "$dir/pack/gpu-check.tgz"
    bytes=$(stat -c %s "$dir/pack/gpu-check.tgz")
    if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
      echo "gpu_check: $dir/pack/gpu-check.tgz is $bytes bytes, over the 64 MiB that may travel"
      exit 1
    fi
    ;;
  run)
    out=${2:?usage: tools/gpu_check.sh run OUT [DIR [NAME...]]}
    dir=${3:-gpu-check}
    only=("${@:4}")
    budget=${GPU_CHECK_BUDGET:-480}
    began=$(date +%s)
    # The logs gather outside OUT and travel packed (OUT/logs.tgz): the machine that ran them may
    # return only a few files of OUT.
    logs=$(mktemp -d "${TMPDIR:-/tmp}/chorus-gpu-check.XXXXXX")/logs
    mkdir -p "$out" "$logs"
    if [ ! -d "$dir/bin" ] && [ -f "$dir/pack/gpu-check.tgz" ]; then
      tar -xzf "$dir/pack/gpu-check.tgz" -C "$dir" || { echo "gpu_check: cannot unpack $dir/pack/gpu-check.tgz"; exit 1; }
    fi
    [ -d "$dir/bin" ] || {
      echo "gpu_check: no $dir/bin and no $dir/pack/gpu-check.tgz: run 'bash tools/gpu_check.sh prepare $dir' on a machine with the CUDA toolkit first"
      exit 1
    }
    # No GPU here (nvidia-smi lists none): every check shows as skipped, none as passed, and the
    # script exits 77. Some checks would pass without one (cuda_host_only is a host-only run).
    gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
    # NCCL itself, for the benchmarks' reference lines (gpu_bench, nccl_bench).
    if [ "$gpus" -gt 0 ]; then
      # shellcheck source=tools/nccl_tests_lib.sh
      source tools/nccl_tests_lib.sh
      NCCL_LIB_DIR=$(nccl_find_lib)
      export NCCL_LIB_DIR
    fi
    export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # MPS: a daemon of this run's own (its pipe directory), so that only the checks given its
    # CUDA_MPS_PIPE_DIRECTORY are its clients; stopped at the end.
    mps_dir=""
    mps="not started"
    if [ "$(id -u)" -eq 0 ] && command -v nvidia-cuda-mps-control > /dev/null 2>&1; then
      mps_dir=$(mktemp -d /tmp/chorus-mps.XXXXXX)
      if CUDA_MPS_PIPE_DIRECTORY=$mps_dir CUDA_MPS_LOG_DIRECTORY=$mps_dir nvidia-cuda-mps-control -d 2> "$logs/mps.log"; then
        mps="running for the process checks (pipe directory $mps_dir)"
      else
        mps="could not be started (logs/mps.log)"
        mps_dir=""
      fi
    elif [ "$(id -u)" -ne 0 ]; then
      mps="not started (not root)"
    else
      mps="not started (no nvidia-cuda-mps-control)"
    fi
    stop_mps() {
      [ -n "$mps_dir" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_dir nvidia-cuda-mps-control > /dev/null 2>&1
      mps_dir=""
    }
    trap stop_mps EXIT
    { date -u; nvidia-smi 2>&1; echo "MPS: $mps"; echo "budget: $budget s"; } > "$out/device.txt"
    : > "$out/summary.txt"
    pack() {
      cp "$out/device.txt" "$out/summary.txt" "$logs/"
      tar -czf "$out/logs.tgz.part" -C "$(dirname "$logs")" logs && mv "$out/logs.tgz.part" "$out/logs.tgz"
    }
    # Runs one check's command with a limit; its exit status.
    run_one() {
      local limit=$1 prog=$2 log=$3 withMps=$4
      local -
      set -f  # the arguments are words: "[nocuda]" is a test filter, not a file pattern
      local -a env_mps=()
      [ "$withMps" = 1 ] && env_mps=(CUDA_MPS_PIPE_DIRECTORY="$mps_dir" CUDA_MPS_LOG_DIRECTORY="$mps_dir")
      if [[ $prog == @* ]]; then
        local cmd=${prog#@}
        env "${env_mps[@]}" timeout -k 10 "$limit" bash -c "${cmd//DIR/$dir}" >> "$log" 2>&1
      elif [[ $prog == env\ * ]]; then
        # shellcheck disable=SC2086
        env "${env_mps[@]}" timeout -k 10 "$limit" ${prog//DIR/$dir} >> "$log" 2>&1
      else
        # shellcheck disable=SC2086
        env "${env_mps[@]}" timeout -k 10 "$limit" "$dir/bin/"$prog >> "$log" 2>&1
      fi
    }
    results=()
    failed=0
    for c in "${checks[@]}"; do
      IFS='|' read -r name limit where how prog <<< "$c"
      if [ ${#only[@]} -gt 0 ]; then
        [[ " ${only[*]} " == *" $name "* ]] || continue
      elif [ "$where" != default ]; then
        continue
      fi
      left=$((budget - ($(date +%s) - began)))
      log="$logs/$name.log"
      : > "$log"
      if [ "$gpus" -eq 0 ]; then
        verdict="skipped (no GPU on this machine)"
        took=0
        echo "nvidia-smi lists no GPU on this machine" > "$log"
      elif [ "$left" -lt 10 ]; then
        verdict="NOT RUN (budget spent)"
        took=0
        failed=1
      else
        [ "$limit" -gt "$left" ] && limit=$left
        start=$(date +%s)
        withMps=0
        [ "$how" = proc ] && [ -n "$mps_dir" ] && withMps=1
        [ $withMps = 1 ] && echo "== under MPS" >> "$log"
        run_one "$limit" "$prog" "$log" $withMps
        rc=$?
        note=""
        if [ $withMps = 1 ] && [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
          left=$((budget - ($(date +%s) - began)))
          if [ "$left" -ge 20 ]; then
            [ "$limit" -gt "$left" ] && limit=$left
            echo "== exit $rc under MPS; once more without MPS" >> "$log"
            run_one "$limit" "$prog" "$log" 0
            rc2=$?
            note=" (under MPS: exit $rc; without: exit $rc2)"
            rc=$rc2
          fi
        fi
        took=$(($(date +%s) - start))
        case $rc in
          0) verdict="passed$note" ;;
          77) verdict=skipped ;;
          124|137) verdict="FAILED (time limit ${limit} s)$note"; failed=1 ;;
          *) verdict="FAILED (exit $rc)$note"; failed=1 ;;
        esac
      fi
      line=$(printf '%-18s %-34s %5s s  %s' "$name" "$verdict" "$took" "$(grep -v '^$' "$log" | tail -1 | cut -c1-120)")
      results+=("$line")
      echo "$line" >> "$out/summary.txt"
      echo "$line"
      pack
    done
    stop_mps
    total=$(($(date +%s) - began))
    echo "total: $total s of a budget of $budget s" >> "$out/summary.txt"
    pack
    echo "== GPU checks ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); MPS $mps; $total s)"
    printf '%s\n' "${results[@]}"
    [ "$gpus" -eq 0 ] && exit 77
    exit $failed
    ;;
  next)
    out=${2:?usage: tools/gpu_check.sh next OUT [DIR]}
    dir=${3:-gpu-check}
    # a: the device's pre-multiplication rounded apart from the sum (device_test, the thread grid)
    #    and the checks run 8 left out or failed under MPS; b: PyTorch and nccl-tests on 4 ranks;
    #    c: the measurements with CHORUS_LL128=1 (docs/records/2026-11-29-gpu-next.md).
    groups=(
      "200|a|device_test cuda_host_only nccl_initall cuda_proc_legacy cuda_kill_hosts cuda_coll"
      "250|b|cuda_api torch_colls nccl_torch_mixed nccl_tests_4 ddp_mnist_gpu"
      "120|c|gpu_bench_ll128"
    )
    worst=77
    for g in "${groups[@]}"; do
      IFS='|' read -r gbudget gname gchecks <<< "$g"
      echo "== group $gname ($gbudget s): $gchecks"
      # shellcheck disable=SC2086
      GPU_CHECK_BUDGET=$gbudget bash tools/gpu_check.sh run "$out/$gname" "$dir" $gchecks
      rc=$?
      rm -f "$out/$gname/device.txt"  # a copy is in its logs.tgz: fewer files to bring back
      if [ $rc -ne 77 ]; then
        [ $worst -eq 77 ] && worst=0
        [ $rc -ne 0 ] && worst=1
      fi
    done
    exit $worst
    ;;
  *)
    sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
