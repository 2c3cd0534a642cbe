#!/usr/bin/python3
"""Draws bus bandwidth against message size for one or more perf-tool JSON files (-J, in
nccl-tests' layout, so nccl-tests' own files work too), or for the medians that
../shared/bench/compare.py writes with --json.

  /usr/bin/python3 tools/plot_perf.py out.png run1.json [run2.json ...] [--title T] [--inplace]
  /usr/bin/python3 tools/plot_perf.py out.png compare.json --nranks 2

A perf-tool file gives one line per type, op and root it ran (`-d all -o all -r -1` gives many),
labelled "<file label> <type> <op> [root R]"; sizes measured more than once (-N) are drawn at
their median. A compare.py file gives one line per contender at --nranks (its copy limit dashed).
Both axes are logarithmic (--linear-y for a linear bandwidth axis).
Needs matplotlib (Debian: python3-matplotlib; `bash tools/setup.sh plots` installs it).
"""
import argparse
import json
import os
import statistics
import sys


def perf_series(run, key, label):
    """The lines of one perf-tool JSON file: {label: [(size, busbw), ...]} sorted by size, one
    per (type, redop, root), medians where a size repeats."""
    groups = {}
    for row in run.get("results", []):
        col = row.get(key)
        if not col or row["size"] <= 0:
            continue
        group = (row["type"], row["redop"], str(row["root"]).strip())
        groups.setdefault(group, {}).setdefault(row["size"], []).append(col["bus_bw"])
    many = len(groups) > 1
    series = {}
    for (dtype, redop, root), sizes in sorted(groups.items()):
        parts = [label]
        if many or dtype != "float":
            parts.append(dtype)
        if redop != "none" and (many or redop != "sum"):
            parts.append(redop)
        if root != "-1" and many:
            parts.append(f"root {root}")
        series[" ".join(parts)] = [(s, statistics.median(v)) for s, v in sorted(sizes.items())]
    return series


def compare_series(run, nranks):
    """The lines of a compare.py file at `nranks`: {contender: [(size, busbw), ...]}."""
    table = run[nranks]  # {size: {"median": {name: [us, busbw, wrong]}}}
    sizes = sorted(int(k) for k in table)
    names = sorted({n for k in table for n, m in table[k]["median"].items() if m})
    return {name: [(s, table[str(s)]["median"][name][1]) for s in sizes if table[str(s)]["median"].get(name)]
            for name in names}


def file_label(run, path):
    args = run.get("args") or [path]
    return os.path.basename(args[0]).replace("_perf", "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", help="PNG file to write")
    ap.add_argument("inputs", nargs="+", help="JSON files written by a perf tool's -J (or compare.py --json)")
    ap.add_argument("--title", default="")
    ap.add_argument("--labels", default="", help="comma-separated labels, one per input")
    ap.add_argument("--inplace", action="store_true", help="plot the in-place columns")
    ap.add_argument("--nranks", default="2", help="which rank count of a compare.py file to draw")
    ap.add_argument("--linear-y", action="store_true", help="a linear bandwidth axis")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_perf.py needs matplotlib: apt-get install python3-matplotlib")
    labels = args.labels.split(",") if args.labels else []
    key = "in_place" if args.inplace else "out_of_place"
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, path in enumerate(args.inputs):
        with open(path) as f:
            run = json.load(f)
        if "results" in run:
            label = labels[i] if i < len(labels) else file_label(run, path)
            for name, pts in perf_series(run, key, label).items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        else:
            for name, pts in compare_series(run, args.nranks).items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if name != "limit" else None,
                        linestyle="--" if name == "limit" else "-", label=name)
    ax.set_xscale("log", base=2)
    if not args.linear_y:
        ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(args.title or "bus bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)


if __name__ == "__main__":
    main()
