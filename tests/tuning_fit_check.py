#!/usr/bin/env python3
"""tools/tuning_fit.py device reads gpu_bench's "all-reduce by algorithm" tables and gives back
the rows they were made from: a log written here from known rows through each algorithm's shape
(src/algo/*.cc estimateUs, through costUs) must fit to those rows, every algorithm and protocol
column gpu_bench prints (one-copy included), at 2 and 4 ranks."""
import math
import os
import re
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "tuning_fit.py")
HOP_US = 1.0
LIMIT = {2: 32, 4: 16}
# (algo, proto) -> (callUs, gbs per channel); stepUs 0: one shape of steps per rank count.
ROWS = {
    ("ring", "simple"): (8.0, 40.0),
    ("ring", "ll"): (6.0, 18.0),
    ("ring", "ll128"): (12.0, 33.0),
    ("tree", "simple"): (9.0, 30.0),
    ("tree", "ll"): (7.0, 9.0),
    ("tree", "ll128"): (13.0, 25.0),
    ("direct", "simple"): (5.0, 35.0),
    ("direct", "ll"): (4.0, 16.0),
    ("direct", "ll128"): (10.0, 30.0),
    ("one-copy", "simple"): (25.0, 90.0),
}
SIZES = [8 * 2**i for i in range(22)]
FORCED_MAX = 1 << 20  # gpu_bench's kForcedLLMaxBytes: LL, LL128 and direct stop here


def channels(algo, proto, size, n):
    if algo == "tree":
        return 2
    if algo == "direct":
        return 1
    if algo == "one-copy":
        return max(1, min(16, size // n // (256 * 1024)))
    per = {"ll": 4096, "ll128": 16384}.get(proto, 32768)
    return max(1, min(size // per, LIMIT[n]))


def shape(algo, n):
    ring = 2.0 * (n - 1) * HOP_US
    hop = ring / (2.0 * (n - 1))
    if algo == "ring":
        return ring, 2.0 * (n - 1) / n
    if algo == "tree":
        return 2.0 * math.ceil(math.log2(n)) * HOP_US, 2.0
    if algo == "direct":
        return hop, n - 1.0
    return 2 * hop, 2.0 * (n - 1) / n  # one-copy


def main():
    lines = []
    for n in (2, 4):
        cols = list(ROWS)
        lines.append("\n== all-reduce by algorithm, %d ranks on one GPU, out of place: us per call "
                     "(tools/tuning_fit.py device)" % n)
        lines.append("%12s" % "size (B)" + "".join(" %12s" % (a + "/" + p) for a, p in cols))
        for size in SIZES:
            row = "%12d" % size
            for algo, proto in cols:
                if (proto in ("ll", "ll128") or algo == "direct") and size > FORCED_MAX:
                    row += " %12s" % "-"
                    continue
                call, gbs = ROWS[(algo, proto)]
                lat, load = shape(algo, n)
                us = call + lat + size * load / (gbs * channels(algo, proto, size, n) * 1e3)
                row += " %12.2f" % us
            lines.append(row)
    lines.append("\n== 2 ranks on one GPU (tuner's choice)\n     1024   3.00")  # another table: skipped
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        out = subprocess.run([sys.executable, TOOL, "device", path, "--channels", "2:32,4:16"],
                             capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    if out.returncode != 0:
        sys.exit("tuning_fit.py device failed:\n" + out.stdout + out.stderr)
    got = {}
    for m in re.finditer(r'\{MemKind::kDevice, "([a-z-]+)", ProtoKind::k(\w+), ([\d.]+), ([\d.]+), ([\d.]+), '
                         r'([\d.]+), (\d+)\}', out.stdout):
        got[(m.group(1), m.group(2).lower(), int(m.group(7)))] = (float(m.group(3)), float(m.group(5)))
    bad = []
    for n in (2, 4):
        for (algo, proto), (call, gbs) in ROWS.items():
            if algo == "tree" and n < 3:
                continue
            key = (algo, proto, n)
            if key not in got:
                bad.append("no row for %s/%s at %d ranks" % key)
                continue
            c, g = got[key]
            # Printed to two decimals: the times were too.
            if abs(c - call) > 0.05 + 0.02 * call or abs(g - gbs) > 0.03 * gbs:
                bad.append("%s/%s at %d ranks: fitted call %.2f us, %.2f GB/s; made from %.2f us, %.2f GB/s" %
                           (algo, proto, n, c, g, call, gbs))
    extra = [k for k in got if (k[0], k[1]) not in ROWS or (k[0] == "tree" and k[2] < 3)]
    if extra:
        bad.append("rows for columns the log does not have: %s" % extra)
    if bad:
        sys.exit("tuning_fit device does not give back the rows its log was made from:\n  " + "\n  ".join(bad) +
                 "\n" + out.stdout)
    print("tuning_fit device: %d rows fitted back within 2%% of the call's cost and 3%% of the rate" % len(got))


if __name__ == "__main__":
    main()
