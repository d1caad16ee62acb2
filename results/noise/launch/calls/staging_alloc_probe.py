"""Issue 41, item 1: is the stray of held staged copies both ways at 64 KiB (one process of five read
~10% high on 2x H200 x2ai) a property of the process's staging allocation? Within ONE process, the
suite's own measure_pair times the point through ALLOCS fresh staging rings (each a new pinned
allocation, some padded so they start at other offsets), twice each, interleaved. Prints per
allocation: the ring's address (mod 2 MiB), medians of the two passes (µs per copy), per-direction parts.
Usage: python3 staging_alloc_probe.py LABEL"""
import statistics, sys, time
import torch
from bench.contract import Context, Point
from bench.measure.timing import TimingConfig
from bench.suites.p2p.buffers import P2PState
from bench.suites.p2p.measure import measure_pair
from bench.suites.p2p.settings import HELD_STAGING

ALLOCS, PASSES = 8, 2
label = sys.argv[1]
ctx = Context(device="cuda", timing=TimingConfig(), sizes=[4096, 65536], gpu_count=2, launches=("held",),
              held_max_bytes=65536)
state = P2PState(ctx)
keep = []


def fresh(k: int) -> None:
    """New rings for both directions: pinned allocations of varied size, so the caching host
    allocator hands out new blocks (kept alive so none is reused)."""
    for d in ("fwd", "rev"):
        pad = (k % 4) * 4096 + (k // 4) * 65536
        blob = torch.empty(4 * 65536 + pad + (k + 1) * 512 * 1024, dtype=torch.uint8, pin_memory=True)
        keep.append(blob)
        state._buffers[(f"ring_{d}", None)] = blob[pad:pad + 4 * 65536]


def point(op: str, size: int) -> Point:
    return Point("p2p", op, size, memory="device", mode="staged", backend="cuda", src="cuda:0", dst="cuda:1",
                 launch="held", engine="ce", params=HELD_STAGING)


rings = []
for k in range(ALLOCS):
    fresh(k)
    rings.append({d: state._buffers[(f"ring_{d}", None)] for d in ("fwd", "rev")})
res = {k: [] for k in range(ALLOCS)}
for p in range(PASSES):
    for k in range(ALLOCS):
        for d in ("fwd", "rev"):
            state._buffers[(f"ring_{d}", None)] = rings[k][d]
        rows = measure_pair(point("bidir", 65536), ctx, state)
        us = statistics.median(r.time_s * 1e6 for r in rows if r.part == "total")
        uni = measure_pair(point("uni", 65536), ctx, state)
        uus = statistics.median(r.time_s * 1e6 for r in uni if r.part == "total")
        res[k].append((us, uus, all(r.verified for r in rows + uni)))
for k in range(ALLOCS):
    a = {d: rings[k][d].data_ptr() for d in ("fwd", "rev")}
    print(f"{label} alloc {k}: fwd {a['fwd']:#x} (mod 2M {a['fwd'] % (2 << 20):#x}) rev {a['rev']:#x} "
          f"(mod 2M {a['rev'] % (2 << 20):#x}) bidir64K " + " ".join(f"{b:.2f}" for b, _, _ in res[k])
          + " | uni64K " + " ".join(f"{u:.2f}" for _, u, _ in res[k]) + f" verified {all(v for _, _, v in res[k])}",
          flush=True)
print(f"{label} flags: " + " ".join(f"{d} {state.flags(d)._words.data_ptr():#x}" for d in ("fwd", "rev")))
b = [statistics.median(x[0] for x in res[k]) for k in range(ALLOCS)]
print(f"{label} bidir64K over allocations: {min(b):.2f}-{max(b):.2f} (spread {max(b)/min(b)-1:.1%})")
