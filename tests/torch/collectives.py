"""Every collective of the chorus backend, for every dtype and op, checked on 3 ranks (mp.spawn).

Each rank's inputs are generated from its rank, so every rank can compute every expected result
with torch's own ops on the inputs of all ranks. Where PyTorch's Gloo supports the same call,
the gloo backend's result (a second process group over the same store) must also match chorus's.
Values are small integers (and 1, 2, 1/2, -1 for products), so sums and products are exact in
every type and results compare exactly; AVG, whose 1/n rounds, within the type's rounding.

Usage: python3 collectives.py [WORLD_SIZE]   (PYTHONPATH must reach chorus_torch)
"""
import os
import sys

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401  registers "chorus"
import harness

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
GLOO_DTYPES = {torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8, torch.int32, torch.int64}
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM", "BAND", "BOR", "BXOR"]
GLOO_OPS = {"SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"}
BITWISE = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}
SIZES = [1, 37, 4099]


def make(rank, n, dtype, op="SUM", salt=0):
    """Rank's input: n elements of dtype, exact under the op's arithmetic."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * n + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if op in BITWISE:  # every bit of the type
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype)
    if op == "PRODUCT":
        if dtype.is_floating_point:
            choices = torch.tensor([1.0, 2.0, 0.5, -1.0], dtype=torch.float64)
            return choices[torch.randint(0, 4, (n,), generator=g)].to(dtype)
        return torch.randint(-3 if dtype != torch.uint8 else 0, 4, (n,), generator=g).to(dtype)
    low = 0 if dtype == torch.uint8 else -20
    return torch.randint(low, 21, (n,), generator=g).to(dtype)


def reference(inputs, op, dtype, world):
    """The expected all-reduce of the ranks' inputs, with torch's ops."""
    if op in BITWISE:
        r = inputs[0]
        for x in inputs[1:]:
            r = BITWISE[op](r, x)
        return r
    if dtype == torch.bool:
        s = torch.stack(inputs)
        return s.any(0) if op in ("SUM", "MAX") else s.all(0)
    s = torch.stack([x.to(torch.float64) if dtype.is_floating_point else x.to(torch.int64) for x in inputs])
    if op == "SUM":
        r = s.sum(0)
    elif op == "PRODUCT":
        r = s.prod(0)
    elif op == "MIN":
        r = s.min(0).values
    elif op == "MAX":
        r = s.max(0).values
    elif op == "AVG":
        r = s.sum(0) / world if dtype.is_floating_point else torch.div(s.sum(0), world, rounding_mode="trunc")
    elif op == "PREMUL_SUM":
        r = s.sum(0) * 2
    return r.to(dtype) if dtype.is_floating_point else wrap(r, dtype)


def wrap(r, dtype):
    """int64 values wrapped to dtype's width, as the integer arithmetic of the type does."""
    bits = 8 * torch.tensor([], dtype=dtype).element_size()
    if bits == 64:
        return r
    r = r & ((1 << bits) - 1)
    if dtype != torch.uint8:
        r = torch.where(r >= (1 << (bits - 1)), r - (1 << bits), r)
    return r.to(dtype)


def reduce_op(op):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(2.0)
    return getattr(dist.ReduceOp, op)


def supported(op, dtype):
    if op in BITWISE:
        return not dtype.is_floating_point
    if dtype == torch.bool:
        return op in ("SUM", "PRODUCT", "MIN", "MAX")
    if op == "PREMUL_SUM":
        return dtype.is_floating_point
    return True


def same(got, want, dtype, op, what):
    if op == "AVG" and dtype.is_floating_point:
        eps = torch.finfo(dtype).eps
        ok = torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=4 * eps, atol=4 * eps * 20)
    else:
        ok = torch.equal(got, want)
    if not ok:
        bad = (got.to(torch.float64) != want.to(torch.float64)).nonzero()
        i = bad[0].item() if len(bad) else 0
        raise AssertionError(f"{what}: element {i} is {got.flatten()[i].item()}, want {want.flatten()[i].item()}")


class Checker:
    def __init__(self, rank, world, gloo):
        self.rank, self.world, self.gloo, self.count = rank, world, gloo, 0

    def all_inputs(self, n, dtype, op="SUM", salt=0):
        return [make(r, n, dtype, op, salt) for r in range(self.world)]

    def allreduce(self):
        for dtype in DTYPES:
            for op in OPS:
                if not supported(op, dtype):
                    continue
                for n in SIZES:
                    ins = self.all_inputs(n, dtype, op)
                    want = reference(ins, op, dtype, self.world)
                    t = ins[self.rank].clone()
                    work = dist.all_reduce(t, op=reduce_op(op), async_op=True)
                    fut = work.get_future()
                    work.wait()
                    same(t, want, dtype, op, f"all_reduce {op} {dtype} n={n}")
                    same(fut.wait()[0], want, dtype, op, f"all_reduce future {op} {dtype}")
                    if dtype in GLOO_DTYPES and op in GLOO_OPS:
                        g = ins[self.rank].clone()
                        dist.all_reduce(g, op=reduce_op(op), group=self.gloo)
                        same(t, g, dtype, op, f"all_reduce {op} {dtype} n={n} against gloo")
                    self.count += 1
        # BAND, BOR and BXOR on a floating type are refused in gloo's words, the tensor untouched.
        for op in BITWISE:
            t = torch.ones(4)
            try:
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            except RuntimeError as e:
                assert f"Cannot use ReduceOp.{op} with non-integral dtype" in str(e), str(e)
            else:
                raise AssertionError(f"{op} on float32 was accepted")
            assert torch.equal(t, torch.ones(4)), t
        try:
            dist.all_reduce(torch.ones(2, dtype=torch.bool), op=dist.ReduceOp.AVG)
        except RuntimeError as e:
            assert "AVG with boolean" in str(e), str(e)
        else:
            raise AssertionError("AVG on bool was accepted")

    def coalesced(self):
        for dtype in (torch.float32, torch.int64):
            ins = [self.all_inputs(n, dtype, salt=5) for n in SIZES]
            ts = [i[self.rank].clone() for i in ins]
            dist.all_reduce_coalesced(ts)
            for t, i, n in zip(ts, ins, SIZES):
                same(t, reference(i, "SUM", dtype, self.world), dtype, "SUM", f"all_reduce_coalesced {dtype} n={n}")
            self.count += 1

    def as_gloo(self):
        # What ProcessGroupGloo does and the test suites of PyTorch check, each against gloo itself.
        w, me = self.world, self.rank
        # A tensor twice in one all_reduce_coalesced, and overlapping views: reduced once.
        for make_list in (lambda t: [t, t], lambda t: [t[0:4], t[2:6]]):
            t = torch.arange(6, dtype=torch.float32) + me
            g = t.clone()
            dist.all_reduce_coalesced(make_list(t))
            dist.all_reduce_coalesced(make_list(g), group=self.gloo)
            assert torch.equal(t, g), (t, g)
        t = torch.full((4,), float(me + 1))
        dist.all_reduce_coalesced([t, t])
        assert torch.equal(t, torch.full((4,), float(w * (w + 1) // 2))), t
        # Views that are not contiguous (a column), in place: all_reduce, broadcast, reduce,
        # send/recv and batch_isend_irecv; only the column changes. (Gloo 2.11 takes such views as
        # if they were contiguous and writes past the column, so the reference is computed here.)
        base = torch.arange(12, dtype=torch.float32).reshape(4, 3)
        def column_of(salt):
            m = base * (me + 1) + salt
            return m, m.clone()
        tri = w * (w + 1) // 2
        for call, col in ((lambda c: dist.all_reduce(c), lambda salt: base[:, 1] * tri + w * salt),
                          (lambda c: dist.broadcast(c, src=w - 1), lambda salt: base[:, 1] * w + salt),
                          (lambda c: dist.reduce(c, dst=0, op=dist.ReduceOp.MAX),
                           lambda salt: base[:, 1] * (w if me == 0 else me + 1) + salt)):
            m, want = column_of(1)
            call(m[:, 1])
            want[:, 1] = col(1)
            assert torch.equal(m, want), (m, want)
        m, want = column_of(2)
        nxt, prv = (me + 1) % w, (me - 1) % w
        ops = [dist.P2POp(dist.isend, m[:, 0], nxt), dist.P2POp(dist.irecv, m[:, 2], prv)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        want[:, 2] = torch.arange(12, dtype=torch.float32).reshape(4, 3)[:, 0] * (prv + 1) + 2
        assert torch.equal(m, want), (m, want)
        m, want = column_of(3)
        if me == 0:
            dist.send(m[:, 1], dst=1)
        elif me == 1:
            dist.recv(m[:, 2], src=0)
            want[:, 2] = torch.arange(12, dtype=torch.float32).reshape(4, 3)[:, 1] * 1 + 3
        assert torch.equal(m, want), (m, want)
        # Under torch.inference_mode(): the results are copied out in that mode too.
        with torch.inference_mode():
            src = torch.full((3,), float(me))
            outs = [torch.empty(3) for _ in range(w)]
            dist.all_gather(outs, src)
            for r in range(w):
                assert torch.equal(outs[r], torch.full((3,), float(r))), (r, outs[r])
            got = [torch.empty(3) for _ in range(w)] if me == 0 else None
            dist.gather(src, got, dst=0)
            if me == 0:
                for r in range(w):
                    assert torch.equal(got[r], torch.full((3,), float(r))), (r, got[r])
            objs = [None] * w
            dist.all_gather_object(objs, {"rank": me})
            assert objs == [{"rank": r} for r in range(w)], objs
        # Bad roots and empty lists: gloo's words ("invalid root rank", "invalid root tensor",
        # "requires non-empty tensor list"), through the backend itself (PyTorch's dispatcher
        # refuses an empty list before any backend sees it), and gloo's own for the same call.
        pg = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        gl = self.gloo._get_backend(torch.device("cpu"))
        bo = dist.BroadcastOptions()
        ro = dist.ReduceOptions()
        cases = []
        for bad in (-1, w):
            bo.rootRank, ro.rootRank = bad, bad
            cases.append((lambda o=bo: pg.broadcast([torch.ones(2)], o), "invalid root rank"))
            cases.append((lambda o=ro: pg.reduce([torch.ones(2)], o), "invalid root rank"))
            bo, ro = dist.BroadcastOptions(), dist.ReduceOptions()
        bo.rootTensor, ro.rootTensor = 1, 1
        cases.append((lambda o=bo: pg.broadcast([torch.ones(2)], o), "invalid root tensor"))
        cases.append((lambda o=ro: pg.reduce([torch.ones(2)], o), "invalid root tensor"))
        cases.append((lambda: pg.allreduce([]), "requires non-empty tensor list"))
        # all_gather_coalesced's output lists, as PyTorch's gloo test checks them.
        outs = [[torch.zeros(1)] for _ in range(w)]
        outs[0] = [torch.zeros(0)]
        cases.append((lambda o=outs: pg.allgather_coalesced(o, [torch.zeros(1)]), "invalid size of output tensor at index 0"))
        outs = [[torch.zeros(1)] for _ in range(w)]
        outs[0] = [torch.zeros(1, dtype=torch.float64)]
        cases.append((lambda o=outs: pg.allgather_coalesced(o, [torch.zeros(1)]), "invalid tensor type at index 0"))
        bo = dist.BroadcastOptions()
        bo.rootTensor = -1
        cases.append((lambda o=bo: pg.broadcast([torch.ones(2)], o), "invalid root tensor"))
        # An empty list names the root tensor first, as gloo's checks go.
        cases.append((lambda: pg.broadcast([], dist.BroadcastOptions()), "invalid root tensor"))
        for fn, words in cases:
            try:
                fn().wait()
            except RuntimeError as e:
                assert words in str(e), f"{words!r} not in {e}"
            else:
                raise AssertionError(f"accepted ({words})")
        try:
            gl.allreduce([])
        except RuntimeError as e:
            assert "requires non-empty tensor list" in str(e), f"gloo says {e}"
        dist.barrier()
        self.count += 1

    def several(self):
        # Several tensors of one rank in one call, as gloo takes them (through the backend: the
        # torch.distributed functions pass one), each result against a reference computed here and
        # against gloo's.
        w, me = self.world, self.rank
        pg = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        gl = self.gloo._get_backend(torch.device("cpu"))

        def mine(r, i):
            return torch.arange(5, dtype=torch.int64) * (i + 1) + 10 * r + i

        # allreduce: the reduction over every rank's tensors, all of them, into each.
        for op, fn in (("SUM", torch.add), ("MAX", torch.maximum), ("BXOR", torch.bitwise_xor)):
            want = mine(0, 0)
            for r in range(w):
                for i in range(3):
                    want = want if (r, i) == (0, 0) else fn(want, mine(r, i))
            o = dist.AllreduceOptions()
            o.reduceOp = getattr(dist.ReduceOp, op)
            for backend in (pg, gl):
                ts = [mine(me, i) for i in range(3)]
                work = backend.allreduce(ts, o)
                work.wait()
                for i, t in enumerate(ts):
                    assert torch.equal(t, want), (backend.name(), op, i, t, want)
            assert all(torch.equal(t, want) for t in work.get_future().value())
        # broadcast with rootTensor j: every tensor of every rank becomes the root's tensor j.
        for root in range(w):
            for j in range(2):
                o = dist.BroadcastOptions()
                o.rootRank, o.rootTensor = root, j
                for backend in (pg, gl):
                    ts = [mine(me, i) for i in range(2)]
                    backend.broadcast(ts, o).wait()
                    for t in ts:
                        assert torch.equal(t, mine(root, j)), (backend.name(), root, j, t)
        # allgather of k inputs: k output lists of k x world size; entry j of each list is input
        # j % k of rank j // k; the future's value is the lists.
        k = 2
        for backend in (pg, gl):
            outs = [[torch.zeros(5, dtype=torch.int64) for _ in range(k * w)] for _ in range(k)]
            work = backend.allgather(outs, [mine(me, i) for i in range(k)])
            work.wait()
            for g in range(k):
                for j in range(k * w):
                    assert torch.equal(outs[g][j], mine(j // k, j % k)), (backend.name(), g, j, outs[g][j])
        value = work.get_future().value()
        assert len(value) == k and all(torch.equal(value[g][j], mine(j // k, j % k))
                                       for g in range(k) for j in range(k * w)), value
        # Sparse: this rank's tensors summed, then across ranks, into each.
        def sparse_of(r, i):
            return torch.sparse_coo_tensor(torch.tensor([[(r + i) % 4]]), torch.tensor([float(r + i + 1)]), (4,))
        for backend in (pg, gl):
            ts = [sparse_of(me, i) for i in range(2)]
            backend.allreduce(ts).wait()
            want = sum(sparse_of(r, i).to_dense() for r in range(w) for i in range(2))
            for t in ts:
                assert torch.equal(t.to_dense(), want), (backend.name(), t, want)
        # Views that are not contiguous in the gathers, scatter and reduce_scatter: a column of a
        # 4 x 3 matrix, in and out; only the column changes.
        def col(r, salt=0):
            return (torch.arange(12, dtype=torch.float32).reshape(4, 3) * (r + 1) + salt)[:, 1]
        mats = [torch.zeros(4, 3) for _ in range(w)]
        src = torch.arange(12, dtype=torch.float32).reshape(4, 3) * (me + 1)
        dist.all_gather([m[:, 0] for m in mats], src[:, 1])
        for r in range(w):
            assert torch.equal(mats[r][:, 0], col(r)) and not mats[r][:, 1:].any(), (r, mats[r])
        mats = [torch.zeros(4, 3) for _ in range(w)]
        dist.gather(src[:, 1], [m[:, 2] for m in mats] if me == 0 else None, dst=0)
        if me == 0:
            for r in range(w):
                assert torch.equal(mats[r][:, 2], col(r)) and not mats[r][:, :2].any(), (r, mats[r])
        out = torch.zeros(4, 3)
        pieces = [(torch.arange(12, dtype=torch.float32).reshape(4, 3) * (r + 1))[:, 1] for r in range(w)]
        dist.scatter(out[:, 0], pieces if me == 1 else None, src=1)
        assert torch.equal(out[:, 0], col(me)) and not out[:, 1:].any(), out
        out = torch.zeros(4, 3)
        ins = [(torch.arange(12, dtype=torch.float32).reshape(4, 3) * (me + 1) + r)[:, 1] for r in range(w)]
        dist.reduce_scatter(out[:, 1], ins)
        want = sum(col(q, me) for q in range(w))
        assert torch.equal(out[:, 1], want) and not out[:, [0, 2]].any(), (out, want)
        # Bad lists, in gloo's words (PyTorch's gloo tests match them), and gloo's own for the same.
        t1, t2, t3 = torch.zeros(1), torch.zeros(1, dtype=torch.float64), torch.zeros(2)
        sp = torch.sparse_coo_tensor([[0]], [1.0], size=(1,))

        def rooted(opts, root):
            opts.rootRank = root
            return opts
        cases = [
            (lambda b: b.allgather([], []), "requires non-empty input tensor list"),
            (lambda b: b.allgather([], [t1]), "requires input/output tensor lists to have the same length"),
            (lambda b: b.allgather([[t1] * (w - 1)], [t1]), "invalid output tensor list"),
            (lambda b: b.allgather([[t1, t1] * w, [t1, t1] * w], [t1, t2]), "invalid tensor type"),
            (lambda b: b.allgather([[t1, t1] * w, [t1, t1] * w], [t1, t3]), "invalid tensor size"),
            (lambda b: b.allgather([([t1, t2] * w)[:w]], [t1]), "invalid tensor type"),
            (lambda b: b.allreduce([t1, t2]), "invalid tensor type"),
            (lambda b: b.allreduce([t1, t3]), "invalid tensor size"),
            (lambda b: b.broadcast([t1, t2], dist.BroadcastOptions()), "invalid tensor type"),
            (lambda b: b.reduce([t1, t1], dist.ReduceOptions()), "requires a single-element tensor list"),
            (lambda b: b.gather([], [], dist.GatherOptions()), "requires a single-element input tensor list"),
            (lambda b: b.scatter([], [], dist.ScatterOptions()), "requires a single-element output tensor list"),
            # Each rank the root of its own call (or each another's), so that every rank refuses.
            (lambda b: b.gather([[t1] * (w - 1)], [t1], rooted(dist.GatherOptions(), me)), "Incorrect output list size"),
            (lambda b: b.gather([[t1] * w, [t1] * w], [t1], rooted(dist.GatherOptions(), me)),
             "requires a single-element output list"),
            (lambda b: b.gather([[t1] * w], [t1], rooted(dist.GatherOptions(), (me + 1) % w)),
             "requires empty output on non-root"),
            (lambda b: b.gather([[t1] * (w - 1) + [t3]], [t1], rooted(dist.GatherOptions(), me)), "invalid tensor size"),
            (lambda b: b.scatter([t1], [[t1] * (w - 1) + [t2]], rooted(dist.ScatterOptions(), me)), "invalid tensor type"),
            (lambda b: b.scatter([t1], [[t1] * (w + 1)], rooted(dist.ScatterOptions(), me)), "Incorrect input list size"),
            (lambda b: b.allreduce_coalesced([t1, t2], dist.AllreduceCoalescedOptions()),
             "tensors must all have the same type"),
            (lambda b: b.allreduce_coalesced([t1, sp], dist.AllreduceCoalescedOptions()),
             "invalid tensor layout at index"),
            (lambda b: b.allreduce_coalesced([sp, sp.clone()], dist.AllreduceCoalescedOptions()), "unsupported layout"),
        ]
        for fn, words in cases:
            for backend in (pg, gl):
                try:
                    fn(backend).wait()
                except RuntimeError as e:
                    assert words in str(e), f"{backend.name()}: {words!r} not in {e}"
                else:
                    raise AssertionError(f"{backend.name()} accepted ({words})")
        dist.barrier()
        self.count += 1

    def sparse(self):
        # Sparse COO all-reduce (SUM), as gloo's: rank r holds entries at indices that overlap other
        # ranks' (uncoalesced: some repeat), with a dense dimension of 3; then once more with rank 1
        # holding no entry at all. The result, in place and still sparse, must equal the dense sum
        # of every rank's tensor, and gloo's.
        def mine(r, dtype, empty):
            g = torch.Generator().manual_seed(500 + r)
            nnz = 0 if r == empty else 4 + 3 * r
            idx = torch.stack([torch.randint(0, 6, (nnz,), generator=g), torch.randint(0, 5, (nnz,), generator=g)])
            val = torch.randint(-20, 21, (nnz, 3), generator=g).to(dtype)
            return torch.sparse_coo_tensor(idx, val, (6, 5, 3))

        for empty in (None, 1):
            for dtype in (torch.float32, torch.float64, torch.int64):
                t = mine(self.rank, dtype, empty)
                dist.all_reduce(t)
                want = sum(mine(r, dtype, empty).to_dense() for r in range(self.world))
                assert t.is_sparse, "sparse all_reduce left a dense tensor"
                same(t.to_dense(), want, dtype, "SUM", f"sparse all_reduce {dtype} (rank {empty} empty)")
                g = mine(self.rank, dtype, empty)
                dist.all_reduce(g, group=self.gloo)
                same(t.to_dense(), g.to_dense(), dtype, "SUM", f"sparse all_reduce {dtype} against gloo")
                self.count += 1

    def rooted(self):
        for dtype in DTYPES:
            for root in range(self.world):
                for n in SIZES:
                    ins = self.all_inputs(n, dtype, salt=root)
                    # broadcast
                    t = ins[self.rank].clone()
                    dist.broadcast(t, src=root)
                    same(t, ins[root], dtype, "SUM", f"broadcast {dtype} root {root}")
                    if dtype in GLOO_DTYPES:
                        g = ins[self.rank].clone()
                        dist.broadcast(g, src=root, group=self.gloo)
                        same(t, g, dtype, "SUM", f"broadcast {dtype} against gloo")
                    # reduce
                    for op in OPS:
                        if not supported(op, dtype):
                            continue
                        rin = self.all_inputs(n, dtype, op, salt=root)
                        t = rin[self.rank].clone()
                        dist.reduce(t, dst=root, op=reduce_op(op))
                        if self.rank == root:
                            same(t, reference(rin, op, dtype, self.world), dtype, op, f"reduce {op} {dtype} root {root}")
                            if dtype in GLOO_DTYPES and op in GLOO_OPS:
                                g = rin[self.rank].clone()
                                dist.reduce(g, dst=root, op=reduce_op(op), group=self.gloo)
                                same(t, g, dtype, op, f"reduce {op} {dtype} against gloo")
                        elif dtype in GLOO_DTYPES and op in GLOO_OPS:
                            dist.reduce(rin[self.rank].clone(), dst=root, op=reduce_op(op), group=self.gloo)
                    # gather
                    outs = [torch.zeros(n, dtype=dtype) for _ in range(self.world)] if self.rank == root else None
                    dist.gather(ins[self.rank], gather_list=outs, dst=root)
                    if self.rank == root:
                        for r in range(self.world):
                            same(outs[r], ins[r], dtype, "SUM", f"gather {dtype} root {root} from {r}")
                    if dtype in GLOO_DTYPES:
                        gouts = [torch.zeros(n, dtype=dtype) for _ in range(self.world)] if self.rank == root else None
                        dist.gather(ins[self.rank], gather_list=gouts, dst=root, group=self.gloo)
                        if self.rank == root:
                            for a, b in zip(outs, gouts):
                                same(a, b, dtype, "SUM", f"gather {dtype} against gloo")
                    # scatter
                    parts = [make(r, n, dtype, salt=99 + root) for r in range(self.world)]
                    out = torch.zeros(n, dtype=dtype)
                    dist.scatter(out, scatter_list=parts if self.rank == root else None, src=root)
                    same(out, parts[self.rank], dtype, "SUM", f"scatter {dtype} root {root}")
                    if dtype in GLOO_DTYPES:
                        gout = torch.zeros(n, dtype=dtype)
                        dist.scatter(gout, scatter_list=parts if self.rank == root else None, src=root,
                                     group=self.gloo)
                        same(out, gout, dtype, "SUM", f"scatter {dtype} against gloo")
                    self.count += 1

    def gathers(self):
        for dtype in DTYPES:
            for n in SIZES:
                ins = self.all_inputs(n, dtype, salt=3)
                outs = [torch.zeros(n, dtype=dtype) for _ in range(self.world)]
                dist.all_gather(outs, ins[self.rank])
                for r in range(self.world):
                    same(outs[r], ins[r], dtype, "SUM", f"all_gather {dtype} n={n} from {r}")
                if dtype in GLOO_DTYPES:
                    gouts = [torch.zeros(n, dtype=dtype) for _ in range(self.world)]
                    dist.all_gather(gouts, ins[self.rank], group=self.gloo)
                    for a, b in zip(outs, gouts):
                        same(a, b, dtype, "SUM", f"all_gather {dtype} against gloo")
                flat = torch.zeros(self.world * n, dtype=dtype)
                dist._all_gather_base(flat, ins[self.rank])
                same(flat, torch.cat(ins), dtype, "SUM", f"_all_gather_base {dtype} n={n}")
                self.count += 1
            # all_gather_into_tensor in a coalescing manager: allgather_into_tensor_coalesced.
            ins = [self.all_inputs(n, dtype, salt=4) for n in SIZES]
            flats = [torch.zeros(self.world * n, dtype=dtype) for n in SIZES]
            with dist._coalescing_manager():
                for flat, i in zip(flats, ins):
                    dist.all_gather_into_tensor(flat, i[self.rank])
            for flat, i, n in zip(flats, ins, SIZES):
                same(flat, torch.cat(i), dtype, "SUM", f"allgather_into_tensor_coalesced {dtype} n={n}")
            self.count += 1
            # A list of several sizes (every third rank's empty): chorusAllGatherV.
            counts = self.uneven()
            ins = [make(r, counts[r], dtype, salt=5) for r in range(self.world)]
            outs = [torch.full((counts[r],), 7, dtype=dtype) for r in range(self.world)]
            dist.all_gather(outs, ins[self.rank])
            for r in range(self.world):
                same(outs[r], ins[r], dtype, "SUM", f"all_gather uneven {dtype} from {r} ({counts})")
            self.count += 1

    def uneven(self):
        """Sizes per rank for the lists of several sizes: rank r's 3 + 1000 r, every third rank's 0."""
        return [0 if r % 3 == 1 else 3 + 1000 * r for r in range(self.world)]

    def reduce_scatters(self):
        for dtype in DTYPES:
            for op in OPS:
                if not supported(op, dtype):
                    continue
                n = 37
                # Rank r's list: world chunks; chunk c of every rank reduces into rank c's output.
                lists = [[make(r, n, dtype, op, salt=50 + c) for c in range(self.world)] for r in range(self.world)]
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter(out, lists[self.rank], op=reduce_op(op))
                want = reference([lists[r][self.rank] for r in range(self.world)], op, dtype, self.world)
                same(out, want, dtype, op, f"reduce_scatter {op} {dtype}")
                flat_out = torch.zeros(n, dtype=dtype)
                dist._reduce_scatter_base(flat_out, torch.cat(lists[self.rank]), op=reduce_op(op))
                same(flat_out, want, dtype, op, f"_reduce_scatter_base {op} {dtype}")
                self.count += 1
                # reduce_scatter_tensor in a coalescing manager: reduce_scatter_tensor_coalesced.
                outs = [torch.zeros(m, dtype=dtype) for m in SIZES]
                chunks = {m: [[make(r, m, dtype, op, salt=60 + c) for c in range(self.world)]
                              for r in range(self.world)] for m in SIZES}
                with dist._coalescing_manager():
                    for o, m in zip(outs, SIZES):
                        dist.reduce_scatter_tensor(o, torch.cat(chunks[m][self.rank]), op=reduce_op(op))
                for o, m in zip(outs, SIZES):
                    want = reference([chunks[m][r][self.rank] for r in range(self.world)], op, dtype, self.world)
                    same(o, want, dtype, op, f"reduce_scatter_tensor_coalesced {op} {dtype} n={m}")
                self.count += 1
                # A list of several sizes: chorusReduceScatterV.
                counts = self.uneven()
                lists = [[make(r, counts[c], dtype, op, salt=70 + c) for c in range(self.world)]
                         for r in range(self.world)]
                out = torch.zeros(counts[self.rank], dtype=dtype)
                dist.reduce_scatter(out, lists[self.rank], op=reduce_op(op))
                want = reference([lists[r][self.rank] for r in range(self.world)], op, dtype, self.world)
                same(out, want, dtype, op, f"reduce_scatter uneven {op} {dtype} ({counts})")
                self.count += 1

    def alltoalls(self):
        for dtype in DTYPES:
            # Equal splits: rows of 3 elements, one row per peer.
            ins = [make(r, self.world * 3, dtype, salt=70).reshape(self.world, 3) for r in range(self.world)]
            out = torch.zeros(self.world, 3, dtype=dtype)
            dist.all_to_all_single(out, ins[self.rank])
            want = torch.stack([ins[r][self.rank] for r in range(self.world)])
            same(out, want, dtype, "SUM", f"all_to_all_single {dtype}")
            if dtype in GLOO_DTYPES:
                gout = torch.zeros(self.world, 3, dtype=dtype)
                dist.all_to_all_single(gout, ins[self.rank], group=self.gloo)
                same(out, gout, dtype, "SUM", f"all_to_all_single {dtype} against gloo")
            # Uneven splits: rank r sends (r + p) % 3 rows of 2 to peer p (some of them none).
            def rows(src, dst):
                return (src + dst) % 3

            def block(src, dst):
                return make(src, rows(src, dst) * 2, dtype, salt=80 + dst).reshape(-1, 2)

            send = torch.cat([block(self.rank, p) for p in range(self.world)])
            recv = torch.zeros(sum(rows(p, self.rank) for p in range(self.world)), 2, dtype=dtype)
            dist.all_to_all_single(recv, send, output_split_sizes=[rows(p, self.rank) for p in range(self.world)],
                                   input_split_sizes=[rows(self.rank, p) for p in range(self.world)])
            same(recv, torch.cat([block(p, self.rank) for p in range(self.world)]), dtype, "SUM",
                 f"all_to_all_single uneven {dtype}")
            # Lists of tensors of different sizes.
            outs = [torch.zeros(rows(p, self.rank) * 2, dtype=dtype) for p in range(self.world)]
            dist.all_to_all(outs, [block(self.rank, p).flatten() for p in range(self.world)])
            for p in range(self.world):
                same(outs[p], block(p, self.rank).flatten(), dtype, "SUM", f"all_to_all {dtype} from {p}")
            self.count += 1

    def point_to_point(self):
        for dtype in DTYPES:
            nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
            mine = make(self.rank, 41, dtype, salt=90)
            got = torch.zeros(41, dtype=dtype)
            # Even ranks send first, odd ranks receive first: no cycle of waiting sends.
            if self.rank % 2 == 0:
                dist.send(mine, nxt)
                dist.recv(got, prv)
            else:
                dist.recv(got, prv)
                dist.send(mine, nxt)
            same(got, make(prv, 41, dtype, salt=90), dtype, "SUM", f"send/recv {dtype}")
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got, prv)])
            for r in reqs:
                r.wait()
            same(got, make(prv, 41, dtype, salt=90), dtype, "SUM", f"batch_isend_irecv {dtype}")
            self.count += 1

    def any_source(self):
        # As PyTorch's test_send_recv_any_source: every rank sends every other rank a tensor filled
        # with its rank, twice, and receives world - 1 of them twice without naming the source
        # (dist.recv and irecv without src): each other rank must come exactly twice, with its data.
        reqs = [dist.isend(torch.full((10,), float(self.rank)), p) for p in range(self.world) if p != self.rank]
        counts = {}
        for _ in range(self.world - 1):
            got = torch.zeros(10)
            src = dist.recv(got)
            assert src != self.rank and torch.equal(got, torch.full((10,), float(src))), (src, got)
            counts[src] = counts.get(src, 0) + 1
        for r in reqs:
            r.wait()
        reqs = [dist.isend(torch.full((10,), float(self.rank)), p) for p in range(self.world) if p != self.rank]
        for _ in range(self.world - 1):
            got = torch.zeros(10)
            w = dist.irecv(got)
            w.wait()
            src = w._source_rank()
            assert src != self.rank and torch.equal(got, torch.full((10,), float(src))), (src, got)
            counts[src] = counts.get(src, 0) + 1
        for r in reqs:
            r.wait()
        assert counts == {p: 2 for p in range(self.world) if p != self.rank}, counts
        self.count += 1

    def misuse(self):
        cases = [
            (lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)), "does not support tensors of type Short"),
            (lambda: dist.all_to_all_single(torch.zeros(2 * self.world), torch.ones(2 * self.world, 2)[:, 0]),
             "Tensors must be contiguous"),
            (lambda: dist.all_reduce(torch.ones(4).to_sparse(), op=dist.ReduceOp.MAX),
             "unsupported reduction operation (allreduce of sparse tensors only works with ReduceOp.SUM"),
            (lambda: dist._all_gather_base(torch.zeros(5), torch.zeros(2)), "the output has 5 elements, not world size"),
            (lambda: dist.reduce_scatter_tensor(torch.zeros(2), torch.zeros(5)), "the input has 5 elements, not world size"),
            (lambda: dist.all_gather([torch.zeros(2 if r == self.rank else 3) for r in range(self.world)], torch.zeros(3)),
             "this rank's tensor in the list has 2 elements, its own tensor 3"),
        ]
        for fn, words in cases:
            try:
                fn()
            except (RuntimeError, ValueError) as e:
                assert words in str(e), f"{words!r} not in {e}"
                # As gloo: a view passed to all_to_all_single is a ValueError.
                assert isinstance(e, ValueError) == ("contiguous" in words), f"{type(e).__name__}: {e}"
            else:
                raise AssertionError(f"misuse accepted ({words})")
        dist.barrier()


def run(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("chorus", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    c = Checker(rank, world, gloo)
    for part in ("allreduce", "coalesced", "as_gloo", "several", "sparse", "rooted", "gathers", "reduce_scatters", "alltoalls", "point_to_point",
                 "any_source", "misuse"):
        getattr(c, part)()
        if rank == 0:
            print(f"{part}: ok ({c.count} cases so far)", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    harness.spawn(run, world, world, harness.free_port())
    print(f"PASS: every collective on {world} ranks")
