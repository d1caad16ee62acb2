"""Does the stream a held collective runs on set its pace? (issue 41, item 1)

One process per GPU, fresh each call. Every rank holds 8 B broadcast, reduce and all_reduce and a
4 KiB broadcast (torch.distributed, async_op=False: torch >= 2.8 launches them on the current
stream) behind the suite's own shared start word (bench.measure.release) and HeldClock, on the
default stream and on each of eight new streams, five rounds over the streams; a trial is 128
ops, its time the slowest rank's. Prints, per op, the default stream's median, each new stream's
median, and the median over all the new streams' trials (what a ring of streams would report).
Usage: python3 stream_probe.py LABEL
"""
import os
import statistics
import sys

import torch
import torch.distributed as dist

from bench.measure.latch import HeldClock
from bench.measure.release import SharedRelease

OPS, ROUNDS, STREAMS = 128, 5, 8


def rank_main(rank: int, world: int, label: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29521")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    cpu = dist.new_group(backend="gloo")

    def agree(values):
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, dist.ReduceOp.MAX, group=cpu)
        return t.tolist()

    release = SharedRelease.join(rank, world)
    clock = HeldClock(lambda: dist.barrier(group=cpu), agree, release)
    small, big = torch.ones(2, device="cuda"), torch.ones(1024, device="cuda")
    ops = {"bcast8": lambda: dist.broadcast(small, 0), "reduce8": lambda: dist.reduce(small, 0),
           "allred8": lambda: dist.all_reduce(small), "bcast4K": lambda: dist.broadcast(big, 0)}
    streams = [("default", torch.cuda.current_stream())] + [(f"s{k}", torch.cuda.Stream()) for k in range(STREAMS)]
    for fn in ops.values():
        fn()
    torch.cuda.synchronize()
    times = {(name, s): [] for name in ops for s, _ in streams}
    for _ in range(ROUNDS + 1):   # the first round warms each stream up and is dropped
        for s, stream in streams:
            with torch.cuda.stream(stream):
                for name, fn in ops.items():
                    clock.start()
                    for _ in range(OPS):
                        fn()
                    t, _ = clock.stop()
                    times[name, s].append(agree([t])[0] / OPS * 1e6)
    if rank == 0:
        for name in ops:
            per = {s: statistics.median(times[name, s][1:]) for s, _ in streams}
            ring = statistics.median(v for s, _ in streams[1:] for v in times[name, s][1:])
            print(f"{label} {name} default={per['default']:.3f} ring={ring:.3f} streams="
                  + ",".join(f"{per[s]:.3f}" for s, _ in streams[1:]), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    n = torch.cuda.device_count()
    torch.multiprocessing.spawn(rank_main, args=(n, sys.argv[1]), nprocs=n)
