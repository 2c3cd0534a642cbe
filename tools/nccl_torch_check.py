"""PyTorch's own ProcessGroupNCCL through Chorus's libnccl.so.2 (docs/nccl.md), on one GPU.

    python3 tools/nccl_torch_check.py DROPIN [--world 2] [--steps 20] [--fsdp-steps 5] [--timeout 120] [--mixed]

DROPIN is the drop-in library (build/nccl/libnccl.so.2). Each rank is a new Python process started
with LD_PRELOAD=DROPIN and NCCL_DEBUG=VERSION, bound to cuda:0 (every rank on the one GPU, which NCCL
itself refuses and Chorus allows), in a "nccl" process group. PyTorch's wheel brings its own
libnccl.so.2 and torch/__init__.py loads it by path, so both libraries are mapped in every rank:
the check proves which one serves the calls, not which is mapped.

1. Which library serves the calls, three ways:
   - the log: with NCCL_DEBUG=VERSION the drop-in prints `Chorus version X.Y.Z` at communicator
     init (rank 0 of each communicator), NCCL prints `NCCL version 2.x.y+cudaZ`; rank 0's output
     must have the first and no rank's output the second (its "+cuda" keeps PyTorch's error text
     ", NCCL version 2.28.9", made from ncclGetVersion, which the drop-in answers too, apart);
   - the global scope: after init and a first all-reduce, `ncclCommInitRankConfig` and
     `ncclAllReduce` as dlsym finds them in the process's global scope (ctypes.CDLL(None)) must lie
     in DROPIN (dladdr names the object that holds the address; realpaths compared);
   - libtorch_cuda.so itself: dlsym on its RTLD_NOLOAD handle searches its own dependency scope,
     and the slots of its global offset table that its calls jump through (its JUMP_SLOT and
     GLOB_DAT relocations, read from the file and the slot read in memory) must hold addresses in
     DROPIN. A preloaded library comes before every DT_NEEDED one in the global scope and torch
     loads its own copy RTLD_LOCAL, so this is what is expected; RTLD_DEEPBIND, or calls through a
     dlsym on torch's own handle, would show here as the real NCCL.
2. DDP: the model of PyTorch's DDP tutorial (Linear 10-10, ReLU, Linear 10-5) trained for --steps
   SGD steps on per-rank batches; every rank's parameters must equal rank 0's, and those of the
   same steps in one process on the average of the ranks' gradients (what DDP computes).
3. FSDP2 (`fully_shard`): the same model, each Linear and the whole model sharded over the ranks
   (Linear 10-5's 5 rows do not split evenly over 2 ranks: FSDP pads), --fsdp-steps SGD steps on
   per-rank batches, then the full parameters (DTensor.full_tensor(), an all-gather) compared with
   one-process training on the average of the ranks' gradients (FSDP reduce-scatters float32
   gradients with ReduceOp.AVG).
4. Both again with PREMUL_SUM (not on --cpu-selftest: gloo has none): DDP with a comm hook that
   all-reduces each bucket with PREMUL_SUM by 1/world held in a tensor on the GPU (ncclScalarDevice,
   which the kernel reads when it runs), and FSDP2 with a gradient divide factor of 2 x world,
   which it applies as PREMUL_SUM by 1/(2 x world), against one-process training dividing alike.

5. With --mixed, the group is "cpu:chorus,cuda:nccl" (chorus_torch must be importable): all of the
   above on CUDA tensors, and on CPU tensors of the same group an all-reduce (whose backend must be
   chorus_torch's ProcessGroupChorus) and the DDP training of 2. on the CPU: one process group whose
   two halves both run on Chorus. tools/torch_mixed_check.sh builds chorus_torch for the GPU
   machine's Python and runs this.

Tolerance for both: 1e-5, absolute, on parameters of size below 1. Each rank's forward and backward
are the same kernels on the same data as the one-process reference; only the averaging of the
gradients may differ from the reference's (g0 + ... + gN-1) / N by rounding (a few float32 ulps,
1e-7 relative, per step; over 2 ranks halving is exact, so it is usually 0), and SGD with lr 0.05
over 20 steps keeps that far below 1e-5. A wrong reduction (a missing rank, sum for average, a
stale buffer) moves parameters by 1e-3 or more.

Exit 0 when all of that holds, 1 when anything differs or a rank fails or hangs (--timeout, one
deadline for all ranks: when it passes or a rank fails, every rank is killed), 77 when there is no
GPU. The last line says PASSED or FAILED and what ran.

    python3 tools/nccl_torch_check.py --cpu-selftest

runs the same DDP and FSDP comparisons with the "gloo" backend on the CPU and no drop-in (checks
the harness and the reference arithmetic, not Chorus), and tries the symbol helpers on Python's own
_ctypes module and libffi.
"""
import argparse
import ctypes
import os
import re
import socket
import struct
import subprocess
import sys
import signal
import threading
import time
import traceback

# ----------------------------------------------------------------------------------------------
# Where a symbol is defined: dlopen, dlsym, dladdr and dlinfo from glibc through ctypes.

RTLD_NOW = 2
RTLD_NOLOAD = 4
RTLD_DI_LINKMAP = 2


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_DL = None


def libdl():
    """glibc's dl functions: in libc since glibc 2.34, in libdl before."""
    global _DL
    if _DL is None:
        for name in ("libc.so.6", "libdl.so.2"):
            try:
                lib = ctypes.CDLL(name)
                lib.dladdr, lib.dlinfo  # noqa: B018 (AttributeError when absent)
            except (OSError, AttributeError):
                continue
            lib.dlopen.restype, lib.dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
            lib.dlsym.restype, lib.dlsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
            lib.dlclose.restype, lib.dlclose.argtypes = ctypes.c_int, [ctypes.c_void_p]
            lib.dlerror.restype, lib.dlerror.argtypes = ctypes.c_char_p, []
            lib.dladdr.restype, lib.dladdr.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
            lib.dlinfo.restype, lib.dlinfo.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            _DL = lib
            break
        else:
            raise OSError("no dladdr/dlinfo in libc.so.6 or libdl.so.2")
    return _DL


def object_of(addr):
    """(realpath of the object whose mapping holds addr, name of the nearest symbol) via dladdr."""
    info = DlInfo()
    if not addr or not libdl().dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) or not info.dli_fname:
        return None, None
    fname = info.dli_fname.decode(errors="replace")
    if not os.path.isabs(fname):  # the main program may be named as it was started
        fname = os.path.realpath("/proc/self/exe") if fname in ("", sys.argv[0]) else fname
    return os.path.realpath(fname), (info.dli_sname.decode(errors="replace") if info.dli_sname else None)


def global_symbol(name):
    """The address the process's global scope gives name (dlsym on dlopen(NULL)), or None."""
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
    return ctypes.cast(fn, ctypes.c_void_p).value


def open_noload(path):
    """A handle for an object already loaded (RTLD_NOLOAD: never loads it), or None."""
    return libdl().dlopen(path.encode(), RTLD_NOW | RTLD_NOLOAD) or None


def scope_symbol(path, name):
    """The address dlsym gives name on path's own handle (path, then its DT_NEEDED libraries,
    breadth first), or None; path must be loaded already."""
    h = open_noload(path)
    if h is None:
        raise OSError(f"{path} is not loaded")
    try:
        return libdl().dlsym(h, name.encode()) or None
    finally:
        libdl().dlclose(h)


def load_bias(path):
    """link_map.l_addr of a loaded object (what its file's addresses are offset by in memory)."""
    h = open_noload(path)
    if h is None:
        raise OSError(f"{path} is not loaded")
    try:
        lm = ctypes.c_void_p()
        if libdl().dlinfo(h, RTLD_DI_LINKMAP, ctypes.byref(lm)) != 0:
            raise OSError(f"dlinfo({path}): {libdl().dlerror()}")
        return ctypes.c_size_t.from_address(lm.value).value  # l_addr is link_map's first field
    finally:
        libdl().dlclose(h)


# Relocation types whose slot holds a symbol's address: GLOB_DAT, JUMP_SLOT, and the plain 64-bit
# one (with addend 0).
_RELOC_TYPES = {62: {6: "GLOB_DAT", 7: "JUMP_SLOT", 1: "64"},              # x86-64
                183: {1025: "GLOB_DAT", 1026: "JUMP_SLOT", 257: "ABS64"}}  # AArch64


def elf_imports(path, names):
    """From the file: {name: [(r_offset, reloc type name), ...]} for each dynamic relocation of
    path that fills a slot with name's address, and path's DT_NEEDED list."""
    with open(path, "rb") as f:
        eh = f.read(64)
        if eh[:4] != b"\x7fELF" or eh[4] != 2 or eh[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        machine = struct.unpack_from("<H", eh, 18)[0]
        shoff, = struct.unpack_from("<Q", eh, 0x28)
        shentsize, shnum, _ = struct.unpack_from("<HHH", eh, 0x3A)
        if machine not in _RELOC_TYPES or not shoff:
            raise ValueError(f"{path}: machine {machine} or no section headers")
        f.seek(shoff)
        raw = f.read(shentsize * shnum)
        # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize
        secs = [struct.unpack_from("<IIQQQQIIQQ", raw, i * shentsize) for i in range(shnum)]

        def read(sec):
            f.seek(sec[4])
            return f.read(sec[5])

        dynsym_i = next((i for i, s in enumerate(secs) if s[1] == 11), None)  # SHT_DYNSYM
        if dynsym_i is None:
            raise ValueError(f"{path}: no .dynsym")
        dynsym = read(secs[dynsym_i])
        dynstr = read(secs[secs[dynsym_i][6]])
        needed = []
        for s in secs:
            if s[1] == 6:  # SHT_DYNAMIC
                for tag, val in struct.iter_unpack("<qQ", read(s)):
                    if tag == 1:  # DT_NEEDED
                        needed.append(dynstr[val:dynstr.index(b"\0", val)].decode())
        # Every place a name may start in .dynstr (the linker may share a tail: "pncclX" and "ncclX").
        starts = {}
        for n in names:
            key, p = n.encode() + b"\0", -1
            while (p := dynstr.find(key, p + 1)) >= 0:
                starts[p] = n
        index = {}  # symbol index -> name, for undefined (imported) symbols of those names
        for i, (st_name, _info, _other, shndx, _value, _size) in enumerate(struct.iter_unpack("<IBBHQQ", dynsym)):
            if st_name in starts and shndx == 0:
                index[i] = starts[st_name]
        found = {n: [] for n in names}
        types = _RELOC_TYPES[machine]
        for s in secs:
            if s[1] != 4 or s[6] != dynsym_i:  # SHT_RELA against .dynsym
                continue
            data = read(s)
            for i, n in index.items():
                for t, tname in types.items():
                    key, p = struct.pack("<Q", (i << 32) | t), -1
                    while (p := data.find(key, p + 1)) >= 0:
                        if p % 24 != 8:  # r_info is the second of r_offset, r_info, r_addend
                            continue
                        r_offset, _, addend = struct.unpack_from("<QQq", data, p - 8)
                        if addend == 0:
                            found[n].append((r_offset, tname))
    return found, needed


def bound_slots(path, names):
    """[(name, reloc type, address in the slot now), ...] for path's relocations against names."""
    found, _ = elf_imports(path, names)
    bias = load_bias(path)
    out = []
    for n in names:
        for r_offset, tname in found[n]:
            out.append((n, tname, ctypes.c_void_p.from_address(bias + r_offset).value))
    return out


def mapped_objects():
    """Realpaths of the files mapped into this process, in order of first appearance."""
    seen = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                p = os.path.realpath(parts[5].strip())
                if p not in seen:
                    seen.append(p)
    return seen


def where(addr, dropin):
    """A short description of the object holding addr, marked as the drop-in or not."""
    obj, sym = object_of(addr)
    if obj is None:
        return f"{addr:#x} in no mapped object" if addr else "not found", False
    mine = obj == dropin
    return f"{addr:#x} = {sym or '?'} in {obj}{' [the drop-in]' if mine else ' [NOT the drop-in]'}", mine


# ----------------------------------------------------------------------------------------------
# Proof that the drop-in serves PyTorch's NCCL calls, from inside a rank.

NCCL_SYMBOLS = ("ncclCommInitRankConfig", "ncclAllReduce")


def check_binding(tag, dropin, torch_lib=None):
    """Prints where the NCCL symbols PyTorch calls resolve; True when all of it is the drop-in."""
    dropin = os.path.realpath(dropin)
    ok = True
    maps = mapped_objects()
    ncclmaps = [p for p in maps if "libnccl" in os.path.basename(p)]
    print(f"{tag}: libnccl mapped: {ncclmaps} (PyTorch loads its own copy by path, RTLD_LOCAL; "
          f"mapped is not the same as called)", flush=True)
    if dropin not in maps:
        print(f"{tag}: FAIL the drop-in {dropin} is not mapped at all", flush=True)
        ok = False
    # The global scope (what every object without RTLD_DEEPBIND binds to first).
    for name in NCCL_SYMBOLS:
        desc, mine = where(global_symbol(name), dropin)
        print(f"{tag}: global scope: {name} -> {desc}", flush=True)
        ok = ok and mine
    if torch_lib is None:
        torch_lib = next((p for p in maps if os.path.basename(p).startswith("libtorch_cuda.so")), None)
    if torch_lib is None:
        print(f"{tag}: FAIL libtorch_cuda.so is not mapped: where does PyTorch call NCCL from?", flush=True)
        return False
    name_t = os.path.basename(torch_lib)
    # libtorch_cuda.so's own dependency scope: what a dlsym on its handle would find.
    for name in NCCL_SYMBOLS:
        desc, mine = where(scope_symbol(torch_lib, name), dropin)
        print(f"{tag}: {name_t}'s own scope (dlsym on its RTLD_NOLOAD handle): {name} -> {desc}", flush=True)
        if not mine:
            print(f"{tag}: FAIL !!! a lookup through {name_t}'s own handle reaches the real NCCL, not "
                  f"the drop-in: PyTorch may not be calling Chorus", flush=True)
            ok = False
    # libtorch_cuda.so's global offset table: the addresses its calls actually jump to.
    try:
        slots = bound_slots(torch_lib, NCCL_SYMBOLS)
    except (OSError, ValueError) as e:
        print(f"{tag}: {name_t}'s relocations could not be read ({e}); its GOT is not checked", flush=True)
        slots = None
    if slots is not None:
        for name in NCCL_SYMBOLS:
            mine_slots = [s for s in slots if s[0] == name]
            if not mine_slots:
                print(f"{tag}: {name_t} has no relocation for {name}", flush=True)
            for _, tname, addr in mine_slots:
                obj, _ = object_of(addr)
                if obj == os.path.realpath(torch_lib):
                    print(f"{tag}: {name_t}'s GOT ({tname}): {name} -> {addr:#x}, its own PLT: not bound "
                          f"yet (lazy binding, not called so far)", flush=True)
                    continue
                desc, mine = where(addr, dropin)
                print(f"{tag}: {name_t}'s GOT ({tname}, what its calls jump to): {name} -> {desc}", flush=True)
                if not mine:
                    print(f"{tag}: FAIL !!! {name_t} calls {name} in {obj}, not in the drop-in", flush=True)
                    ok = False
        if not any(s[0] == "ncclAllReduce" and object_of(s[2])[0] == dropin for s in slots):
            print(f"{tag}: FAIL no slot of {name_t} holds the drop-in's ncclAllReduce after an all-reduce",
                  flush=True)
            ok = False
    print(f"{tag}: binding {'ok: the drop-in serves the calls' if ok else 'FAIL'}", flush=True)
    return ok


# ----------------------------------------------------------------------------------------------
# The training comparisons, run in each rank.

TOLERANCE = 1e-5
LR = 0.05


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


def batch(rank, step, salt=0):
    import torch

    g = torch.Generator().manual_seed(1000 * step + rank + 100000 * salt)
    return torch.randn(20, 10, generator=g), torch.randn(20, 5, generator=g)


def reference(steps, world, device, salt, divide=None):
    """The parameters after `steps` SGD steps in one process on the ranks' gradients summed and
    divided by `divide` (default: the number of ranks, their average)."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    ref = model().to(device)
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    loss_fn = nn.MSELoss()
    for step in range(steps):
        grads = None
        for r in range(world):
            ref.zero_grad()
            x, y = batch(r, step, salt)
            loss_fn(ref(x.to(device)), y.to(device)).backward()
            g = [p.grad.clone() for p in ref.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        for p, g in zip(ref.parameters(), grads):
            p.grad = g / (divide or world)
        opt.step()
    return torch.cat([p.detach().flatten() for p in ref.parameters()])


def compare(tag, what, mine, world, device, steps, salt, divide=None):
    """Every rank's parameters equal (all-gather) and close to one-process training."""
    import torch
    import torch.distributed as dist

    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    ref = reference(steps, world, device, salt, divide)
    diff = (ref - mine).abs().max().item()
    ok = same and diff <= TOLERANCE
    if not same:
        # Which slots differ from this rank's own parameters (every rank's should equal them when
        # each equals the reference). No further collective here: the other ranks may have found
        # theirs equal and gone on. tools/torch_coll_check.py checks each collective by itself.
        out = []
        for r, g in enumerate(gathered):
            bad = (g != mine).nonzero().flatten()
            first = bad[0].item() if bad.numel() else -1
            out.append(f"slot {r}: {bad.numel()} of {g.numel()} differ" +
                       (f" (first at {first}: {g[first].item()!r}, own {mine[first].item()!r})" if first >= 0 else ""))
        print(f"{tag}: {what}: all_gather: {'; '.join(out)}", flush=True)
    print(f"{tag}: {what}: {steps} steps on {world} ranks; ranks' parameters "
          f"{'equal' if same else 'DIFFER'}; largest difference from one-process training {diff:.2e} "
          f"(tolerance {TOLERANCE:.0e}): {'ok' if ok else 'FAIL'}", flush=True)
    return ok


def run_ddp(tag, rank, world, device, steps, premul=False):
    """DDP training; with `premul`, its buckets all-reduced by a comm hook with PREMUL_SUM, the
    factor 1/world a tensor on the GPU (ncclScalarDevice: the kernel reads it when it runs)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    net = model().to(device)
    ddp = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    if premul:
        def premul_hook(state, bucket):
            t = bucket.buffer()
            factor = torch.tensor([1.0 / world], device=t.device, dtype=t.dtype)
            work = dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor), async_op=True)
            return work.get_future().then(lambda fut: fut.value()[0])

        ddp.register_comm_hook(None, premul_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    loss_fn = nn.MSELoss()
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss_fn(ddp(x.to(device)), y.to(device)).backward()
        opt.step()
    mine = torch.cat([p.detach().flatten() for p in net.parameters()])
    return compare(tag, "DDP with PREMUL_SUM (comm hook)" if premul else "DDP", mine, world, device, steps, 0)


def import_fully_shard():
    try:
        from torch.distributed.fsdp import fully_shard  # PyTorch 2.6 and later
        return fully_shard
    except Exception:  # ImportError, or an old torch whose fsdp package fails to import
        pass
    from torch.distributed._composable.fsdp import fully_shard  # PyTorch 2.4, 2.5
    return fully_shard


def run_fsdp(tag, rank, world, device, steps, premul=False):
    """FSDP2 training; with `premul`, a gradient divide factor of 2 x world, which FSDP2 applies as
    a reduce-scatter with PREMUL_SUM by 1/(2 x world) (a factor equal to the group's size would be
    AVG), against one-process training that divides by the same."""
    import torch
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard = import_fully_shard()
    mesh = init_device_mesh(device.type, (world,))
    torch.manual_seed(0)
    net = model().to(device)
    for layer in (net.net1, net.net2):
        fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    if device.type == "cpu" and hasattr(net, "set_force_sum_reduction_for_comms"):
        net.set_force_sum_reduction_for_comms(True)  # gloo has no ReduceOp.AVG: sum, then divide
    divide = None
    if premul:
        divide = 2.0 * world
        for m in (net.net1, net.net2, net):
            setter = getattr(m, "set_gradient_divide_factor", None) or getattr(m, "set_reduce_scatter_divide_factor")
            setter(divide)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    loss_fn = nn.MSELoss()
    for step in range(steps):
        x, y = batch(rank, step, 1)
        opt.zero_grad()
        loss_fn(net(x.to(device)), y.to(device)).backward()
        opt.step()
    kinds = sorted({type(p).__name__ for p in net.parameters()})
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in net.parameters()]
    mine = torch.cat([t.detach().flatten() for t in full])
    print(f"{tag}: FSDP2 parameters are {kinds}; full parameters gathered with full_tensor()", flush=True)
    what = "FSDP2 (fully_shard) with PREMUL_SUM (divide factor)" if premul else "FSDP2 (fully_shard)"
    return compare(tag, what, mine, world, device, steps, 1, divide)


def rank_main(args):
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    tag = f"rank {rank}"
    results = {}
    try:
        if args.cpu_selftest:
            device = torch.device("cpu")
            dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout))
        else:
            device = torch.device("cuda:0")
            torch.cuda.set_device(device)
            if args.mixed:
                import chorus_torch  # noqa: F401  registers "chorus"
            dist.init_process_group("cpu:chorus,cuda:nccl" if args.mixed else "nccl", rank=rank, world_size=world,
                                    device_id=device, timeout=timedelta(seconds=args.timeout))
        t = torch.full((1,), float(rank + 1), device=device)
        dist.all_reduce(t)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        want = world * (world + 1) / 2
        results["first all-reduce"] = t.item() == want
        print(f"{tag}: first all_reduce on {device} gives {t.item():g} (want {want:g})", flush=True)
        if not args.cpu_selftest:
            try:
                results["binding"] = check_binding(tag, args.dropin)
            except Exception:  # a broken helper is a failed proof, not a reason to skip the rest
                traceback.print_exc()
                print(f"{tag}: FAIL the binding check raised", flush=True)
                results["binding"] = False
        if args.mixed:
            # The same group's CPU half: chorus_torch's backend, on Chorus's host path.
            import chorus_torch
            cpu = torch.device("cpu")
            backend = dist.group.WORLD._get_backend(cpu)
            c = torch.full((3,), float(rank + 1))
            dist.all_reduce(c)
            ok = isinstance(backend, chorus_torch.ProcessGroupChorus) and bool((c == want).all())
            results["CPU all-reduce on chorus"] = ok
            print(f"{tag}: CPU tensors go to {type(backend).__name__}; all_reduce gives {c.tolist()} "
                  f"(want {want:g}): {'ok' if ok else 'FAIL'}", flush=True)
            results["DDP CPU (chorus)"] = run_ddp(tag, rank, world, cpu, args.steps)
        results["DDP"] = run_ddp(tag, rank, world, device, args.steps)
        if not args.cpu_selftest:
            results["DDP PREMUL_SUM"] = run_ddp(tag, rank, world, device, args.steps, premul=True)
        try:
            import_fully_shard()
            have_fsdp = True
        except Exception as e:
            have_fsdp = False
            print(f"{tag}: {'SKIP' if args.cpu_selftest else 'FAIL'} FSDP2: this PyTorch "
                  f"({torch.__version__}) has no fully_shard ({type(e).__name__}: {e})", flush=True)
            if not args.cpu_selftest:
                results["FSDP2"] = False
        if have_fsdp:
            results["FSDP2"] = run_fsdp(tag, rank, world, device, args.fsdp_steps)
            if not args.cpu_selftest:
                results["FSDP2 PREMUL_SUM"] = run_fsdp(tag, rank, world, device, args.fsdp_steps, premul=True)
        dist.destroy_process_group()
    except Exception:
        # A rank that stops mid-way leaves the others waiting in a collective: say why and leave at
        # once, so that the parent ends them now rather than at the deadline.
        traceback.print_exc()
        print(f"{tag}: RESULT " + " ".join(f"{k.replace(' ', '-')}={'ok' if v else 'FAIL'}"
                                           for k, v in results.items()) + " raised", flush=True)
        os._exit(1)
    ok = all(results.values())
    print(f"{tag}: RESULT " + " ".join(f"{k.replace(' ', '-')}={'ok' if v else 'FAIL'}"
                                       for k, v in results.items()), flush=True)
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------
# The parent: start the ranks, one deadline, read their logs.

CHORUS_LINE = re.compile(r"Chorus version \d+\.\d+")
# NCCL's own line is "NCCL version 2.28.9+cuda13.0"; PyTorch's error messages say ", NCCL version
# 2.28.9" from ncclGetVersion, which the drop-in answers too, so "+cuda" tells them apart.
NCCL_LINE = re.compile(r"NCCL version 2\.\d+\.\d+\S*\+cuda")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Terminated(Exception):
    pass


def _on_sigterm(signum, frame):
    raise Terminated()


def _pump(r, stream, lines, lock):
    """Copies rank r's output to ours as it comes (a rank's own lines already say "rank r:")."""
    for line in stream:
        lines.append(line)
        with lock:
            sys.stdout.write(line if line.startswith(f"rank {r}:") else f"[rank {r}] {line}")
            sys.stdout.flush()
    stream.close()


def run_ranks(args, extra_env):
    """Starts the ranks and copies their output to ours as it comes, under one deadline; returns
    (exit codes, each rank's output, a note on why ranks were killed or "", seconds taken)."""
    port = free_port()
    procs, outs, pumps, lock = [], [], [], threading.Lock()
    for r in range(args.world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PYTHONUNBUFFERED="1", **extra_env)
        for k in ("NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "CHORUS_DEBUG", "CHORUS_DEBUG_SUBSYS",
                  "CHORUS_DEBUG_FILE"):
            env.pop(k, None)  # the version lines must reach this rank's stdout/stderr, and only they
        # DeviceMesh sets the device from LOCAL_RANK where none is set yet: every rank is on cuda:0.
        env.pop("LOCAL_RANK", None)
        if "LD_PRELOAD" not in extra_env:
            env.pop("LD_PRELOAD", None)
        cmd = [sys.executable, os.path.abspath(__file__), "--rank-process", "--world", str(args.world),
               "--steps", str(args.steps), "--fsdp-steps", str(args.fsdp_steps), "--timeout", str(args.timeout)]
        if args.cpu_selftest:
            cmd.append("--cpu-selftest")
        else:
            if args.mixed:
                cmd.append("--mixed")
            cmd.append(args.dropin)
        pr = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace")
        procs.append(pr)
        outs.append([])
        pumps.append(threading.Thread(target=_pump, args=(r, pr.stdout, outs[-1], lock), daemon=True))
        pumps[-1].start()
    # One deadline for all; a rank that fails leaves the others waiting in a collective, so they get
    # a short grace and are killed too. So are they when an outer limit ends this process (SIGTERM).
    start = time.monotonic()
    deadline = start + args.timeout
    failed_at, note = None, ""
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        while True:
            codes = [pr.poll() for pr in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
            if now > deadline:
                note = f"ranks still running after {args.timeout:g} s: killed"
                break
            if failed_at is not None and now - failed_at > 15:
                note = "a rank failed and the others had not finished 15 s later: killed"
                break
            time.sleep(0.2)
    except (Terminated, KeyboardInterrupt) as e:
        note = f"{'SIGTERM' if isinstance(e, Terminated) else 'interrupted'} after {time.monotonic() - start:.0f} s " \
               f"(an outer time limit?): ranks killed"
    finally:
        signal.signal(signal.SIGTERM, old)
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
        for pr in procs:
            pr.wait()
    for t in pumps:
        t.join(timeout=5)
    if note:
        print(f"check: {note}", flush=True)
    codes = [pr.returncode if pr.returncode >= 0 else f"signal {-pr.returncode}" for pr in procs]
    return codes, ["".join(o) for o in outs], note, time.monotonic() - start


def results_of(out):
    m = re.findall(r"RESULT (.*)", out)
    return m[-1].strip() if m else "no RESULT line"


def selftest_helpers():
    """The symbol helpers against Python's own libraries: printf in libc; ffi_call as _ctypes gets it."""
    import _ctypes

    ok = True
    libc = next((p for p in mapped_objects() if re.match(r"libc[.-]", os.path.basename(p))), None)
    addr = global_symbol("printf")
    obj, sym = object_of(addr)
    good = obj is not None and obj == libc
    print(f"selftest: global scope: printf -> {addr:#x} = {sym} in {obj} (libc is {libc}): "
          f"{'ok' if good else 'FAIL'}")
    ok = ok and good
    ext = os.path.realpath(getattr(_ctypes, "__file__", "") or "")
    if not os.path.isfile(ext):
        print("selftest: _ctypes is built into this Python; its GOT is not tried")
        return ok
    ffi = object_of(scope_symbol(ext, "ffi_call"))[0]
    good = ffi is not None and "libffi" in os.path.basename(ffi)
    print(f"selftest: {os.path.basename(ext)}'s own scope: ffi_call in {ffi}: {'ok' if good else 'FAIL'}")
    ok = ok and good
    slots = bound_slots(ext, ["ffi_call", "malloc"])
    for name, tname, value in slots:
        o, s = object_of(value)
        good = o is not None and (("libffi" in os.path.basename(o)) if name == "ffi_call" else o == libc)
        print(f"selftest: {os.path.basename(ext)}'s GOT ({tname}): {name} -> {value:#x} = {s} in {o}: "
              f"{'ok' if good else 'FAIL'}")
        ok = ok and good
    names = {s[0] for s in slots}
    if "ffi_call" not in names:
        print("selftest: FAIL no GOT slot for ffi_call found")
        ok = False
    return ok


def main():
    p = argparse.ArgumentParser(description="PyTorch's ProcessGroupNCCL (DDP, FSDP2) through Chorus's NCCL drop-in")
    p.add_argument("dropin", nargs="?", help="the drop-in, e.g. build/nccl/libnccl.so.2")
    p.add_argument("--world", type=int, default=2, help="ranks, all on cuda:0 (default 2)")
    p.add_argument("--steps", type=int, default=20, help="DDP steps (default 20)")
    p.add_argument("--fsdp-steps", type=int, default=5, help="FSDP2 steps (default 5)")
    p.add_argument("--timeout", type=float, default=120,
                   help="seconds for the whole run; then every rank is killed (default 120)")
    p.add_argument("--mixed", action="store_true",
                   help='one "cpu:chorus,cuda:nccl" group (chorus_torch on PYTHONPATH): CUDA tensors through '
                        'ProcessGroupNCCL and the drop-in, CPU tensors through chorus_torch, both on Chorus')
    p.add_argument("--rank-process", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cpu-selftest", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_process:
        return rank_main(args)
    sys.stdout.reconfigure(line_buffering=True)  # our lines and the ranks' in the order they happen
    if not args.cpu_selftest and not args.dropin:
        p.error("the drop-in's path is required")
    if args.mixed and args.cpu_selftest:
        p.error("--mixed needs a GPU (ProcessGroupNCCL); the CPU self-test runs gloo")
    what = (f"ProcessGroupNCCL through the drop-in, {args.world} ranks on cuda:0: "
            f"DDP {args.steps} steps, FSDP2 {args.fsdp_steps} steps")
    if args.mixed:
        what = ('one "cpu:chorus,cuda:nccl" group: CPU tensors through chorus_torch (all-reduce, DDP) and '
                + what)
    try:
        import torch
    except ImportError:
        print(f"SKIP: no PyTorch for {sys.executable}; {what}: not run")
        return 77
    if args.cpu_selftest:
        what = (f"CPU self-test with gloo and no drop-in (PyTorch {torch.__version__}), {args.world} ranks: "
                f"DDP {args.steps} steps, FSDP2 {args.fsdp_steps} steps")
        helpers_ok = selftest_helpers()
        codes, outs, note, took = run_ranks(args, {})
        results = "; ".join(f"rank {r}: {results_of(o)}" for r, o in enumerate(outs))
        ok = helpers_ok and all(c == 0 for c in codes)
        if any("SKIP FSDP2" in o for o in outs):
            what += " (FSDP2 not run: no fully_shard in this PyTorch)"
        print(("PASSED" if ok else f"FAILED (exit codes {codes})") + f": {what} in {took:.0f} s ({results}"
              f"{'; ' + note if note else ''}; symbol helpers {'ok' if helpers_ok else 'FAIL'})")
        return 0 if ok else 1
    if not torch.cuda.is_available():
        print(f"SKIP: no CUDA device (PyTorch {torch.__version__} sees none); {what}: not run")
        return 77
    if not os.path.isfile(args.dropin):
        print(f"FAILED: no drop-in at {args.dropin}; {what}: not run")
        return 1
    dropin = os.path.realpath(args.dropin)
    what = f"PyTorch {torch.__version__} " + what
    print(f"drop-in {dropin}; ranks run with LD_PRELOAD={dropin} NCCL_DEBUG=VERSION; deadline {args.timeout:g} s",
          flush=True)
    codes, outs, note, took = run_ranks(args, {"LD_PRELOAD": dropin, "NCCL_DEBUG": "VERSION"})
    # The log proof: the drop-in's version line (rank 0 of each communicator prints it), and never
    # the real NCCL's.
    chorus = [ln.strip() for ln in outs[0].splitlines() if CHORUS_LINE.search(ln)]
    nccl = [(r, ln.strip()) for r, out in enumerate(outs) for ln in out.splitlines() if NCCL_LINE.search(ln)]
    log_ok = bool(chorus) and not nccl
    print(f"NCCL_DEBUG=VERSION: rank 0 printed {len(chorus)} Chorus version line(s)"
          f"{': ' + repr(chorus[0]) if chorus else ' (want at least 1)'}; "
          f"real NCCL's 'NCCL version 2.x.y+cuda' lines: {nccl if nccl else 'none'}: {'ok' if log_ok else 'FAIL'}")
    results = "; ".join(f"rank {r}: {results_of(o)}" for r, o in enumerate(outs))
    ok = log_ok and all(c == 0 for c in codes)
    print(("PASSED" if ok else f"FAILED (exit codes {codes})") + f": {what} in {took:.0f} s "
          f"(version line {'ok' if log_ok else 'FAIL'}; {results}{'; ' + note if note else ''})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
