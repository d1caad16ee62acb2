"""The input pipeline of a training job: what a DataLoader-fed loop delivers to the GPU, and the
stage that limits it.

A map-style dataset (source.py: samples made with numpy, views of one buffer, or the user's own
Dataset) feeds a DataLoader; the loop (feed.py) moves each batch to the GPU as a training job does
and checks it. A point is one continuous stream of batches read in the steady state (measure.py);
a batch size's points, the host's pace, each stage alone and the loops, run in interleaved
rounds (rounds.py). The tables (tables.py) name each loop's bottleneck, the fraction of its bound
it reaches, and what to change. How it measures: docs/method.md; what to do with its figures,
and your own dataset: docs/training.md; its rows: docs/columns.md.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Iterator


from bench import ConfigError
from bench.contract import DEFAULT_OVERHEAD, Context, Overhead, Point, Suite
from bench.measure.memory import format_bytes, gpu_free_bytes, host_available_bytes
from bench.results import Sample
from bench.sizes import parse_size
from bench.sizes import sweep as size_sweep
from bench.suites.pipeline.model import (CONSUME, H2D, LOOP_ONLY, LOOP_OP, PACE_OP, STAGES, STEP, Pace, Settings, loops,
                                         sample_dtype, stages_of)
from bench.suites.pipeline.cost import point_seconds
from bench.suites.pipeline.reading import PipelineView
from bench.suites.pipeline.rounds import complete, measure_rounds
from bench.suites.pipeline.source import PERIOD, named, user_batch, user_dataset, user_sample, user_step


def _free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def samples_of(p: Settings) -> list[tuple[int, str, int | None]]:
    """(sample bytes, the rows' dtype, the most samples a batch may hold) of each sample the
    suite measures: the user's dataset's one collated sample (made here: a bad factory is one
    line before anything runs), else each of pipeline.sample_sizes."""
    if p.dataset:
        size, dtype = user_sample(p.user)
        return [(size, dtype, len(user_dataset(p.dataset)))]
    return [(s, sample_dtype(s), None) for s in dict.fromkeys(parse_size(x) for x in p.sample_sizes)]


def batch_sizes(p: Settings, ctx: Context, sample: int, most: int | None = None) -> list[int]:
    """Batch bytes from min_size to max_size in x size_factor steps, whole samples each (at least
    one, at most `most`: a user's dataset's length); without a GPU they stop at sizes.cpu_max
    (ctx.size_cap)."""
    lo, hi = parse_size(p.min_size), parse_size(p.max_size)
    if ctx.size_cap is not None:
        hi = max(lo, min(hi, ctx.size_cap))
    sizes = (s // sample * sample for s in size_sweep(lo, hi, p.size_factor) if s >= sample)
    return list(dict.fromkeys(s for s in sizes if most is None or s // sample <= most))


def _no_batch(p: Settings, ctx: Context) -> str:
    """Why no batch size holds whole samples: what would make one."""
    hi = parse_size(p.max_size)
    if not p.dataset:
        return (f"pipeline.sample_sizes: no batch size holds a whole sample (batch sizes up to {format_bytes(hi)}); "
                "lower the sample size or raise pipeline.max_size")
    sample, _, most = samples_of(p)[0]
    if sample > min(hi, ctx.size_cap or hi):
        return (f"pipeline.dataset={p.dataset}: one collated sample holds {format_bytes(sample)}, more than the "
                f"largest batch size ({format_bytes(min(hi, ctx.size_cap or hi))}); raise pipeline.max_size")
    return (f"pipeline.dataset={p.dataset}: its {most} samples hold {format_bytes(most * sample)} together, and no "
            f"batch size from pipeline.min_size={p.min_size} on fits in them whole; lower pipeline.min_size to "
            f"{format_bytes(most * sample)} or less (a larger pipeline.max_size cannot help), or use a longer dataset")


def _check_step(spec: str, ctx: Context) -> None:
    """The user's step made on the run's device (and kept for the run): one line where it cannot
    be. A plan imports its factory only: it starts no CUDA context."""
    if not ctx.planning:
        user_step(spec, f"cuda:{ctx.local_rank}" if ctx.device == "cuda" else "cpu")
    elif not callable(named(spec, "step")):
        raise ConfigError(f"pipeline.step={spec}: is not a callable that returns a step")


def _check(p: Settings, ctx: Context) -> None:
    gpu = ctx.device == "cuda"
    sampled = samples_of(p)
    sizes = [b for s, _, most in sampled for b in batch_sizes(p, ctx, s, most)]
    if not sizes:
        raise ConfigError(_no_batch(p, ctx))
    if not ctx.here:
        return
    if p.dataset:
        user_batch(p.user, max(sizes) // sampled[0][0])   # samples of varying shape: one line, here
    if p.step:
        _check_step(p.step, ctx)
    big = max(sizes)
    ahead = max(lp.queued for s, _, _ in sampled for lp in loops(p, ctx.device, s, ctx.cores))
    shm, shared = _free_bytes("/dev/shm"), ahead * big
    if shared and shm is not None and shared > shm:
        raise ConfigError(f"pipeline.max_size: the workers pass up to {format_bytes(shared)} of batches "
                          f"through /dev/shm, which has {format_bytes(shm)} free; lower pipeline.max_size or "
                          "pipeline.workers, or enlarge /dev/shm (docker run --shm-size)")
    # Batches queued, being pinned and in the loop, each made once then collated; the free
    # producer's rows; the link's pinned buffer.
    need = 2 * (ahead + 2) * big + PERIOD * max(s for s, _, _ in sampled) + big
    available = host_available_bytes()
    if available is not None and need > available:
        raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(need)} of host memory but "
                          f"only {format_bytes(available)} is available; lower pipeline.max_size or pipeline.workers")
    if gpu:
        free = gpu_free_bytes(0)
        if 6 * big > free:   # the link's buffer, batches in flight, the check's temporaries
            raise ConfigError(f"pipeline.max_size: the pipeline needs about {format_bytes(6 * big)} on cuda:0 but "
                              f"only {format_bytes(free)} is free; lower pipeline.max_size")


def sweep(p: Settings, ctx: Context) -> list[Point]:
    """Per sample and batch size: the host's pace, the stages any loop needs, then the loops."""
    gpu = ctx.device == "cuda"
    device_side = (H2D, CONSUME, STEP) if gpu else ()
    out = []
    for sample, dtype, most in samples_of(p):
        measured = loops(p, ctx.device, sample, ctx.cores)
        needed = dict.fromkeys(st for lp in measured for group in stages_of(lp, gpu).values() for st in group
                               if st.op not in LOOP_ONLY)
        order = sorted(needed, key=lambda st: (STAGES.index(st.op), st.memory, str(st.producer), st.workers, st.threads))
        for size in batch_sizes(p, ctx, sample, most):
            out.append(Point(Pipeline.name, PACE_OP, 0, mode="timing.host_pace 1 thread",
                             backend=ctx.device, src="host", dst="host", dtype=dtype,
                             params=Pace(sample, size, p.user)))
            out += [Point(Pipeline.name, st.op, size, memory=st.memory, mode=st.mode(), backend=ctx.device,
                          src="host", dst="cuda:0" if st.op in device_side else "host", dtype=dtype, params=st)
                    for st in order]
            out += [Point(Pipeline.name, LOOP_OP if gpu else "loader", size, memory=lp.memory if gpu else "pageable",
                          mode=lp.mode(ctx.device), backend=ctx.device, src="host",
                          dst="cuda:0" if gpu else "host", dtype=dtype, params=lp) for lp in measured]
    return out


class Pipeline(PipelineView, Suite):
    name = "pipeline"
    title = "Input pipeline"
    Settings = Settings
    groups = ("training",)
    order = 50

    def check(self, p: Settings, ctx: Context) -> str | None:
        _check(p, ctx)
        return None

    def points(self, p: Settings, ctx: Context) -> list[Point]:
        return sweep(p, ctx)

    def overhead_of(self, p: Settings, ctx: Context) -> Overhead:
        """Each point's rounds as cost.py models them (a user's dataset: with what its samples cost
        to make, timed on a batch of them when the settings were checked), on average."""
        points = sweep(p, ctx)
        sample_s = length = 0
        if p.dataset and ctx.here and points:
            sample, _, length = samples_of(p)[0]
            sample_s = user_batch(p.user, max(pt.size_bytes for pt in points) // sample)
        seconds = sum(point_seconds(pt, p, ctx, sample_s, length) for pt in points) / max(1, len(points))
        return replace(DEFAULT_OVERHEAD, per_point_s=seconds, modelled=True)

    def together(self, point: Point):
        """A batch size's points, measured in interleaved rounds."""
        what = point.params
        return (point.dtype, what.batch_bytes if isinstance(what, Pace) else point.size_bytes)

    def measure_together(self, points: list[Point], p: Settings, ctx: Context, state,
                         stored: list[frozenset[int]]) -> Iterator[list[Sample]]:
        return measure_rounds(points, p, ctx, 0 if p.dataset else p.epoch_batches, stored)

    def complete(self, point: Point, p: Settings, rounds: frozenset[int]) -> bool:
        return complete(point, p, rounds)

    def measure(self, point: Point, p: Settings, ctx: Context, state) -> list[Sample]:
        return [s for rows in measure_rounds([point], p, ctx, 0 if p.dataset else p.epoch_batches) for s in rows]
