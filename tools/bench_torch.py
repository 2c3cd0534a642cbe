"""The chorus PyTorch backend against gloo, in one run on the same ranks (mp.spawn).

    PYTHONPATH=build/python .torch-venv/bin/python tools/bench_torch.py ddp 2 [BATCH]
    PYTHONPATH=build/python .torch-venv/bin/python tools/bench_torch.py allreduce 4

ddp:       time per DDP training step of an MLP of 25.2M parameters (1024-4096-4096-1024, fp32,
           BATCH per rank, default 16, SGD), one DDP model per backend from the same weights; rounds
           alternate the backends; each cell is the median over rounds of the round's median.
allreduce: torch.distributed.all_reduce (float32 sum) of one element, then 1 KiB to 64 MiB, on each backend in
           turn per size and round; time per call is rank 0's mean over the iterations after a
           barrier; busbw = bytes / time * 2 (n - 1) / n as nccl-tests; median over rounds.
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "examples"))
import ports  # noqa: E402


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1024))


def bench_ddp(rank, world, groups, batch, rounds=3, warmup=3, steps=10):
    models = {name: DDP(model(), process_group=pg) for name, pg in groups.items()}
    opts = {name: torch.optim.SGD(m.parameters(), lr=0.001) for name, m in models.items()}
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(batch, 1024, generator=g), torch.randn(batch, 1024, generator=g)
    loss_fn = nn.MSELoss()
    results = {name: [] for name in groups}
    for r in range(rounds):
        for name, m in (models.items() if r % 2 == 0 else reversed(list(models.items()))):
            times = []
            dist.barrier(group=groups[name])
            for s in range(warmup + steps):
                t0 = time.perf_counter()
                opts[name].zero_grad()
                loss_fn(m(x), y).backward()
                opts[name].step()
                if s >= warmup:
                    times.append(time.perf_counter() - t0)
            results[name].append(statistics.median(times))
    if rank == 0:
        params = sum(p.numel() for p in models["chorus"].parameters())
        c, gl = statistics.median(results["chorus"]), statistics.median(results["gloo"])
        print(f"| {world} | {params / 1e6:.1f}M | {batch} | {c * 1e3:.1f} | {gl * 1e3:.1f} | {gl / c:.2f} |", flush=True)


def bench_allreduce(rank, world, groups, batch, rounds=3):
    sizes = [4] + [1 << k for k in range(10, 27, 2)]  # one element, then 1 KiB .. 64 MiB
    rows = []
    for size in sizes:
        n = size // 4
        iters = max(5, min(200, (64 << 20) // size * 2))
        t = torch.ones(n)
        per = {name: [] for name in groups}
        for r in range(rounds):
            for name in (list(groups) if r % 2 == 0 else list(reversed(list(groups)))):
                pg = groups[name]
                for _ in range(3):
                    dist.all_reduce(t, group=pg)
                dist.barrier(group=pg)
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(t, group=pg)
                per[name].append((time.perf_counter() - t0) / iters)
        rows.append((size, {name: statistics.median(v) for name, v in per.items()}))
    if rank == 0:
        factor = 2 * (world - 1) / world
        for size, med in rows:
            label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B"
            c, g = med["chorus"], med["gloo"]
            print(f"| {world} | {label} | {c * 1e6:.1f} | {size / c * factor / 1e9:.2f} | {g * 1e6:.1f} | "
                  f"{size / g * factor / 1e9:.2f} | {g / c:.2f} |", flush=True)


def run(rank, world, what, batch, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("chorus", rank=rank, world_size=world)
    groups = {"chorus": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    (bench_ddp if what == "ddp" else bench_allreduce)(rank, world, groups, batch)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    what, world = sys.argv[1], int(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    if what == "ddp":
        print("| ranks | parameters | batch per rank | chorus ms/step | gloo ms/step | gloo / chorus |")
        print("|---:|---:|---:|---:|---:|---:|")
    else:
        print("| ranks | size | chorus us | chorus busbw GB/s | gloo us | gloo busbw GB/s | gloo / chorus time |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
    mp.spawn(run, args=(world, what, batch, ports.free_port(1)), nprocs=world)
