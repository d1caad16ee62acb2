"""One continuous stream of operations (an input pipeline: a producer feeding a consumer), cut
into trials at marks rather than restarted for each, so no pause between trials lets the producer
work ahead: the timing core's warm-up, calibration and trials for a stream."""
from __future__ import annotations

import math
import time
from typing import Callable

from bench import lazy
from bench.measure.timing import TimingConfig, Trial, grow

torch = lazy.module("torch")


class HostMarks:
    """Marks of a stream on the host's perf_counter: the host's own work, done when it returns."""

    def mark(self) -> float:
        return time.perf_counter()

    def seconds(self, start: float, end: float) -> float:
        return end - start


class EventMarks:
    """Marks of a stream as CUDA events on the current stream, recorded without waiting: each
    is the moment the device reached it, so a stream the host feeds too slowly shows the
    device's idle time, and one the device is slow to drain shows the device's pace."""

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        end.synchronize()
        return start.elapsed_time(end) / 1e3


class BusyMarks:
    """Marks of the seconds an operation itself took (`add`), not counting what the stream
    around it did: one stage's cost inside a longer loop."""

    def __init__(self) -> None:
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.total += seconds

    def mark(self) -> float:
        return self.total

    def seconds(self, start: float, end: float) -> float:
        return end - start


def measure_stream(step: Callable[[int], None], marks, cfg: TimingConfig, warmup: int = 0, min_ops: int = 1,
                   multiple: int = 1) -> list[Trial]:
    """One continuous stream of operations, cut into trials rather than restarted for each one.

    step(n) runs the stream's next n operations; `marks` reads the stream between two steps
    (HostMarks, EventMarks, BusyMarks). First max(warmup, cfg.warmup) operations, untimed (a
    producer's queue drains); then segments of growing length until one lasts min_trial_s
    (N as calibrate() sets it, from one reading: the stream is already warm); then cfg.trials
    trials of N operations back to back, nothing but a mark between two: no synchronize, no
    pause in which a producer could work ahead of its consumer. N is at least min_ops and
    cfg.min_iters, and a multiple of `multiple` (whole epochs), as are the warm-up and every
    segment. A trial under half of min_trial_s is flagged short (not run again: the stream goes on).
    Marks with a `count(start, end)` method say how many operations a segment held, where one
    step's count varies (a worker's item of as many operations as fit in a time); else n. Marks
    with a `parts(start, end)` method give each trial's parts: seconds the stream's own stages
    spent inside the segment, read at the same cuts.
    """
    n = stream_iters(step, marks, cfg, warmup, min_ops, multiple)
    return stream_trials(step, marks, cfg, n)


def stream_iters(step: Callable[[int], None], marks, cfg: TimingConfig, warmup: int = 0, min_ops: int = 1,
                 multiple: int = 1, known: int = 0) -> int:
    """measure_stream's warm-up and calibration: the N of its trials. `known` (an N an earlier
    stream of the same operation calibrated): the warm-up alone, and that N."""
    def whole(n: int) -> int:
        return -(-n // multiple) * multiple

    if max(warmup, cfg.warmup):
        step(whole(max(warmup, cfg.warmup)))
    least = whole(max(1, min_ops, cfg.min_iters))
    if known:
        return max(least, whole(known))
    n = least
    while True:
        start = marks.mark()
        step(n)
        t = marks.seconds(start, marks.mark())
        if t >= cfg.min_trial_s or n >= cfg.max_iters:
            break
        n = whole(grow(n, t, cfg))
    if t > 1.2 * cfg.min_trial_s:   # as calibrate(): fewer operations still last min_trial_s
        n = max(least, whole(math.ceil(n * 1.2 * cfg.min_trial_s / t)))
    return n


def stream_trials(step: Callable[[int], None], marks, cfg: TimingConfig, n: int) -> list[Trial]:
    """measure_stream's trials: cfg.trials of n operations, cut at marks."""
    cuts = [marks.mark()]
    for _ in range(cfg.trials):
        step(n)
        cuts.append(marks.mark())
    count = getattr(marks, "count", lambda a, b: n)
    parts = getattr(marks, "parts", lambda a, b: {})
    trials = [(count(a, b), marks.seconds(a, b), parts(a, b)) for a, b in zip(cuts, cuts[1:])]
    return [Trial(k, t, within, short=t < cfg.min_trial_s / 2) for k, t, within in trials]
