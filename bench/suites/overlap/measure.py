"""One point on this rank: all_reduce's pairs on every rank; the other points on rank 0, while
the other ranks wait on the host."""
from __future__ import annotations

from bench import lazy
from bench.contract import Context, Point
from bench.measure.consensus import Consensus
from bench.results import Sample
from bench.suites.overlap.make_tensor import make_point
from bench.suites.overlap.model import Settings
from bench.suites.overlap.pairs import all_reduce_point, copy_transfer, measure_pair
from bench.suites.overlap.state import OverlapState
from bench.suites.overlap.syncs import sync_point

torch = lazy.module("torch")


def measure_point(point: Point, s: Settings, ctx: Context, state: OverlapState) -> list[Sample]:
    state.host_barrier()
    if point.op == "all_reduce":
        return all_reduce_point(point, ctx, state)
    if ctx.rank != 0:
        return []
    try:
        if point.op == "peer" and ctx.gpu_count < 2:
            return [point.skipped(f"needs 2 or more GPUs, found {ctx.gpu_count}")]
        if point.op.startswith("sync_"):
            return sync_point(point, s, ctx, state)
        if point.op == "make_tensor":
            return make_point(point, ctx)
        return measure_pair(point, ctx, copy_transfer(point, state), state.product(point.params.matmul),
                            Consensus(), state.streams())
    except torch.cuda.OutOfMemoryError as exc:  # rank 0 alone measures here: it alone skips
        torch.cuda.empty_cache()
        return [point.skipped(f"out of memory: {str(exc).splitlines()[0]}")]
