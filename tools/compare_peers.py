#!/usr/bin/env python3
"""Chorus's all-reduce beside Open MPI's and Gloo's on host memory, in one run on one host.

Builds the peers (perf/peers/: MPI_Allreduce against Debian's Open MPI, gloo::allreduce against
Debian's libgloo-dev, and the memcpy bound) into BUILD/peers, then runs, round after round and in
turn so that drift on a shared machine hits all alike:

  chorus   BUILD/perf/all_reduce_perf -a 3 -c 1 under mpirun (the slowest rank's time)
  openmpi  perf/peers/mpi_allreduce.c under the same mpirun
  gloo     perf/peers/gloo_allreduce.cc under the same mpirun (a FileStore rendezvous)
  limit    perf/peers/copy_limit.c: one thread's memcpy GB/s while two copy at once, the bound of
           a 2-rank all-reduce's bus bandwidth (2 ranks, bandwidth sizes only)

Every contender times a float sum the way nccl-tests do (warm-up calls, then ITERS calls back to
back, the slowest rank's mean) and checks the last result element by element; a wrong element, a
size with no result, or a command that fails (non-zero exit, timeout) fails the run (exit 1). Two
sweeps by default: latency (8 B to 4 KiB, factor 8, many iterations) and bandwidth (64 KiB to 64 MiB,
factor 2); the copy limit runs on a sweep's sizes from 64 KiB up. It prints, per rank count, a
Markdown table of the medians over the rounds: times in microseconds, Chorus's bus bandwidth, the
copy limit, and "x PEER" = the peer's time over Chorus's (above 1: Chorus is faster).

  bash tools/setup.sh bench                        # libgloo-dev (Open MPI comes with the build)
  bash tools/setup.sh build
  python3 tools/compare_peers.py                   # 2 and 4 ranks, 3 rounds (about 15 minutes here)
  python3 tools/compare_peers.py --np 2 --rounds 5 --json /tmp/compare.json
  python3 tools/compare_peers.py --sweeps 8:64K:8 --rounds 1 --iters 5   # a quick look
  python3 tools/compare_peers.py --stream null --before /tmp/old/build   # NULL stream, before and after

Chorus runs on a host stream (nccl-tests' default), or with --stream null on the NULL stream (each
call returns when done). --before adds an earlier build of Chorus as one more contender in the same
rounds, for a before-and-after in one sitting.

--json writes the medians ({"2": {"SIZE": {"median": {NAME: [us, busbw, wrong]}}}}) that
tools/plot_perf.py draws with --nranks, with the command and the machine under "meta".
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np"]
NAMED_SWEEPS = {"latency": (8, 4096, 8), "bandwidth": (64 << 10, 64 << 20, 2)}
LIMIT_FROM = 64 << 10  # the copy limit is measured from this size up
TITLES = {"chorus": "Chorus", "before": "Chorus before", "openmpi": "Open MPI", "gloo": "Gloo"}


def parse_size(text):
    """A size as nccl-tests take it: a number with an optional K, M or G (powers of 1024)."""
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


def parse_sweep(text):
    """A named sweep (latency, bandwidth) or MIN:MAX:FACTOR -> (min, max, factor, named)."""
    if text in NAMED_SWEEPS:
        return (*NAMED_SWEEPS[text], text)
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"a sweep is latency, bandwidth or MIN:MAX:FACTOR, not '{text}'")
    lo, hi, factor = parse_size(parts[0]), parse_size(parts[1]), int(parts[2])
    if lo < 4 or hi < lo or factor < 2:
        raise ValueError(f"the sweep '{text}' needs 4 <= MIN <= MAX and FACTOR >= 2")
    return (lo, hi, factor, text)


def sweep_sizes(lo, hi, factor):
    """The sizes a sweep runs, as nccl-tests step them: lo, lo*factor, ... up to hi."""
    sizes = []
    while lo <= hi:
        sizes.append(lo)
        lo *= factor
    return sizes


def parse_rows(text):
    """{size: (time us, busbw GB/s, wrong)} from a table in all_reduce_perf's layout (size count
    type redop root time algbw busbw #wrong ...), the out-of-place columns; comment lines and
    anything before the size (a rank prefix) are skipped."""
    rows = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        tok = line.replace(":", " ").split()
        for i in range(len(tok) - 8):
            f = tok[i:]
            if not (f[0].isdigit() and f[1].isdigit()) or f[2][0].isdigit() or f[2][0] == "-":
                continue
            try:
                rows.setdefault(int(f[0]), (float(f[5]), float(f[7]), int(float(f[8]))))
            except ValueError:
                pass
            break
    return rows


def build_peers(outdir):
    missing = [what for what, ok in (("mpicc and mpirun (openmpi-bin, libopenmpi-dev)",
                                      shutil.which("mpicc") and shutil.which("mpirun")),
                                     ("Gloo's headers (libgloo-dev)", os.path.exists("/usr/include/gloo/allreduce.h")))
               if not ok]
    if missing:
        sys.exit("compare_peers.py: missing " + " and ".join(missing) + ": run `bash tools/setup.sh bench`")
    os.makedirs(outdir, exist_ok=True)
    src = os.path.join(ROOT, "perf", "peers")
    bins = {name: os.path.join(outdir, name) for name in ("mpi_allreduce", "gloo_allreduce", "copy_limit")}
    steps = [
        ["mpicc", "-O3", os.path.join(src, "mpi_allreduce.c"), "-o", bins["mpi_allreduce"]],
        ["g++", "-O3", "-std=c++17", os.path.join(src, "gloo_allreduce.cc"), "-o", bins["gloo_allreduce"], "-lgloo",
         "-lpthread"],
        ["gcc", "-O3", "-pthread", os.path.join(src, "copy_limit.c"), "-o", bins["copy_limit"]],
    ]
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"compare_peers.py: building a peer failed: {' '.join(cmd)}\n{p.stderr}")
    return bins


def run(cmd, timeout):
    """The command's output, or None with the reason on stderr."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"compare_peers.py: timed out after {timeout} s: {' '.join(cmd)}", file=sys.stderr)
        return None
    if p.returncode != 0:
        print(f"compare_peers.py: exit {p.returncode}: {' '.join(cmd)}\n{(p.stdout + p.stderr)[-2000:]}",
              file=sys.stderr)
        return None
    return p.stdout


def fmt_time(us):
    return f"{us:.2f}"


def fmt_ratio(r):
    return f"{r:.2f}" if r < 10 else f"{r:.3g}" if r < 1000 else f"{r:.0f}"


def size_name(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def table(nranks, med, peers):
    """The Markdown table of one rank count from {name: {size: (us, busbw, wrong)}}."""
    names = ["chorus"] + peers
    limit = "limit" in med
    head = ["size"] + [TITLES[n] for n in names] + ["Chorus busbw"] + (["limit"] if limit else [])
    head += [f"x {TITLES[p]}" for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for size in sorted(set().union(*(set(v) for v in med.values()))):
        c = med.get("chorus", {}).get(size)
        row = [size_name(size)]
        row += [fmt_time(med[n][size][0]) if size in med.get(n, {}) else "-" for n in names]
        row.append(f"{c[1]:.3f}" if c else "-")
        if limit:
            row.append(f"{med['limit'][size][1]:.2f}" if size in med["limit"] else "-")
        for p in peers:
            t = med.get(p, {}).get(size)
            row.append(fmt_ratio(t[0] / c[0]) if t and c and c[0] > 0 else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", default="2,4", help="rank counts, comma-separated (default 2,4)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the tables show medians (default 3)")
    ap.add_argument("--sweeps", default="latency,bandwidth",
                    help="latency, bandwidth, or MIN:MAX:FACTOR, comma-separated (default latency,bandwidth)")
    ap.add_argument("--iters", type=int, default=0,
                    help="calls timed per size (default 1000 in the latency sweep, 20 otherwise)")
    ap.add_argument("--gloo-iters", type=int, default=0,
                    help="Gloo's calls per size in the latency sweep (default 50: Gloo takes milliseconds there)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--peers", default="openmpi,gloo", help="which peers (default openmpi,gloo)")
    ap.add_argument("--build", default="build", help="Chorus's build tree (default build)")
    ap.add_argument("--stream", choices=("host", "null"), default="host",
                    help="the stream Chorus's calls go on: a host stream, as nccl-tests do (default), or the NULL "
                         "stream (-y 1: each call waits for itself)")
    ap.add_argument("--before", metavar="BUILD",
                    help="also run the all_reduce_perf of this build tree (an earlier commit's), in the same rounds, "
                         "as 'Chorus before'; the table adds its time and 'x Chorus before'")
    ap.add_argument("--timeout", type=int, default=900, help="seconds one command may take (default 900)")
    ap.add_argument("--json", help="also write the medians here (tools/plot_perf.py draws them)")
    a = ap.parse_args()
    try:
        sweeps = [parse_sweep(s) for s in a.sweeps.split(",") if s]
        nps = [int(x) for x in a.np.split(",") if x]
    except ValueError as e:
        sys.exit(f"compare_peers.py: {e}")
    peers = [p for p in a.peers.split(",") if p]
    unknown = [p for p in peers if p not in ("openmpi", "gloo")]
    before = os.path.join(a.before, "perf", "all_reduce_perf") if a.before else None
    if before and not os.access(before, os.X_OK):
        sys.exit(f"compare_peers.py: no {before}: build the earlier commit there first")
    if unknown or not nps or min(nps) < 2 or a.rounds < 1:
        sys.exit("compare_peers.py: --peers takes openmpi and gloo, --np counts of at least 2, --rounds at least 1")
    perf = os.path.join(a.build, "perf", "all_reduce_perf")
    if not os.access(perf, os.X_OK):
        sys.exit(f"compare_peers.py: no {perf}: build Chorus first (bash tools/setup.sh build) or give --build")
    bins = build_peers(os.path.join(a.build, "peers"))

    samples = {}  # np -> name -> size -> [(us, busbw, wrong)]
    failed = []
    for rnd in range(a.rounds):
        for np_ in nps:
            for lo, hi, factor, name in sweeps:
                iters = a.iters or (1000 if name == "latency" else 20)
                gloo_iters = a.gloo_iters or (50 if name == "latency" else iters)
                size_args = ["-b", str(lo), "-e", str(hi), "-f", str(factor), "-w", str(a.warmup)]
                launch = MPIRUN + [str(np_)]
                chorus_args = size_args + ["-n", str(iters), "-a", "3", "-c", "1", "-y", "1" if a.stream == "null" else "0"]
                cmds = {"chorus": launch + [perf] + chorus_args}
                if before:
                    cmds["before"] = launch + [before] + chorus_args
                if "openmpi" in peers:
                    cmds["openmpi"] = launch + [bins["mpi_allreduce"]] + size_args + ["-n", str(iters)]
                store = None
                if "gloo" in peers:
                    store = tempfile.mkdtemp(prefix="chorus-gloo-store-")
                    cmds["gloo"] = launch + [bins["gloo_allreduce"]] + size_args + ["-n", str(gloo_iters), "-s", store]
                # The limit runs on the sweep's own sizes from LIMIT_FROM up (below, a copy's rate says
                # little of a bound), so it has a row for each of them and none past the sweep's last size;
                # a sweep with no such size (8:64K:8 stops at 32 KiB) has no limit column.
                limit_sizes = [s for s in sweep_sizes(lo, hi, factor) if s >= LIMIT_FROM] if np_ == 2 else []
                if limit_sizes:
                    cmds["limit"] = [bins["copy_limit"], "-b", str(limit_sizes[0]), "-e", str(limit_sizes[-1]),
                                     "-f", str(factor), "-n", str(iters)]
                for who, cmd in cmds.items():
                    print(f"# round {rnd + 1}/{a.rounds}, {np_} ranks, {name}: {who}", file=sys.stderr, flush=True)
                    out = run(cmd, a.timeout)
                    if out is None:  # run() said why; a partial table must not pass for a whole one
                        failed.append(f"{who} at {np_} ranks, {name}: the command failed: {' '.join(cmd)}")
                        continue
                    rows = parse_rows(out)
                    want = limit_sizes if who == "limit" else sweep_sizes(lo, hi, factor)
                    lost = [s for s in want if s not in rows]
                    wrong = [s for s in want if s in rows and rows[s][2] != 0]
                    if lost or wrong:
                        failed.append(f"{who} at {np_} ranks: " + (f"no result for {len(lost)} sizes; " if lost else "") +
                                      (f"wrong elements at {', '.join(size_name(s) for s in wrong)}" if wrong else ""))
                    for size, row in rows.items():
                        samples.setdefault(np_, {}).setdefault(who, {}).setdefault(size, []).append(row)
                if store:
                    shutil.rmtree(store, ignore_errors=True)

    report = {"meta": {"date": datetime.date.today().isoformat(), "command": " ".join([sys.argv[0]] + sys.argv[1:]),
                       "machine": f"{platform.node()}, {os.cpu_count()} CPUs", "rounds": a.rounds,
                       "stream": a.stream}}
    for np_ in nps:
        # Bus bandwidth from the median time (a median of each column could come from two rounds).
        def busbw(who, size, us):
            return size / us / 1e3 * (1 if who == "limit" else 2 * (np_ - 1) / np_)

        med = {}
        for who, by_size in samples.get(np_, {}).items():
            for size, rows in by_size.items():
                us = statistics.median(r[0] for r in rows)
                med.setdefault(who, {})[size] = (us, busbw(who, size, us), max(r[2] for r in rows))
        stream = "the NULL stream" if a.stream == "null" else "a host stream"
        print(f"\n{np_} ranks (all-reduce, float sum, host memory, Chorus on {stream}; medians of {a.rounds} rounds; "
              "times in us):\n")
        print(table(np_, med, (["before"] if before else []) + peers))
        report[str(np_)] = {str(size): {"median": {who: list(m[size]) for who, m in med.items() if size in m}}
                            for size in sorted(set().union(*(set(m) for m in med.values())))} if med else {}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    if failed:
        print("\nFAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
