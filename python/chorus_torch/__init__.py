"""Chorus as a torch.distributed backend (PyTorch 2.x).

    import chorus_torch                      # registers the backend "chorus"
    torch.distributed.init_process_group("chorus", ...)        # CPU tensors
    torch.distributed.init_process_group("cpu:chorus,cuda:nccl", ...)

Any init method works (env://, file://, tcp://, torchrun, mp.spawn): the backend bootstraps
through the store PyTorch hands it. The backend takes CPU tensors; with "cpu:chorus,cuda:nccl"
CUDA tensors go to PyTorch's ProcessGroupNCCL, which runs on Chorus when Chorus's libnccl.so.2 is
the NCCL it loads. See docs/pytorch.md.
"""
import torch.distributed as _dist

from . import _C

ProcessGroupChorus = _C.ProcessGroupChorus


def _create(dist_options, backend_options):
    """The backend's creator (register_backend's extended API): one communicator per group."""
    if backend_options is not None:
        raise ValueError(
            "chorus takes no pg_options (got %r): set Chorus's settings through CHORUS_* "
            "environment variables (docs/environment.md)" % (backend_options,))
    return _C._create_process_group(dist_options.store, dist_options.group_rank,
                                    dist_options.group_size, dist_options.timeout)


if "CHORUS" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("chorus", _create, extended_api=True, devices=["cpu"])

__all__ = ["ProcessGroupChorus"]
