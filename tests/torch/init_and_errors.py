"""The chorus backend's init methods and how its errors reach Python, on 2 ranks (mp.spawn).

- init_method file://, tcp:// and env:// each make a working group (an all-reduce is checked);
- a process group made with timeout=3 s whose peer never joins an all-reduce: the call raises a
  RuntimeError within seconds that names the rank waited for, and async work's wait() and
  future raise it too.

Usage: python3 init_and_errors.py
"""
import os
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import chorus_torch  # noqa: F401


def check_allreduce(rank, world, what):
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    want = float(sum(range(1, world + 1)))
    if not torch.equal(t, torch.full((5,), want)):
        raise AssertionError(f"{what}: all_reduce gave {t.tolist()}, want {want}")


def init_methods(rank, world, port, tmpdir, failures):
    try:
        methods = {
            "file": f"file://{tmpdir}/store",
            "tcp": f"tcp://127.0.0.1:{port}",
        }
        for name, url in methods.items():
            dist.init_process_group("chorus", init_method=url, rank=rank, world_size=world)
            check_allreduce(rank, world, name)
            dist.destroy_process_group()
            if rank == 0:
                print(f"init_method {name}:// works", flush=True)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port + 1)
        os.environ["RANK"] = str(rank)
        os.environ["WORLD_SIZE"] = str(world)
        dist.init_process_group("chorus", init_method="env://")
        check_allreduce(rank, world, "env")
        dist.destroy_process_group()
        if rank == 0:
            print("init_method env:// works", flush=True)
    except Exception:
        failures.put(f"rank {rank}: {traceback.format_exc()}")
        raise


def timeout(rank, world, port, failures):
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("chorus", rank=rank, world_size=world, timeout=timedelta(seconds=3))
        check_allreduce(rank, world, "before the timeout")
        if rank == 1:
            time.sleep(6)  # never joins the next all-reduce
            os._exit(0)
        start = time.monotonic()
        work = dist.all_reduce(torch.ones(4), async_op=True)
        fut = work.get_future()
        try:
            work.wait()
        except RuntimeError as e:
            took = time.monotonic() - start
            msg = str(e)
        else:
            raise AssertionError("the all-reduce without its peer succeeded")
        print(f"all_reduce failed after {took:.1f} s: {msg.splitlines()[0][:300]}", flush=True)
        if not 2.0 <= took <= 9.0:
            raise AssertionError(f"the 3 s timeout took {took:.1f} s")
        if "rank 1" not in msg:
            raise AssertionError(f"the error does not name rank 1: {msg}")
        try:
            fut.wait()
        except RuntimeError as e:
            if "rank 1" not in str(e):
                raise AssertionError(f"the future's error does not name rank 1: {e}")
        else:
            raise AssertionError("the future of the failed all-reduce succeeded")
        # The group is broken now; later calls fail at once with the same reason.
        try:
            dist.all_reduce(torch.ones(1))
        except RuntimeError as e:
            if "rank 1" not in str(e) and "failed" not in str(e):
                raise AssertionError(f"a call after the failure says: {e}")
        dist.destroy_process_group()
    except Exception:
        failures.put(f"rank {rank}: {traceback.format_exc()}")
        raise


def spawn(fn, args, world, failures):
    try:
        mp.spawn(fn, args=(world,) + args + (failures,), nprocs=world)
    except Exception:
        while not failures.empty():
            print(failures.get(), file=sys.stderr)
        print("FAIL", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    failures = ctx.SimpleQueue()
    port = 20000 + (os.getpid() + 13) % 20000
    with tempfile.TemporaryDirectory() as tmp:
        spawn(init_methods, (port, tmp), 2, failures)
    spawn(timeout, (port + 2,), 2, failures)
    print("PASS: init methods and the timeout")
