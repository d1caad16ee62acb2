"""The plan's model of a pipeline point: each of its rounds a segment whose loader starts, warms
up and runs its trials; where the batches come from a user's dataset, what making them costs."""
from __future__ import annotations

from bench.contract import Context, Point
from bench.suites.pipeline.measure import MIN_BATCHES, POOL
from bench.suites.pipeline.model import COLLATE, Loop, Pace, Settings, usable_cores
from bench.suites.pipeline.rounds import PACE_S, round_timing

# A segment costs SETUP_S besides its trials: its loader started and stopped, and the stream's
# warm-up; WORKERS_S more where its loader has workers (forked, and joined at its end). Fitted,
# with a GPU, to the quick default (38 points, 3 rounds) and the exhaustive sweep (225 points, 5
# rounds) on one 4x H200 host (3e836531b4f2, 2026-11-27, results/noise/pipeline-h200-x4/x4d):
# 0.13 s a segment, 0.21 s more with workers; the exhaustive sweeps of two other hosts
# (nvidia-h200 24846c139c94, 4x H200 62c71e6f4860) follow within 7%. A point's first round, which
# also calibrates its trials' N, costs no more than the fit's noise. Without a GPU,
# on the 2-core CPU machine, idle: the quick default (34 points, 102 segments) took 14.3 and 14.6 s
# of suite, 0.09 s a segment besides its trial (results/noise/cpu-idle); runs made while
# other jobs shared its cores took 36-39 s (results/noise/pipeline-cpu/quick, allocator).
SETUP_S = {"cuda": 0.13, "cpu": 0.09}
WORKERS_S = {"cuda": 0.21, "cpu": 0.0}


def trial_seconds(p: Settings, ctx: Context) -> tuple[int, float]:
    """Trials a round and the least each lasts, as the rounds run them."""
    cfg = round_timing(ctx, p)
    return cfg.trials, cfg.min_trial_s


def point_seconds(point: Point, p: Settings, ctx: Context, sample_s: float = 0.0, length: int = 0) -> float:
    """Seconds a point costs over its rounds, besides what the timing core's replay counts.
    `sample_s`: one sample of the user's dataset made, and `length` its samples (0: the suite's
    producers, which cost little beside their trials)."""
    what = point.params
    if isinstance(what, Pace):
        return (p.rounds + 1) * PACE_S
    per_round, trial = trial_seconds(p, ctx)
    setup = SETUP_S[ctx.device] + (WORKERS_S[ctx.device] if what.workers > 0 else 0.0)   # a Loop or a Stage
    segment = setup + per_round * trial
    if sample_s and isinstance(what, Loop):
        batch = point.size_bytes // what.sample_size
        made = batch * sample_s / max(1, min(what.workers, ctx.cores or usable_cores()))   # workers make batches at once
        batches = max(what.queued + 1, ctx.timing.warmup) + per_round * max(MIN_BATCHES, 2 * what.queued)
        epochs = batches * batch / max(1, length)   # each epoch's start starts the loader anew
        segment = setup * (1 + epochs) + max(batches * made, per_round * trial)
    elif sample_s and point.op == COLLATE:
        segment += POOL * point.size_bytes // what.sample_size * sample_s
    return p.rounds * segment
