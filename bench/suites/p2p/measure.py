"""Measuring the p2p suite's points: copies between a pair of GPUs (one way or both, direct or
staged through host memory), every other GPU with one GPU at once, and the pointer chase
through a peer's memory."""
from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

from bench import lazy
from bench.contract import Context, Point, trial_rows
from bench.measure import cudart, flags, kernels, timing
from bench.measure.chase import NOTE as LATENCY_NOTE
from bench.measure.chase import Chase
from bench.measure.checks import same_data
from bench.measure.lanes import Lane, SpanClock, Streams, Together, sync_all
from bench.measure.latch import HELD_STREAMS
from bench.measure.timing import EventClock
from bench.results import Sample
from bench.suites.p2p.buffers import P2PState

torch = lazy.module("torch")


def _copy_once(dst, src, staging, s_src, s_dst, copy, hand_off) -> None:
    """One copy src -> dst, direct (with `copy`) or via `staging`; it ends on the source GPU's stream."""
    if staging is None:
        with torch.cuda.stream(s_src):
            copy(dst, src)
        return
    with torch.cuda.stream(s_src):
        staging.copy_(src, non_blocking=True)
    hand_off(s_src, s_dst, 0)
    with torch.cuda.stream(s_dst):
        dst.copy_(staging, non_blocking=True)
    hand_off(s_dst, s_src, 1)  # the next copy into `staging` waits for this one to be read


def _torch_hand_off(done, then, word: int) -> None:
    """torch's hand-off between GPUs, an event: what an eager torch program pays. Held staged
    copies hand off through a word in host memory instead (bench/measure/flags.py says why)."""
    then.wait_stream(done)


def _enqueue(legs: list[tuple], n: int) -> dict:
    """All legs at once, each on its source GPU's stream, forked from and joined to the current one.

    The first copy of each leg is enqueued, then the rest of each, so a second leg starts one
    launch after the first rather than after all of the first's n launches: the span of a
    bidirectional copy is its two directions side by side, not one direction's head start."""
    cur = torch.cuda.current_stream()
    start = torch.cuda.Event(enable_timing=True)
    start.record(cur)
    parts = {}
    for name, (_, _, _, s_src, _, _, _) in legs:
        s_src.wait_event(start)
        begin = torch.cuda.Event(enable_timing=True)
        begin.record(s_src)
        parts[name] = [begin]
    for count in (min(n, 1), n - 1):
        for _, leg in legs:
            for _ in range(count):
                _copy_once(*leg)
    for name, (_, _, _, s_src, _, _, _) in legs:
        end = torch.cuda.Event(enable_timing=True)
        end.record(s_src)
        parts[name] = (parts[name][0], end)
    # Join only once every leg is enqueued: torch orders a cross-GPU copy after the destination
    # GPU's current stream, so an early join would queue the reverse leg behind the forward one.
    for _, (_, _, _, s_src, _, _, _) in legs:
        cur.wait_stream(s_src)
    return parts if len(legs) > 1 else {}


class _RingOfStreams:
    """_enqueue with each leg on the next streams of its GPUs' rings at each call: a held copy's
    trials each on streams of their own (latch.HELD_STREAMS says why), an eager one's on one."""

    def __init__(self, legs: list[tuple]) -> None:
        self._legs, self._calls = legs, 0

    def __call__(self, n: int) -> dict:
        k, self._calls = self._calls, self._calls + 1
        return _enqueue([(name, (dst, src, staging, srcs[k % len(srcs)], dsts[k % len(dsts)], copy, hand_off))
                         for name, (dst, src, staging, srcs, dsts, copy, hand_off) in self._legs], n)


def _gpu(name: str) -> int:
    return int(name.split(":")[1])


def _no_peer_access(workers_and_peers) -> str:
    """Why SM kernels cannot run: the first (worker, peer) without peer access, or ''."""
    for worker, peer in workers_and_peers:
        if not torch.cuda.can_device_access_peer(worker, peer):
            return f"cuda:{worker} has no peer access to cuda:{peer}: its SMs cannot reach that memory"
    return ""


def measure_pair(point: Point, ctx: Context, state: P2PState) -> list[Sample]:
    i, j, n = _gpu(point.src), _gpu(point.dst), point.size_bytes
    directions = [("fwd", i, j)] + ([("rev", j, i)] if point.op == "bidir" else [])
    if point.engine == "sm" and (why := _no_peer_access((a, b) for _, a, b in directions)):
        return [point.skipped(why)]
    copy = _copier(point)
    if copy is None:
        return [point.skipped(f"held peer copies need cudaMemcpyAsync: {_no_cudart()}")]
    held_staged = point.launch == "held" and point.mode == "staged"
    if held_staged and (why := _no_flags()):
        return [point.skipped(f"held staged copies need the driver's stream memory operations: {why}")]
    legs, checks, ring = [], [], HELD_STREAMS if point.launch == "held" else 1
    for name, a, b in directions:
        hand_off = state.flags(name).hand_off if held_staged else _torch_hand_off
        dst, src = state.buffer("dst", b)[:n], state.buffer("src", a)[:n]
        staging = state.buffer(f"host_{name}", None)[:n] if point.mode == "staged" else None
        if copy is cudart.copy:
            kernels.ce_copy(dst, src)   # torch enables peer access as it copies; cudaMemcpyAsync alone would not
        dst.zero_()
        rings = (state.streams(a, name, ring), state.streams(b, name, ring))
        legs.append((name, (dst, src, staging, *rings, copy, hand_off)))
        checks.append((dst, src))
    note = ""
    if point.mode == "peer" and point.engine != "sm" and not torch.cuda.can_device_access_peer(i, j):
        note = "no peer access between these GPUs: the driver staged the copy"
    timing_cfg = replace(ctx.timing, trials=max(ctx.timing.trials, ring))
    with torch.cuda.device(i):
        trials = timing.measure(_RingOfStreams(legs), timing.device_clock(point.launch), timing_cfg)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
    if point.launch == "held" and len(legs) > 1:
        # Each direction timed on its own GPU from its first copy to its last: the cross-GPU waits
        # that start and join them are resolved by the driver, late when the host is busy.
        trials = [replace(t, time_s=max(t.parts.values())) for t in trials]
    verified = all(same_data(dst, src) for dst, src in checks)
    return trial_rows(point, trials, n * len(directions), 1.0, verified, note)


def _copier(point: Point):
    """How one leg copies: the source GPU's kernel pushes (sm); torch's copy_, which joins both
    GPUs' streams around each copy (eager: what a torch program pays); or, held, one
    cudaMemcpyAsync on the source GPU's stream, the link's own time (None: not callable here)."""
    if point.engine == "sm":
        return kernels.sm_copy
    if point.launch == "held" and point.mode == "peer":
        return None if _no_cudart() else cudart.copy
    return kernels.ce_copy


def _no_cudart() -> str:
    try:
        cudart.require()
    except cudart.CudartUnavailable as exc:
        return str(exc)
    return ""


def _no_flags() -> str:
    try:
        flags.require()
    except flags.FlagsUnavailable as exc:
        return str(exc)
    return ""


def _ce_peer(dst, src, barrier, n: int) -> None:
    """n copies on the source GPU's current stream. torch joins a copy between GPUs with the
    destination GPU's current stream at both ends; a stream of the lane's own there (`barrier`)
    keeps the lanes into one GPU from waiting on each other through it."""
    with torch.cuda.stream(barrier):
        for _ in range(n):
            dst.copy_(src, non_blocking=True)


def _lane(point: Point, streams: Streams, gpus: int, k: int, reader: int, writer: int, dst, src) -> Lane:
    """The k-th peer's lane: CE copies on the source GPU's stream, SM copies by the GPU that
    moves the data across (the writer pushes for all_to_one, the reader pulls for one_to_all)."""
    if point.engine == "sm":
        gpu = writer if point.op == "all_to_one" else reader
        return Lane(gpu, streams(gpu)[1 + k], partial(_sm_copies, dst, src, gpu))
    barrier = streams(reader)[gpus + k]   # past the lanes: [1, gpus - 1] are lanes
    return Lane(writer, streams(writer)[1 + k], partial(_ce_peer, dst, src, barrier))


def _sm_copies(dst, src, gpu: int, n: int) -> None:
    for _ in range(n):
        kernels.sm_copy(dst, src, gpu)


def measure_concurrent(point: Point, ctx: Context, state: P2PState) -> list[Sample]:
    """Every other GPU with `one` at once: one lane per peer, each with its own buffers."""
    one, n = _gpu(point.dst if point.op == "all_to_one" else point.src), point.size_bytes
    peers = [i for i in range(point.world_size) if i != one]
    if point.engine == "sm" and (why := _no_peer_access((i, one) for i in peers)):   # each peer's kernel reaches `one`
        return [point.skipped(why)]
    parts, checks = {}, []
    for k, i in enumerate(peers):
        if point.op == "all_to_one":   # peer i writes into its own slot on `one`
            reader, writer, dst = one, i, state.buffer("gather", one)[k * n:(k + 1) * n]
        else:                          # peer i reads `one`'s source
            reader, writer, dst = i, one, state.buffer("dst", i)[:n]
        src = state.buffer("src", writer)[:n]
        dst.zero_()
        parts[f"cuda:{i}"] = [_lane(point, state.lanes, ctx.gpu_count, k, reader, writer, dst, src)]
        checks.append((dst, src))
    together = Together(parts, state.lanes)
    trials = timing.measure(together, SpanClock(), ctx.timing)
    sync_all(range(point.world_size))
    verified = all(same_data(dst, src) for dst, src in checks)
    return trial_rows(point, trials, n * len(peers), 1.0, verified, together.note(trials))


def measure_latency(point: Point, ctx: Context, state: P2PState) -> list[Sample]:
    owner, reader = _gpu(point.src), _gpu(point.dst)   # the ring lives on src; dst's SMs chase it
    if why := _no_peer_access([(reader, owner)]):
        return [point.skipped(why)]
    chase = Chase(state.ring(owner), reader)
    with torch.cuda.device(reader):
        trials = timing.measure(chase, EventClock(), ctx.timing)
    return trial_rows(point, trials, math.nan, 1.0, chase.verified(), LATENCY_NOTE)
