"""Host<->device and device<->device copies, one GPU at a time or every GPU at once, and link latency.

Ops: h2d, d2h, bidir (both at once on two streams), d2d (within one GPU: the HBM ceiling where
source and destination do not fit in L2 together; rows that fit say 'cache-resident' in their
note: bench.analysis.cache), and latency (one GPU's dependent 8-byte loads around a 2 MiB ring
in pinned host memory, the pointer chase of bench.measure.chase; time_s is seconds per access
and there is no bandwidth). Host memory is pinned or pageable; copies go through the copy
engines (engine 'ce', Tensor.copy_) or a Triton copy kernel on the GPU's SMs (engine 'sm',
pinned memory only).

Which GPUs (copy.gpus): the first GPU selected gets the full sweep (every op, memory, launch and
size). Whole-machine traffic -- each other selected GPU alone, and every GPU at once ('all') --
is pinned h2d, d2h and bidir at a few sizes (machine_sizes()), and so are SM copies, of the first
GPU alone and of every GPU at once. 'all' gives one row per GPU (part cuda:i) plus the total;
src/dst name it 'all'; each GPU copies on its own streams and buffers, started together
(bench.measure.lanes).

Host buffers are placed by copy.numa (bench.measure.numa): on the GPU's NUMA node (local), the
farthest node (remote) or wherever first touch puts them (none), and the copying thread runs on
that node's CPUs; each row's note says where. Buffers are allocated once at the largest size and
sliced per point; sources hold random bytes (seeded per GPU), destinations are zeroed before each
point and compared with the source after the timed copies. Without a GPU the suite measures
host-to-host copies (op 'h2h') so the whole pipeline still runs.

The folder: settings.py (the config section), plan.py (the points), buffers.py and measure.py
(measuring them), reading.py (the reading face: what the rows mean, the tables).
"""
from __future__ import annotations

import sys
from collections import defaultdict

from bench.config.settings import Engine, SizeRange
from bench.contract import Context, Overhead, Point, Suite
from bench.links import Speeds
from bench.measure import kernels
from bench.measure.memory import check_fits, check_host_fits
from bench.points import ALL
from bench.results import Sample
from bench.suites.copy.buffers import CopyState
from bench.suites.copy.measure import measure_alone, measure_h2h, measure_latency, measure_together
from bench.suites.copy.points import cpu_dropped, gpus_of, host_plan_for, select_gpus, sweep
from bench.suites.copy.reading import CopyView
from bench.suites.copy.settings import CopyOp, Settings


class Copy(CopyView, Suite):
    Settings = Settings
    sizes = SizeRange("4KiB", "1GiB", ["4KiB:x4", "64KiB:x2", "4MiB:x4"])
    groups = ("links",)
    order = 10
    # Before a reference run refines per_point_s: host copies touch every byte on the host; the
    # CPU figures are from a 2-core machine, where making random source data and checking results
    # cost seconds a GB.
    overhead = {"cuda": Overhead(0.04, 0.2e-9, 0.005, 1.0, 30e-6), "cpu": Overhead(0.02, 3e-9, 0.0, 0.5, 10e-6)}

    def check(self, s: Settings, ctx: Context) -> str | None:
        biggest = max(ctx.sizes)
        if ctx.device != "cuda":
            if ctx.here:
                check_host_fits("the copy suite (2 x sizes.max)", 2 * biggest)   # h2h: a source and a destination
                note = cpu_dropped(s, ctx.explicit)
                if note:
                    print(f"xferbench: copy: {note}", file=sys.stderr)
            return None
        selection = select_gpus(s.gpus, ctx.gpu_count, s.together)
        if ctx.here:
            kernels.need([w for w, on in (("copy.engine=sm", Engine.sm in s.engine),
                                          ("copy.ops=latency", CopyOp.latency in s.ops)) if on])
        planned = self.points(s, ctx)
        if not planned:
            return "nothing to measure with these copy settings"
        if not ctx.here:
            return None
        lines = list(host_plan_for(s, ctx).lines)
        if ALL in s.gpus and not selection.together:
            lines.append(f"copy.gpus=all skipped: needs 2 or more GPUs, found {ctx.gpu_count}")
        for line in lines:
            print(f"xferbench: copy: {line}", file=sys.stderr)
        check_fits("the copy suite (2 x sizes.max)", 2 * biggest, sorted({g for p in planned for g in gpus_of(p)}))
        # Host buffers: a source and a destination per GPU and host memory kind, one NUMA mode at a time.
        per_mode = defaultdict(set)
        for p in planned:
            if p.memory in ("pinned", "pageable") and p.op != "latency":
                per_mode[p.numa] |= {(g, p.memory) for g in gpus_of(p)}
        buffers = 2 * max((len(v) for v in per_mode.values()), default=0)
        check_host_fits(f"the copy suite's host buffers ({buffers} x sizes.max)", buffers * biggest)
        return None

    def points(self, s: Settings, ctx: Context) -> list[Point]:
        return sweep(s, ctx)

    def start(self, s: Settings, ctx: Context) -> CopyState:
        return CopyState(s, ctx, cpu_dropped(s, ctx.explicit) if ctx.device != "cuda" else "")

    def measure(self, point: Point, s: Settings, ctx: Context, state: CopyState) -> list[Sample]:
        if point.backend == "cpu":
            return measure_h2h(point, ctx, state)
        if point.op == "latency":
            return measure_latency(point, ctx, state)
        if ALL in (point.src, point.dst):
            return measure_together(point, ctx, state)
        return measure_alone(point, ctx, state)

    def op_time(self, point: Point, speeds: Speeds) -> float:
        size, graph = point.size_bytes, point.launch == "graph"
        if point.backend == "cpu":
            return 2e-6 + size / 15e9
        pcie = speeds.pcie() * 0.87          # what copies reach of PCIe, on the reference machines
        bandwidth = {"pinned": pcie, "pageable": pcie / 4, "device": 1500.0}.get(point.memory, pcie)
        moved = 2 * size if point.op == "bidir" else size
        return (3e-6 if graph else 7e-6) + moved / (bandwidth * (1.7 if point.op == "bidir" else 1) * 1e9)
