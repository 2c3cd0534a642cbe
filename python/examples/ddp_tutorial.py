"""The programs of PyTorch's "Getting Started with Distributed Data Parallel" tutorial, on chorus.

    python3 ddp_tutorial.py --spawn 2          # basic and checkpoint demos under mp.spawn
    python3 -m torch.distributed.run --nproc_per_node=2 ddp_tutorial.py   # the basic demo, torchrun

Each demo checks what it should leave behind and exits non-zero when it does not: after the basic
step every rank holds the same parameters; after the checkpoint demo's load every rank holds the
parameters rank 0 saved.
"""
import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch  # noqa: F401  registers the "chorus" backend
import ports


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("chorus", rank=rank, world_size=world_size)


def same_everywhere(model, what):
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    for r, f in enumerate(everyone):
        if not torch.equal(f, flat):
            raise SystemExit(f"{what}: rank {r}'s parameters differ from rank {dist.get_rank()}'s")


def one_step(ddp_model, rank):
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10) + rank)  # every rank its own data
    loss_fn(outputs, torch.randn(20, 5)).backward()
    optimizer.step()


def basic(rank, world_size, label):
    torch.manual_seed(rank)  # different initial weights: DDP broadcasts rank 0's
    ddp_model = DDP(ToyModel())
    one_step(ddp_model, rank)
    same_everywhere(ddp_model, label)
    if rank == 0:
        print(f"{label} demo: {world_size} ranks hold the same parameters after one step", flush=True)
    dist.destroy_process_group()


def demo_basic(rank, world_size, port):
    setup(rank, world_size, port)
    basic(rank, world_size, "basic")


def demo_checkpoint(rank, world_size, port, path):
    setup(rank, world_size, port)
    torch.manual_seed(rank)
    ddp_model = DDP(ToyModel())
    one_step(ddp_model, rank)
    if rank == 0:
        # All processes hold the same parameters, so one saves them.
        torch.save(ddp_model.state_dict(), path)
    dist.barrier()  # nobody loads before rank 0 has written
    map_location = {"cpu": "cpu"}
    loaded = torch.load(path, map_location=map_location)
    ddp_model.load_state_dict(loaded)
    for name, p in ddp_model.state_dict().items():
        if not torch.equal(p, loaded[name]):
            raise SystemExit(f"checkpoint: {name} differs from the saved one on rank {rank}")
    one_step(ddp_model, rank)
    same_everywhere(ddp_model, "checkpoint")
    dist.barrier()  # everyone has loaded before the file goes
    if rank == 0:
        os.remove(path)
        print(f"checkpoint demo: saved on rank 0, loaded on {world_size} ranks, trained on", flush=True)
    dist.destroy_process_group()


def demo_torchrun():
    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT: env:// needs nothing else.
    dist.init_process_group("chorus")
    basic(dist.get_rank(), dist.get_world_size(), "torchrun")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spawn", type=int, default=0, help="run the demos under mp.spawn with this many ranks")
    parser.add_argument("--port", type=int, default=None,
                        help="MASTER_PORT of the first demo, the next port the second's (default: free ones)")
    args = parser.parse_args()
    if "RANK" in os.environ and args.spawn == 0:
        demo_torchrun()
        return
    n = args.spawn or 2
    mp.spawn(demo_basic, args=(n, args.port or ports.free_port()), nprocs=n, join=True)
    path = os.path.join(tempfile.mkdtemp(), "model.checkpoint")
    port = args.port + 1 if args.port else ports.free_port()
    mp.spawn(demo_checkpoint, args=(n, port, path), nprocs=n, join=True)


if __name__ == "__main__":
    sys.exit(main())
