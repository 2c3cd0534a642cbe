#!/usr/bin/env python3
"""Refills the tuning table (src/algo/tuning_table.cc) from measurements.

Each row of the table is what one algorithm costs on one memory kind with one protocol beyond the
links the topology models: a cost per call, a cost per step of its schedule and a rate (per
channel on device memory). This tool measures every algorithm forced (CHORUS_ALGO), fits those
numbers to the medians by least squares on the relative error, using the same shapes as the
algorithms' estimates (src/algo/*.cc, costUs in src/algo/cost.cc), and prints the rows to paste:
on host memory one row per algorithm and rank count measured (the tuner takes the row of the most
ranks up to a communicator's), since a 2-core machine's ranks beyond 2 share cores and no single
line fits them all.

  host:   python3 tools/tuning_fit.py host --build BUILD [--np 2,3,4] [--rounds 3] [--save LOG]
          runs all_reduce_perf out of place, 8 B to 16 MiB by 2x, each algorithm forced: ring,
          tree and direct with ranks as processes (chorusrun), slice with ranks as threads of one
          process (it reads peers' buffers in place, as registered memory between processes
          would); reads the topology's model from each shape's CHORUS_TOPO_DUMP_FILE.
          --log LOG fits a saved run (--save) instead of measuring.
  device: python3 tools/tuning_fit.py device LOG... [--channels 2:32,4:16]
          reads gpu_bench logs (their "all-reduce by algorithm" tables: every algorithm and
          protocol forced, 2 and 4 ranks on one GPU) and fits a row per algorithm, protocol and
          rank count; --channels gives the communicator's device channel limit per rank count
          (its INFO line "device collectives run up to N").
"""
import argparse
import collections
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

SIZES = [8 * 2**i for i in range(22)]  # 8 B .. 16 MiB


def shape(algo, n, model):
    """steps, latency (us), load: as the algorithm's estimateUs gives them to costUs."""
    hop = model["ringLatencyUs"] / (2.0 * (n - 1))
    if algo == "ring":
        return 2 * (n - 1), model["ringLatencyUs"], 2.0 * (n - 1) / n
    if algo == "tree":
        return 2 * math.ceil(math.log2(n)), model["treeLatencyUs"], 2.0
    if algo == "direct":
        return 1, hop, n - 1.0
    if algo == "slice":
        return 3, 3 * hop, 2.0 * (n - 1) / n
    if algo == "one-copy":
        return 1, 2 * hop, 2.0 * (n - 1) / n
    raise ValueError(algo)


def one_copy_parts(size, n):
    """The one-copy all-reduce's blocks per rank (oneCopyParts, src/algo/one_copy.cc)."""
    return max(1, min(16, size // n // (256 * 1024)))


def fit(points):
    """points: (steps, latency, load x size, channels, time), one rank count. Returns callUs,
    stepUs (0: one shape of steps, which the call's cost takes) and gbs: the call's cost and the
    rate by least squares on the relative error, so every size counts alike (the choices the
    tuner makes at each size are what the table is for)."""
    a = [[0.0, 0.0], [0.0, 0.0]]
    b = [0.0, 0.0]
    for _, lat, x, ch, t in points:
        w = 1.0 / (t * t)
        r = (1.0, x / ch)
        for i in range(2):
            b[i] += w * r[i] * (t - lat)
            for j in range(2):
                a[i][j] += w * r[i] * r[j]
    det = a[0][0] * a[1][1] - a[0][1] * a[1][0]
    call = (b[0] * a[1][1] - a[0][1] * b[1]) / det if det else 0.0
    inv = (a[0][0] * b[1] - a[1][0] * b[0]) / det if det else 0.0
    if call < 0 or not det:  # no cost of its own: the rate alone
        call = 0.0
        inv = sum((t - lat) * x / ch / (t * t) for _, lat, x, ch, t in points) / sum(
            (x / ch) ** 2 / (t * t) for _, lat, x, ch, t in points)
    return call, 0.0, (1.0 / (inv * 1e3) if inv > 0 else 0.0)


def run(cmd, env=None):
    full = dict(os.environ)
    full.update(env or {})
    out = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), out.stdout[-2000:], out.stderr[-2000:]))
    return out.stdout


def table_rows(text):
    """all_reduce_perf rows: size -> out-of-place time (us)."""
    got = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 10 and f[0].isdigit():
            got[int(f[0])] = float(f[5])
    return got


def host(args):
    nps = [int(x) for x in args.np.split(",")]
    record = {"models": {}, "runs": []}
    if args.log:
        record = json.load(open(args.log))
    else:
        def perf(n, threads, sizes):
            cmd = [args.build + "/perf/all_reduce_perf"] + (["-t", str(n)] if threads else []) + sizes
            return cmd if threads else [args.build + "/chorusrun", "-n", str(n), "--"] + cmd

        sweep = ["-b", "8", "-e", str(SIZES[-1]), "-f", "2", "-n", "50", "-w", "5", "-c", "0", "-a", "3"]
        for n in nps:
            for algo in ("ring", "tree", "direct", "slice"):
                if algo == "tree" and n < 3:
                    continue
                threads = algo == "slice"
                key = "%d/%s" % (n, "threads" if threads else "processes")
                if key not in record["models"]:
                    with tempfile.TemporaryDirectory() as d:
                        dump = os.path.join(d, "topo.json")
                        run(perf(n, threads, ["-b", "8", "-e", "8", "-n", "1", "-w", "0", "-c", "0"]),
                            {"CHORUS_TOPO_DUMP_FILE": dump})
                        record["models"][key] = json.load(open(dump))["tuner"]
                for r in range(args.rounds):
                    times = table_rows(run(perf(n, threads, sweep), {"CHORUS_ALGO": algo}))
                    record["runs"].append({"n": n, "algo": algo, "key": key, "times": times})
                    print("measured n=%d %s round %d" % (n, algo, r + 1), file=sys.stderr)
        if args.save:
            json.dump(record, open(args.save, "w"), indent=1)
    med = collections.defaultdict(list)
    for r in record["runs"]:
        for size, t in r["times"].items():
            med[(r["algo"], r["n"], r["key"], int(size))].append(t)
    print("// Host rows: python3 tools/tuning_fit.py host --build BUILD --np %s --rounds %d" % (args.np, args.rounds))
    # One row per algorithm and rank count (its steps are then fixed: the call's cost takes them).
    for algo in ("ring", "tree", "direct", "slice"):
        for n in sorted({k[1] for k in med}):
            points = []
            for (a, m, key, size), ts in sorted(med.items()):
                if a != algo or m != n:
                    continue
                steps, lat, load = shape(algo, n, record["models"][key])
                points.append((steps, lat, load * size, 1, statistics.median(ts)))
            if not points:
                continue
            call, step, gbs = fit(points)
            print('    {MemKind::kHost, "%s", ProtoKind::kSimple, %.2f, %.2f, %.2f, 0, %d},' % (algo, call, step, gbs, n))


def device(args):
    limit = {int(k): int(v) for k, v in (x.split(":") for x in args.channels.split(","))}
    points = collections.defaultdict(list)
    for path in args.logs:
        n = None
        cols = []
        for line in open(path):
            m = re.match(r"== all-reduce by algorithm, (\d+) ranks", line)
            if m:
                n = int(m.group(1))
                continue
            f = line.split()
            if line.startswith("=="):
                n = None
            if n is None or not f:
                continue
            if f[0] == "size":
                cols = [c.split("/") for c in f[2:]]  # "size (B)", then algo/proto
                continue
            if not f[0].isdigit() or len(f) != len(cols) + 1:
                continue
            size = int(f[0])
            for (algo, proto), t in zip(cols, f[1:]):
                if t == "-" or (algo == "tree" and n < 3):
                    continue
                # Tuner::k*ChannelBytes: one channel per this many bytes, per protocol
                per = {"ll": 4096, "ll128": 16384}.get(proto, 32768)
                ch = max(1, min(size // per, limit.get(n, 1)))
                ch = 2 if algo == "tree" else 1 if algo == "direct" else ch  # their lanes
                ch = one_copy_parts(size, n) if algo == "one-copy" else ch
                # The topology's hops inside a host (1 us each): a lap of n, the trees' depth.
                model = {"ringLatencyUs": 2.0 * (n - 1) * args.hop_us,
                         "treeLatencyUs": 2.0 * math.ceil(math.log2(n)) * args.hop_us}
                steps, lat, load = shape(algo, n, model)
                name = {"ll": "LL", "ll128": "LL128"}.get(proto, "Simple")
                points[(algo, name, n)].append((steps, lat, load * size, ch, float(t)))
    print("// Device rows: python3 tools/tuning_fit.py device %s --channels %s" % (" ".join(args.logs), args.channels))
    for (algo, proto, n), pts in sorted(points.items()):
        # Per channel; the call's ceiling (maxGbs) from the largest sizes, where it shows.
        call, step, gbs = fit(pts)
        top = sorted(pts, key=lambda p: p[2])[-2:]
        seen = [p[2] / max(1e-9, p[4] - call - p[1]) / 1e3 for p in top]
        cap = statistics.median(seen) if seen else 0.0
        cap = cap if 0 < cap < 0.9 * gbs * max(p[3] for p in top) else 0.0
        print('    {MemKind::kDevice, "%s", ProtoKind::k%s, %.2f, %.2f, %.2f, %.1f, %d},' %
              (algo, proto, call, step, gbs, cap, n))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    h = sub.add_parser("host")
    h.add_argument("--build", default="build")
    h.add_argument("--np", default="2,3,4")
    h.add_argument("--rounds", type=int, default=3)
    h.add_argument("--log")
    h.add_argument("--save")
    d = sub.add_parser("device")
    d.add_argument("logs", nargs="+")
    d.add_argument("--channels", default="2:32,4:16")
    d.add_argument("--hop-us", type=float, default=1.0)
    args = p.parse_args()
    host(args) if args.mode == "host" else device(args)


if __name__ == "__main__":
    main()
