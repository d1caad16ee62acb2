"""Measuring the copy suite's points: copies enqueued on one GPU or on every GPU at once, the
host's own memory, and the pointer chase through pinned host memory."""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import replace
from functools import partial
from typing import Callable, ContextManager

from bench import lazy
from bench.analysis.cache import resident_note
from bench.contract import Context, Point, trial_rows
from bench.measure import hostmem, kernels, numa, timing
from bench.measure.chase import NOTE as LATENCY_NOTE
from bench.measure.chase import Chase
from bench.measure.checks import same_data
from bench.measure.lanes import Lane, SpanClock, Together, sync_all
from bench.measure.latch import HELD_STREAMS
from bench.measure.timing import EventClock, HostClock
from bench.results import Sample
from bench.suites.copy.buffers import CopyState, Store
from bench.suites.copy.points import gpus_of
from bench.suites.copy.settings import OPS

torch = lazy.module("torch")


# ---------------------------------------------------------------- enqueueing copies


def copier(engine: str) -> Callable:
    """One copy on the current stream. SM: the GPU pulls from host memory and pushes to it."""
    return kernels.sm_copy if engine == "sm" else kernels.ce_copy


def _copies(dst, src, copy: Callable, n: int) -> None:
    for _ in range(n):
        copy(dst, src)


def _on_stream(dst, src, copy: Callable, streams: tuple, n: int) -> None:
    """n copies on streams[0], forked from and joined to the current stream."""
    cur, stream = torch.cuda.current_stream(), streams[0]
    stream.wait_stream(cur)
    with torch.cuda.stream(stream):
        _copies(dst, src, copy, n)
    cur.wait_stream(stream)


def _bidir(h2d: tuple, d2h: tuple, copy: Callable, pair: tuple, n: int) -> dict:
    """n copies each way on two streams at once: the first copy of each, then the rest of each,
    so the second direction starts one launch after the first rather than after all of its
    copies are queued (a head start that cost 4% of a 256 MiB bidirectional peer copy), at two
    stream switches a direction; returns each stream's end event."""
    cur = torch.cuda.current_stream()
    legs = (("h2d", h2d, pair[0]), ("d2h", d2h, pair[1]))
    for _, _, stream in legs:
        stream.wait_stream(cur)
    for count in (min(n, 1), n - 1):
        for _, (dst, src), stream in legs:
            with torch.cuda.stream(stream):
                _copies(dst, src, copy, count)
    ends = {}
    for name, _, stream in legs:
        ends[name] = torch.cuda.Event(enable_timing=True)
        ends[name].record(stream)
    for _, _, stream in legs:
        cur.wait_stream(stream)
    return ends


class _Ring:
    """enqueue(streams, n) with the ring's next `width` streams at each call: each trial (and each
    calibration reading) on streams of its own, the ring's streams in turn."""

    def __init__(self, enqueue: Callable, ring: list, width: int) -> None:
        self._enqueue, self._ring, self._width, self._next = enqueue, ring, width, 0

    def __call__(self, n: int):
        streams = tuple(self._ring[(self._next + k) % len(self._ring)] for k in range(self._width))
        self._next += self._width
        return self._enqueue(streams, n)


# ---------------------------------------------------------------- measuring


def place_note(place: numa.Placement | None) -> str:
    if place is None:
        return ""
    if place.node is None:
        return "host memory not bound to a NUMA node"
    return f"host memory on NUMA node {place.node}, copying thread on CPUs {numa.format_cpulist(place.cpus)}"


def _bound(cpus: frozenset[int]) -> ContextManager:
    return numa.bind_thread(cpus) if cpus else nullcontext()


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _measure_host_memory(point: Point, ctx: Context, state: CopyState) -> list[Sample]:
    """The host's own memory in a GPU's host buffers, on point.params.threads threads."""
    gpu = point.params.gpu
    n, place = point.size_bytes, state.store.plan.places[gpu, point.numa]
    host = partial(state.store.host, gpu, point.numa, "pageable")
    src, dst = host("src")[:n], host("dst")[:n]
    kind = point.mode.split()[0]
    dst.zero_()
    traffic = hostmem.HostTraffic(kind, dst, src)
    threads = point.params.threads
    with hostmem.threads(threads, place.cpus):
        trials = timing.measure(traffic, HostClock(), ctx.timing)
    return trial_rows(point, trials, n, 1.0, traffic.check(), _join(place_note(place), f"{threads} threads"))


def measure_h2h(point: Point, ctx: Context, state: CopyState) -> list[Sample]:
    if point.params is not None:
        return _measure_host_memory(point, ctx, state)
    dst, src = (buf[:point.size_bytes] for buf in state.h2h())
    dst.zero_()
    # One thread, as the CPU noise study measured it: from 64 KiB torch splits a copy over its
    # pool, and on a busy machine every copy then waits whole scheduler slices for a descheduled
    # thread (a flat 8-20 ms from 64 KiB to 16 MiB in some runs, microseconds in others).
    with hostmem.threads(1, ()):
        trials = timing.measure(partial(_copies, dst, src, kernels.ce_copy), HostClock(), ctx.timing)
    return trial_rows(point, trials, point.size_bytes, 1.0, same_data(dst, src), state.cpu_note)


def _legs(store: Store, gpu: int, point: Point) -> list[tuple]:
    """(dst, src) of each direction the point copies, sliced to its size."""
    n, op = point.size_bytes, OPS[point.op]
    if op.on_one_gpu:
        dst, src = store.device(gpu, "dst")[:n], store.device(gpu, "src")[:n]
        if op.views:   # of whole elements: the sweep has sizes of whole elements only
            elements = getattr(torch, f"int{8 * op.element}")
            dst, src = op.views(dst.view(elements), src.view(elements))
        return [(dst, src)]
    host = partial(store.host, gpu, point.numa, point.memory)
    h2d = (store.device(gpu, "dst")[:n], host("src")[:n])
    d2h = (host("dst")[:n], store.device(gpu, "src")[:n])
    return {"h2d": [h2d], "d2h": [d2h], "bidir": [h2d, d2h]}[point.op]


def measure_alone(point: Point, ctx: Context, state: CopyState) -> list[Sample]:
    store = state.store
    gpu = gpus_of(point)[0]
    legs = _legs(store, gpu, point)
    for dst, _ in legs:
        dst.zero_()
    op = OPS[point.op]
    on_gpu = op.on_one_gpu
    place = None if on_gpu else store.plan.places[gpu, point.numa]
    # Views are copied by Tensor.copy_, which runs torch's copy kernel on the SMs for them.
    copy = kernels.ce_copy if op.views else copier(point.engine)
    timing_cfg = ctx.timing
    if point.launch == "held":
        on_streams = partial(_bidir, *legs, copy) if point.op == "bidir" else partial(_on_stream, *legs[0], copy)
        enqueue = _Ring(on_streams, state.held_streams(gpu), len(legs))
        timing_cfg = replace(timing_cfg, trials=max(timing_cfg.trials, HELD_STREAMS))
    elif point.op == "bidir":
        enqueue = partial(_bidir, *legs, copy, tuple(state.streams(gpu)[1:3]))
    else:
        enqueue = partial(_copies, *legs[0], copy)
    with torch.cuda.device(gpu), _bound(place.cpus if place else frozenset()):
        # The host blocks in pageable copies: time them on the host.
        clock = HostClock(torch.cuda.synchronize) if point.memory == "pageable" else timing.device_clock(point.launch)
        timer = timing.measure_graph if point.launch == "graph" else timing.measure
        trials = timer(enqueue, clock, timing_cfg)
        torch.cuda.synchronize()
    verified = all(same_data(dst, src) for dst, src in legs)
    note = resident_note(point.size_bytes, torch.cuda.get_device_properties(gpu).L2_cache_size) \
        if on_gpu else place_note(place)
    return trial_rows(point, trials, point.size_bytes * len(legs), 1.0, verified, note)


def measure_together(point: Point, ctx: Context, state: CopyState) -> list[Sample]:
    store, copy = state.store, copier(point.engine)
    parts, checks, places = {}, [], {}
    for gpu in range(point.world_size):
        places[f"cuda:{gpu}"] = store.plan.places[gpu, point.numa]
        lanes = []
        for k, (dst, src) in enumerate(_legs(store, gpu, point)):
            dst.zero_()
            lanes.append(Lane(gpu, state.streams(gpu)[1 + k], partial(_copies, dst, src, copy)))
            checks.append((dst, src))
        parts[f"cuda:{gpu}"] = lanes
    # One host thread enqueues for every GPU: it may run on any of their nodes' CPUs.
    with _bound(frozenset().union(*(p.cpus for p in places.values()))):
        together = Together(parts, state.streams)
        trials = timing.measure(together, SpanClock(), ctx.timing)
    sync_all(range(point.world_size))
    verified = all(same_data(dst, src) for dst, src in checks)
    rows = trial_rows(point, trials, point.size_bytes * len(checks), 1.0, verified, together.note(trials))
    # each GPU's rows say where its host memory is
    return [replace(row, note=_join(row.note, place_note(places.get(row.part)))) for row in rows]


def measure_latency(point: Point, ctx: Context, state: CopyState) -> list[Sample]:
    store = state.store
    gpu = gpus_of(point)[0]
    place = store.plan.places[gpu, point.numa]
    chase = Chase(store.ring(gpu, point.numa), gpu)
    with torch.cuda.device(gpu), _bound(place.cpus):
        trials = timing.measure(chase, EventClock(), ctx.timing)
    return trial_rows(point, trials, math.nan, 1.0, chase.verified(), _join(LATENCY_NOTE, place_note(place)))
