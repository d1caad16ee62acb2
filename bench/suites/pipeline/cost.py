"""The plan's model of a pipeline point: each of its rounds a segment whose loader starts, warms
up and runs its trials; where the batches come from a user's dataset, what making them costs."""
from __future__ import annotations

import math

from bench.contract import Context, Point
from bench.suites.pipeline.measure import MIN_BATCHES, POOL
from bench.suites.pipeline.model import COLLATE, Loop, Pace, Settings, usable_cores
from bench.suites.pipeline.rounds import PACE_S

# A segment costs this much besides its trials: its loader started (workers forked), the stream's
# warm-up and, in its first round, calibration. With a GPU: segments of one trial of
# pipeline.min_trial_s (0.05 s) took 0.21-0.25 s on H100, H200 and 4x H200 hosts (2026-11-26:
# results/noise/pipeline-h*, suite_wall_s over points x rounds). Without one: segments of two
# such trials took 0.35-0.37 s on the 2-core CPU machine (results/noise/pipeline-cpu/allocator).
SETUP_S = {"cuda": 0.19, "cpu": 0.26}


def trial_seconds(p: Settings, ctx: Context) -> tuple[int, float]:
    """Trials a round (rounds.round_timing) and the least each lasts."""
    return max(1, math.ceil(ctx.timing.trials / p.rounds)), max(ctx.timing.min_trial_s, p.min_trial_s)


def point_seconds(point: Point, p: Settings, ctx: Context, sample_s: float = 0.0, length: int = 0) -> float:
    """Seconds a point costs over its rounds, besides what the timing core's replay counts.
    `sample_s`: one sample of the user's dataset made, and `length` its samples (0: the suite's
    producers, which cost little beside their trials)."""
    what = point.params
    if isinstance(what, Pace):
        return (p.rounds + 1) * PACE_S
    per_round, trial = trial_seconds(p, ctx)
    setup = SETUP_S[ctx.device]
    segment = setup + per_round * trial
    if sample_s and isinstance(what, Loop):
        batch = point.size_bytes // what.sample_size
        made = batch * sample_s / max(1, min(what.workers, usable_cores()))   # workers make batches at once
        batches = max(what.queued + 1, ctx.timing.warmup) + per_round * max(MIN_BATCHES, 2 * what.queued)
        epochs = batches * batch / max(1, length)   # each epoch's start starts the loader anew
        segment = setup * (1 + epochs) + max(batches * made, per_round * trial)
    elif sample_s and point.op == COLLATE:
        segment += POOL * point.size_bytes // what.sample_size * sample_s
    return p.rounds * segment
