"""Host<->device and device<->device copies: h2d, d2h, bidirectional, d2d; pinned vs pageable.

Buffers are allocated once at the largest size and sliced per point. The source holds random
bytes; the destination is zeroed before each point and compared with the source after the
timed copies, so a point whose data did not arrive is recorded as failed. Without a GPU the
suite measures host-to-host copies (op 'h2h') so the whole pipeline still runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import List

import torch

from bench import timing
from bench.results import Sample
from bench.settings import Choice, nonempty
from bench.suites import Context, Point, check_fits, check_host_fits, trial_rows
from bench.timing import EventClock, HostClock

NAME = "copy"
DISTRIBUTED = False


class CopyOp(Choice):
    h2d = "h2d"
    d2h = "d2h"
    bidir = "bidir"
    d2d = "d2d"


class HostMemory(Choice):
    pinned = "pinned"
    pageable = "pageable"


@dataclass
class Settings:
    ops: List[CopyOp] = field(default_factory=lambda: list(CopyOp))
    memory: List[HostMemory] = field(default_factory=lambda: list(HostMemory))

    def __post_init__(self) -> None:
        nonempty("copy.ops", self.ops)
        nonempty("copy.memory", self.memory)


def check(cfg, ctx: Context) -> str | None:
    biggest = max(ctx.sizes)
    if ctx.device == "cuda":
        check_fits("the copy suite (2 x sizes.max)", 2 * biggest, [0])
        host_buffers = 2 * len({m for op in cfg.copy.ops if op != "d2d" for m in cfg.copy.memory})
    else:
        host_buffers = 2  # h2h: a source and a destination
    check_host_fits(f"the copy suite ({host_buffers} x sizes.max)", host_buffers * biggest)
    return None


def points(cfg, ctx: Context) -> list[Point]:
    if ctx.device == "cpu":
        return [Point(NAME, "h2h", s, memory="pageable", backend="cpu", src="host", dst="host") for s in ctx.sizes]
    out = []
    for size in ctx.sizes:
        for op in cfg.copy.ops:
            for mem in (["device"] if op == "d2d" else cfg.copy.memory):
                if op == "bidir" and mem == "pageable":
                    continue  # pageable copies block the host thread, so they cannot overlap
                src, dst = {"h2d": ("host", "cuda:0"), "d2h": ("cuda:0", "host"),
                            "bidir": ("host", "cuda:0"), "d2d": ("cuda:0", "cuda:0")}[op]
                for launch in ctx.launches:
                    graphable = mem != "pageable" and op != "bidir" and size <= ctx.graph_max_bytes
                    if launch == "eager" or graphable:
                        out.append(Point(NAME, op, size, memory=mem, backend="cuda", src=src, dst=dst, launch=launch))
    return out


class _Buffers:
    """Largest-size buffers, made on first use and sliced for every point."""

    def __init__(self, size: int, device: str) -> None:
        self.size = size
        self.device = device
        self._made: dict[str, torch.Tensor] = {}

    def get(self, name: str) -> torch.Tensor:
        if name not in self._made:
            if name == "dev_src":
                buf = torch.randint(0, 256, (self.size,), dtype=torch.uint8, device=self.device)
            elif name.endswith("_src"):
                buf = torch.empty(self.size, dtype=torch.uint8, pin_memory=name.startswith("pinned"))
                buf.copy_(self.get("dev_src") if self.device == "cuda" else
                          torch.randint(0, 256, (self.size,), dtype=torch.uint8))
            elif name == "dev_dst":
                buf = torch.empty(self.size, dtype=torch.uint8, device=self.device)
            else:
                buf = torch.empty(self.size, dtype=torch.uint8, pin_memory=name.startswith("pinned"))
            self._made[name] = buf
        return self._made[name]


def _buffers(ctx: Context) -> _Buffers:
    bufs = ctx.extra.get("copy_buffers")
    if bufs is None:
        bufs = ctx.extra["copy_buffers"] = _Buffers(max(ctx.sizes), "cuda:0" if ctx.device == "cuda" else "cpu")
    return bufs


def _copies(dst: torch.Tensor, src: torch.Tensor, n: int) -> None:
    for _ in range(n):
        dst.copy_(src, non_blocking=True)


def _bidir(h2d: tuple, d2h: tuple, streams: tuple, n: int) -> dict:
    """n copies each way on two streams at once; returns each stream's end event."""
    cur = torch.cuda.current_stream()
    ends = {}
    for name, (dst, src), stream in (("h2d", h2d, streams[0]), ("d2h", d2h, streams[1])):
        stream.wait_stream(cur)
        with torch.cuda.stream(stream):
            _copies(dst, src, n)
            ends[name] = torch.cuda.Event(enable_timing=True)
            ends[name].record(stream)
    for stream in streams:
        cur.wait_stream(stream)
    return ends


def same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal contents, compared on the GPU when either tensor lives there."""
    device = a.device if a.device.type == "cuda" else b.device
    return torch.equal(a.to(device), b.to(device))


def measure(point: Point, cfg, ctx: Context) -> list[Sample]:
    bufs, n = _buffers(ctx), point.size_bytes
    host = "pinned" if point.memory == "pinned" else "pageable"
    if point.op == "h2h":
        pairs = [(bufs.get("pageable_dst")[:n], bufs.get("pageable_src")[:n])]
    elif point.op == "h2d":
        pairs = [(bufs.get("dev_dst")[:n], bufs.get(f"{host}_src")[:n])]
    elif point.op == "d2h":
        pairs = [(bufs.get(f"{host}_dst")[:n], bufs.get("dev_src")[:n])]
    elif point.op == "d2d":
        pairs = [(bufs.get("dev_dst")[:n], bufs.get("dev_src")[:n])]
    else:  # bidir
        pairs = [(bufs.get("dev_dst")[:n], bufs.get(f"{host}_src")[:n]), (bufs.get(f"{host}_dst")[:n], bufs.get("dev_src")[:n])]
    for dst, _ in pairs:
        dst.zero_()

    if point.op == "bidir":
        streams = ctx.extra.setdefault("copy_streams", (torch.cuda.Stream(), torch.cuda.Stream()))
        enqueue = partial(_bidir, pairs[0], pairs[1], streams)
    else:
        enqueue = partial(_copies, *pairs[0])
    if point.backend == "cpu":
        clock = HostClock()
    elif point.memory == "pageable":  # the host blocks in these copies: time them on the host
        clock = HostClock(torch.cuda.synchronize)
    else:
        clock = EventClock()
    timer = timing.measure_graph if point.launch == "graph" else timing.measure
    trials = timer(enqueue, clock, ctx.timing)
    if point.backend == "cuda":
        torch.cuda.synchronize()
    verified = all(same_data(dst, src) for dst, src in pairs)
    moved = n * len(pairs)
    return trial_rows(point, trials, moved, 1.0, verified)

