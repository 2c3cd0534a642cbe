#!/usr/bin/env python3
"""Writes the first TRAIN training and TEST test samples of an MNIST-format data set (gzipped idx
files) as a data set of its own, for machines without the Debian package (tools/gpu_check.sh).

    mnist_subset.py SRC_DIR DST_DIR TRAIN TEST
"""
import gzip
import struct
import sys


def subset(src, dst, count):
    with gzip.open(src, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = magic & 0xFF
    shape = list(struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims]))
    if count > shape[0]:
        raise SystemExit(f"{src} holds {shape[0]} samples, fewer than {count}")
    per = 1
    for d in shape[1:]:
        per *= d
    header = 4 + 4 * dims
    shape[0] = count
    out = struct.pack(">I", magic) + struct.pack(">" + "I" * dims, *shape) + data[header:header + count * per]
    with gzip.open(dst, "wb") as f:
        f.write(out)


def main():
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    src, dst, train, test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for prefix, n in (("train", train), ("t10k", test)):
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
            subset(f"{src}/{prefix}-{kind}.gz", f"{dst}/{prefix}-{kind}.gz", n)


if __name__ == "__main__":
    main()
