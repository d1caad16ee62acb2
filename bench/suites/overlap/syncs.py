"""Synchronizations (sync_device, sync_item, sync_event, sync_stream): a step is some work, then
the synchronization; its cost is the step's time less the work's alone. Idle: the work is one
tiny kernel; busy: a matrix product long enough that the GPU, not the host, sets the pace.
"""
from __future__ import annotations

import math
from typing import Callable

from bench import lazy
from bench.contract import Context, Point
from bench.measure import timing
from bench.measure.timing import HostClock, Trial
from bench.results import Sample
from bench.suites.overlap.model import Settings
from bench.suites.overlap.state import OverlapState
from bench.suites.overlap.trials import median_op
from bench.suites.overlap.work import TINY

torch = lazy.module("torch")


class _Work:
    """A step's work and its fresh result: idle, one tiny sum; busy, a product and C[0, 0]."""

    def __init__(self, state: OverlapState, busy: bool, n: int) -> None:
        self.product = state.product(n) if busy else None
        self.ones = state.ones()
        self.last = None
        if busy:
            self.product.c.zero_()   # a stale C would fail the check below
            p = self.product
            self.expected = float(p.a[0].float() @ p.b[:, 0].float())
        else:
            self.expected = float(TINY)

    def __call__(self):
        if self.product is None:
            self.last = self.ones.sum()
        else:
            self.product()
            self.last = self.product.c[0, 0]
        return self.last

    def correct(self, value: float) -> bool:
        """value is the work's result: exact for the sum; at bf16's tolerance (Matmul.correct) for C[0, 0]."""
        if self.product is None:
            return value == self.expected
        scale = math.sqrt(self.product.n)   # the entries' spread: A and B hold N(0, 1)
        return self.product.correct() and math.isclose(value, self.expected, rel_tol=1e-2, abs_tol=1e-2 * scale)


def _sync_action(kind: str, state: OverlapState, seen: list) -> Callable:
    if kind == "device":
        return lambda result: torch.cuda.synchronize()
    if kind == "item":
        return lambda result: seen.__setitem__(0, result.item())
    if kind == "event":
        event = torch.cuda.Event()

        def wait(result) -> None:
            event.record()
            event.synchronize()

        return wait
    side = state.streams()[0]   # the device waits, not the host
    return lambda result: side.wait_stream(torch.cuda.current_stream())


def sync_point(point: Point, s: Settings, ctx: Context, state: OverlapState) -> list[Sample]:
    kind, busy = point.op.removeprefix("sync_"), point.mode == "busy"
    work = _Work(state, busy, s.sync_matmul)
    seen = [math.nan]
    act = _sync_action(kind, state, seen)

    def steps(n: int) -> None:
        for _ in range(n):
            act(work())

    def works(n: int) -> None:
        for _ in range(n):
            work()

    clock = HostClock(torch.cuda.synchronize)
    with_sync = timing.measure(steps, clock, ctx.timing)
    alone = timing.measure(works, clock, ctx.timing)
    torch.cuda.synchronize()
    verified = work.correct(float(work.last)) and (kind != "item" or work.correct(seen[0]))
    what = f"work: one {s.sync_matmul}x{s.sync_matmul} bf16 product" if busy else \
        f"work: one sum of {TINY} floats"
    return sync_rows(point, with_sync, alone, verified, what)


def sync_rows(point: Point, steps: list[Trial], works: list[Trial], verified: bool, what: str) -> list[Sample]:
    """Per trial: 'step' (work then the sync), 'work' (the work alone) and 'cost' (a step less
    the median work): seconds per step in time_s, no bandwidth."""
    base = median_op(works)
    failed = f"data check failed: a result differs from the expected; {what}"
    status, note = ("ok", what) if verified else ("failed", failed)
    rows = []
    for part, trials, less in (("step", steps, 0.0), ("work", works, 0.0), ("cost", steps, base)):
        for i, t in enumerate(trials):
            rows.append(point.sample(trial=i, iters=t.iters, part=part, time_s=t.per_op_s - less,
                                     verified=verified, status=status,
                                     note=note + ("; short trial" if t.short else "")))
    return rows
