"""What the torch tests share: running a function on ranks under mp.spawn and reporting failures."""
import os
import socket
import sys
import time
import traceback

import torch.multiprocessing as mp


def free_port(offset=0):
    """A port nothing listens on now, chosen by the kernel so that tests running side by side do
    not collide (a pid-derived one did). Callers also use port + 1 and port + 2, which are free
    too unless some other socket took them in between; `offset` is no longer needed."""
    del offset
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 2 < 65536:
            return port


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
