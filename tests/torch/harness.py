"""What the torch tests share: running a function on ranks under mp.spawn and reporting failures."""
import os
import random
import socket
import sys
import time
import traceback

import torch.multiprocessing as mp


def _bindable(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(offset=0):
    """A port that, with port + 1 and port + 2, nothing listens on now. It is drawn at random
    below the kernel's ephemeral range: a port from that range (bind to 0) could be handed out
    a moment later as the source port of some connection, the test's own store clients' among
    them, and the port after it was, once. Random, so that tests running side by side do not
    collide; `offset` is no longer needed."""
    del offset
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    while True:
        port = rng.randrange(10000, max(10001, low - 3))
        if all(_bindable(port + i) for i in range(3)):
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
