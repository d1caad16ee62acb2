"""What sets a held small op's figure apart between processes, when its trials within one agree to 1%.

copies: held 4 KiB d2d / 16 KiB h2d / 16 KiB d2h (256 ops behind a 20 ms sleep), per stream (the
  default stream, 8 pool streams, 2 high-priority ones) and per buffer (a slice of 1 GiB, or its own
  64 KiB); five trials each, median µs per op.
staged: GPU 0 -> pinned host -> GPU 1, 4 KiB held: one staging buffer with both hand-offs per copy
  (the suite today), or one slot per copy (only the forward hand-off); per-trial µs per copy.
nccl (two ranks): broadcast 8 B held, 256 ops, on four process groups (each its own communicator
  and stream); five trials each.
Usage: python3 state_probe.py copies|staged|nccl
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


def held(fn, stream, cyc, ops=OPS, before=lambda: None) -> float:
    before()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(cyc)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(ops):
            fn()
        gave = a.query()
        b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / ops if not gave else float("nan")


def copies() -> None:
    torch.cuda.set_device(0)
    cyc = cycles(HOLD_S)
    big_src = torch.randint(0, 255, (1 << 30,), dtype=torch.uint8, device="cuda")
    big_dst = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    own_src = torch.randint(0, 255, (65536,), dtype=torch.uint8, device="cuda")
    own_dst = torch.empty(65536, dtype=torch.uint8, device="cuda")
    host = torch.empty(65536, dtype=torch.uint8, pin_memory=True)
    streams = [("default", torch.cuda.default_stream())] + [(f"pool{k}", torch.cuda.Stream()) for k in range(8)] \
        + [(f"high{k}", torch.cuda.Stream(priority=-1)) for k in range(2)]
    ops = {
        "d2d4k-big": lambda: big_dst[:4096].copy_(big_src[:4096], non_blocking=True),
        "d2d4k-own": lambda: own_dst[:4096].copy_(own_src[:4096], non_blocking=True),
        "h2d16k": lambda: own_dst[:16384].copy_(host[:16384], non_blocking=True),
        "d2h16k": lambda: host[:16384].copy_(own_src[:16384], non_blocking=True),
    }
    for name, fn in ops.items():
        line = []
        for sname, s in streams:
            held(fn, s, cyc, 16)
            line.append(statistics.median(held(fn, s, cyc) for _ in range(TRIALS)))
        print(f"{name:10s} " + " ".join(f"{sn}={v:.3f}" for (sn, _), v in zip(streams, line))
              + f"  | min {min(line):.3f} median {statistics.median(line):.3f} max {max(line):.3f}", flush=True)


def staged() -> None:
    nb, ops = 4096, 64
    src = torch.randint(0, 255, (nb,), dtype=torch.uint8, device="cuda:0")
    dst = torch.empty(nb, dtype=torch.uint8, device="cuda:1")
    slots = torch.empty(ops * nb, dtype=torch.uint8, pin_memory=True)
    s0, s1 = torch.cuda.Stream(0), torch.cuda.Stream(1)
    with torch.cuda.device(0):
        cyc = cycles(HOLD_S)
    for way in ("serial", "slots"):
        res = []
        for _ in range(20):
            with torch.cuda.device(0):
                cur = torch.cuda.current_stream()
                torch.cuda._sleep(cyc)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(cur); s0.wait_event(a)
                for k in range(ops):
                    stg = slots[:nb] if way == "serial" else slots[k * nb:(k + 1) * nb]
                    with torch.cuda.stream(s0):
                        stg.copy_(src, non_blocking=True)
                    s1.wait_stream(s0)
                    with torch.cuda.stream(s1):
                        dst.copy_(stg, non_blocking=True)
                    if way == "serial":
                        s0.wait_stream(s1)
                gave = a.query()
                s0.wait_stream(s1); cur.wait_stream(s0); b.record(cur); b.synchronize()
                res.append(a.elapsed_time(b) * 1e3 / ops if not gave else float("nan"))
        torch.cuda.synchronize(0); torch.cuda.synchronize(1)
        assert torch.equal(dst.cpu(), src.cpu())
        print(f"staged {way:6s} median {statistics.median(res):6.2f}  " + " ".join(f"{x:.1f}" for x in res), flush=True)


def nccl_rank(rank: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    cyc = cycles(HOLD_S)
    groups = [None] + [dist.new_group([0, 1]) for _ in range(3)]
    t = torch.ones(2, device="cuda")
    line = []
    for g in groups:
        fn = lambda: dist.broadcast(t, 0, group=g)
        fn(); torch.cuda.synchronize()
        bar = lambda: (torch.cuda.synchronize(), dist.barrier(device_ids=[rank]), torch.cuda.synchronize())
        held(fn, torch.cuda.current_stream(), cyc, 16, bar)
        line.append(statistics.median(held(fn, torch.cuda.current_stream(), cyc, before=bar) for _ in range(TRIALS)))
    if rank == 0:
        print("nccl bcast8 per group " + " ".join(f"{v:.3f}" for v in line), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "nccl":
        torch.multiprocessing.spawn(nccl_rank, nprocs=2)
    else:
        {"copies": copies, "staged": staged}[what]()
