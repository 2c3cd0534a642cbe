"""What the torch tests share: running a function on ranks under mp.spawn and reporting failures."""
import os
import sys
import time
import traceback

import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "examples"))
import ports  # noqa: E402


def free_port():
    """A port that, with port + 1 and port + 2, nothing listens on now (python/examples/ports.py,
    which the examples use too: random, below the kernel's ephemeral range)."""
    return ports.free_port(3)


def _guarded(rank, fn, args, failures):
    try:
        fn(rank, *args)
    except Exception:
        failures.put(f"rank {rank}: {traceback.format_exc()}")
        raise


def spawn(fn, world, *args):
    """Runs fn(rank, *args) on `world` processes; on any failure prints each rank's traceback and
    exits with status 1."""
    failures = mp.get_context("spawn").SimpleQueue()
    try:
        mp.spawn(_guarded, args=(fn, args, failures), nprocs=world)
    except Exception:
        while not failures.empty():
            print(failures.get(), file=sys.stderr)
        print("FAIL", file=sys.stderr)
        sys.exit(1)


def expect_failure(call, what):
    """Runs call(), which must raise a RuntimeError; prints and returns (seconds taken, message)."""
    start = time.monotonic()
    try:
        call()
    except RuntimeError as e:
        took = time.monotonic() - start
        msg = str(e)
    else:
        raise AssertionError(f"{what} succeeded")
    print(f"{what} failed after {took:.1f} s: {msg.splitlines()[0][:300]}", flush=True)
    return took, msg
