"""Calls torch's own distributed tests exercise beyond the basic collectives, on the chorus backend
(mp.spawn, 2 and 3 ranks):

- batch_isend_irecv with every pair of ranks exchanging both ways (torch brackets it with
  startCoalescing/endCoalescing: one Chorus group), and plain isend/irecv both ways between two
  ranks, each element checked;
- all_gather_coalesced with inputs of different shapes, against each rank's inputs;
- the process group's monitored_barrier: passes when every rank comes; with one rank absent,
  rank 0 raises naming it ("Rank 1 failed to pass monitoredBarrier") within the timeout, and
  with no time at all says that it timed out itself ("Rank 0 timed out in monitoredBarrier");
- a barrier whose peer never comes fails with a message that PyTorch's tests match with
  " (Timed out|closed|timeout) ".

Usage: python3 coalescing_and_barriers.py
"""
import os
import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401
import harness


def init(rank, world, port, timeout=30):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("chorus", rank=rank, world_size=world, timeout=timedelta(seconds=timeout))


def p2p_and_coalesced(rank, world, port):
    init(rank, world, port)
    # Every pair both ways in one batch.
    ops, got = [], {}
    for peer in range(world):
        if peer == rank:
            continue
        send = torch.arange(10, dtype=torch.float32) + 100 * rank + peer
        got[peer] = torch.full((10,), -1.0)
        ops.append(dist.P2POp(dist.isend, send, peer))
        ops.append(dist.P2POp(dist.irecv, got[peer], peer))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    for peer, t in got.items():
        want = torch.arange(10, dtype=torch.float32) + 100 * peer + rank
        if not torch.equal(t, want):
            raise AssertionError(f"batch_isend_irecv from {peer}: {t.tolist()}, want {want.tolist()}")
    # isend then irecv between ranks 0 and 1, outside any batch: separate calls on one stream.
    if rank < 2:
        peer = 1 - rank
        out = torch.full((1000,), float(rank + 1))
        into = torch.zeros(1000)
        s = dist.isend(out, peer)
        r = dist.irecv(into, peer)
        s.wait()
        r.wait()
        if not torch.equal(into, torch.full((1000,), float(peer + 1))):
            raise AssertionError(f"isend/irecv both ways: got {into[:4].tolist()}")
    # all_gather_coalesced: inputs of three shapes.
    inputs = [torch.full((2, 2), float(rank)), torch.tensor([rank * 10.0]), torch.arange(3.0) + rank]
    outputs = [[torch.full_like(t, -1.0) for t in inputs] for _ in range(world)]
    dist.all_gather_coalesced(outputs, inputs)
    for r in range(world):
        want = [torch.full((2, 2), float(r)), torch.tensor([r * 10.0]), torch.arange(3.0) + r]
        for i in range(3):
            if not torch.equal(outputs[r][i], want[i]):
                raise AssertionError(f"all_gather_coalesced [{r}][{i}]: {outputs[r][i].tolist()}")
    # monitored_barrier with everyone.
    pg = dist.distributed_c10d._get_default_group()
    pg.monitored_barrier(timedelta(seconds=10))
    dist.barrier()
    if rank == 0:
        print(f"world {world}: batch_isend_irecv, isend/irecv, all_gather_coalesced, monitored_barrier pass",
              flush=True)
    dist.destroy_process_group()


def absent_rank(rank, world, port):
    init(rank, world, port, timeout=3)
    pg = dist.distributed_c10d._get_default_group()
    dist.barrier()
    if rank == 1:
        time.sleep(12)  # misses the monitored barrier and the barrier
        os._exit(0)
    took, msg = harness.expect_failure(lambda: pg.monitored_barrier(timedelta(seconds=2), wait_all_ranks=True),
                                       "monitored_barrier without rank 1")
    # The 2 s timeout, not rank 1's exit at 12 s, ends it (a loaded machine adds seconds).
    if "Rank 1 failed to pass monitoredBarrier" not in msg or not 1.5 <= took <= 10:
        raise AssertionError(f"monitored_barrier: {msg} after {took:.1f} s")
    # No time at all: rank 0 itself timed out before any rank's turn (gloo's text, which PyTorch's
    # test_monitored_barrier_gloo_rank_0_timeout matches).
    _, msg = harness.expect_failure(lambda: pg.monitored_barrier(timedelta(seconds=0)), "monitored_barrier in 0 s")
    if "Rank 0 timed out in monitoredBarrier" not in msg or "No ranks successfully processed" not in msg:
        raise AssertionError(f"monitored_barrier in 0 s: {msg}")
    took, msg = harness.expect_failure(dist.barrier, "barrier without rank 1")
    if not re.search(" (Timed out|closed|timeout) ", msg):
        raise AssertionError(f"the barrier's timeout does not read as one to PyTorch's tests: {msg}")
    os._exit(0)  # the group is broken; rank 1 is gone


if __name__ == "__main__":
    # A fresh port for each job: each uses its port (the store) and the next (Chorus's root).
    harness.spawn(p2p_and_coalesced, 2, 2, harness.free_port())
    harness.spawn(p2p_and_coalesced, 3, 3, harness.free_port())
    harness.spawn(absent_rank, 2, 2, harness.free_port())
    print("PASS: coalescing, all_gather_coalesced, monitored_barrier and timeouts")
