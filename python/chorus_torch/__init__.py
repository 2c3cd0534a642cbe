"""Chorus as a torch.distributed backend.

    import chorus_torch                      # registers the backend "chorus"
    torch.distributed.init_process_group("chorus", ...)

Any init method works (env://, file://, tcp://, torchrun, mp.spawn): the backend bootstraps
through the store PyTorch hands it. Tensors must be CPU tensors; see docs/pytorch.md.
"""
import torch as _torch
import torch.distributed as _dist

from . import _C

ProcessGroupChorus = _C.ProcessGroupChorus


def _create(store, rank, world_size, timeout):
    return _C._create_process_group(store, rank, world_size, timeout)


if "CHORUS" not in _dist.Backend._plugins:
    if int(_torch.__version__.split(".")[0]) >= 2:
        # A c10d.Backend for CPU tensors: "cpu:chorus,cuda:nccl" puts CUDA tensors on
        # ProcessGroupNCCL, which runs on Chorus through its libnccl.so.2 (docs/pytorch.md).
        _dist.Backend.register_backend("chorus", _create, devices=["cpu"])
    else:
        _dist.Backend.register_backend("chorus", _create)

__all__ = ["ProcessGroupChorus"]
