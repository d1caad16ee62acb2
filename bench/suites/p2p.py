"""Peer-to-peer copies between GPU pairs, every GPU with one GPU at once, and peer load latency.

For each selected ordered pair (src, dst): one-way copies (op 'uni') and copies both ways at
once (op 'bidir', one row per direction plus their sum), either direct (mode 'peer': a
device-to-device copy, over NVLink or PCIe with peer access) or staged through pinned host
memory (mode 'staged': device->host then host->device, what a machine without P2P does).
Direct copies run on the copy engines (engine 'ce') or as a Triton kernel on the source GPU's
SMs storing into the peer's memory (engine 'sm', nvbandwidth's write; at the whole-machine sizes
of bench.suites.copy.machine_sizes). Timing uses CUDA events on the source GPU; the other GPU's
work joins its stream.

Concurrent peer traffic, for each GPU j as 'the one' (mode peer, whole-machine sizes; the largest
with pairs=auto):
all_to_one: every other GPU writes into j at once (src 'all', dst cuda:j); one_to_all: every
other GPU reads from j at once (src cuda:j, dst 'all'; with engine ce, j's copy engines push,
since torch runs a copy between GPUs on the source's stream; with sm, each reader's kernel
loads). One row per peer (part cuda:i) and the total, started together and timed as the copy
suite's 'all' points are (bench.suites.copy.Together).

latency: for each selected pair (pairs=auto: one per link class), dst's SMs chase pointers
through a 2 MiB ring in src's memory (seconds per dependent load in time_s, no bandwidth).

Every point's destination is compared with the source after timing (latency: the chase's end).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, List

import torch

from bench import ConfigError, kernels, timing
from bench.pairs import class_pairs, pairs_at_size
from bench.results import Sample
from bench.settings import Choice, nonempty
from bench.suites import Context, Point, check_fits, trial_rows
from bench.suites.copy import (ALL, LATENCY_NOTE, RING_BYTES, Chase, Engine, Lane, SpanClock, Together, ce_copy,
                               lane_streams, machine_sizes, need_triton, same_data, sync_all)
from bench.timing import EventClock

NAME = "p2p"
DISTRIBUTED = False


class P2POp(Choice):
    uni = "uni"
    bidir = "bidir"
    all_to_one = "all_to_one"
    one_to_all = "one_to_all"
    latency = "latency"


PAIR_OPS = ("uni", "bidir")
CONCURRENT_OPS = ("all_to_one", "one_to_all")


class P2PMode(Choice):
    peer = "peer"
    staged = "staged"


_PAIRS_HELP = "use auto, all, ring, or a list of [src, dst] pairs like [[0,1],[1,0]]"


@dataclass
class Settings:
    # auto | all | ring | [[src, dst], ...]: one of two shapes, so it is checked here rather than typed.
    # auto: every ordered pair at the smallest and the largest whole-machine size, one pair per link
    # class at the others (see points())
    pairs: Any = "auto"
    ops: List[P2POp] = field(default_factory=lambda: list(P2POp))
    modes: List[P2PMode] = field(default_factory=lambda: list(P2PMode))
    engine: List[Engine] = field(default_factory=lambda: list(Engine))

    def __post_init__(self) -> None:
        nonempty("p2p.ops", self.ops)
        nonempty("p2p.modes", self.modes)
        nonempty("p2p.engine", self.engine)
        if isinstance(self.pairs, str):
            if self.pairs not in ("auto", "all", "ring"):
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
    if spec in ("auto", "all"):  # auto: every pair at the matrix sizes; points() picks the rest
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
    need_triton([w for w, on in (("p2p.engine=sm", Engine.sm in cfg.p2p.engine and P2PMode.peer in cfg.p2p.modes),
                                 ("p2p.ops=latency", P2POp.latency in cfg.p2p.ops)) if on])
    planned = points(cfg, ctx)
    concurrent = any(p.op in CONCURRENT_OPS for p in planned)
    gpus = sorted({d for pair in pairs for d in pair} | (set(range(ctx.gpu_count)) if concurrent else set()))
    # all_to_one gathers every peer's copy on the one GPU: a slot of sizes.max per peer
    gather = ctx.gpu_count - 1 if any(p.op == "all_to_one" for p in planned) else 0
    check_fits(f"p2p ({2 + gather} x sizes.max per GPU)", (2 + gather) * max(ctx.sizes), gpus)
    return None


def points(cfg, ctx: Context) -> list[Point]:
    """With pairs=auto: CE copies of every pair at the matrix sizes and of one pair per link class
    at the others; SM copies and latency on one pair per link class (a property of the link, and
    on 8 GPUs 56 pairs each); concurrent ops at the largest whole-machine size, bandwidth being
    their question. Otherwise every selected pair at every size."""
    pairs, auto = select_pairs(cfg.p2p.pairs, ctx.gpu_count), cfg.p2p.pairs == "auto"
    links = ctx.extra.get("links", {})
    machine = machine_sizes(ctx.sizes)
    matrix = (min(ctx.sizes), max(machine))
    per_link = class_pairs(ctx.gpu_count, links) if auto else pairs
    ops, modes, engines = ([str(x) for x in values] for values in (cfg.p2p.ops, cfg.p2p.modes, cfg.p2p.engine))
    out = [Point(NAME, "latency", RING_BYTES, memory="device", mode="peer", backend="cuda", src=f"cuda:{i}",
                 dst=f"cuda:{j}", engine="sm") for i, j in per_link if "latency" in ops]
    for size in ctx.sizes:
        here = pairs_at_size(size, matrix, ctx.gpu_count, links) if auto else pairs
        for i, j in here:
            for op in (o for o in ops if o in PAIR_OPS):
                if op == "bidir" and (j, i) in here and j < i:
                    continue  # i<->j at once is one measurement, whichever way it is named
                for mode in modes:
                    for engine in engines:
                        if engine == "sm" and (mode != "peer" or size not in machine or (i, j) not in per_link):
                            continue  # a kernel copies directly, at whole-machine sizes
                        out.append(Point(NAME, op, size, memory="device", mode=mode, backend="cuda",
                                         src=f"cuda:{i}", dst=f"cuda:{j}", engine=engine))
        if (size == max(machine) if auto else size in machine) and "peer" in modes:
            out += [Point(NAME, op, size, memory="device", mode="peer", backend="cuda", world_size=ctx.gpu_count,
                          engine=engine, **_ends(op, f"cuda:{j}"))
                    for op in ops if op in CONCURRENT_OPS for j in range(ctx.gpu_count) for engine in engines]
    return out


def _ends(op: str, one: str) -> dict[str, str]:
    """src and dst of a concurrent op: every other GPU ('all') into or out of the one GPU."""
    return {"src": ALL, "dst": one} if op == "all_to_one" else {"src": one, "dst": ALL}


def _buffer(ctx: Context, name: str, device: int | None) -> torch.Tensor:
    """Largest-size buffers, one set per GPU (and pinned host staging), made on first use:
    src (random bytes, seeded per GPU so that one GPU's data cannot pass for another's), dst,
    and gather (a slot per peer, for all_to_one)."""
    bufs = ctx.extra.setdefault("p2p_buffers", {})
    key = (name, device)
    if key not in bufs:
        size = max(ctx.sizes)
        if device is None:
            bufs[key] = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        elif name == "src":
            seeded = torch.Generator(device=f"cuda:{device}").manual_seed(device + 1)
            bufs[key] = torch.randint(0, 256, (size,), dtype=torch.uint8, device=f"cuda:{device}", generator=seeded)
        else:
            slots = ctx.gpu_count - 1 if name == "gather" else 1
            bufs[key] = torch.empty(size * slots, dtype=torch.uint8, device=f"cuda:{device}")
    return bufs[key]


def _stream(ctx: Context, device: int, direction: str) -> torch.cuda.Stream:
    """A stream per GPU and direction: the two legs of a bidirectional copy share none."""
    streams = ctx.extra.setdefault("p2p_streams", {})
    if (device, direction) not in streams:
        streams[device, direction] = torch.cuda.Stream(device=device)
    return streams[device, direction]


def _leg(dst: torch.Tensor, src: torch.Tensor, staging: torch.Tensor | None, s_src, s_dst, copy, n: int) -> None:
    """n copies src -> dst, direct (with `copy`) or via `staging`; the source GPU's stream ends after the last."""
    for _ in range(n):
        if staging is None:
            with torch.cuda.stream(s_src):
                copy(dst, src)
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
    for name, (dst, src, staging, s_src, s_dst, copy) in legs:
        s_src.wait_event(start)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(s_src)
        _leg(dst, src, staging, s_src, s_dst, copy, n)
        end.record(s_src)
        parts[name] = (begin, end)
    # Join only once every leg is enqueued: torch orders a cross-GPU copy after the destination
    # GPU's current stream, so an early join would queue the reverse leg behind the forward one.
    for _, (_, _, _, s_src, _, _) in legs:
        cur.wait_stream(s_src)
    return parts if len(legs) > 1 else {}


def _gpu(name: str) -> int:
    return int(name.split(":")[1])


def _no_peer_access(workers_and_peers) -> str:
    """Why SM kernels cannot run: the first (worker, peer) without peer access, or ''."""
    for worker, peer in workers_and_peers:
        if not torch.cuda.can_device_access_peer(worker, peer):
            return f"cuda:{worker} has no peer access to cuda:{peer}: its SMs cannot reach that memory"
    return ""


def measure(point: Point, cfg, ctx: Context) -> list[Sample]:
    if point.op == "latency":
        return _measure_latency(point, ctx)
    if point.op in CONCURRENT_OPS:
        return _measure_concurrent(point, ctx)
    return _measure_pair(point, ctx)


def _measure_pair(point: Point, ctx: Context) -> list[Sample]:
    i, j, n = _gpu(point.src), _gpu(point.dst), point.size_bytes
    directions = [("fwd", i, j)] + ([("rev", j, i)] if point.op == "bidir" else [])
    if point.engine == "sm" and (why := _no_peer_access((a, b) for _, a, b in directions)):
        return [point.skipped(why)]
    copy = kernels.sm_copy if point.engine == "sm" else ce_copy   # sm: the source GPU's kernel pushes
    legs, checks = [], []
    for name, a, b in directions:
        dst, src = _buffer(ctx, "dst", b)[:n], _buffer(ctx, "src", a)[:n]
        staging = _buffer(ctx, f"host_{name}", None)[:n] if point.mode == "staged" else None
        dst.zero_()
        legs.append((name, (dst, src, staging, _stream(ctx, a, name), _stream(ctx, b, name), copy)))
        checks.append((dst, src))
    note = ""
    if point.mode == "peer" and point.engine != "sm" and not torch.cuda.can_device_access_peer(i, j):
        note = "no peer access between these GPUs: the driver staged the copy"
    with torch.cuda.device(i):
        trials = timing.measure(partial(_enqueue, legs), EventClock(), ctx.timing)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
    verified = all(same_data(dst, src) for dst, src in checks)
    return trial_rows(point, trials, n * len(directions), 1.0, verified, note)


def _ce_peer(dst: torch.Tensor, src: torch.Tensor, barrier: torch.cuda.Stream, n: int) -> None:
    """n copies on the source GPU's current stream. torch joins a copy between GPUs with the
    destination GPU's current stream at both ends; a stream of the lane's own there (`barrier`)
    keeps the lanes into one GPU from waiting on each other through it."""
    with torch.cuda.stream(barrier):
        for _ in range(n):
            dst.copy_(src, non_blocking=True)


def _lane(point: Point, ctx: Context, k: int, reader: int, writer: int, dst: torch.Tensor,
          src: torch.Tensor) -> Lane:
    """The k-th peer's lane: CE copies on the source GPU's stream, SM copies by the GPU that
    moves the data across (the writer pushes for all_to_one, the reader pulls for one_to_all)."""
    if point.engine == "sm":
        gpu = writer if point.op == "all_to_one" else reader
        return Lane(gpu, lane_streams(ctx, gpu)[1 + k], partial(_sm_copies, dst, src, gpu))
    barrier = lane_streams(ctx, reader)[ctx.gpu_count + k]   # past the lanes: [1, gpu_count - 1] are lanes
    return Lane(writer, lane_streams(ctx, writer)[1 + k], partial(_ce_peer, dst, src, barrier))


def _sm_copies(dst: torch.Tensor, src: torch.Tensor, gpu: int, n: int) -> None:
    for _ in range(n):
        kernels.sm_copy(dst, src, gpu)


def _measure_concurrent(point: Point, ctx: Context) -> list[Sample]:
    """Every other GPU with `one` at once: one lane per peer, each with its own buffers."""
    one, n = _gpu(point.dst if point.op == "all_to_one" else point.src), point.size_bytes
    peers = [i for i in range(point.world_size) if i != one]
    if point.engine == "sm" and (why := _no_peer_access((i, one) for i in peers)):   # each peer's kernel reaches `one`
        return [point.skipped(why)]
    parts, checks = {}, []
    for k, i in enumerate(peers):
        if point.op == "all_to_one":   # peer i writes into its own slot on `one`
            reader, writer, dst = one, i, _buffer(ctx, "gather", one)[k * n:(k + 1) * n]
        else:                          # peer i reads `one`'s source
            reader, writer, dst = i, one, _buffer(ctx, "dst", i)[:n]
        src = _buffer(ctx, "src", writer)[:n]
        dst.zero_()
        parts[f"cuda:{i}"] = [_lane(point, ctx, k, reader, writer, dst, src)]
        checks.append((dst, src))
    together = Together(parts, ctx)
    trials = timing.measure(together, SpanClock(), ctx.timing)
    sync_all(range(point.world_size))
    verified = all(same_data(dst, src) for dst, src in checks)
    return trial_rows(point, trials, n * len(peers), 1.0, verified, together.note(trials))


def _ring(ctx: Context, gpu: int) -> torch.Tensor:
    rings = ctx.extra.setdefault("p2p_rings", {})
    if gpu not in rings:
        rings[gpu] = kernels.make_ring(RING_BYTES, device=f"cuda:{gpu}")
    return rings[gpu]


def _measure_latency(point: Point, ctx: Context) -> list[Sample]:
    owner, reader = _gpu(point.src), _gpu(point.dst)   # the ring lives on src; dst's SMs chase it
    if why := _no_peer_access([(reader, owner)]):
        return [point.skipped(why)]
    chase = Chase(_ring(ctx, owner), reader)
    with torch.cuda.device(reader):
        trials = timing.measure(chase, EventClock(), ctx.timing)
    return trial_rows(point, trials, math.nan, 1.0, chase.verified(), LATENCY_NOTE)
