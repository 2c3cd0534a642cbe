"""FSDP on the chorus backend, against the same run on gloo and against one process (2 ranks by default).

Two wrappers of PyTorch 2.x, both on CPU tensors: `fully_shard` (FSDP2, a DeviceMesh over the
group) and `FullyShardedDataParallel` (FSDP1, `device_id=cpu`); two models: the DDP tutorial's
ToyModel on random data and the small CNN of the MNIST tutorials on Fashion-MNIST (every layer
its own FSDP unit, then the root). Each run trains from the same initial weights on the same
per-rank batches, SGD with momentum, and records every rank's loss at every step.

Checked for chorus:
- its losses equal gloo's step by step (within 1e-5 of their scale, the largest magnitude and at
  least 1) and those of one process training an unsharded copy on all ranks' batches at once,
  whose gradient is what FSDP's averaged reduce-scatter gives in exact arithmetic (within 1e-4:
  the sums' order differs);
- the trained parameters, gathered whole, equal gloo's and the single process's alike and are
  equal on every rank;
- the parameters were sharded (each rank holds about 1/world of each), and the chorus group
  carried the traffic: all-gathers (all_gather_into_tensor; FSDP1 on CPU: all_gather) before
  forward and again before backward, reduce_scatter_tensor after backward, each counted as
  torch.distributed is called, none on another group.

Usage: python3 fsdp_parity.py [STEPS [WORLD_SIZE]]   (PYTHONPATH must reach chorus_torch)
"""
import collections
import inspect
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard

import chorus_torch  # noqa: F401
import harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "examples"))
import ddp_tutorial  # noqa: E402
import mnist_cnn  # noqa: E402

WORLD = int(os.environ.get("FSDP_PARITY_WORLD", "2"))
BATCH = 16

# Every call of these by any FSDP, keyed by (function, backend of the group). FSDP1 gathers CPU
# tensors with the list form, all_gather.
calls = collections.Counter()
GATHERS = ("all_gather_into_tensor", "all_gather")


def counting(name):
    real = getattr(dist, name)
    signature = inspect.signature(real)

    def wrapper(*args, **kwargs):
        group = signature.bind(*args, **kwargs).arguments.get("group")
        calls[(name, dist.get_backend(group))] += 1
        return real(*args, **kwargs)

    setattr(dist, name, wrapper)


for _name in GATHERS + ("reduce_scatter_tensor",):
    counting(_name)


class ToyModel(ddp_tutorial.ToyModel):
    """The model of PyTorch's DDP tutorial."""

    def units(self):
        return [self.net1, self.net2]


class Cnn(mnist_cnn.Net):
    def units(self):
        return [self.conv1, self.conv2, self.fc]


def toy_batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(BATCH, 10, generator=g), torch.randn(BATCH, 5, generator=g)


def toy_loss(out, y):
    return F.mse_loss(out, y)


class Fashion:
    """Rank r's batch at step s: the s * world + r'th BATCH images of the training set, in order."""

    def __init__(self, steps):
        x, y = mnist_cnn.load("train", mnist_cnn.DATA).tensors
        self.x, self.y = x[:steps * WORLD * BATCH], y[:steps * WORLD * BATCH]

    def __call__(self, rank, step):
        i = (step * WORLD + rank) * BATCH
        return self.x[i:i + BATCH], self.y[i:i + BATCH]


MODELS = {"toy": (ToyModel, toy_batch, toy_loss, 0.05), "cnn": (Cnn, None, F.nll_loss, 0.02)}


def make(kind):
    torch.manual_seed(1234)
    return MODELS[kind][0]()


def wrap(model, wrapper, group):
    if wrapper == "fully_shard":
        mesh = DeviceMesh.from_group(group, "cpu")
        for unit in model.units():
            fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    return FSDP(model, process_group=group, device_id=torch.device("cpu"), use_orig_params=True,
                auto_wrap_policy=ModuleWrapPolicy({type(u) for u in model.units()}))


def full_params(model, wrapper):
    """Every parameter whole, in order, on every rank."""
    if wrapper == "fully_shard":
        return [p.full_tensor().detach().clone() for p in model.parameters()]
    with FSDP.summon_full_params(model):
        return [p.detach().clone() for p in model.parameters()]


def local_sizes(model, wrapper):
    """(elements this rank holds, elements of the model)."""
    if wrapper == "fully_shard":
        return sum(p.to_local().numel() for p in model.parameters()), sum(p.numel() for p in model.parameters())
    held = sum(p.numel() for p in model.parameters())  # use_orig_params: the rank's share, flattened
    with FSDP.summon_full_params(model):
        return held, sum(p.numel() for p in model.parameters())


def train(kind, wrapper, group, rank, steps, data):
    model = wrap(make(kind), wrapper, group)
    _, batch_fn, loss_fn, lr = MODELS[kind]
    batch_fn = batch_fn or data
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = batch_fn(rank, step)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, full_params(model, wrapper), local_sizes(model, wrapper)


def reference(kind, rank, steps, data):
    """One process, the unsharded model, all ranks' batches at once: rank's loss before each step."""
    model = make(kind)
    _, batch_fn, loss_fn, lr = MODELS[kind]
    batch_fn = batch_fn or data
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for step in range(steps):
        batches = [batch_fn(r, step) for r in range(WORLD)]
        with torch.no_grad():
            losses.append(loss_fn(model(batches[rank][0]), batches[rank][1]).item())
        loss = sum(loss_fn(model(x), y) for x, y in batches) / WORLD
        loss.backward()
        opt.step()
        opt.zero_grad()
    return losses, [p.detach().clone() for p in model.parameters()]


def close(a, b, tol, what):
    """a equals b within tol of b's scale (the largest magnitude in b, at least 1): summation order
    moves small elements by more than tol of their own size, a wrong reduction moves them by far
    more than tol of the tensor's."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    worst = (a - b).abs().max().item()
    bound = tol * max(1.0, b.abs().max().item())
    if not worst <= bound:  # NaN fails too
        i = (a - b).abs().nan_to_num(float("inf")).flatten().argmax().item()
        raise AssertionError(f"{what}: element {i} is {a.flatten()[i].item()!r}, want {b.flatten()[i].item()!r} "
                             f"(the bound is {bound:.1e})")
    return worst


def run(rank, world, port, steps):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("chorus", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    data = Fashion(steps)
    for kind in MODELS:
        ref_losses, ref_params = reference(kind, rank, steps, data)
        for wrapper in ("fully_shard", "FullyShardedDataParallel"):
            what = f"{kind} {wrapper}"
            calls.clear()
            losses, params, (held, total) = train(kind, wrapper, dist.group.WORLD, rank, steps, data)
            chorus_calls = dict(calls)
            gloo_losses, gloo_params, _ = train(kind, wrapper, gloo, rank, steps, data)
            close(losses, gloo_losses, 1e-5, f"{what}: losses against gloo")
            worst = close(losses, ref_losses, 1e-4, f"{what}: losses against one process")
            for i, (p, q, r) in enumerate(zip(params, gloo_params, ref_params)):
                close(p, q, 1e-5, f"{what}: parameter {i} against gloo")
                close(p, r, 1e-4, f"{what}: parameter {i} against one process")
            flat = torch.cat([p.flatten() for p in params])
            everyone = [torch.zeros_like(flat) for _ in range(world)]
            dist.all_gather(everyone, flat)
            assert all(torch.equal(f, flat) for f in everyone), f"{what}: ranks hold different parameters"
            # Sharded: at most a rank's share of each parameter's rows (FSDP2 splits dim 0, rank 0
            # takes the rounded-up share; FSDP1 splits each unit's flat parameter evenly, padded).
            share = sum(-(-p.shape[0] // world) * (p.numel() // p.shape[0]) for p in params) + world * len(params)
            assert held <= share < total, f"{what}: rank holds {held} of {total} elements (a share is {share})"
            units = len(make(kind).units()) + 1
            gathers = sum(chorus_calls.get((name, "chorus"), 0) for name in GATHERS)
            scatters = chorus_calls.get(("reduce_scatter_tensor", "chorus"), 0)
            others = {k: v for k, v in chorus_calls.items() if k[1] != "chorus"}
            assert not others, f"{what}: collectives on other backends: {others}"
            # Every unit holding parameters gathers before forward and again before backward (the
            # root keeps its parameters between the two), and reduce-scatters its gradients once.
            assert gathers >= steps * (units - 1) * 2 and scatters >= steps * (units - 1), \
                f"{what}: {gathers} all-gathers and {scatters} reduce-scatters in {steps} steps of {units} units"
            if rank == 0:
                print(f"{what}: {steps} steps, losses {losses[0]:.4f} -> {losses[-1]:.4f} equal gloo's, within "
                      f"{worst:.1e} of one process; rank holds {held} of {total} elements; "
                      f"{gathers} all-gathers, {scatters} reduce-scatters on chorus", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    WORLD = int(sys.argv[2]) if len(sys.argv) > 2 else WORLD
    os.environ["FSDP_PARITY_WORLD"] = str(WORLD)  # the spawned ranks import this module again
    harness.spawn(run, WORLD, WORLD, harness.free_port(), steps)
    print(f"PASS: FSDP (fully_shard and FullyShardedDataParallel) on chorus matches gloo and one process")
