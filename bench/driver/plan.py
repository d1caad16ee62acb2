"""The plan: what a run will measure and about how long it will take, before anything is allocated.

Each point's cost is the timing core's own work, replayed: bench.timing.measure runs on a
virtual clock that advances by the point's time per operation (warm-up, calibration growing N
until a trial lasts min_trial_s, the two confirming readings, the trials), so the model follows
the core as it changes. To that come what a point costs besides its operations (buffers, data
checks, a results rewrite, graph captures) and what a suite costs once (spawning ranks, NCCL's
start-up, per world of ranks).

Times per operation come from the committed reference runs of the same machine kind
(results/reference/<label>/, else those of the same GPU model with the most GPUs; read from the
table bench.driver.reference_times ships, which needs no pandas): the same
point, else the closest series of the same op and variant, its sizes interpolated on a log-log
line and another world size scaled by the bus factor. Where no reference has the series, a
model of latency + bytes / link bandwidth gives it. A reference run also refines the cost per
point: its suite wall time less its own replayed timing, per point.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from bench import lazy, suites
from bench.driver.machine import Machine
from bench.driver.sweep import Planned
from bench.links import Speeds
from bench.points import SERIES_KEYS
from bench.measure import timing
from bench.measure.latch import HOLD_MARGIN_S, HeldClock
from bench.measure.timing import TimingConfig
from bench.results import point_key
from bench.driver import reference_times
from bench.driver.reference_times import COLUMNS, RunTimes
from bench.contract import Overhead, Point

np = lazy.module("numpy")

LONG_S = 600.0          # above this, a run says plainly that it is long
GRAPH_OPS = 256         # timing.measure_graph's max_graph_ops: operations captured in one graph


@dataclass
class SuiteEstimate:
    name: str
    points: int
    timing_s: float         # warm-up, calibration and trials
    other_s: float          # per-point work besides them, and start-up
    basis: str              # where per-op times and per-point costs came from
    worlds: str = ""        # a distributed suite's worlds of ranks, and how they share this machine's cores

    @property
    def seconds(self) -> float:
        return self.timing_s + self.other_s


# A run's own cost besides its suites: the interpreter and imports, CUDA's and NVML's start, the
# machine's description, the plan, the exit (RUN_START_S), and its summary and verdicts, which
# grow with its points (SUMMARY_S a point). Measured as wall time less the suites' times on 4x
# H200 (2026-11-27, host 3e836531b4f2, results/noise/pipeline-h200-x4/x4d): 5.1 s for the
# pipeline's quick default (40 points); with the summary's medians grouped once, 6.7 s for the
# default sweep (551 points) in both runs on host 572a57254e62 (results/noise/samehost/h200-x4-572a57254e62).
# On the project's 2-core CPU machine, idle: 2.5 s for the default sweep (94 points) and 2.6 s for
# the pipeline's quick default (36).
RUN_START_S = {"cuda": 4.8, "cpu": 2.5}
SUMMARY_S = {"cuda": 0.0035, "cpu": 0.0}


@dataclass
class Plan:
    machine: Machine
    suites: list[SuiteEstimate]
    skipped: list[str] = field(default_factory=list)
    startup_s: float = 0.0
    pace_here_s: float | None = None    # this host's usual pace, where the plan scaled its host's work by it
    pace_basis_s: float | None = None   # the basis host's

    @property
    def seconds(self) -> float:
        return self.startup_s + sum(s.seconds for s in self.suites)

    @property
    def points(self) -> int:
        return sum(s.points for s in self.suites)


# ---------------------------------------------------------------- the timing core, replayed


class _VirtualClock:
    """A timing.Clock whose trials last `per_op` seconds an operation plus `per_trial`; it adds up
    the time they would take. Its `enqueue` is the operation: it only notes how many."""

    def __init__(self, per_op: float, per_trial: float) -> None:
        self.per_op, self.per_trial = per_op, per_trial
        self.elapsed = 0.0
        self._n = 0

    def enqueue(self, n: int) -> None:
        self._n = n

    def start(self) -> None:
        pass

    def stop(self, part_events=None) -> tuple[float, dict[str, float]]:
        seconds = self._n * self.per_op + self.per_trial
        self.elapsed += seconds
        return seconds, {}


class _HeldVirtualClock(_VirtualClock, HeldClock):
    """A held trial replayed: its device time is `per_op` an operation, but the host first queues
    every operation (`host_op` each, its eager time) behind a latch twice that long."""

    def __init__(self, per_op: float, per_trial: float, host_op: float) -> None:
        super().__init__(per_op, per_trial)
        self.host_op, self.again = host_op, False

    def stop(self, part_events=None) -> tuple[float, dict[str, float]]:
        seconds = self._n * self.per_op
        self.elapsed += seconds + 2 * self._n * self.host_op + HOLD_MARGIN_S + self.per_trial
        return seconds, {}


def timing_seconds(per_op: float, cfg: TimingConfig, graph: bool = False, per_trial: float = 0.0,
                   held_host_op: float | None = None) -> float:
    """Seconds the timing core spends on one point whose operation takes `per_op` seconds (held:
    `held_host_op` the host's time to launch one, what its latch must outlast)."""
    if held_host_op is not None:
        clock = _HeldVirtualClock(max(per_op, 1e-9), per_trial, max(held_host_op, per_op))
        timing.measure(clock.enqueue, clock, cfg, read_pace=False)
        return clock.elapsed
    clock = _VirtualClock(max(per_op, 1e-9), per_trial)
    if not graph:
        timing.measure(clock.enqueue, clock, cfg, read_pace=False)
        return clock.elapsed
    # measure_graph's steps (it needs a GPU to run): a warm-up on a side stream and the timed
    # warm-up whose rate sizes the graph, one replay, the calibration of replays per trial, the trials.
    per = timing.warm_up(clock.enqueue, clock, replace(cfg, warmup=max(1, cfg.warmup)))
    ops = max(1, min(GRAPH_OPS, math.ceil(1.2 * cfg.min_trial_s / max(per, 1e-9))))
    replays = _VirtualClock(ops * clock.per_op, per_trial)
    k = timing.calibrate(replays.enqueue, replays, TimingConfig(0, 1, cfg.min_trial_s, 1, max(1, cfg.max_iters // ops)))
    trials = cfg.trials * (k * replays.per_op + per_trial)
    return clock.elapsed + (1 + ops) * clock.per_op + replays.elapsed + trials


# ---------------------------------------------------------------- times per operation: a model


def model_op_time(point: Point, planned: Planned, speeds: Speeds) -> float:
    """The suite's model of one operation from the links' speeds (its op_time), else latency +
    bytes over what copies reach of PCIe: where no reference run has the series."""
    modelled = planned.suite.op_time(point, speeds)
    return modelled if modelled is not None else 10e-6 + point.size_bytes / (speeds.pcie() * 0.87 * 1e9)


# ---------------------------------------------------------------- times per operation: reference runs


# A reference series stands for a point where its series keys agree, the link class too; the soft
# ones are matched as far as they can be (weighted), so that another world size or engine still
# gives a time.
_SOFT = {"world_size": 4, "nnodes": 4, "api": 2, "engine": 2, "dtype": 1, "numa": 1}
_HARD = (*(k for k in SERIES_KEYS if k not in _SOFT), "link")


@dataclass
class _Series:
    """One curve of a reference run: a point's median time per op against size."""

    soft: dict
    sizes: np.ndarray
    times: np.ndarray
    start: str

    def at(self, size: int) -> float:
        if size <= self.sizes[0]:
            return float(self.times[0])                           # latency-bound below the curve
        if size >= self.sizes[-1]:
            return float(self.times[-1] * size / self.sizes[-1])  # bandwidth-bound above it
        return float(np.exp(np.interp(math.log(size), np.log(self.sizes), np.log(self.times))))


class Reference:
    """A machine kind's committed runs: times per op by series, and each suite's per-point cost."""

    def __init__(self, label: str, runs: list[RunTimes]) -> None:
        self.label = label
        self.runs = sorted(runs, key=lambda r: r.start_time)
        self._series: dict[tuple, list[_Series]] = {}
        order = [COLUMNS.index(k) for k in (*_HARD, *_SOFT)]
        size, time_s = COLUMNS.index("size_bytes"), COLUMNS.index("time_s")
        for run in self.runs:
            curves: dict[tuple, list[tuple]] = {}
            for row in run.rows:
                curves.setdefault(tuple(row[i] for i in order), []).append((row[size], row[time_s]))
            for key, points in curves.items():
                points.sort()
                series = _Series(dict(zip(_SOFT, key[len(_HARD):])), np.array([p[0] for p in points], float),
                                 np.array([p[1] for p in points], float), run.start_time)
                self._series.setdefault(tuple(str(v) for v in key[:len(_HARD)]), []).append(series)

    @classmethod
    def find(cls, machine: Machine, root: Path | None = None) -> "Reference | None":
        """The runs of machine.label, else of the same GPU model's kind with the most GPUs: from the
        table shipped in the package, or from the run folders under `root`."""
        kinds = reference_times.shipped() if root is None else {
            p.name: p for p in root.glob("*") if p.is_dir()}
        label = machine.label
        if label not in kinds and machine.gpu_model:
            siblings = [k for k in kinds if re.fullmatch(rf"{re.escape(machine.gpu_model)}-x\d+", k)]
            label = max(siblings, key=lambda k: int(k.rsplit("-x", 1)[1]), default=label)
        if label not in kinds:
            return None
        runs = kinds[label] if root is None else reference_times.runs_under(kinds[label])
        return cls(label, runs) if runs else None

    def op_time(self, point: Point, link: str) -> float | None:
        """The point's time per op from the closest series, or None where no series has its variant."""
        hard = tuple(str(v) for v in (point.suite, point.op, point.memory, point.mode, point.backend,
                                      point.launch, link))
        candidates = self._series.get(hard)
        if not candidates:
            return None
        want = {k: str(getattr(point, k)) for k in _SOFT}
        best = max(candidates, key=lambda s: (sum(w for k, w in _SOFT.items() if str(s.soft[k]) == want[k]), s.start))
        t = best.at(point.size_bytes)
        ref_n = int(best.soft["world_size"])
        if ref_n != point.world_size:
            # Latency stays; the time that moves bytes grows with what each rank must move (a
            # collective's bus factor; 1 for copies, whatever the GPU count).
            declared = suites.get(point.suite).op(point.op)
            old, new = declared.bus_factor(ref_n), declared.bus_factor(point.world_size)
            latency = min(float(best.times[0]), t)
            t = latency + (t - latency) * (new / old if old > 0 else 1.0)
        return t

    def basis(self, suite: str | None = None) -> list[RunTimes]:
        """The runs a suite's per-point cost is fitted to (None: any suite): the newest main sweep
        (most suites) that measured it, special-purpose runs having start-up heavy walls, and with
        it the other main sweeps of its host: a fresh machine's first run pays costs its later ones
        do not (its first pinned allocations), and a user's run may be either."""
        walled = [r for r in self.runs if (suite is None or suite in r.suite_wall_s) and r.status in ("complete", None)]
        if not walled:
            return []
        newest = max(walled, key=lambda r: (len(r.suite_wall_s), r.start_time))
        return [r for r in walled if newest.host and r.host == newest.host
                and set(r.suite_wall_s) == set(newest.suite_wall_s)] or [newest]

    def pace_s(self, suite: str | None = None) -> float | None:
        """The usual pace of the host the suite's per-point cost is fitted to (None: not read): the
        lower median of its runs', since a fresh machine's first run can read a pace its per-point
        cost did not follow (x1h-default-1 read 294 µs, its second run 163, their copy suites 10.7
        and 8.0 s)."""
        paces = sorted(r.host_pace_s for r in self.basis(suite) if r.host_pace_s)
        return paces[(len(paces) - 1) // 2] if paces else None

    def paces(self) -> tuple[float, float] | None:
        """The quickest and the slowest usual pace the kind's reference runs read (None: none read)."""
        paces = [r.host_pace_s for r in self.runs if r.host_pace_s]
        return (min(paces), max(paces)) if paces else None

    def overhead(self, suite: str, base: Overhead, distributed: bool) -> tuple[Overhead, str]:
        """`base` with per_point_s fitted to the main reference sweeps that measured the suite
        (basis(); a distributed suite starts once per world of ranks); as it is where the suite
        models it from its settings (`modelled`: a reference run of other settings would mislead)."""
        runs = self.basis(suite)
        if not runs or base.modelled:
            return base, ""
        per_point = float(np.mean([self._per_point(run, suite, base, distributed) for run in runs]))
        return replace(base, per_point_s=per_point), ", ".join(f"{self.label}/{run.name}" for run in runs)

    @staticmethod
    def _per_point(run: RunTimes, suite: str, base: Overhead, distributed: bool) -> float:
        """The suite's per-point cost in `run`: its wall less the timing core's replay of its points
        and their modelled costs, over its points."""
        cfg = _timing_of(run.timing)
        at = {k: COLUMNS.index(k) for k in ("suite", "time_s", "launch", "size_bytes", "world_size")}
        mine = [row for row in run.rows if row[at["suite"]] == suite]
        eager = {_without_launch(row, at["launch"]): row[at["time_s"]] for row in mine if row[at["launch"]] == "eager"}

        def host_op(row: tuple) -> float | None:
            # As estimate_suite replays a held point: its latch outlasts the eager twin's launches.
            if row[at["launch"]] != "held":
                return None
            return max(row[at["time_s"]], eager.get(_without_launch(row, at["launch"]), row[at["time_s"]]))

        replayed = sum(timing_seconds(row[at["time_s"]], cfg, row[at["launch"]] == "graph", base.per_trial_s,
                                      host_op(row))
                       + row[at["size_bytes"]] * base.per_byte_s
                       + (base.per_graph_s if row[at["launch"]] == "graph" else 0.0) for row in mine)
        worlds = len({row[at["world_size"]] for row in mine}) if distributed else 1
        rest = run.suite_wall_s[suite] - replayed - worlds * base.startup_s
        return max(0.0, rest / max(1, len(mine)))


def _without_launch(row: tuple, launch_at: int) -> tuple:
    """A reference row's point and link, its launch and time left out: what its eager twin shares."""
    return row[:launch_at] + row[launch_at + 1:-1]


def _timing_of(t: dict) -> TimingConfig:
    default = TimingConfig()
    return TimingConfig(int(t.get("warmup", default.warmup)), int(t.get("trials", default.trials)),
                        float(t.get("min_trial_s", default.min_trial_s)), int(t.get("min_iters", default.min_iters)),
                        int(t.get("max_iters", default.max_iters)))


# ---------------------------------------------------------------- points and the estimate


def _shared_cores(ranks: int, machine: Machine) -> int:
    """How many ranks share a CPU core here (collectives.oversubscribe=true on a small machine):
    their start-up (importing torch) and every operation's host work take that many times as long."""
    if not machine.here or machine.device == "cuda":
        return 1
    return max(1, math.ceil(ranks / max(1, len(os.sched_getaffinity(0)))))


def estimate_suite(planned: Planned, machine: Machine, reference: Reference | None,
                   done: set = frozenset(), pace_here: float | None = None) -> SuiteEstimate:
    """The suite's estimate; with `pace_here` (this host's usual pace), its host's work (per-point
    costs, start-up, and host-bound operations' timing) scaled from its basis host's pace to it."""
    suite, ctx = planned.suite, planned.ctx
    points = [p for p in planned.points() if point_key(p) not in done]
    distributed = planned.distribution() is not None
    base = suite.overhead_of(planned.settings, ctx)
    overhead, fitted = reference.overhead(suite.name, base, distributed) if reference else (base, "")
    host = host_ratio(pace_here, reference.pace_s(suite.name) if reference and fitted else None)
    timed = other = 0.0
    from_model = 0
    for p in points:
        per_op = reference.op_time(p, machine.speeds.pair(p.src, p.dst)) if reference else None
        if per_op is None:
            per_op, from_model = model_op_time(p, planned, machine.speeds), from_model + 1
        graph = p.launch == "graph"
        shared = _shared_cores(p.world_size, machine) if distributed else 1
        host_op = _launch_time(p, per_op, reference, machine) if p.launch == "held" else None
        replayed = timing_seconds(per_op, ctx.timing, graph, overhead.per_trial_s, host_op)
        timed += shared * replayed * (host if max(per_op, host_op or 0.0) < timing.HOST_BOUND_S else 1.0)
        other += shared * (overhead.per_point_s + p.size_bytes * overhead.per_byte_s
                           + (overhead.per_graph_s if graph else 0.0))
    worlds = {p.world_size for p in points} if distributed else {1}
    other += sum(overhead.startup_s * _shared_cores(n, machine) for n in worlds) if points else 0.0
    return SuiteEstimate(suite.name, len(points), timed, other * host, _basis(reference, fitted, from_model, len(points)),
                         _worlds(planned, machine) if distributed else "")


# Readings of the host's pace a plan takes on the machine it plans for (timing.host_pace: a
# fixed piece of Python work each, short beside a run's start-up).
PACE_READINGS = 50


def pace_here() -> float:
    """This host's usual pace now, as a run reads its own (timing.usual_of its readings)."""
    return timing.usual_of(sorted(timing.host_pace() for _ in range(PACE_READINGS)))


def host_ratio(here: float | None, basis: float | None) -> float:
    """How much longer this host takes for the host's work than the basis host took (1: either
    unknown): a default sweep's wall follows its host's pace (docs/usage.md, "The plan")."""
    return here / basis if here and basis else 1.0


def _worlds(planned: Planned, machine: Machine) -> str:
    """'world sizes [2, 4]', and where ranks outnumber this machine's cores, by how much."""
    sizes = [planned.ctx.world_size] if planned.ctx.launcher else planned.distribution().world_sizes
    text = f"world sizes {sizes}"
    largest = max(sizes)
    shared = _shared_cores(largest, machine)
    if shared > 1:
        cores = len(os.sched_getaffinity(0))
        text += (f"; {largest} ranks on {cores} CPU core{'s' * (cores > 1)}, up to {shared} a core: a world's start "
                 "and host work take as many times as long")
    return text


def _launch_time(point: Point, per_op: float, reference: Reference | None, machine: Machine) -> float:
    """The host's time to launch one of a held point's operations: the same point's eager time."""
    eager = reference.op_time(replace(point, launch="eager"), machine.speeds.pair(point.src, point.dst)) \
        if reference else None
    return max(per_op, eager or per_op)


def _basis(reference: Reference | None, fitted: str, from_model: int, total: int) -> str:
    if reference is None:
        return "model (no reference run of this machine kind)"
    times = f"per-op times {reference.label}" + (f" ({from_model} of {total} points: model)" if from_model else "")
    return times + (f"; per-point cost {fitted}" if fitted else "")


def estimate(cfg, planned: list[Planned], machine: Machine, skipped: list[str] = (),
             done: set = frozenset(), root: Path | None = None, pace_here: Callable[[], float] = pace_here) -> Plan:
    """The plan for suites already checked (sweep.plan_suites), on `machine`; its per-op times
    from the shipped reference table, or from the run folders under `root`; on this machine, its
    host's work scaled by its pace (`pace_here`) against the basis host's."""
    reference = Reference.find(machine, root)
    basis = reference.pace_s() if reference else None
    # Only this machine's own pace says how it differs from the basis host: a plan for another
    # (an instance from conf/, a recorded run) keeps the basis host's.
    here = pace_here() if machine.here and basis else None
    if here:   # no further than the kind's reference hosts went: past them no wall has been seen to follow it
        quickest, slowest = reference.paces()
        here = min(max(here, quickest), slowest)
    suites = [estimate_suite(p, machine, reference, done, here) for p in planned]
    points = sum(s.points for s in suites)
    start = RUN_START_S.get(machine.device, 0.0) + SUMMARY_S.get(machine.device, 0.0) * points
    start *= host_ratio(here, basis)
    return Plan(machine, suites, list(skipped), start if planned else 0.0, here, basis if here else None)


# ---------------------------------------------------------------- what is printed


def duration(seconds: float) -> str:
    """'45 s', '1 min 31 s', '14 min', '2 h 5 min'."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 600:
        return f"{s // 60} min {s % 60} s"
    if s < 3600:
        return f"{round(seconds / 60)} min"
    return f"{s // 3600} h {round(s % 3600 / 60)} min"


def start_line(plan: Plan) -> str:
    """The estimate every run prints as it starts; a long run says so plainly."""
    per_suite = ", ".join(f"{s.name} {s.points}" for s in plan.suites)
    line = f"xferbench: {plan.points} points ({per_suite}), about {duration(plan.seconds)}"
    if plan.seconds > LONG_S:
        line += (f"\nxferbench: this run will take more than 10 minutes (about {duration(plan.seconds)}); "
                 "plan=true shows where the time goes, sizes=quick or a lower sizes.max shortens it")
    return line


def format_plan(plan: Plan) -> str:
    """plan=true's report: points and estimated time per suite, and what the estimate rests on."""
    rows = [("suite", "points", "timing", "other", "estimate", "basis")]
    for s in plan.suites:
        rows.append((s.name, str(s.points), duration(s.timing_s), duration(s.other_s), duration(s.seconds), s.basis))
    if plan.startup_s:
        rows.append(("start-up", "", "", "", duration(plan.startup_s),
                     "imports, CUDA, the machine's description, summary"))
    rows.append(("total", str(plan.points), "", "", duration(plan.seconds), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"xferbench plan for {plan.machine.label}: {plan.machine.describe()}; nothing measured"]
    for r in rows:
        lines.append("  " + "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
                     + f"  {r[5]}".rstrip())
    lines += [f"  {s.name}: {s.worlds}" for s in plan.suites if s.worlds]
    if plan.pace_here_s:
        lines.append(f"  host's work scaled {plan.pace_here_s / plan.pace_basis_s:.2f}x: this host's pace "
                     f"{plan.pace_here_s * 1e6:.0f} µs, the basis host's {plan.pace_basis_s * 1e6:.0f} µs")
    lines += [f"  {line}" for line in plan.skipped]
    lines.append("  timing: warm-up, calibration and trials; other: per-point buffers, checks and writes, "
                 "and start-up")
    if plan.seconds > LONG_S:
        lines.append("  more than 10 minutes: sizes=quick, a lower sizes.max or fewer ops shorten it")
    return "\n".join(lines)
