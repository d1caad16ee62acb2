"""One timing core for every suite: warm-up, an adaptive iteration count, repeated trials.

A trial enqueues N back-to-back operations between two clock readings: CUDA events on the
current stream for asynchronous GPU work, or the host's perf_counter with a synchronize on
both sides where the host itself blocks (pageable copies, CPU and gloo work). N doubles (or
jumps by the measured rate) until trials at N last `min_trial_s` by two readings that agree (the
warm-up's rate may be one; a third decides where they do not), so timer resolution and the
interpreter's launch cost are dwarfed and no single outlier reading sets N; a reading that set N
alone, at that N, is the first trial. A trial shorter
than half of `min_trial_s` is measured once more, and flagged `short` if it still is. Warm-up is
`warmup` operations, or one that alone lasts min_trial_s. In graph mode about min_trial_s of
operations are captured once in a CUDA graph and each trial replays it:
the trial then measures the wire, not Python. Held (HeldClock): the trial's operations are
queued behind a sleep kernel on the stream and timed by events once it ends, so the trial is the
device's own time for them, which neither the launch path nor a slow host can move (a latch that
gives way before the host has queued everything is sized up and the trial run again; the ranks
of one host wait instead on one word of shared memory, raised once all have queued, and start
together: bench.measure.release). A
producer feeding a consumer (an input pipeline) is measured as one continuous stream instead
(bench.measure.stream).
"""
from __future__ import annotations

import bisect
import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping, Protocol

from bench import lazy, results
from bench.measure.latch import HELD_MAX_OPS, HELD_TRIAL_SHARE, HOLD_TRIES, HeldClock, elapsed
from bench.measure.release import SharedRelease

torch = lazy.module("torch")

# agree(values) returns each value reduced over the ranks of a collective (the slowest's, by
# default): every decision is taken on agreed values, so every rank takes the same branches and
# runs the same operations. One call agrees many values: each is a round trip between the ranks.
Agree = Callable[[list[float]], list[float]]

# enqueue(n) puts n back-to-back operations on the current stream. It may return events that
# time parts of the work (a bidirectional copy's two streams): an end event, timed from the
# trial's start, or a (start, end) pair, needed where a part runs on another GPU.
PartEvents = "Mapping[str, torch.cuda.Event | tuple[torch.cuda.Event, torch.cuda.Event]] | None"
Enqueue = Callable[[int], PartEvents]


@dataclass(frozen=True)
class TimingConfig:
    """What the timing core needs; bench.settings.TimingSettings checks user input into it."""

    warmup: int = 3
    trials: int = 5
    min_trial_s: float = 0.004
    min_iters: int = 1
    max_iters: int = 10000


@dataclass(frozen=True)
class Trial:
    iters: int
    time_s: float
    parts: Mapping[str, float] = field(default_factory=dict)
    short: bool = False   # shorter than half of min_trial_s, twice: timer resolution may show in it
    fastest_rank_s: float = math.nan   # a collective's fastest rank's trial time (time_s is the slowest's)
    host_pace_s: float = math.nan      # host_pace() just before the trial, where the host's pace sets the op's
    caveat: str = ""                   # what a reader must know of this trial's time (a latch that gave way)

    @property
    def per_op_s(self) -> float:
        return self.time_s / self.iters


class Clock(Protocol):
    def start(self) -> None: ...

    def stop(self, part_events: PartEvents = None) -> tuple[float, dict[str, float]]: ...


class HostClock:
    """perf_counter between two calls of `sync` (a device synchronize, a barrier, or nothing)."""

    def __init__(self, sync: Callable[[], None] = lambda: None) -> None:
        self._sync = sync
        self._t0 = 0.0

    def start(self) -> None:
        self._sync()
        self._t0 = time.perf_counter()

    def stop(self, part_events=None) -> tuple[float, dict[str, float]]:
        self._sync()
        seconds = time.perf_counter() - self._t0
        return seconds, {name: elapsed(ev) for name, ev in (part_events or {}).items() if isinstance(ev, tuple)}


class EventClock:
    """CUDA events on the current stream; `before_start` runs first (a barrier between ranks)."""

    def __init__(self, before_start: Callable[[], None] = lambda: None) -> None:
        self._before = before_start
        self._start: torch.cuda.Event | None = None

    def start(self) -> None:
        self._before()
        self._start = torch.cuda.Event(enable_timing=True)
        self._start.record()

    def stop(self, part_events=None) -> tuple[float, dict[str, float]]:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        parts = {name: elapsed(ev if isinstance(ev, tuple) else (self._start, ev))
                 for name, ev in (part_events or {}).items()}
        return self._start.elapsed_time(end) / 1e3, parts


def _same(values: list[float]) -> list[float]:
    return list(values)


def device_clock(launch: str, before_start: Callable[[], None] = lambda: None,
                 agree: Agree = _same, release: SharedRelease | None = None) -> EventClock | HeldClock:
    """The clock of a GPU point by its launch: held behind a latch (the ranks' shared `release`
    where given), else events around the launches."""
    return HeldClock(before_start, agree, release) if launch == "held" else EventClock(before_start)


def _run_trial(enqueue: Enqueue, clock: Clock, n: int) -> Trial:
    for _ in range(HOLD_TRIES):
        clock.start()
        part_events = enqueue(n)
        total, parts = clock.stop(part_events)
        if not getattr(clock, "again", False):
            return Trial(n, total, parts)
    return Trial(n, total, parts, caveat=f"latch gave way {HOLD_TRIES} times: launch gaps may show")


def grow(n: int, t: float, cfg: TimingConfig) -> int:
    """The next N to try after trials of n operations took t seconds: double it, or jump by the rate."""
    guess = math.ceil(n * 1.2 * cfg.min_trial_s / max(t, 1e-9))
    return min(cfg.max_iters, max(2 * n, guess))


# A reading is taken on trust, without another at its N, when its rate agrees within this share
# with the warm-up's, an independent reading; else a second reading must agree with it, as the
# median of three asks of two, and a third decides where they disagree.
AGREE_WITH_WARM_UP = 0.25


def _agrees(t: float, reference: float) -> bool:
    return reference > 0 and abs(t / reference - 1) <= AGREE_WITH_WARM_UP


def calibrate(enqueue: Enqueue, clock: Clock, cfg: TimingConfig, agree: Agree = _same,
              per_op: float = math.nan) -> int:
    """Iterations per trial so that one trial lasts at least cfg.min_trial_s (within the bounds).

    N starts where the warm-up's agreed time per operation (`per_op`, NaN: unknown) puts it, else
    at 1, and grows until a trial reaches min_trial_s (or N reaches max_iters). A reading there
    whose rate agrees with the warm-up's is taken; else a second reading at that N, taken where
    the two agree, else the median of three, so neither a slow hiccup (N stays too small) nor a
    fast glitch (N jumps far too high) sets N alone. Every reading is agreed over the ranks
    (`agree`), so every rank takes the same branches and runs the same operations.
    """
    return _calibrated(enqueue, clock, cfg, agree, per_op, paced=False)[0]


def _calibrated(enqueue: Enqueue, clock: Clock, cfg: TimingConfig, agree: Agree, per_op: float,
                paced: bool) -> tuple[int, Trial | None]:
    """calibrate()'s N, and its last reading as a trial where that reading alone set N (taken on
    trust, at that very N, not short): a trial like any other (`paced`: the host's pace read
    before it, agreed with its time in one round trip), so measure() runs one trial fewer."""
    least = min(cfg.max_iters, max(1, cfg.min_iters))

    def reading() -> tuple[Trial, float, float]:
        pace = _reading() if paced else math.nan
        trial = _run_trial(enqueue, clock, n)
        t, pace = agree([trial.time_s, pace])
        return trial, t, pace

    n = 1 if not per_op > 0 else min(cfg.max_iters, max(1, math.ceil(1.2 * cfg.min_trial_s / per_op)))
    while True:
        last, t, pace = reading()
        alone = True
        if t >= cfg.min_trial_s or n >= cfg.max_iters:
            if not _agrees(t / n, per_op):
                alone, second = False, reading()[1]
                t = statistics.median([t, second] + ([] if _agrees(second, t) else [reading()[1]]))
            if t >= cfg.min_trial_s or n >= cfg.max_iters:
                break
        n = grow(n, t, cfg)
    if t > 1.2 * cfg.min_trial_s:
        # Fewer operations take no less than their share of the time (a fixed cost only adds to
        # it), so scaling down by the median rate still gives trials of at least min_trial_s.
        n = math.ceil(n * 1.2 * cfg.min_trial_s / t)
    n = int(agree([min(cfg.max_iters, max(n, least))])[0])
    if not (alone and n == last.iters and t >= cfg.min_trial_s / 2):
        return n, None
    if paced:
        _note(pace)
    return n, replace(last, host_pace_s=pace)


def _trials(enqueue: Enqueue, clock: Clock, n: int, cfg: TimingConfig, agree: Agree,
            paced: bool = False, first: Trial | None = None) -> list[Trial]:
    """cfg.trials trials, `first` (calibration's last reading) among them; `paced`: each after a
    reading of the host's pace. Each trial's time and pace are agreed together after it (each the
    slowest rank's): one round trip between the ranks a trial, not two. A trial whose agreed time
    is far shorter than calibration promised is run again, then kept but flagged `short`. Each
    trial keeps this rank's own time."""
    trials = [] if first is None else [first]
    for _ in range(cfg.trials - len(trials)):
        trial, t = _agreed_trial(enqueue, clock, n, agree, paced)
        if t < cfg.min_trial_s / 2:
            trial, t = _agreed_trial(enqueue, clock, n, agree, paced)
            trial = replace(trial, short=t < cfg.min_trial_s / 2)
        trials.append(trial)
    return trials


def _agreed_trial(enqueue: Enqueue, clock: Clock, n: int, agree: Agree, paced: bool) -> tuple[Trial, float]:
    """A trial with its agreed pace (read before it), and its agreed time. The round trip after
    each trial also lines the ranks up for the next: with the trials' agreements gathered into
    one after the last, a rank started late far more often (docs/usage.md). Nor does it stand
    for the barrier before the next trial: the Python between them (the pace's reading, this
    trial's bookkeeping) takes each rank its own time, and without that barrier a rank started
    bandwidth-bound collectives late more often (docs/method.md, "Timing")."""
    pace = _reading() if paced else math.nan
    trial = _run_trial(enqueue, clock, n)
    t, pace = agree([trial.time_s, pace])
    if paced:
        _note(pace)
    return replace(trial, host_pace_s=pace), t


# ---------------------------------------------------------------- the host's pace
# A shared host's CPUs come in moods: a fixed piece of Python work takes far longer for seconds at
# a time, and every eager launch slows with it (docs/method.md, "The host's pace"). Ops whose time
# the host may set (under HOST_BOUND_S, or host-clocked) read the pace before each trial; where no
# trial of a short GPU op ran at the host's usual pace, it waits (at most WAIT_FOR_HOST_S, and all
# waits at most WAIT_SHARE of the time) for the host to come back and measures again. Readers keep
# the trials taken at the host's usual pace (results.usable_rows).
PACE_WORK = 5000          # iterations of the probe: short beside a trial, long beside a timer's tick
PACE_SLACK = results.PACE_SLACK   # a reading this much above the usual one: the host in a slow mood
WAIT_FOR_HOST_S = 2.0     # for one point
WAIT_SHARE = 0.025        # of the time since the first reading, at most, spent waiting (a slow host's cost)
_POLL_S = 0.02
_readings: list[float] = []   # this process's agreed readings before trials, sorted
_clock = {"first": math.nan, "waited": 0.0}   # when the first reading was taken; seconds waited since


def host_pace() -> float:
    """Seconds the host takes for a fixed piece of single-thread Python work: its pace now."""
    t0 = time.perf_counter()
    x = 0
    for i in range(PACE_WORK):
        x += i
    return time.perf_counter() - t0


def _reading() -> float:
    """This rank's reading of host_pace(); the first starts the clock of the run's waiting."""
    if math.isnan(_clock["first"]):
        _clock["first"] = time.perf_counter()
    return host_pace()


def _note(agreed: float) -> None:
    bisect.insort(_readings, agreed)


def usual_of(readings: list[float]) -> float:
    """The usual one of sorted readings of host_pace(): as the readers take a run's
    (results.USUAL_PACE_QUANTILE, a low quantile, not the luckiest reading)."""
    return readings[int(results.USUAL_PACE_QUANTILE * (len(readings) - 1))]


def usual_pace() -> float:
    """This process's usual reading (usual_of its readings so far): not the luckiest, else a
    ranks' pace, read beside NCCL's own busy threads, would hardly ever be usual and every small
    collective would wait for the host."""
    return usual_of(_readings) if _readings else math.inf


def at_pace(pace: float) -> bool:
    """Whether a reading of host_pace() is the host at its usual pace."""
    return not pace > PACE_SLACK * usual_pace()


def _any_slow(paces: list[float], agree: Agree) -> bool:
    """Whether no reading in `paces` was at the usual pace, agreed over the ranks: each rank's
    usual reading is its own (rank 0 alone measures some suites' points), so each rank may
    judge the same agreed readings apart, and every rank must take the branch together."""
    return agree([float(not any(at_pace(p) for p in paces))])[0] > 0


def _wait_for_host(agree: Agree) -> bool:
    """Polls the host's pace until it is back to usual (True) or WAIT_FOR_HOST_S passed (False).
    Every decision is taken on agreed readings, so every rank polls as often; the polls, taken
    while the host is slow, are not noted among the usual readings."""
    budget = WAIT_SHARE * (time.perf_counter() - _clock["first"]) - _clock["waited"]
    if agree([float(budget > 0)])[0] == 0:   # every rank waits where any may: they stay in step
        return False
    start = time.perf_counter()
    try:
        for _ in range(int(WAIT_FOR_HOST_S / _POLL_S)):
            if not _any_slow([agree([_reading()])[0]], agree):
                return True
            time.sleep(_POLL_S)
        return False
    finally:
        _clock["waited"] += time.perf_counter() - start


# Ops faster than this are bound by the host's launch cost, which comes in moods (a slow mode
# ~3x the fast one was seen in torch.distributed's eager launches on 2x H200, for tens of ms):
# their trials are split SMALL_OP_SPLIT ways, the same timed budget in more, shorter trials, so
# one such moment moves a few trials of many rather than the median of five. The warm-up's rate
# says which ops are small (it errs slow: first calls cost more), so N is calibrated for the
# shorter trials directly.
SMALL_OP_S = 100e-6
SMALL_OP_SPLIT = 3
# Ops under this may still be set by the host's launch path (a 45 µs copy read 74 µs in a slow
# mood, warm-up and all, so SMALL_OP_S alone would miss it): their trials read the host's pace.
HOST_BOUND_S = 1e-3
# Ops this short are the host's launch path's: only they wait for a slow host to come back.
WAIT_BELOW_S = 300e-6


def warm_up(enqueue: Enqueue, clock: Clock, cfg: TimingConfig, agree: Agree = _same) -> float:
    """cfg.warmup untimed operations, or one where one alone lasts min_trial_s (a 1 GiB copy needs
    no second to be warm); returns the agreed time per operation of the last reading."""
    if not cfg.warmup:
        return math.nan
    t = agree([_run_trial(enqueue, clock, 1).time_s])[0]
    if cfg.warmup > 1 and t < cfg.min_trial_s:
        t = agree([_run_trial(enqueue, clock, cfg.warmup - 1).time_s])[0] / (cfg.warmup - 1)
    return t


def measure(
    enqueue: Enqueue,
    clock: Clock,
    cfg: TimingConfig,
    agree: Agree = _same,
    read_pace: bool = True,
) -> list[Trial]:
    """Warm up, calibrate N, then cfg.trials trials of N back-to-back operations each (ops the
    warm-up finds under SMALL_OP_S: SMALL_OP_SPLIT times as many trials of a SMALL_OP_SPLIT-th
    of min_trial_s; without a warm-up no op is known to be small). Ops under HOST_BOUND_S and
    host-clocked ones read the host's pace before each trial; when none of the trials of a GPU op
    under WAIT_BELOW_S ran at the host's usual pace, as many again follow once it is back (if it
    comes back within WAIT_FOR_HOST_S). read_pace=False where no host runs the operations (the
    plan's replay on a virtual clock): no reading is taken, and none joins this process's."""
    per_op = warm_up(enqueue, clock, cfg, agree)   # agreed: every rank decides alike
    held = isinstance(clock, HeldClock)   # the device's own time: the host's moods do not reach it
    if held:
        cfg = replace(cfg, min_trial_s=cfg.min_trial_s * HELD_TRIAL_SHARE, max_iters=min(cfg.max_iters, HELD_MAX_OPS))
    elif per_op < SMALL_OP_S:
        cfg = replace(cfg, trials=cfg.trials * SMALL_OP_SPLIT, min_trial_s=cfg.min_trial_s / SMALL_OP_SPLIT)
    # The warm-up errs slow (a first call sets up peers, NCCL, caches), so an op it finds under
    # HOST_BOUND_S is one for sure: calibration reads the pace before its readings, and its last
    # one can be the first trial. Where only the calibrated rate says so, it cannot.
    pace_first = read_pace and not held and (isinstance(clock, HostClock) or not per_op >= HOST_BOUND_S)
    n, first = _calibrated(enqueue, clock, cfg, agree, per_op, pace_first)
    # The calibrated N, agreed on every rank, says too how long an op takes.
    calibrated = 1.2 * cfg.min_trial_s / n
    per_op = calibrated if math.isnan(per_op) else min(per_op, calibrated)
    paced = read_pace and not held and (per_op < HOST_BOUND_S or isinstance(clock, HostClock))
    trials = _trials(enqueue, clock, n, cfg, agree, paced, first if paced == pace_first else None)
    # Only GPU work waits: the device's clock is what a slow host must not set; work the host does
    # itself (and tests on CPUs shared with other tests) keeps its readings for the readers to sort.
    waits = isinstance(clock, EventClock) and per_op < WAIT_BELOW_S
    if paced and waits and _any_slow([t.host_pace_s for t in trials], agree) and _wait_for_host(agree):
        trials += _trials(enqueue, clock, n, cfg, agree, paced)
    return trials


_CAPTURE_STREAMS: dict[int, torch.cuda.Stream] = {}


@contextlib.contextmanager
def capture(graph: torch.cuda.CUDAGraph) -> Iterator[None]:
    """torch.cuda.graph without its gc.collect() and empty_cache() on every capture: those cost
    tens of milliseconds each, and a sweep captures hundreds of graphs. Capture runs on a side
    stream of the current device (never the legacy default stream), as torch's does."""
    device = torch.cuda.current_device()
    stream = _CAPTURE_STREAMS.setdefault(device, torch.cuda.Stream(device))
    torch.cuda.synchronize()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            yield
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)


def measure_graph(
    enqueue: Enqueue,
    clock: Clock,
    cfg: TimingConfig,
    agree: Agree = _same,
    max_graph_ops: int = 256,
) -> list[Trial]:
    """Capture up to `max_graph_ops` operations in one CUDA graph; a trial replays it k times.

    The graph holds about min_trial_s of operations by the eager warm-up's rate (eager is no
    faster than a replay, so a replay lasts at most that); k comes from calibration, so a trial
    still lasts min_trial_s.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # libraries (NCCL, cuBLAS) must be warm before a capture
        enqueue(1)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    per_op = warm_up(enqueue, clock, replace(cfg, warmup=max(1, cfg.warmup)), agree)  # agreed: same graph on every rank
    ops_per_graph = max(1, min(max_graph_ops, math.ceil(1.2 * cfg.min_trial_s / max(per_op, 1e-9))))
    graph = torch.cuda.CUDAGraph()
    with capture(graph):
        enqueue(ops_per_graph)

    def replay(k: int) -> None:
        for _ in range(k):
            graph.replay()

    replay(1)
    # The first replay (it uploads the graph) ends before calibration's first barrier: without
    # NCCL's graph mixing support no eager collective may be issued while a replay still runs.
    torch.cuda.synchronize()
    replays = calibrate(replay, clock, TimingConfig(0, 1, cfg.min_trial_s, 1, max(1, cfg.max_iters // ops_per_graph)), agree)
    trials = _trials(replay, clock, replays, cfg, agree)
    return [replace(t, iters=t.iters * ops_per_graph) for t in trials]
