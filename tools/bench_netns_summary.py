#!/usr/bin/env python3
"""Medians of tools/bench_netns.sh output: Chorus against Gloo per size, and Chorus's all-reduce
bus bandwidth at the largest size against half of what iperf3 moved both ways in the same rounds."""
import statistics
import sys
from collections import defaultdict


def main(path):
    iperf = {}
    steal = {}
    chorus = defaultdict(lambda: ([], []))
    gloo = defaultdict(list)
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "iperf":
            iperf[int(f[1])] = (float(f[2]), float(f[3]))
        elif f[0] == "chorus":
            b = int(f[2])
            chorus[b][0].append(float(f[3]))
            chorus[b][1].append(float(f[4]))
        elif f[0] == "steal":
            steal[int(f[1])] = float(f[2])
        elif f[0] == "gloo":
            gloo[int(f[2])].append(float(f[3]))
    med = statistics.median
    print(f"\n{len(iperf)} rounds; medians; times in us; 2 ranks, busbw = bytes / time")
    print("| bytes | Chorus out-of-place | Chorus in-place | Gloo | Gloo / Chorus |")
    print("|---:|---:|---:|---:|---:|")
    for b in sorted(chorus):
        o, i = med(chorus[b][0]), med(chorus[b][1])
        g = med(gloo[b]) if b in gloo else None
        ratio = f"{g / o:.2f}x" if g else "-"
        print(f"| {b} | {o:.1f} | {i:.1f} | {g:.1f} | {ratio} |" if g else f"| {b} | {o:.1f} | {i:.1f} | - | - |")
    if not iperf:
        return
    big = max(chorus)
    print(f"\nAt {big} bytes, per round: iperf3 tx/rx Gbit/s, half the total in GB/s, Chorus busbw GB/s "
          "out of place and in place, and each as a share of that half")
    ratios = ([], [])
    for r in sorted(iperf):
        tx, rx = iperf[r]
        half = (tx + rx) / 2 / 8
        bw = [big / 1e3 / chorus[big][k][r - 1] for k in (0, 1)]
        for k in (0, 1):
            ratios[k].append(bw[k] / half)
        print(f"round {r}: iperf3 {tx:.1f} / {rx:.1f} Gbit/s, half {half:.2f} GB/s, Chorus {bw[0]:.2f} / {bw[1]:.2f} GB/s, "
              f"{100 * bw[0] / half:.0f}% / {100 * bw[1] / half:.0f}%, steal {steal.get(r, 0):.1f}%")
    print(f"median of the rounds' shares: out of place {100 * med(ratios[0]):.0f}%, in place {100 * med(ratios[1]):.0f}%")
    halves = [(tx + rx) / 2 / 8 for tx, rx in iperf.values()]
    bws = [big / 1e3 / med(chorus[big][k]) for k in (0, 1)]
    print(f"medians: iperf3 half {med(halves):.2f} GB/s; Chorus {bws[0]:.2f} GB/s out of place "
          f"({100 * bws[0] / med(halves):.0f}%), {bws[1]:.2f} GB/s in place ({100 * bws[1] / med(halves):.0f}%)")


if __name__ == "__main__":
    main(sys.argv[1])
