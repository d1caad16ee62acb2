"""A batch size's points measured in interleaved rounds (A B C ... A B C ...), the host's pace
read between rounds and around each point's segment.

A host's single-thread pace moves by tens of percent within seconds on shared machines
(results/noise/pipeline-h200-x1/host-pace/study.md): a point measured in one go reads the pace
of its moment, and two runs then disagree by more than the trials of one point. In rounds, each
point is read at several moments spread over the batch size's whole span, and every point of
that size meets the same moments: the median over rounds is the figure, and the lowest and
highest round its spread (docs/method.md). The pace (the timing core's host_pace(), the one
probe every suite reads, over PACE_S) is read before each round and after the last, so a run
records what the host gave; and around each point's segment, in its rows' host_pace_s as every
suite's trials carry it, so a segment met in one of the host's slow moods is set aside where its
point has others (results.usable_rows)."""
from __future__ import annotations

from bench import lazy

import time
from dataclasses import replace
from typing import Iterator


from bench.contract import Context, Point
from bench.measure.timing import TimingConfig, host_pace
from bench.results import Sample
from bench.suites.pipeline.measure import Segment, measure_point
from bench.suites.pipeline.model import Pace, Settings

np = lazy.module("numpy")

PACE_S = 0.02           # one reading of the host's pace: host_pace() again and again for this long


def read_pace() -> tuple[float, int]:
    """One reading of the host's pace: (the median of timing.host_pace() over PACE_S, readings)."""
    paces, start = [host_pace()], time.perf_counter()
    while time.perf_counter() - start < PACE_S:
        paces.append(host_pace())
    return float(np.median(paces)), len(paces)


def _pace_row(point: Point, reading: int, pace: float, readings: int) -> Sample:
    """A Pace point's row: the reading in time_s and host_pace_s (no bytes move, so no GB/s)."""
    return point.sample(trial=reading, round=reading, iters=readings, time_s=pace, host_pace_s=pace, verified=True)


def round_timing(ctx: Context, p: Settings) -> TimingConfig:
    """A round's share of a point: the run's trials spread over the rounds, no more in all (at
    least one a round: the rounds are the repeats a figure's median and spread come from), each at
    least pipeline.min_trial_s long."""
    cfg = ctx.timing
    return TimingConfig(cfg.warmup, max(1, cfg.trials // p.rounds), max(cfg.min_trial_s, p.min_trial_s),
                        cfg.min_iters, cfg.max_iters)


def measure_rounds(points: list[Point], p: Settings, ctx: Context, epoch_batches: int,
                   stored: list[frozenset[int]] | None = None) -> Iterator[list[Sample]]:
    """Rows of each point and round as each segment ends: p.rounds rounds over the points, each
    point's trials numbered on across rounds and its rows carrying their round and, in
    host_pace_s, the pace its segment met: the slower of timing.host_pace() just before and just
    after it (a round lasts seconds, longer than a host's moods, so the pace of the round's start
    is not the segment's; results.usable_rows keeps the segments at the host's usual pace, as it
    keeps every suite's trials); a Pace point's rows the pace before each round and after the
    last. `stored`: the rounds of each point the run holds (a cut run resumed), not measured again."""
    cfg = round_timing(ctx, p)
    stored = stored or [frozenset()] * len(points)
    segments = [Segment(cfg) for _ in points]
    paces = [i for i, point in enumerate(points) if isinstance(point.params, Pace)]
    for r in range(p.rounds + 1):
        if any(r not in stored[i] for i in paces):
            pace, readings = read_pace()
            yield from ([_pace_row(points[i], r, pace, readings)] for i in paces if r not in stored[i])
        if r == p.rounds:
            break
        for i, point in enumerate(points):
            if i in paces or r in stored[i]:
                continue
            before = host_pace()
            got = measure_point(point, segments[i], ctx, epoch_batches)
            met = max(before, host_pace())
            yield [replace(s, trial=s.trial + r * cfg.trials, round=r, host_pace_s=met) for s in got]


def complete(point: Point, p: Settings, rounds: frozenset[int]) -> bool:
    """Whether a point holds all its rounds: p.rounds, and a Pace point's reading after the last."""
    return rounds >= set(range(p.rounds + isinstance(point.params, Pace)))
