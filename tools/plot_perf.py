#!/usr/bin/python3
"""Draws bus bandwidth against message size for one or more perf-tool JSON files (-J, in
nccl-tests' layout, so nccl-tests' own files work too), or for the medians that
tools/compare_peers.py writes with --json.

  /usr/bin/python3 tools/plot_perf.py out.png run1.json [run2.json ...] [--title T] [--inplace]
  /usr/bin/python3 tools/plot_perf.py out.png compare.json --nranks 2

A perf-tool file gives one line per type, op and root it ran, labelled "<file label> <type> <op>
[root R]"; sizes measured more than once (-N) are drawn at their median. Beyond 12 lines in all
(`-d all -o all -r -1` gives up to 12 x 5 x ranks) the figure has one panel per op and root, a
line per file and type in each, and one legend; more than 24 lines in a panel is refused (plot
fewer files or types). A compare_peers.py file gives one line per contender at --nranks (its copy
limit dashed).
Both axes are logarithmic (--linear-y for a linear bandwidth axis).
Needs matplotlib (Debian: python3-matplotlib; `bash tools/setup.sh plots` installs it).
"""
import argparse
import json
import os
import statistics
import sys


# Lines one panel may hold; beyond it a figure splits into panels by op and root.
ONE_PANEL = 12
PER_PANEL = 24


def perf_groups(run, key):
    """{(type, redop, root): [(size, busbw), ...]} of one perf-tool JSON file, sorted by size,
    medians where a size repeats."""
    groups = {}
    for row in run.get("results", []):
        col = row.get(key)
        if not col or row["size"] <= 0:
            continue
        group = (row["type"], row["redop"], str(row["root"]).strip())
        groups.setdefault(group, {}).setdefault(row["size"], []).append(col["bus_bw"])
    return {g: [(s, statistics.median(v)) for s, v in sorted(sizes.items())] for g, sizes in sorted(groups.items())}


def perf_series(run, key, label):
    """The lines of one perf-tool JSON file: {label: [(size, busbw), ...]} sorted by size, one
    per (type, redop, root), medians where a size repeats."""
    return perf_series_from_groups(perf_groups(run, key), label)


def perf_series_from_groups(groups, label):
    """perf_groups' lines named "<label> [type] [op] [root R]" (what they all share left out)."""
    many = len(groups) > 1
    series = {}
    for (dtype, redop, root), pts in groups.items():
        parts = [label]
        if many or dtype != "float":
            parts.append(dtype)
        if redop != "none" and (many or redop != "sum"):
            parts.append(redop)
        if root != "-1" and many:
            parts.append(f"root {root}")
        series[" ".join(parts)] = pts
    return series


def panels(files):
    """Splits the lines of several perf-tool files ([(label, groups)]) into panels by op and root:
    {(redop, root): {"<label> <type>": pts}}. Raises ValueError when a panel would hold more than
    PER_PANEL lines."""
    out = {}
    for label, groups in files:
        for (dtype, redop, root), pts in groups.items():
            out.setdefault((redop, root), {})[f"{label} {dtype}" if len(files) > 1 else dtype] = pts
    for (redop, root), lines in out.items():
        if len(lines) > PER_PANEL:
            raise ValueError(f"{len(lines)} lines in the panel of op {redop}, root {root} (at most {PER_PANEL}): "
                             "plot fewer files or types (-d) at a time")
    return dict(sorted(out.items()))


def compare_series(run, nranks):
    """The lines of a compare_peers.py file at `nranks`: {contender: [(size, busbw), ...]}."""
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
    ap.add_argument("inputs", nargs="+", help="JSON files written by a perf tool's -J (or tools/compare_peers.py --json)")
    ap.add_argument("--title", default="")
    ap.add_argument("--labels", default="", help="comma-separated labels, one per input")
    ap.add_argument("--inplace", action="store_true", help="plot the in-place columns")
    ap.add_argument("--nranks", default="2", help="which rank count of a compare_peers.py file to draw")
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
    perf_files = []  # (label, groups) of each perf-tool file
    compares = []  # {contender: pts} of each compare.py file
    for i, path in enumerate(args.inputs):
        with open(path) as f:
            run = json.load(f)
        if "results" in run:
            perf_files.append((labels[i] if i < len(labels) else file_label(run, path), perf_groups(run, key)))
        else:
            compares.append(compare_series(run, args.nranks))
    total = sum(len(g) for _, g in perf_files) + sum(len(c) for c in compares)

    def style(ax, title):
        ax.set_xscale("log", base=2)
        if not args.linear_y:
            ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)

    if total <= ONE_PANEL or not perf_files:
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, groups in perf_files:
            for name, pts in perf_series_from_groups(groups, label).items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        for series in compares:
            for name, pts in series.items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if name != "limit" else None,
                        linestyle="--" if name == "limit" else "-", label=name)
        style(ax, args.title or "bus bandwidth")
        ax.legend(fontsize="small")
    else:
        if compares:
            sys.exit("plot_perf.py: a compare_peers.py file draws on its own, not beside a perf-tool file of "
                     f"{total} lines: plot them separately")
        try:
            split = panels(perf_files)
        except ValueError as e:
            sys.exit(f"plot_perf.py: {e}")
        names = sorted({n for lines in split.values() for n in lines})
        colors = {n: plt.get_cmap("tab20")(i % 20) for i, n in enumerate(names)}
        cols = min(3, len(split))
        rows = (len(split) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows + 1), squeeze=False)
        for ax, ((redop, root), lines) in zip(axes.flat, split.items()):
            for name, pts in lines.items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", color=colors[name], label=name)
            style(ax, " ".join(p for p in (redop if redop != "none" else "", f"root {root}" if root != "-1" else "")
                              if p) or "all")
        for ax in list(axes.flat)[len(split):]:
            ax.set_visible(False)
        handles = [plt.Line2D([], [], color=colors[n], marker=".", label=n) for n in names]
        fig.legend(handles=handles, loc="lower center", ncol=min(6, len(names)), fontsize="small")
        fig.suptitle(args.title or "bus bandwidth")
        fig.tight_layout(rect=(0, 0.025 * ((len(names) + 5) // 6), 1, 0.97))
    fig.savefig(args.output, dpi=120)


if __name__ == "__main__":
    main()
