"""What a training step keeps of the link while the GPU computes, and what synchronizing costs
(docs/method.md, "Overlap, synchronization and the input pipeline").

Three kinds of point: pairs, a transfer (h2d, d2h, peer, all_reduce) beside a bf16 matrix
product (pairs.py); synchronizations (syncs.py); make_tensor, a tensor made on the host and
moved or made on the device (make_tensor.py). Data is checked: copies are compared with their
source, the all_reduce's result with the exact sum before timing, products with a float32
reference, synchronized values with the expected.

all_reduce needs a rank per GPU, so the suite is distributed: each rank runs every point; for
the single-GPU points, ranks other than 0 wait on the host (a gloo barrier) while rank 0
measures, so no idle rank spins a GPU kernel beside them. The all_reduce goes through NCCL
directly (bench.measure.nccl) on a stream of the suite's own, where events can time it; torch.distributed
runs the same kernel on a stream of its own.
"""
from __future__ import annotations

import sys

from bench import ConfigError
from bench.contract import Context, Distribution, Point, Suite
from bench.measure import nccl
from bench.measure.memory import RANK_HOST_BYTES, format_bytes, gpu_free_bytes, host_available_bytes, local_rank_limit
from bench.results import Sample
from bench.suites.overlap.measure import measure_point
from bench.suites.overlap.model import OverlapOp, Settings, largest
from bench.suites.overlap.points import sweep, world_sizes
from bench.suites.overlap.reading import OverlapView
from bench.suites.overlap.state import OverlapState


class Overlap(OverlapView, Suite):
    Settings = Settings
    groups = ("training",)
    order = 40

    def check(self, o: Settings, ctx: Context) -> str | None:
        if ctx.device != "cuda":
            return "needs a CUDA GPU"
        if not ctx.here:
            return None
        big, made = largest(o.sizes), largest(o.make_sizes)
        need = 2 * big + 6 * o.matmul ** 2 + 6 * o.sync_matmul ** 2 + 2 * made  # buffers, A, B and C of each product
        free = gpu_free_bytes(0)
        if need > free:
            raise ConfigError(f"overlap.sizes: the overlap suite needs {format_bytes(need)} on cuda:0 but only "
                              f"{format_bytes(free)} is free; lower overlap.sizes, overlap.matmul or overlap.make_sizes")
        return None

    def rank_limit(self, o: Settings, ctx: Context) -> int:
        """The ranks this machine holds; NCCL and the host memory of that many ranks checked."""
        max_ranks, limited_by = local_rank_limit("overlap")
        ranks = world_sizes(o, ctx, max_ranks)[0]
        if OverlapOp.all_reduce in o.ops and ctx.gpu_count >= 2 and ranks < ctx.gpu_count:
            print(f"xferbench: overlap's all_reduce capped at {limited_by}: {ranks} of the {ctx.gpu_count} GPUs",
                  file=sys.stderr)
        if ranks > 1:
            try:
                nccl.require()
            except nccl.NcclUnavailable as exc:
                raise ConfigError(f"overlap.ops includes all_reduce: {exc}") from None
        big, made = largest(o.sizes), largest(o.make_sizes)
        host = 2 * big * len(o.memory) + 2 * made + ranks * RANK_HOST_BYTES  # rank 0's buffers, every rank
        available = host_available_bytes()
        if available is not None and host > available:
            raise ConfigError(f"overlap.sizes: the overlap suite needs {format_bytes(host)} of host memory but only "
                              f"{format_bytes(available)} is available; lower overlap.sizes")
        return max_ranks

    def points(self, s: Settings, ctx: Context) -> list[Point]:
        return sweep(s, ctx)

    def distribution(self, s: Settings, ctx: Context, max_ranks: int = 0) -> Distribution:
        return Distribution(world_sizes(s, ctx, max_ranks), "nccl", s.timeout_s)

    def start(self, s: Settings, ctx: Context) -> OverlapState:
        return OverlapState(s, ctx)

    def finish(self, state: OverlapState) -> None:
        if state.comm is not None:
            state.comm.close()   # collective over the ranks: the driver calls it on every rank at once

    def measure(self, point: Point, s: Settings, ctx: Context, state: OverlapState) -> list[Sample]:
        return measure_point(point, s, ctx, state)
