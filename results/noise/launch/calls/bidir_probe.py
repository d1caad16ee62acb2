"""Held bidirectional peer copies (4 KiB, cuda:0 <-> cuda:1), µs per copy per leg, several ways.
usage: python bidir_probe.py LABEL"""
import statistics as st
import sys
import time

import torch

from bench.measure import cudart, kernels
from bench.measure.latch import sleep_cycles

label = sys.argv[1]
I, J, NB, N, TRIALS = 0, 1, 4096, 180, 10
bufs = {}
for a, b in ((I, J), (J, I)):
    src = torch.randint(0, 255, (NB,), dtype=torch.uint8, device=f"cuda:{a}")
    dst = torch.empty(NB, dtype=torch.uint8, device=f"cuda:{b}")
    kernels.ce_copy(dst, src)
    bufs[(a, b)] = (dst, src)
rings = {g: [torch.cuda.Stream(device=g) for _ in range(8)] for g in (I, J)}
with torch.cuda.device(J):
    cyc_j = sleep_cycles(1e-3)
with torch.cuda.device(I):
    cyc_i = sleep_cycles(1e-3)
torch.cuda.synchronize(I); torch.cuda.synchronize(J)


def ev():
    return torch.cuda.Event(enable_timing=True)


def trial(way, k, hold_ms=80.0):
    legs = {"fwd": (I, J), "rev": (J, I)}
    if way == "uni-fwd":
        legs = {"fwd": (I, J)}
    if way == "uni-rev":
        legs = {"rev": (J, I)}
    t0 = time.perf_counter()
    streams = {name: rings[a][k % 8] for name, (a, b) in legs.items()}
    begins, ends = {}, {}
    with torch.cuda.device(I):
        cur = torch.cuda.current_stream()
        latches = []
        if way.startswith("twolatch"):
            for name, (a, b) in legs.items():
                with torch.cuda.device(a), torch.cuda.stream(streams[name]):
                    torch.cuda._sleep(int((cyc_i if a == I else cyc_j) * hold_ms))
                    latches.append(ev()); latches[-1].record()
            start = None
        else:
            torch.cuda._sleep(int(cyc_i * hold_ms))
            start = ev(); start.record(cur)
        for name, s in streams.items():
            if start is not None:
                s.wait_event(start)
            begins[name] = ev(); begins[name].record(s)
        order = [(name, c) for c in (1, N - 1) for name in legs]
        if way == "sequential":
            order = [(name, N) for name in legs]
        for name, count in order:
            a, b = legs[name]
            dst, src = bufs[(a, b)]
            for _ in range(count):
                if way == "curdev":
                    with torch.cuda.device(a), torch.cuda.stream(streams[name]):
                        cudart.copy(dst, src)
                else:
                    with torch.cuda.stream(streams[name]):
                        cudart.copy(dst, src)
        for name, s in streams.items():
            ends[name] = ev(); ends[name].record(s)
        enq_ms = (time.perf_counter() - t0) * 1e3
        gave_way = any(e.query() for e in ([start] if start is not None else latches))
        if way != "twolatch":
            for name, s in streams.items():
                cur.wait_stream(s)
    for e in ends.values():
        e.synchronize()
    return {name: begins[name].elapsed_time(ends[name]) * 1e3 / N for name in legs}, gave_way, enq_ms


for way in ("suite", "uni-fwd", "uni-rev", "twolatch", "twolatch+join", "sequential", "suite"):
    per = {}
    late = 0
    enq = []
    t0 = time.perf_counter()
    for k in range(TRIALS):
        r, g, e = trial(way, k)
        late += bool(g)
        enq.append(e)
        for name, us in r.items():
            per.setdefault(name, []).append(us)
    s = "  ".join(f"{name} med {st.median(v):5.2f} min {min(v):5.2f} max {max(v):5.2f}" for name, v in per.items())
    print(f"{label:6s} {way:10s} {s}  gave_way {late}/{TRIALS} enqueue ms med {st.median(enq):.2f} ({time.perf_counter() - t0:.2f} s)", flush=True)
