"""PyTorch's own ProcessGroupNCCL through Chorus's libnccl.so.2 (docs/nccl.md), on one GPU.

    python3 tools/nccl_torch_check.py DROPIN [--world 2] [--steps 20]

DROPIN is the drop-in library (build/nccl/libnccl.so.2). Each rank is a new Python process
started with LD_PRELOAD=DROPIN (torch's wheel carries its own libnccl.so.2 behind an RPATH: a
preloaded library of the same soname comes first), bound to cuda:0 (every rank on the one GPU,
which NCCL itself refuses and Chorus allows), in a "nccl" process group. Each rank checks that
the libnccl.so.2 mapped in /proc/self/maps is DROPIN and no other, then trains the model of
PyTorch's DDP tutorial (Linear 10-10, ReLU, Linear 10-5) for a few steps of SGD on its own
batches. Afterwards every rank's parameters must equal rank 0's, and rank 0's must equal those
of the same model trained in one process on the average of the ranks' gradients (what DDP
computes), to within float rounding.

Exit 0 when all of that holds, 1 when something differs, 77 when there is no GPU.
"""
import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model():
    import torch.nn as nn

    class ToyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.net1 = nn.Linear(10, 10)
            self.relu = nn.ReLU()
            self.net2 = nn.Linear(10, 5)

        def forward(self, x):
            return self.net2(self.relu(self.net1(x)))

    return ToyModel()


def batch(rank, step):
    import torch

    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(20, 10, generator=g), torch.randn(20, 5, generator=g)


def rank_main(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda:0"))
    maps = open("/proc/self/maps").read()
    libs = sorted({line.split()[-1] for line in maps.splitlines() if "libnccl" in line})
    want = os.path.realpath(args.dropin)
    if [os.path.realpath(p) for p in libs] != [want]:
        print(f"rank {rank}: FAIL libnccl mapped: {libs}, want only {want}", flush=True)
        return 1
    torch.manual_seed(0)
    net = model().cuda(0)
    ddp = DDP(net, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    for step in range(args.steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss_fn(ddp(x.cuda(0)), y.cuda(0)).backward()
        opt.step()
    mine = torch.cat([p.detach().flatten() for p in net.parameters()])
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    ok = all(torch.equal(gathered[0], g) for g in gathered)
    if not ok:
        print(f"rank {rank}: FAIL the ranks' parameters differ", flush=True)
    if rank == 0 and ok:
        # The same steps in one process: the gradient is the average of the ranks' gradients.
        torch.manual_seed(0)
        ref = model().cuda(0)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
        for step in range(args.steps):
            ref_opt.zero_grad()
            grads = None
            for r in range(world):
                ref.zero_grad()
                x, y = batch(r, step)
                loss_fn(ref(x.cuda(0)), y.cuda(0)).backward()
                g = [p.grad.clone() for p in ref.parameters()]
                grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            for p, g in zip(ref.parameters(), grads):
                p.grad = g / world
            ref_opt.step()
        want_params = torch.cat([p.detach().flatten() for p in ref.parameters()])
        diff = (want_params - mine).abs().max().item()
        ok = diff <= 1e-5
        print(f"rank 0: {args.steps} DDP steps on {world} ranks through {want}; "
              f"largest difference from one-process training {diff:.2e} ({'ok' if ok else 'FAIL'})", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dropin")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rank-process", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_process:
        return rank_main(args)
    try:
        import torch
    except ImportError:
        print("SKIP: no PyTorch")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (PyTorch sees none)")
        return 77
    if not os.path.exists(args.dropin):
        print(f"FAIL: no drop-in at {args.dropin}")
        return 1
    port = free_port()
    procs = []
    for r in range(args.world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), LD_PRELOAD=os.path.realpath(args.dropin))
        procs.append(subprocess.Popen([sys.executable, __file__, args.dropin, "--world", str(args.world),
                                       "--steps", str(args.steps), "--rank-process"], env=env))
    # One deadline for all: a rank that hangs is killed, and so are the others (they would wait on it).
    deadline = time.monotonic() + 300
    codes = []
    for pr in procs:
        try:
            codes.append(pr.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            print("FAIL: a rank was still running after 300 s; killing every rank")
            for other in procs:
                other.kill()
            codes.append("timed out")
    for pr in procs:
        pr.wait()
    ok = all(c == 0 for c in codes)
    print(("PASSED" if ok else f"FAILED (exit codes {codes})") + f": ProcessGroupNCCL through the drop-in, "
          f"{args.world} ranks on cuda:0")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
