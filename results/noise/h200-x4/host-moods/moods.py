"""Device experiment (issue 31): what makes eager small-op times come in moods, and what holds them.

Windows of ~4 ms each: a peer 4 KiB copy, a pinned h2d 4 KiB copy, a tiny kernel, each timed as
the harness does (events around N back-to-back ops), and a pure-Python pace probe, with the CPU
the thread ran on. Conditions, 12 s each: free, with the NVML sampler, pinned to one CPU, pinned
with the sampler. Writes JSON lines to argv[1].
"""
import json
import os
import sys
import time

import torch

from bench.driver.telemetry import Sampler

out = open(sys.argv[1], "w")
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 12.0
n_gpu = torch.cuda.device_count()
peer = 1 if n_gpu > 1 else 0
src = torch.ones(1024, device="cuda:0")
dst = torch.empty(1024, device=f"cuda:{peer}")
host = torch.ones(1024).pin_memory()
dev = torch.empty(1024, device="cuda:0")
tiny = torch.zeros(1, device="cuda:0")


def cpu_now() -> int:
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def timed(op, n):
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for _ in range(n):
        op()
    host_s = time.perf_counter() - t0
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3 / n, host_s / n


ops = {
    "peer": lambda: dst.copy_(src, non_blocking=True),
    "h2d": lambda: dev.copy_(host, non_blocking=True),
    "kernel": lambda: tiny.add_(1),
}


def pace():
    t0 = time.perf_counter()
    x = 0
    for i in range(20000):
        x += i
    return time.perf_counter() - t0


for op in ops.values():
    timed(op, 50)
counts = {name: max(10, int(0.004 / timed(op, 200)[0])) for name, op in ops.items()}
print("counts", counts, flush=True)


def condition(name, sampler, cpu):
    before = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    s = Sampler().start() if sampler else None
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        row = {"cond": name, "t": time.time(), "cpu": cpu_now(), "pace": pace()}
        for op_name, op in ops.items():
            row[op_name], row[op_name + "_host"] = timed(op, counts[op_name])
        out.write(json.dumps(row) + "\n")
    out.flush()
    if s is not None:
        s.stop()
    os.sched_setaffinity(0, before)


first = cpu_now()
for name, sampler, cpu in [("free", False, None), ("sampler", True, None), ("pinned", False, first),
                           ("pinned+sampler", True, first), ("free-again", False, None)]:
    condition(name, sampler, cpu)
    print("done", name, flush=True)
