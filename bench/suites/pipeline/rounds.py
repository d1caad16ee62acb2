"""A batch size's points measured in interleaved rounds (A B C ... A B C ...), the host's pace
read between rounds.

A host's single-thread pace moves by tens of percent within seconds on shared machines
(results/noise/pipeline-h200-x1/host-pace/study.md): a point measured in one go reads the pace
of its moment, and two runs then disagree by more than the trials of one point. In rounds, each
point is read at several moments spread over the batch size's whole span, and every point of
that size meets the same moments: the median over rounds is the figure, and the lowest and
highest round its spread (docs/method.md). The pace (np.full of PACE_BYTES, one thread, for
PACE_S) is read before each round and after the last, so a run records what the host gave."""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from bench.contract import Context, Point
from bench.measure.timing import TimingConfig
from bench.results import Sample
from bench.suites.pipeline.measure import Segment, measure_point
from bench.suites.pipeline.model import PACE_BYTES, Pace, Settings

PACE_S = 0.02           # one reading of the host's pace lasts about this long
PACE_CALLS = 50         # calls between two looks at the clock


def host_pace(seconds: float = PACE_S) -> tuple[int, float]:
    """(calls, seconds) of np.full(PACE_BYTES) on this thread for about `seconds`: the unit of
    work a numpy producer does per 64 KiB sample, a memory-bound single-thread pace."""
    calls, start = 0, time.perf_counter()
    while True:
        for i in range(PACE_CALLS):
            np.full(PACE_BYTES, i, dtype=np.uint8)
        calls += PACE_CALLS
        took = time.perf_counter() - start
        if took >= seconds:
            return calls, took


def _pace_row(point: Point, reading: int) -> Sample:
    calls, took = host_pace()
    per = took / calls
    return point.sample(trial=reading, round=reading, iters=calls, time_s=per, algbw_gbps=PACE_BYTES / per / 1e9,
                        busbw_gbps=PACE_BYTES / per / 1e9, verified=True)


def round_timing(ctx: Context, p: Settings) -> TimingConfig:
    """A round's share of a point: the run's trials spread over the rounds (at least one a
    round), each at least pipeline.min_trial_s long."""
    cfg = ctx.timing
    return TimingConfig(cfg.warmup, max(1, math.ceil(cfg.trials / p.rounds)), max(cfg.min_trial_s, p.min_trial_s),
                        cfg.min_iters, cfg.max_iters)


def measure_rounds(points: list[Point], p: Settings, ctx: Context, epoch_batches: int) -> list[list[Sample]]:
    """Rows of each point, in order: p.rounds rounds over the points, each point's trials
    numbered on across rounds and its rows carrying their round; a Pace point's rows the pace
    before each round and after the last."""
    cfg = round_timing(ctx, p)
    segments = [Segment(cfg) for _ in points]
    rows: list[list[Sample]] = [[] for _ in points]
    paces = [i for i, point in enumerate(points) if isinstance(point.params, Pace)]
    for r in range(p.rounds + 1):
        for i in paces:
            rows[i].append(_pace_row(points[i], r))
        if r == p.rounds:
            break
        for i, point in enumerate(points):
            if i in paces:
                continue
            got = measure_point(point, segments[i], ctx, epoch_batches)
            rows[i] += [replace(s, trial=s.trial + r * cfg.trials, round=r) for s in got]
    return rows
