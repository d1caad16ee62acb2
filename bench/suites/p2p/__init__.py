"""Peer-to-peer copies between GPU pairs, every GPU with one GPU at once, and peer load latency.

For each selected ordered pair (src, dst): one-way copies (op 'uni') and copies both ways at
once (op 'bidir', one row per direction plus their sum), either direct (mode 'peer': a
device-to-device copy, over NVLink or PCIe with peer access) or staged through pinned host
memory (mode 'staged': device->host then host->device, what a machine without P2P does).
Direct copies run on the copy engines (engine 'ce') or as a Triton kernel on the source GPU's
SMs storing into the peer's memory (engine 'sm', nvbandwidth's write; at the whole-machine sizes
of bench.sizes.machine_sizes). Timing uses CUDA events on the source GPU; the other GPU's
work joins its stream.

Concurrent peer traffic, for each GPU j as 'the one' (mode peer, whole-machine sizes; the largest
with pairs=auto):
all_to_one: every other GPU writes into j at once (src 'all', dst cuda:j); one_to_all: every
other GPU reads from j at once (src cuda:j, dst 'all'; with engine ce, j's copy engines push,
since torch runs a copy between GPUs on the source's stream; with sm, each reader's kernel
loads). One row per peer (part cuda:i) and the total, started together and timed as the copy
suite's 'all' points are (bench.measure.lanes.Together).

latency: for each selected pair (pairs=auto: one per link class), dst's SMs chase pointers
through a 2 MiB ring in src's memory (seconds per dependent load in time_s, no bandwidth).

Every point's destination is compared with the source after timing (latency: the chase's end).

The folder: settings.py (the config section), plan.py (the points), buffers.py and measure.py
(measuring them), reading.py (the reading face: what the rows mean, the matrices and tables).
"""
from __future__ import annotations

from bench.config.settings import Engine, SizeRange
from bench.contract import Context, Overhead, Point, Suite
from bench.links import Speeds
from bench.measure import kernels
from bench.measure.memory import check_fits
from bench.results import Sample
from bench.suites.p2p.buffers import P2PState
from bench.suites.p2p.measure import measure_concurrent, measure_latency, measure_pair
from bench.suites.p2p.points import select_pairs, sweep
from bench.suites.p2p.reading import P2PView
from bench.suites.p2p.settings import CONCURRENT_OPS, P2PMode, P2POp, Settings


class P2P(P2PView, Suite):
    Settings = Settings
    sizes = SizeRange("4KiB", "1GiB", ["4KiB:x4", "1MiB:x2", "16MiB:x4"])
    groups = ("links",)
    order = 20
    overhead = {"cuda": Overhead(0.03, 0.01e-9, 0.005, 1.0, 30e-6)}

    def check(self, s: Settings, ctx: Context) -> str | None:
        if ctx.device != "cuda" or ctx.gpu_count < 2:
            return f"needs 2 or more GPUs, found {ctx.gpu_count}"
        pairs = select_pairs(s.pairs, ctx.gpu_count)
        if ctx.here:
            kernels.need([w for w, on in (("p2p.engine=sm", Engine.sm in s.engine and P2PMode.peer in s.modes),
                                          ("p2p.ops=latency", P2POp.latency in s.ops)) if on])
        planned = sweep(s, ctx)
        if not ctx.here:
            return None
        concurrent = any(p.op in CONCURRENT_OPS for p in planned)
        gpus = sorted({d for pair in pairs for d in pair} | (set(range(ctx.gpu_count)) if concurrent else set()))
        # all_to_one gathers every peer's copy on the one GPU: a slot of sizes.max per peer
        gather = ctx.gpu_count - 1 if any(p.op == "all_to_one" for p in planned) else 0
        check_fits(f"p2p ({2 + gather} x sizes.max per GPU)", (2 + gather) * max(ctx.sizes), gpus)
        return None

    def points(self, s: Settings, ctx: Context) -> list[Point]:
        return sweep(s, ctx)

    def start(self, s: Settings, ctx: Context) -> P2PState:
        return P2PState(ctx)

    def measure(self, point: Point, s: Settings, ctx: Context, state: P2PState) -> list[Sample]:
        if point.op == "latency":
            return measure_latency(point, ctx, state)
        if point.op in CONCURRENT_OPS:
            return measure_concurrent(point, ctx, state)
        return measure_pair(point, ctx, state)

    def op_time(self, point: Point, speeds: Speeds) -> float:
        size, pcie = point.size_bytes, speeds.pcie() * 0.87
        nvlink = speeds.nvlink(speeds.pair(point.src, point.dst))
        link = pcie / 2 if point.mode == "staged" else (0.87 * nvlink if nvlink else 0.8 * pcie)
        moved, both = (2 * size, 1.9) if point.op == "bidir" else (size, 1.0)
        return (80e-6 if point.mode == "staged" else 25e-6) + moved / (link * both * 1e9)
