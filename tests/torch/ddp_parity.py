"""DistributedDataParallel on the chorus backend against the same run on gloo, on 3 ranks.

Each variant trains two copies of one model from the same initial weights on the same batches,
one wrapped in DDP over the chorus process group, one over a gloo group, and after every step
their parameters must agree to fp32 rounding (fp16 compression: to fp16 rounding of the
gradients). Variants: default, gradient_as_bucket_view, find_unused_parameters (a branch some
ranks skip some steps, and a layer no rank uses), no_sync (two accumulated micro-batches per
step), the fp16 compression hook, Join with uneven inputs (rank r has 4 + r batches), and sparse
gradients (an EmbeddingBag with sparse=True: DDP all-reduces its gradient as a sparse tensor).

Usage: python3 ddp_parity.py [WORLD_SIZE]
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus_torch  # noqa: F401
import harness


class ToyModel(nn.Module):
    """The model of PyTorch's DDP tutorial."""

    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x, branch=True):
        return self.net2(self.relu(self.net1(x)))


class Branchy(nn.Module):
    """A branch used only when asked, and a layer never used."""

    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.branch = nn.Linear(10, 10)
        self.never = nn.Linear(10, 10)
        self.net2 = nn.Linear(10, 5)

    def forward(self, x, branch=True):
        h = torch.relu(self.net1(x))
        if branch:
            h = h + torch.relu(self.branch(h))
        return self.net2(h)


class SparseEmbedding(nn.Module):
    """An embedding with sparse gradients (DDP all-reduces them as sparse tensors) before a dense
    layer; inputs are token ids drawn from the batch's features."""

    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(40, 10, mode="sum", sparse=True)
        self.net2 = nn.Linear(10, 5)

    def forward(self, x, branch=True):
        ids = (x.abs() * 7).long().clamp(max=39)
        return self.net2(self.embed(ids))


def batch(rank, step, micro=0):
    g = torch.Generator().manual_seed(10000 * rank + 100 * step + micro)
    return torch.randn(8, 10, generator=g), torch.randn(8, 5, generator=g)


def twins(model_cls, groups, **ddp_args):
    models = {}
    for name, pg in groups.items():
        torch.manual_seed(0)
        models[name] = DDP(model_cls(), process_group=pg, **ddp_args)
    return models


def compare(models, what, rtol, atol):
    for (n, pc), (_, pg) in zip(models["chorus"].module.named_parameters(), models["gloo"].module.named_parameters()):
        if not torch.allclose(pc, pg, rtol=rtol, atol=atol):
            diff = (pc - pg).abs().max().item()
            raise AssertionError(f"{what}: parameter {n} differs from gloo's by {diff}")


def train(rank, groups, variant, steps=6):
    model_cls = {"find_unused_parameters": Branchy, "sparse_gradients": SparseEmbedding}.get(variant, ToyModel)
    args = {}
    if variant == "gradient_as_bucket_view":
        args["gradient_as_bucket_view"] = True
    if variant == "find_unused_parameters":
        args["find_unused_parameters"] = True
    models = twins(model_cls, groups, **args)
    if variant == "fp16_compress_hook":
        for m in models.values():
            m.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opts = {n: torch.optim.SGD(m.parameters(), lr=0.05) for n, m in models.items()}
    rtol, atol = (1e-4, 1e-5) if variant == "fp16_compress_hook" else (1e-5, 1e-6)
    loss_fn = nn.MSELoss()
    batches = 4 + rank if variant == "join" else steps
    for name, m in models.items():
        # The two runs one after the other per step would interleave two groups' collectives the
        # same way on every rank; simpler to train each fully, then compare.
        opt = opts[name]
        ctx = Join([m]) if variant == "join" else _Null()
        with ctx:
            for step in range(batches):
                opt.zero_grad()
                if variant == "no_sync":
                    x, y = batch(rank, step, 1)
                    with m.no_sync():
                        loss_fn(m(x), y).backward()
                x, y = batch(rank, step)
                branch = (step + rank) % 2 == 0
                loss_fn(m(x, branch) if variant == "find_unused_parameters" else m(x), y).backward()
                opt.step()
    compare(models, variant, rtol, atol)
    # Every rank holds the same parameters, bit for bit (the join variant: once the last rank
    # has finished; DDP's Join does not sync the final model by default, so skipped there).
    if variant != "join":
        flat = torch.cat([p.detach().flatten() for p in models["chorus"].parameters()])
        all_flat = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(all_flat, flat)
        for r, f in enumerate(all_flat):
            if not torch.equal(f, flat):
                raise AssertionError(f"{variant}: rank {r}'s parameters differ from rank {rank}'s")


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


VARIANTS = ["default", "gradient_as_bucket_view", "find_unused_parameters", "no_sync", "fp16_compress_hook", "join",
            "sparse_gradients"]


def run(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("chorus", rank=rank, world_size=world)
    groups = {"chorus": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    for v in VARIANTS:
        train(rank, groups, v)
        if rank == 0:
            print(f"{v}: parameters match gloo's", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    harness.spawn(run, world, world, harness.free_port())
    print(f"PASS: DDP on chorus matches gloo in {len(VARIANTS)} variants on {world} ranks")
