"""The suite contract: what a suite declares and does, and what the driver hands it.

A suite is one module of bench/suites/ (or a file named in XFERBENCH_SUITES) defining one
subclass of `Suite`. The registry checks it on import (`check_suite`). Required: `name`,
`Settings` (a dataclass: the config section of that name), `check`, `points`, `measure`.
Everything else has a default, and a suite overrides what its story needs:

- its sweep: `sizes` (a `sizes.<name>` range and ladder) or None when its settings size it;
- running: `start` (its typed state, made once per run and rank), `finish`, `distribution`
  (ranks: world sizes, backend, timeout, environment); `together`, `measure_together` and
  `complete` (points measured as one, e.g. in interleaved rounds, each round written as it ends);
- the plan: `op_time` (a model of one operation where no reference run has it), `overhead`
  (`overhead_of` where its settings move it);
- reading its rows, its reading face (`bench.suite_view.SuiteView`, which Suite extends):
  `bandwidth`, `latency_sizes`, `tables`, `figures`, `headline`, `noise`, `link_limit`,
  `efficiency`, `expectation` and `judged` (what the analysis side needs; it gets them from the
  registry, never by importing a suite).
"""
from __future__ import annotations

import dataclasses
import inspect
import keyword
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Mapping, Sequence

from bench import ConfigError
from bench.config.settings import SizeRange
from bench.measure.timing import TimingConfig, Trial
from bench.results import Sample, params_text
from bench.points import PointKey, point_label
from bench.suite_view import SuiteView

if TYPE_CHECKING:
    from bench.links import Speeds
    from bench.measure.numa import Topology


def counts_at_once(asked: Sequence[int], gpu_count: int) -> tuple[int, ...]:
    """The GPU counts of a suite's points on several GPUs at once (the first N): the counts asked
    ([]: every GPU) capped at the machine's, each once and two or more."""
    return tuple(dict.fromkeys(min(n, gpu_count) for n in (asked or [gpu_count]) if min(n, gpu_count) >= 2))

# Config keys of the root config: no suite may take one as its name.
RESERVED = frozenset({"suites", "device", "out_dir", "run_id", "resume", "progress", "plan", "timing", "sizes",
                      "instance", "hydra", "all"})


class SuiteError(ConfigError):
    """A suite that breaks the contract; the message names the module and what is wrong."""


@dataclass(frozen=True)
class Context:
    """What the driver tells a suite about this run and the machine it plans or measures for; read
    only: a hook hands what it learns to another through the driver (e.g. rank_limit's max_ranks)."""

    device: str                      # "cuda" or "cpu"
    timing: TimingConfig
    sizes: list[int]                 # this suite's sweep (empty for a suite that sizes itself)
    gpu_count: int = 0
    launches: tuple[str, ...] = ("eager",)
    graph_max_bytes: int = 0
    held_max_bytes: int = 0
    links: Mapping[str, str] = field(default_factory=dict)   # 'i,j' -> NV18, PIX, SYS (nvidia-smi topo -m)
    size_cap: int | None = None      # without a GPU, sweeps stop here (sizes.cpu_max)
    numa: Topology | None = None     # the NUMA nodes (None: one node holding every CPU)
    gpu_nodes: tuple[int | None, ...] = ()   # each GPU's NUMA node, in CUDA's order (None: unknown)
    cores: int | None = None         # the CPU cores of the machine planned for elsewhere (None: this one's)
    here: bool = True                # False when planning for another machine: probe nothing here
    planning: bool = False           # plan=true: nothing is measured, and no CUDA context started
    launcher: bool = False           # torchrun or srun started this process's ranks
    explicit: frozenset[str] = frozenset()   # the settings the user named (e.g. 'copy.memory')
    rank: int = 0
    world_size: int = 1
    nnodes: int = 1
    local_rank: int = 0

    def launches_at(self, size: int, graph: bool = True, held: bool = True) -> list[str]:
        """The launches a point of `size` is measured with: eager always (where asked), graph and
        held where the op has that form (`graph`, `held`) and the size is within their limits."""
        limits = {"eager": True, "graph": graph and size <= self.graph_max_bytes,
                  "held": held and size <= self.held_max_bytes}
        return [launch for launch in self.launches if limits[launch]]


@dataclass(frozen=True)
class Point(PointKey):
    """One sweep step: the fields that identify it in the results (`points.PointKey`).

    `params` is the suite's own typed description of the step (a frozen dataclass), for what the
    common fields do not name; `mode` then carries its short human name. It is stored as JSON in
    the `params` column, which the suite's tables read back (`results.params`).
    """

    def sample(self, **values: Any) -> Sample:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "params"}
        return Sample(**{**fields, "params": params_text(self.params), **values})

    def skipped(self, reason: str, status: str = "skipped") -> Sample:
        return self.sample(status=status, note=reason)

    def label(self) -> str:
        return point_label(self)


@dataclass(frozen=True)
class Distribution:
    """A suite that runs in ranks: one world of ranks after another, each rank running every point."""

    world_sizes: list[int]
    backend: str                     # nccl | gloo
    timeout_s: float                 # a dead or hung rank ends the run after this long
    env: Mapping[str, str] = field(default_factory=dict)   # for every rank (a user's own setting wins)


@dataclass(frozen=True)
class Overhead:
    """What a suite costs besides its operations, for the plan."""

    per_point_s: float      # buffers, Python, a results append
    per_byte_s: float       # fills and data checks, which touch every byte
    per_graph_s: float      # a graph point's captures and instantiation
    startup_s: float        # once per suite; per world of ranks for a distributed suite
    per_trial_s: float      # a trial's own clock readings, syncs and (collectives) barriers
    modelled: bool = False  # per_point_s follows the settings (overhead_of): not fitted to a reference run


DEFAULT_OVERHEAD = Overhead(0.04, 0.2e-9, 0.005, 1.0, 50e-6)


class Suite(SuiteView):
    """A suite: its measuring face (below) over its reading face (`SuiteView`, declared once
    there); see the module docstring for what is required."""

    name: ClassVar[str]
    Settings: ClassVar[type]
    sizes: ClassVar[SizeRange | None] = None
    groups: ClassVar[tuple[str, ...]] = ()       # config groups besides `all` and its own (suite=links, ...)
    order: ClassVar[int] = 100                   # where it runs among the suites of one run
    overhead: ClassVar[Mapping[str, Overhead]] = {}      # device -> its cost besides operations

    # ---- required

    def check(self, settings: Any, ctx: Context) -> str | None:
        """ConfigError on bad input, a skip reason where this machine cannot run it, else None.
        Allocates nothing; probes this machine (free memory, libraries) only when ctx.here."""
        raise NotImplementedError

    def points(self, settings: Any, ctx: Context) -> list[Point]:
        raise NotImplementedError

    def measure(self, point: Point, settings: Any, ctx: Context, state: Any) -> list[Sample]:
        """The point's rows (one per trial and part), its data checked; distributed suites run it
        on every rank and return rows on rank 0 only."""
        raise NotImplementedError

    # ---- running

    def start(self, settings: Any, ctx: Context) -> Any:
        """The suite's state for one run (buffers, streams, communicators), made lazily by its
        own code; passed to every measure()."""
        return None

    def finish(self, state: Any) -> None:
        """Release what start() made that needs more than garbage collection (communicators)."""

    def together(self, point: Point) -> Any:
        """Points of equal key, consecutive in points(), are measured as one (measure_together):
        e.g. in interleaved rounds, so that a host whose pace drifts moves all of them alike.
        None: the point alone."""
        return None

    def measure_together(self, points: list[Point], settings: Any, ctx: Context, state: Any,
                         stored: list[frozenset[int]]) -> Iterator[list[Sample]]:
        """The rows of `points` (those of one `together` key not yet complete) as they are measured:
        each yield one point's rows, or one round's of a point measured in rounds, written to the
        run as it comes (a cut loses none of them). `stored`: the rounds of each point the run
        holds already (a cut run resumed), which it measures no more."""
        for point in points:
            yield self.measure(point, settings, ctx, state)

    def complete(self, point: Point, settings: Any, rounds: frozenset[int]) -> bool:
        """Whether a point whose rows in the run hold these rounds is measured whole (a run cut
        in its rounds, resumed, measures the rest). Default: any rows."""
        return True

    def distribution(self, settings: Any, ctx: Context, max_ranks: int = 0) -> Distribution | None:
        """None: measured in this process. A Distribution: in ranks, one world after another, of at
        most `max_ranks` local ranks each (what `rank_limit` gave; 0: no limit known)."""
        return None

    def rank_limit(self, settings: Any, ctx: Context) -> int:
        """The most local ranks this machine holds for the suite's worlds (0: no limit known). The
        driver asks it once, after check(), when it probes this machine (`ctx.here`), and passes it
        to distribution(); ConfigError when the worlds cannot run here."""
        return 0

    # ---- the plan

    def op_time(self, point: Point, speeds: Speeds) -> float | None:
        """Seconds per operation from the links' speeds, where no reference run has the series."""
        return None

    def overhead_of(self, settings: Any, ctx: Context) -> Overhead:
        """What the suite costs besides its operations on ctx.device with these settings: by
        default `overhead`'s entry for the device."""
        return self.overhead.get(ctx.device, DEFAULT_OVERHEAD)


_REQUIRED = ("check", "points", "measure")


def check_suite(module: ModuleType) -> Suite:
    """The one Suite a module defines, instantiated, after every check of the contract."""
    where = getattr(module, "__file__", None) or module.__name__
    defined = [c for c in vars(module).values()
               if inspect.isclass(c) and issubclass(c, Suite) and c is not Suite and c.__module__ == module.__name__]
    if len(defined) != 1:
        raise SuiteError(f"{where}: defines {len(defined)} Suite subclasses; a suite module defines one")
    cls = defined[0]
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or not name.islower():
        raise SuiteError(f"{where}: {cls.__name__}.name={name!r} must be a lower-case identifier")
    if name in RESERVED:
        raise SuiteError(f"{where}: name {name!r} is taken by the root config")
    settings = getattr(cls, "Settings", None)
    if not (inspect.isclass(settings) and dataclasses.is_dataclass(settings)):
        raise SuiteError(f"{where}: {cls.__name__}.Settings must be a dataclass (the config section {name})")
    missing = [m for m in _REQUIRED if getattr(cls, m) is getattr(Suite, m)]
    if missing:
        raise SuiteError(f"{where}: {cls.__name__} does not implement {', '.join(missing)}")
    if cls.sizes is not None and not isinstance(cls.sizes, SizeRange):
        raise SuiteError(f"{where}: {cls.__name__}.sizes must be a SizeRange or None")
    if cls.bandwidth not in ("algbw_gbps", "busbw_gbps"):
        raise SuiteError(f"{where}: {cls.__name__}.bandwidth must be algbw_gbps or busbw_gbps")
    for metric in cls.headline:
        if metric.suite != name:
            raise SuiteError(f"{where}: headline metric {metric.label!r} names suite {metric.suite!r}, not {name!r}")
    return cls()


def trial_rows(point: Point, trials: list[Trial], bytes_per_op: float, bus_factor: float,
               verified: bool, note: str = "") -> list[Sample]:
    """One row per trial (and per part of a bidirectional op); a failed check gives no bandwidth.

    A trial timing flagged short keeps its rows (status unchanged) with the caveat in `note`.
    """
    point_note = note if verified else (note or "data check failed: destination differs from source")
    rows = []
    for i, t in enumerate(trials):
        parts = {"total": (t.time_s, bytes_per_op)}
        for name, seconds in t.parts.items():  # each direction moves half of the total
            parts[name] = (seconds, bytes_per_op / max(1, len(t.parts)))
        short = f"short trial: {t.time_s * 1e3:.2g} ms < half of min_trial_s" if t.short else ""
        for part, (seconds, nbytes) in parts.items():
            algbw = nbytes * t.iters / seconds / 1e9 if verified and seconds > 0 else float("nan")
            rows.append(point.sample(
                trial=i, iters=t.iters, part=part, time_s=seconds / t.iters,
                time_fastest_rank_s=t.fastest_rank_s / t.iters, host_pace_s=t.host_pace_s,
                algbw_gbps=algbw, busbw_gbps=algbw * bus_factor, verified=verified,
                status="ok" if verified else "failed",
                note="; ".join(n for n in (point_note, short, t.caveat) if n),
            ))
    return rows
