#!/usr/bin/env python3
"""PyTorch's collectives through the NCCL drop-in with known values, checked element by element.

Each rank (a process on cuda:0, ProcessGroupNCCL, the drop-in preloaded) runs all_gather (list
and into one tensor), broadcast from each root, all_reduce and reduce_scatter on tensors whose
every element is known (and all_reduce with PREMUL_SUM, its factor a number and a tensor on the
GPU), at several sizes and rounds, in three ways: synchronous calls on the
default stream (PyTorch then enqueues the collective on the current stream, here the legacy
default stream, stream 0), synchronous calls under `torch.cuda.stream(side)`, and async_op=True
calls waited for with Work.wait(). Each result is compared with the expected values twice: at once
on the current stream (what a program does next) and after torch.cuda.synchronize(). A result
right only after the synchronize was read before the collective's writes were ordered before the
reader; one wrong both times was written wrong.

  tools/torch_coll_check.py DROPIN [--world 2] [--rounds 3]    starts the ranks, prints PASSED or
                                                               FAILED last; exit 0 when passed
  tools/torch_coll_check.py --cpu                              the check's own logic, on gloo
"""
import argparse
import os
import subprocess
import sys
import socket


def rank_main(args):
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.cpu:  # the check's own logic, on gloo
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    else:
        device = torch.device("cuda:0")
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device,
                                timeout=timedelta(seconds=60))
    bad = {}

    def expect(n, r, it):
        return torch.arange(n, device=device, dtype=torch.float32) + float(r * 1_000_000 + it * 1000)

    def count(key, got, want):
        at_once = (got != want).sum().item()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        later = (got != want).sum().item()
        a, b = bad.get(key, (0, 0))
        bad[key] = (a + at_once, b + later)

    def run(how, n, it):
        asyncOp = how == "async_op"

        def done(work):
            if asyncOp:
                work.wait()

        mine = expect(n, rank, it)
        outs = [torch.empty_like(mine) for _ in range(world)]
        done(dist.all_gather(outs, mine, async_op=asyncOp))
        for r in range(world):
            count(f"{how}: all_gather(list) n={n}", outs[r], expect(n, r, it))
        flat = torch.empty(world * n, device=device)
        done(dist.all_gather_into_tensor(flat, mine, async_op=asyncOp))
        for r, part in enumerate(flat.chunk(world)):
            count(f"{how}: all_gather_into_tensor n={n}", part, expect(n, r, it))
        for root in range(world):
            b = mine.clone() if root == rank else torch.empty_like(mine)
            done(dist.broadcast(b, src=root, async_op=asyncOp))
            count(f"{how}: broadcast n={n}", b, expect(n, root, it))
        s = mine.clone()
        done(dist.all_reduce(s, async_op=asyncOp))
        count(f"{how}: all_reduce n={n}", s, sum(expect(n, r, it) for r in range(world)))
        # PREMUL_SUM: each rank's input times its own factor, a Python number (ncclScalarHostImmediate)
        # or a tensor on the GPU (ncclScalarDevice, read by the kernel when it runs).
        if device.type == "cuda" and hasattr(dist, "_make_nccl_premul_sum"):
            for kind, factor in (("number", float(rank + 2)),
                                 ("tensor", torch.tensor([float(rank + 2)], device=device))):
                s = mine.clone()
                done(dist.all_reduce(s, op=dist._make_nccl_premul_sum(factor), async_op=asyncOp))
                want = sum(expect(n, r, it) * (r + 2) for r in range(world))
                count(f"{how}: all_reduce PREMUL_SUM by a {kind} n={n}", s, want)
        if n % world == 0:
            o = torch.empty(n // world, device=device)
            done(dist.reduce_scatter_tensor(o, expect(n, rank, it), async_op=asyncOp))
            want = sum(expect(n, r, it) for r in range(world)).chunk(world)[rank]
            count(f"{how}: reduce_scatter_tensor n={n}", o, want)

    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    for how in ("default stream", "side stream", "async_op"):
        for n in args.sizes:
            for it in range(args.rounds):
                if how == "side stream" and side is not None:
                    with torch.cuda.stream(side):
                        run(how, n, it)
                else:
                    run(how, n, it)
    dist.barrier()
    dist.destroy_process_group()
    failed = False
    for key, (a, b) in bad.items():
        if a or b:
            print(f"rank {rank}: {key}: {a} elements wrong at once, {b} after synchronize", flush=True)
            failed = True
    print(f"rank {rank}: {'FAILED' if failed else 'ok'}: {len(bad)} kinds of call checked", flush=True)
    return 1 if failed else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dropin", nargs="?")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=[165, 4096, 1 << 18])
    p.add_argument("--rank-process", action="store_true")
    p.add_argument("--cpu", action="store_true")
    args = p.parse_args()
    if args.rank_process:
        sys.exit(rank_main(args))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
        if args.dropin:
            env["LD_PRELOAD"] = os.path.abspath(args.dropin)
        env.pop("LOCAL_RANK", None)
        cmd = [sys.executable, os.path.abspath(__file__), "--rank-process", "--world", str(args.world),
               "--rounds", str(args.rounds), "--sizes", *map(str, args.sizes)] + (["--cpu"] if args.cpu else [])
        procs.append(subprocess.Popen(cmd, env=env))
    codes = []
    for pr in procs:
        try:
            codes.append(pr.wait(timeout=120))
        except subprocess.TimeoutExpired:
            pr.kill()
            codes.append("killed")
    ok = all(c == 0 for c in codes)
    print(f"{'PASSED' if ok else 'FAILED'}: PyTorch collectives with known values on {args.world} ranks "
          f"({'gloo on CPU' if args.cpu else 'through ' + str(args.dropin)}), exit codes {codes}", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
