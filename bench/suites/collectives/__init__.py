"""Collectives through torch.distributed (api 'torch') and through NCCL called directly (api
'nccl'): NCCL on GPUs (one rank each), gloo between CPU processes (torch only).

Both apis run the same ops on the same buffers, sizes and checks, so torch's time over NCCL's
is what a PyTorch job pays over the library's own cost. The nccl api uses the libnccl.so.2 that
torch loaded (bench.measure.nccl) with a communicator of its own, on torch's current stream, so
graph capture works the same way for both.

Sizes, algbw and busbw follow nccl-tests (docs/method.md, "Collectives"): S is the op's total
message size, busbw = algbw x factor, t the slowest rank's time per op. Each point is checked
against the exact answer before it is timed (measure.py).
"""
from __future__ import annotations

from bench import ConfigError
from bench.config.settings import SizeRange
from bench.contract import Context, Distribution, Overhead, Point, Suite
from bench.links import Speeds
from bench.measure import nccl
from bench.measure.consensus import Consensus
from bench.measure.memory import local_rank_limit
from bench.results import Sample
from bench.suites.collectives.measure import CollectivesState, measure_point, rank_device
from bench.suites.collectives.points import apis, backend, check_worlds, sweep, transport_env, world_sizes
from bench.suites.collectives.reading import CollectivesView
from bench.suites.collectives.settings import OPS, Api, Settings


class Collectives(CollectivesView, Suite):
    Settings = Settings
    sizes = SizeRange("8B", "4GiB", ["8B:x8", "64KiB:x4", "1MiB:x2", "16MiB:x4"])
    groups = ("links",)
    order = 30
    # On GPUs: the four 2x H200 runs of 2026-11-23's timing core (196 to 364 points, wall less
    # replayed timing 9-15 s), with the start the profile showed (5.7 s to spawn the ranks, start
    # NCCL and tear down): 6 s a world, 9 ms a point, 10 ms more a graph point (two captures),
    # 0.066 s a GB (buffers and checks). CPU: three gloo runs on the project's 2-core machine, idle
    # (results/noise/cpu-idle: 12 to 91 points); a fourth, held out, ran 3.7 s against 5 s planned.
    overhead = {"cuda": Overhead(0.009, 0.066e-9, 0.010, 6.0, 100e-6), "cpu": Overhead(0.06, 2.5e-9, 0.0, 1.5, 1e-3)}

    def check(self, s: Settings, ctx: Context) -> str | None:
        if not apis(s, ctx):
            raise ConfigError("collectives.api=[nccl] calls NCCL, which needs CUDA GPUs; without them use "
                              "collectives.api=[torch] (gloo)")
        if Api.nccl in s.api and ctx.device == "cuda" and ctx.here:
            try:
                nccl.require()
            except nccl.NcclUnavailable as exc:
                raise ConfigError(f"collectives.api includes nccl: {exc}") from None
        if s.transport == "socket" and ctx.device != "cuda":
            raise ConfigError("collectives.transport=socket forces NCCL's socket path and needs GPUs; "
                              "without them the run already uses gloo over local sockets")
        if ctx.launcher:
            return None
        if not s.nproc and ctx.device == "cuda" and ctx.gpu_count < 2:
            return f"needs 2 or more GPUs, found {ctx.gpu_count} (collectives.nproc=1 forces a 1-rank run)"
        if not ctx.here:   # planned for another machine: its GPUs alone cap the worlds
            check_worlds(s, ctx, 0, "")
        return None

    def rank_limit(self, s: Settings, ctx: Context) -> int:
        if ctx.launcher:
            return 0
        # Buffers of a rank in host memory: on a CPU about 3 x sizes.max; on GPUs they are on the GPU.
        buffers = 0 if ctx.device == "cuda" else 3 * max(ctx.sizes)
        max_ranks, limited_by = local_rank_limit("collectives", buffers, "3 x sizes.max" if buffers else "",
                                                 s.oversubscribe)
        check_worlds(s, ctx, max_ranks, limited_by)
        return max_ranks

    def points(self, s: Settings, ctx: Context) -> list[Point]:
        return sweep(s, ctx)

    def distribution(self, s: Settings, ctx: Context, max_ranks: int = 0) -> Distribution:
        return Distribution(world_sizes(s, ctx, max_ranks), backend(ctx), s.timeout_s,
                            transport_env(s.transport, ctx.nnodes))

    def start(self, s: Settings, ctx: Context) -> CollectivesState:
        return CollectivesState(ctx, Consensus(rank_device(ctx)))

    def finish(self, state: CollectivesState) -> None:
        if state.comm is not None:
            state.comm.close()   # collective over the ranks: the driver calls it on every rank at once

    def measure(self, point: Point, s: Settings, ctx: Context, state: CollectivesState) -> list[Sample]:
        return measure_point(point, ctx, state)

    def op_time(self, point: Point, speeds: Speeds) -> float:
        size, graph = point.size_bytes, point.launch == "graph"
        n = max(point.world_size, 1)
        factor = max(OPS[point.op].bus_factor(n), 1 / n)
        if point.backend == "gloo":
            return 0.5e-3 + size * factor / 0.7e9
        nvlink = speeds.nvlink()
        busbw = 3.0 if point.mode == "socket" else (0.75 * nvlink if nvlink else 0.5 * 0.87 * speeds.pcie())
        return (20e-6 if graph else 40e-6) + size * factor / (busbw * 1e9)
