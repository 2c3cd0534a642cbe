#!/usr/bin/python3
"""Draws bus bandwidth against message size for one or more perf-tool JSON files (-J), or for
the medians that ../shared/bench/compare.py writes with --json.

  /usr/bin/python3 tools/plot_perf.py out.png run1.json [run2.json ...] [--title T] [--inplace]
  /usr/bin/python3 tools/plot_perf.py out.png compare.json --nranks 2

A perf-tool file becomes one line, labelled "<collective> <nranks> ranks" (or --labels a,b,...);
a compare.py file one line per contender at --nranks (its copy limit dashed).
Needs matplotlib (Debian: python3-matplotlib; `bash tools/setup.sh plots` installs it).
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", help="PNG file to write")
    ap.add_argument("inputs", nargs="+", help="JSON files written by a perf tool's -J")
    ap.add_argument("--title", default="")
    ap.add_argument("--labels", default="", help="comma-separated labels, one per input")
    ap.add_argument("--inplace", action="store_true", help="plot the in-place columns")
    ap.add_argument("--nranks", default="2", help="which rank count of a compare.py file to draw")
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
        if "rows" not in run:  # compare.py: {nranks: {size: {"median": {name: [us, busbw, wrong]}}}}
            table = run[args.nranks]
            sizes = sorted(int(k) for k in table)
            names = sorted({n for k in table for n, m in table[k]["median"].items() if m})
            for name in names:
                pts = [(s, table[str(s)]["median"][name][1]) for s in sizes if table[str(s)]["median"].get(name)]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if name != "limit" else None,
                        linestyle="--" if name == "limit" else "-", label=name)
            continue
        rows = [r for r in run["rows"] if key in r and r["size"] > 0]
        rows.sort(key=lambda r: r["size"])
        label = labels[i] if i < len(labels) else f'{run["collective"]} {run["nranks"]} ranks'
        ax.plot([r["size"] for r in rows], [r[key]["busbw_GBps"] for r in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(args.title or "bus bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)


if __name__ == "__main__":
    main()
