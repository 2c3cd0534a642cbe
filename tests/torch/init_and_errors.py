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
from datetime import timedelta

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401
import harness


def check_allreduce(rank, world, what):
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    want = float(sum(range(1, world + 1)))
    if not torch.equal(t, torch.full((5,), want)):
        raise AssertionError(f"{what}: all_reduce gave {t.tolist()}, want {want}")


def init_methods(rank, world, port, tmpdir):
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


def timeout(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("chorus", rank=rank, world_size=world, timeout=timedelta(seconds=3))
    check_allreduce(rank, world, "before the timeout")
    if rank == 1:
        time.sleep(6)  # never joins the next all-reduce
        os._exit(0)
    work = dist.all_reduce(torch.ones(4), async_op=True)
    fut = work.get_future()
    took, msg = harness.expect_failure(work.wait, "all_reduce without its peer")
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


if __name__ == "__main__":
    port = harness.free_port()
    with tempfile.TemporaryDirectory() as tmp:
        harness.spawn(init_methods, 2, 2, port, tmp)
    harness.spawn(timeout, 2, 2, port + 2)
    print("PASS: init methods and the timeout")
