"""The points of a run of the overlap suite, and its world: one rank per GPU when all_reduce is
measured, else rank 0 alone."""
from __future__ import annotations

from bench.contract import Context, Point
from bench.sizes import parse_size
from bench.suites.overlap.model import SYNCS, OverlapOp, Product, Settings
from bench.suites.overlap.reading import OverlapView


def world_sizes(s: Settings, ctx: Context, max_ranks: int = 0) -> list[int]:
    """One rank per GPU when all_reduce is asked for on 2 or more GPUs (no more than `max_ranks`,
    rank_limit: this machine's cores and host memory); else rank 0 alone."""
    ranks = min(ctx.gpu_count, max_ranks or ctx.gpu_count)
    return [ranks if OverlapOp.all_reduce in s.ops and ranks >= 2 else 1]


def sweep(s: Settings, ctx: Context) -> list[Point]:
    """Pairs by size, the synchronizations, make_tensor; all_reduce last, so that every rank
    leaves the suite together after it."""
    ops = {str(op) for op in s.ops}
    mm, product = f"mm{s.matmul}", Product(s.matmul)
    out = []
    for size in (parse_size(text) for text in s.sizes):
        for op in ("h2d", "d2h"):
            if op in ops:
                src, dst = ("host", "cuda:0") if op == "h2d" else ("cuda:0", "host")
                out += [Point(OverlapView.name, op, size, memory=str(m), mode=mm, backend="cuda", src=src, dst=dst,
                                params=product)
                        for m in s.memory]
        if "peer" in ops:
            out.append(Point(OverlapView.name, "peer", size, memory="device", mode=mm, backend="cuda", src="cuda:0",
                             dst="cuda:1", params=product))
    if "sync" in ops:
        out += [Point(OverlapView.name, f"sync_{kind}", 0, mode=state, backend="cuda", src="cuda:0", dst="cuda:0")
                for kind in SYNCS for state in ("idle", "busy")]
    if "make_tensor" in ops:
        out += [Point(OverlapView.name, "make_tensor", parse_size(size), memory=m, backend="cuda",
                      src="cuda:0" if m == "device" else "host", dst="cuda:0")
                for size in s.make_sizes for m in [*map(str, s.memory), "device"]]
    if "all_reduce" in ops:
        out += [Point(OverlapView.name, "all_reduce", max(2, parse_size(text) // 2 * 2), memory="device", mode=mm,
                      backend="nccl", world_size=ctx.world_size, nnodes=ctx.nnodes, dtype="bfloat16",
                      params=product)
                for text in s.sizes]
    return out
