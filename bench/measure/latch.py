"""The sleep latch: operations queued on the GPU behind a sleep kernel, timed once it ends.

An eager launch's time is the host's as much as the link's: a busy or slow host stretches every
small copy and collective. Queued behind a latch, the same operations run back to back once it
ends, however slowly the host launched them, so the events around them time the device alone
(nvbandwidth and p2pBandwidthLatencyTest block their streams the same way). The timing core's
`held` launch uses HeldClock.
"""
from __future__ import annotations

import time
from typing import Callable

from bench import lazy
from bench.measure.release import SharedRelease

torch = lazy.module("torch")

# A latch lasts twice the host's last queuing time, plus a margin, at most MAX_HOLD_S.
FIRST_HOLD_S = 1e-3
HOLD_MARGIN_S = 200e-6
MAX_HOLD_S = 0.5
HOLD_TRIES = 4    # a trial whose latch gave way is run again, with a longer latch, up to this many times
# Held trials are short and few ops long: the device's clock needs no long trial to be exact, no
# host mood needs averaging out, and every op of a trial waits in the stream's launch queue.
HELD_TRIAL_SHARE = 1 / 8   # of min_trial_s
HELD_MAX_OPS = 256
# A held copy's trials go round a ring of streams, a stream a trial (at least this many trials): the
# hardware channel a CUDA stream is given sets a small copy's pace, so one stream's figure is a draw
# and a ring's median is the machine's (docs/method.md, "Eager and held").
HELD_STREAMS = 8
_SLEEP_HZ: dict[int, float] = {}   # each GPU's cycles per second of torch.cuda._sleep's spin


class HeldClock:
    """CUDA events around operations held behind a sleep latch: the device's own time for them.

    start() queues a sleep kernel on the current stream and records the start event behind it;
    the trial's operations queue up behind the latch while it sleeps, so they run back to back
    once it ends, however slowly the host launched them (nvbandwidth and p2pBandwidthLatencyTest
    block their streams the same way). stop() asks whether the start event had already passed
    when the host finished queuing: if so the latch gave way and launch gaps may show, `again`
    says so, and the next latch is longer. Each latch lasts twice the last trial's queuing time
    (agreed over ranks: every rank sleeps as long and retries alike). `before_start` runs first
    (a barrier between ranks). With `release` (the ranks of one host), the latch is that shared
    word instead of a sleep: every rank's operations start together once all have queued them.
    """

    def __init__(self, before_start: Callable[[], None] = lambda: None,
                 agree: Callable[[list[float]], list[float]] = list, release: SharedRelease | None = None) -> None:
        self._before, self._agree, self._release = before_start, agree, release
        self.hold_s = FIRST_HOLD_S
        self.again = False
        self._start: torch.cuda.Event | None = None
        self._t0 = 0.0

    def start(self) -> None:
        self._before()
        if self._release is not None:
            self._release.hold()
        else:
            torch.cuda._sleep(sleep_cycles(self.hold_s))
        self._start = torch.cuda.Event(enable_timing=True)
        self._start.record()
        self._t0 = time.perf_counter()

    def stop(self, part_events=None) -> tuple[float, dict[str, float]]:
        queued_s = time.perf_counter() - self._t0
        gave_way = self._release.open() if self._release is not None else self._start.query()
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        gave_way, hold_s = self._agree([float(gave_way), 2 * queued_s + HOLD_MARGIN_S])
        self.again = gave_way > 0
        self.hold_s = min(MAX_HOLD_S, hold_s * (2 if self.again else 1))
        parts = {name: elapsed(ev if isinstance(ev, tuple) else (self._start, ev))
                 for name, ev in (part_events or {}).items()}
        return self._start.elapsed_time(end) / 1e3, parts


def sleep_cycles(seconds: float) -> int:
    """Cycles of torch.cuda._sleep that last about `seconds` on the current GPU (its clock read once)."""
    device = torch.cuda.current_device()
    if device not in _SLEEP_HZ:
        cycles = 10_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _SLEEP_HZ[device] = cycles / max(start.elapsed_time(end) / 1e3, 1e-9)
    return int(seconds * _SLEEP_HZ[device])


def elapsed(pair: tuple) -> float:
    """Seconds between two CUDA events, once the second has happened."""
    pair[1].synchronize()
    return pair[0].elapsed_time(pair[1]) / 1e3
