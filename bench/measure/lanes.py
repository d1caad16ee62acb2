"""Copies on several streams at once, started together: every GPU at once, or every peer with one GPU.

A `Lane` is one stream's share of a point. `Together` is an enqueue(n) for the timing core that
puts n copies on every lane and starts them at once on every GPU; `SpanClock` times each part (a
GPU, one peer's traffic) on its own GPU's clock. `Streams` hands out each GPU's streams.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

from bench import lazy
from bench.measure.latch import MAX_HOLD_S, sleep_cycles
from bench.measure.timing import Trial

torch = lazy.module("torch")


class Streams:
    """Each GPU's streams for copies on several streams at once: [0] a latch, then lanes.

    Made together: torch hands streams out round-robin from a pool of 32 per GPU, so streams made
    far apart may be one CUDA stream, and two lanes on one stream would run one after the other.
    Enough for a lane and a barrier stream per peer (p2p's concurrent ops).
    """

    def __init__(self, gpu_count: int) -> None:
        self.per_gpu = 1 + 2 * max(2, gpu_count - 1)
        self._made: dict[int, list] = {}

    def __call__(self, gpu: int) -> list:
        if gpu not in self._made:
            self._made[gpu] = [torch.cuda.Stream(device=gpu) for _ in range(self.per_gpu)]
        return self._made[gpu]


def sync_all(gpus: Iterable[int]) -> None:
    for gpu in gpus:
        torch.cuda.synchronize(gpu)


def event():
    return torch.cuda.Event(enable_timing=True)


@dataclass(frozen=True)
class Lane:
    """One stream's share of a point that runs on several streams at once."""

    gpu: int                             # the GPU the stream belongs to
    stream: object                       # a torch.cuda.Stream of that GPU
    enqueue: Callable[[int], None]       # puts n copies on the current stream


@dataclass
class _Call:
    n: int
    enqueue_s: float
    sleeps: dict   # GPU -> (sleep start event, begin event)

    def slept_s(self) -> float:
        """The shortest sleep any GPU actually had, by its own clock."""
        return min(start.elapsed_time(begin) / 1e3 for start, begin in self.sleeps.values())


class Together:
    """An enqueue(n) for the timing core: n copies on every lane, started at once on every GPU.

    Each GPU's first stream (the latch) sleeps for longer than the host takes to enqueue every
    copy, then records `begin`, which every lane on that GPU waits for: the copies queue up behind
    the latch and start together, so enqueue cost stays out of the timing. The sleep is sized from
    the last call's enqueue time; afterwards each GPU's own clock says how long it slept, and the
    calls where a sleep ended before the host was done are counted (note()). A part (a GPU, or one
    peer's traffic) is timed from its GPU's begin to the last of its lanes' ends (SpanClock).
    A GPU's lanes plus its latch stay within CUDA's 8 hardware queues per GPU for up to 8 GPUs;
    beyond that, streams share queues and can wait on each other.
    """

    def __init__(self, parts: dict[str, list[Lane]], streams: Streams) -> None:
        self.parts = parts
        self.gpus = sorted({lane.gpu for lanes in parts.values() for lane in lanes})
        self.latches = {gpu: streams(gpu)[0] for gpu in self.gpus}
        self.per_op_s = 50e-6
        self.calls: list[_Call] = []
        for lanes in parts.values():   # compile kernels and enable peer access before any call is sized
            for lane in lanes:
                with torch.cuda.stream(lane.stream):
                    lane.enqueue(1)
        sync_all(self.gpus)

    def __call__(self, n: int) -> dict:
        ops = n * sum(len(lanes) for lanes in self.parts.values())
        hold = min(MAX_HOLD_S, 1.5 * self.per_op_s * ops + 200e-6)
        t0 = time.perf_counter()
        sleeps, begins = {}, {}
        for gpu, latch in self.latches.items():
            with torch.cuda.stream(latch):
                start, begins[gpu] = event(), event()
                start.record()
                torch.cuda._sleep(sleep_cycles(hold))
                begins[gpu].record()
            sleeps[gpu] = (start, begins[gpu])
        ends: dict[str, list] = {}
        for name, lanes in self.parts.items():
            for lane in lanes:
                with torch.cuda.stream(lane.stream):
                    lane.stream.wait_event(begins[lane.gpu])
                    lane.enqueue(n)
                    ends.setdefault(name, []).append(event())
                    ends[name][-1].record()
        spent = time.perf_counter() - t0
        self.per_op_s = spent / ops
        self.calls.append(_Call(n, spent, sleeps))
        return {name: (begins[lanes[0].gpu], ends[name]) for name, lanes in self.parts.items()}

    def note(self, trials: list[Trial]) -> str:
        """What to say when the latch gave way in calls with the trials' iteration count."""
        n = trials[0].iters
        calls = [c for c in self.calls if c.n == n]
        late = sum(c.enqueue_s >= c.slept_s() for c in calls)
        return (f"start latch ran out before every copy was enqueued in {late} of {len(calls)} calls of "
                f"{n} copies: the GPUs may not have started together" if late else "")


class SpanClock:
    """Each part timed on its own GPU's clock, from its begin event to the last of its end events;
    a trial's time is the longest part's (events of two GPUs cannot be compared)."""

    def start(self) -> None:
        pass

    def stop(self, part_events) -> tuple[float, dict[str, float]]:
        spans = {}
        for name, (begin, ends) in part_events.items():
            for end in ends:
                end.synchronize()
            spans[name] = max(begin.elapsed_time(end) for end in ends) / 1e3
        return max(spans.values()), spans
