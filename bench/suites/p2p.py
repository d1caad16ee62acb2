"""Peer-to-peer copies between GPU pairs: bandwidth and latency matrices.

For each selected ordered pair (src, dst): one-way copies (op 'uni') and copies both ways at
once (op 'bidir', one row per direction plus their sum), either direct (mode 'peer': a
device-to-device copy, over NVLink or PCIe with peer access) or staged through pinned host
memory (mode 'staged': device->host then host->device, what a machine without P2P does).
Timing uses CUDA events on the source GPU; the other GPU's work joins its stream. Every
point's destination is compared with the source after timing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, List

import torch

from bench import ConfigError, timing
from bench.results import Sample
from bench.settings import Choice, nonempty
from bench.suites import Context, Point, check_fits, trial_rows
from bench.suites.copy import same_data
from bench.timing import EventClock

NAME = "p2p"
DISTRIBUTED = False


class P2POp(Choice):
    uni = "uni"
    bidir = "bidir"


class P2PMode(Choice):
    peer = "peer"
    staged = "staged"


_PAIRS_HELP = "use all, ring, or a list of [src, dst] pairs like [[0,1],[1,0]]"


@dataclass
class Settings:
    # all | ring | [[src, dst], ...]: one of two shapes, so it is checked here rather than typed
    pairs: Any = "all"
    ops: List[P2POp] = field(default_factory=lambda: list(P2POp))
    modes: List[P2PMode] = field(default_factory=lambda: list(P2PMode))

    def __post_init__(self) -> None:
        nonempty("p2p.ops", self.ops)
        nonempty("p2p.modes", self.modes)
        if isinstance(self.pairs, str):
            if self.pairs not in ("all", "ring"):
                raise ConfigError(f"p2p.pairs={self.pairs!r} is unknown; {_PAIRS_HELP}")
            return
        try:
            self.pairs = [[int(x) for x in item] for item in self.pairs]
        except (TypeError, ValueError):
            raise ConfigError(f"p2p.pairs={self.pairs!r}: {_PAIRS_HELP}") from None
        for item in self.pairs:
            if len(item) != 2 or item[0] == item[1] or min(item) < 0:
                raise ConfigError(f"p2p.pairs: {item} is not a pair of two different GPU indices")
        nonempty("p2p.pairs", self.pairs)


def select_pairs(spec: str | list, n: int) -> list[tuple[int, int]]:
    """'all' ordered pairs, a 'ring' (i -> i+1), or an explicit list of [src, dst]."""
    if spec == "all":
        return [(i, j) for i in range(n) for j in range(n) if i != j]
    if spec == "ring":
        return [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1), (1, 0)][: 2 if n == 2 else 0]
    pairs = [(int(i), int(j)) for i, j in spec]
    for i, j in pairs:
        if i == j or not (0 <= i < n and 0 <= j < n):
            raise ConfigError(f"p2p.pairs: [{i}, {j}] needs two different GPUs among 0..{n - 1}")
    return pairs


def check(cfg, ctx: Context) -> str | None:
    if ctx.device != "cuda" or ctx.gpu_count < 2:
        return f"needs 2 or more GPUs, found {ctx.gpu_count}"
    pairs = select_pairs(cfg.p2p.pairs, ctx.gpu_count)
    check_fits("p2p (2 x sizes.max per GPU)", 2 * max(ctx.sizes), sorted({d for pair in pairs for d in pair}))
    return None


def points(cfg, ctx: Context) -> list[Point]:
    pairs = select_pairs(cfg.p2p.pairs, ctx.gpu_count)
    out = []
    for size in ctx.sizes:
        for i, j in pairs:
            for op in cfg.p2p.ops:
                if op == "bidir" and (j, i) in pairs and j < i:
                    continue  # i<->j at once is one measurement, whichever way it is named
                for mode in cfg.p2p.modes:
                    out.append(Point(NAME, op, size, memory="device", mode=mode, backend="cuda",
                                     src=f"cuda:{i}", dst=f"cuda:{j}"))
    return out


def _buffer(ctx: Context, name: str, device: int | None) -> torch.Tensor:
    """Largest-size buffers, one set per GPU (and pinned host staging), made on first use."""
    bufs = ctx.extra.setdefault("p2p_buffers", {})
    key = (name, device)
    if key not in bufs:
        size = max(ctx.sizes)
        if device is None:
            bufs[key] = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        elif name == "src":
            bufs[key] = torch.randint(0, 256, (size,), dtype=torch.uint8, device=f"cuda:{device}")
        else:
            bufs[key] = torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")
    return bufs[key]


def _stream(ctx: Context, device: int, direction: str) -> torch.cuda.Stream:
    """A stream per GPU and direction: the two legs of a bidirectional copy share none."""
    streams = ctx.extra.setdefault("p2p_streams", {})
    if (device, direction) not in streams:
        streams[device, direction] = torch.cuda.Stream(device=device)
    return streams[device, direction]


def _leg(dst: torch.Tensor, src: torch.Tensor, staging: torch.Tensor | None, s_src, s_dst, n: int) -> None:
    """n copies src -> dst, direct or via `staging`; the source GPU's stream ends after the last."""
    for _ in range(n):
        if staging is None:
            with torch.cuda.stream(s_src):
                dst.copy_(src, non_blocking=True)
        else:
            with torch.cuda.stream(s_src):
                staging.copy_(src, non_blocking=True)
            s_dst.wait_stream(s_src)
            with torch.cuda.stream(s_dst):
                dst.copy_(staging, non_blocking=True)
            s_src.wait_stream(s_dst)  # the next copy into `staging` waits for this one to be read


def _enqueue(legs: list[tuple], n: int) -> dict:
    """All legs at once, each on its source GPU's stream, forked from and joined to the current one."""
    cur = torch.cuda.current_stream()
    start = torch.cuda.Event(enable_timing=True)
    start.record(cur)
    parts = {}
    for name, (dst, src, staging, s_src, s_dst) in legs:
        s_src.wait_event(start)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(s_src)
        _leg(dst, src, staging, s_src, s_dst, n)
        end.record(s_src)
        parts[name] = (begin, end)
    # Join only once every leg is enqueued: torch orders a cross-GPU copy after the destination
    # GPU's current stream, so an early join would queue the reverse leg behind the forward one.
    for _, (_, _, _, s_src, _) in legs:
        cur.wait_stream(s_src)
    return parts if len(legs) > 1 else {}


def measure(point: Point, cfg, ctx: Context) -> list[Sample]:
    i, j, n = int(point.src.split(":")[1]), int(point.dst.split(":")[1]), point.size_bytes
    directions = [("fwd", i, j)] + ([("rev", j, i)] if point.op == "bidir" else [])
    legs, checks = [], []
    for name, a, b in directions:
        dst, src = _buffer(ctx, "dst", b)[:n], _buffer(ctx, "src", a)[:n]
        staging = _buffer(ctx, f"host_{name}", None)[:n] if point.mode == "staged" else None
        dst.zero_()
        legs.append((name, (dst, src, staging, _stream(ctx, a, name), _stream(ctx, b, name))))
        checks.append((dst, src))
    note = ""
    if point.mode == "peer" and not torch.cuda.can_device_access_peer(i, j):
        note = "no peer access between these GPUs: the driver staged the copy"
    with torch.cuda.device(i):
        trials = timing.measure(partial(_enqueue, legs), EventClock(), ctx.timing)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
    verified = all(same_data(dst, src) for dst, src in checks)
    return trial_rows(point, trials, n * len(directions), 1.0, verified, note)
