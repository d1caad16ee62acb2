"""Which part of a process sets its held rooted-collective state? (issue 41, item 1)

Two ranks, one per GPU, each process fresh. Per rank, held behind a 20 ms spin (256 ops, median of
five trials, a barrier before each): empty kernels (torch.cuda._sleep(0): the GPU's own cost of one
kernel after another), 8 B host-to-device copies from pinned memory (the host memory path), then
on three communicators (the default and two new groups, each made after a different padding of
device memory): broadcast 8 B from root 0 and from root 1, reduce 8 B to root 0 and to root 1,
all_reduce 8 B. A process whose broadcast reads slow while its empty kernels and h2d copies do not
points at NCCL's or the link's state; a root that flips the state points at one direction.
Usage: python3 split_probe.py LABEL
"""
import os
import statistics
import sys

import torch
import torch.distributed as dist

HOLD_S, OPS, TRIALS = 20e-3, 256, 5


def cycles(seconds: float) -> int:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); torch.cuda._sleep(10_000_000); b.record(); b.synchronize()
    return int(seconds * 10_000_000 / (a.elapsed_time(b) / 1e3))


def held(fn, cyc, before) -> float:
    before()
    s = torch.cuda.current_stream()
    torch.cuda._sleep(cyc)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(s)
    for _ in range(OPS):
        fn()
    gave = a.query()
    b.record(s)
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / OPS if not gave else float("nan")


def figure(fn, cyc, before) -> float:
    fn(); torch.cuda.synchronize()
    held(fn, cyc, before)
    return statistics.median(held(fn, cyc, before) for _ in range(TRIALS))


def rank_main(rank: int, label: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29519")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    cyc = cycles(HOLD_S)
    bar = lambda: (torch.cuda.synchronize(), dist.barrier(device_ids=[rank]), torch.cuda.synchronize())
    host = torch.ones(2, pin_memory=True)
    dev = torch.empty(2, device="cuda")
    line = [f"empty={figure(lambda: torch.cuda._sleep(0), cyc, bar):.3f}",
            f"h2d8={figure(lambda: dev.copy_(host, non_blocking=True), cyc, bar):.3f}"]
    pads = []
    for k, g in enumerate([None, "new", "new"]):
        pads.append(torch.empty((1 + 5 * k) << 20, dtype=torch.uint8, device="cuda"))
        group = None if g is None else dist.new_group([0, 1])
        t = torch.ones(2, device="cuda")
        ops = {"b0": lambda: dist.broadcast(t, 0, group=group), "b1": lambda: dist.broadcast(t, 1, group=group),
               "r0": lambda: dist.reduce(t, 0, group=group), "r1": lambda: dist.reduce(t, 1, group=group),
               "ar": lambda: dist.all_reduce(t, group=group)}
        line.append(f"g{k}:" + ",".join(f"{n}={figure(fn, cyc, bar):.3f}" for n, fn in ops.items()))
    print(f"{label} rank{rank} " + " ".join(line), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.spawn(rank_main, args=(sys.argv[1],), nprocs=2)
