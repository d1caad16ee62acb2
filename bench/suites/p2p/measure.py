"""Measuring the p2p suite's points: copies between a pair of GPUs (one way or both, direct or
staged through host memory), every other GPU with one GPU at once, and the pointer chase
through a peer's memory."""
from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Callable, NamedTuple

from bench import lazy
from bench.contract import Context, Point, trial_rows
from bench.measure import cudart, flags, kernels, timing
from bench.measure.chase import NOTE as LATENCY_NOTE
from bench.measure.chase import Chase
from bench.measure.checks import same_data
from bench.measure.flags import HostFlags
from bench.measure.lanes import Lane, SpanClock, Streams, Together, sync_all
from bench.measure.latch import HELD_STREAMS
from bench.measure.timing import EventClock
from bench.results import Sample
from bench.suites.p2p.buffers import P2PState

torch = lazy.module("torch")


class _Leg(NamedTuple):
    """One direction of a pair copy: src -> dst, direct (with `copy`) or staged through pinned host
    memory (`staging`: its slots, taken in turn), handed between the GPUs' streams by torch's events
    (`flags` None: eager, one slot) or by words of host memory (`flags`: held, a ring of slots)."""
    dst: object
    src: object
    staging: tuple
    s_src: object
    s_dst: object
    copy: Callable
    flags: HostFlags | None


WRITTEN, READ = 0, 1   # a held staged leg's words: copies written into host memory, copies read out of it


def _copies(leg: _Leg, count: int) -> None:
    """`count` copies of the leg, ending on the source GPU's stream. A held peer leg's run is
    queued from one stream context with its call bound once: its latch lasts twice as long as the
    host takes to queue the trial, and a long latch may slow a held pair copy's pace
    (docs/method.md, "Eager and held"). Every other copy is queued as an eager loop queues it."""
    if not leg.staging and leg.copy is cudart.copy:
        with torch.cuda.stream(leg.s_src):
            issue = cudart.copier(leg.dst, leg.src)
            for _ in range(count):
                issue()
        return
    copy_once = _copy_once if not leg.staging else _staged_eager if leg.flags is None else _staged_held
    for _ in range(count):
        copy_once(leg)


def _copy_once(leg: _Leg) -> None:
    with torch.cuda.stream(leg.s_src):
        leg.copy(leg.dst, leg.src)


def _staged_eager(leg: _Leg) -> None:
    """One staged copy as an eager torch program makes it: torch's events hand it from GPU to GPU,
    and the next copy into the slot waits for this one to be read out."""
    with torch.cuda.stream(leg.s_src):
        leg.staging[0].copy_(leg.src, non_blocking=True)
    leg.s_dst.wait_stream(leg.s_src)
    with torch.cuda.stream(leg.s_dst):
        leg.dst.copy_(leg.staging[0], non_blocking=True)
    leg.s_src.wait_stream(leg.s_dst)


def _staged_held(leg: _Leg) -> None:
    """One staged copy into the ring's next slot: it waits for the copy that last used the slot to
    be read out, and the destination GPU for it to be written. One hand-off a copy stands between
    the GPUs, as in NCCL's shared-memory transport; a round trip per copy (one slot) strays from
    process to process with the host's hand-offs (docs/method.md, "Eager and held")."""
    flags, slots = leg.flags, len(leg.staging)
    k = flags.count(READ)
    if k >= slots:
        flags.wait(leg.s_src, READ, k + 1 - slots)
    with torch.cuda.stream(leg.s_src):
        leg.staging[k % slots].copy_(leg.src, non_blocking=True)
    flags.hand_off(leg.s_src, leg.s_dst, WRITTEN)
    with torch.cuda.stream(leg.s_dst):
        leg.dst.copy_(leg.staging[k % slots], non_blocking=True)
    flags.signal(leg.s_dst, READ)


def _end_on_source(leg: _Leg) -> None:
    """A held staged leg ends once its last copy is read out: its source stream waits for that."""
    if leg.flags is not None:
        leg.flags.wait(leg.s_src, READ, leg.flags.count(READ))


def _enqueue(legs: list[tuple[str, _Leg]], n: int) -> dict:
    """All legs at once, each on its source GPU's stream, forked from and joined to the current one.

    The first copy of each leg is enqueued, then the rest of each, so a second leg starts one
    launch after the first rather than after all of the first's n launches: the span of a
    bidirectional copy is its two directions side by side, not one direction's head start."""
    cur = torch.cuda.current_stream()
    start = torch.cuda.Event(enable_timing=True)
    start.record(cur)
    parts = {}
    for name, leg in legs:
        leg.s_src.wait_event(start)
        begin = torch.cuda.Event(enable_timing=True)
        begin.record(leg.s_src)
        parts[name] = [begin]
    for count in (min(n, 1), n - 1):
        for _, leg in legs:
            _copies(leg, count)
    for name, leg in legs:
        _end_on_source(leg)
        end = torch.cuda.Event(enable_timing=True)
        end.record(leg.s_src)
        parts[name] = (parts[name][0], end)
    # Join only once every leg is enqueued: torch orders a cross-GPU copy after the destination
    # GPU's current stream, so an early join would queue the reverse leg behind the forward one.
    for _, leg in legs:
        cur.wait_stream(leg.s_src)
    return parts if len(legs) > 1 else {}


class _RingOfStreams:
    """_enqueue with each leg on the next streams of its GPUs' rings (source's, destination's) at
    each call: a held copy's trials each on streams of their own (latch.HELD_STREAMS says why),
    an eager one's on one."""

    def __init__(self, legs: list[tuple[str, _Leg]], rings: list[tuple[list, list]]) -> None:
        self._legs, self._rings, self._calls = legs, rings, 0

    def __call__(self, n: int) -> dict:
        k, self._calls = self._calls, self._calls + 1
        return _enqueue([(name, leg._replace(s_src=srcs[k % len(srcs)], s_dst=dsts[k % len(dsts)]))
                         for (name, leg), (srcs, dsts) in zip(self._legs, self._rings)], n)


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
        return [point.skipped(f"held peer copies need cudaMemcpyAsync: {_why_not(cudart)}")]
    held_staged = point.launch == "held" and point.mode == "staged"
    if held_staged and (why := _why_not(flags)):
        return [point.skipped(f"held staged copies need the driver's stream memory operations: {why}")]
    legs, rings, checks, ring_len = [], [], [], HELD_STREAMS if point.launch == "held" else 1
    for name, a, b in directions:
        dst, src = state.buffer("dst", b)[:n], state.buffer("src", a)[:n]
        staging = state.staging(name, n, point.params.slots if held_staged else 1) if point.mode == "staged" else ()
        if copy is cudart.copy:
            kernels.ce_copy(dst, src)   # torch enables peer access as it copies; cudaMemcpyAsync alone would not
        dst.zero_()
        rings.append((state.streams(a, name, ring_len), state.streams(b, name, ring_len)))
        flags_of_leg = state.flags(name) if held_staged else None
        legs.append((name, _Leg(dst, src, staging, None, None, copy, flags_of_leg)))   # streams: per trial, from the rings
        checks.append((dst, src))
    note = ""
    if point.mode == "peer" and point.engine != "sm" and not torch.cuda.can_device_access_peer(i, j):
        note = "no peer access between these GPUs: the driver staged the copy"
    timing_cfg = replace(ctx.timing, trials=max(ctx.timing.trials, ring_len))
    with torch.cuda.device(i):
        trials = timing.measure(_RingOfStreams(legs, rings), timing.device_clock(point.launch), timing_cfg)
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
        return None if _why_not(cudart) else cudart.copy
    return kernels.ce_copy


def _why_not(library) -> str:
    """Why `library` (bench.measure.cudart or .flags) cannot be called here, in one line; '' if it can."""
    try:
        library.require()
    except (cudart.CudartUnavailable, flags.FlagsUnavailable) as exc:
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
