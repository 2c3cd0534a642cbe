"""The small CNN of the classic multi-GPU MNIST tutorials, on Fashion-MNIST, data-parallel on chorus.

Two 3x3 convolutions, max-pooling and one linear layer; DistributedSampler shards the training set
(reshuffled per epoch with set_epoch); DDP averages the gradients over the chorus backend. Rank 0
reports the test accuracy at the end.

    python3 mnist_cnn.py --nprocs 2 --max-steps 200
    python3 -m torch.distributed.run --nproc_per_node=2 mnist_cnn.py   (torchrun; see docs/pytorch.md)

Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, gzipped idx files).
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import chorus_torch  # noqa: F401
import ports

DATA = "/usr/share/datasets/fashion-mnist"


def load(split, data):
    """idx images and labels, normalised with the training set's mean and deviation."""
    with gzip.open(os.path.join(data, f"{split}-images-idx3-ubyte.gz")) as f:
        raw = f.read()
    if int.from_bytes(raw[0:4], "big") != 0x803:
        raise SystemExit(f"{data}: {split} images are not an idx file")
    n = int.from_bytes(raw[4:8], "big")
    images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, 28, 28)
    with gzip.open(os.path.join(data, f"{split}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc = nn.Linear(9216, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


def train(rank, world, args):
    if "RANK" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(args.port)
        dist.init_process_group("chorus", rank=rank, world_size=world)
    else:
        dist.init_process_group("chorus")
        rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    train_set = load("train", args.data)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler, drop_last=True)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step, start = 0, time.monotonic()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if rank == 0 and step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if step == args.max_steps:
                break
        if step == args.max_steps:
            break
    took = time.monotonic() - start
    # Every rank ends with the same weights.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    if any(not torch.equal(f, flat) for f in everyone):
        raise SystemExit(f"rank {rank}: the ranks' weights differ")
    if rank == 0:
        test = load("t10k", args.data)
        x, y = test.tensors
        with torch.no_grad():
            model.eval()
            pred = torch.cat([model.module(x[i:i + 500]).argmax(1) for i in range(0, args.test_images, 500)])
        acc = (pred == y[:args.test_images]).float().mean().item()
        print(f"{step} steps of {args.batch} x {world} in {took:.1f} s; weights identical on {world} ranks; "
              f"test accuracy {acc:.4f} on {args.test_images} images (chance 0.10)", flush=True)
        if acc < args.min_accuracy:
            raise SystemExit(f"test accuracy {acc:.4f} is below {args.min_accuracy}")
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nprocs", type=int, default=2, help="ranks started with mp.spawn (not under torchrun)")
    p.add_argument("--data", default=DATA)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--test-images", type=int, default=2000)
    p.add_argument("--min-accuracy", type=float, default=0.0)
    p.add_argument("--port", type=int, default=None, help="MASTER_PORT under --nprocs (default: a free one)")
    args = p.parse_args()
    if "RANK" in os.environ:
        train(0, 0, args)
    else:
        args.port = args.port or ports.free_port(1)
        mp.spawn(train, args=(args.nprocs, args), nprocs=args.nprocs)


if __name__ == "__main__":
    sys.exit(main())
