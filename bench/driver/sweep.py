"""What a run measures: each suite of the config with its settings and context, checked, on this
machine or one of conf/instance. The run and the plan both start here (`plan_suites`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from bench import ConfigError, suites
from bench.driver.machine import Machine
from bench.measure.timing import TimingConfig
from bench.sizes import ladder, parse_size
from bench.contract import Context, Distribution, Point, Suite


@dataclass
class Planned:
    """A suite as a run measures it: its settings and its context on the machine."""

    suite: Suite
    settings: Any
    ctx: Context
    max_ranks: int = 0   # the suite's rank_limit on this machine (0: no limit known)

    def distribution(self) -> Distribution | None:
        return self.suite.distribution(self.settings, self.ctx, self.max_ranks)

    def start(self) -> Any:
        return self.suite.start(self.settings, self.ctx)

    def points(self) -> list[Point]:
        """Every point it measures; a distributed suite's in each of its worlds of ranks."""
        distribution = self.distribution()
        if distribution is None:
            return self.suite.points(self.settings, self.ctx)
        worlds = [self.ctx.world_size] if self.ctx.launcher else distribution.world_sizes
        return [p for n in worlds for p in self.suite.points(self.settings, replace(self.ctx, world_size=n))]


def timing_config(cfg) -> TimingConfig:
    t = cfg.timing
    return TimingConfig(t.warmup, t.trials, t.min_trial_s, t.min_iters, t.max_iters)


def size_cap(cfg, device: str) -> int | None:
    """Without a GPU, sweeps stop at sizes.cpu_max unless sizes.max is set."""
    s = cfg.sizes
    return parse_size(s.cpu_max, "sizes.cpu_max") if device == "cpu" and s.cpu_max is not None and s.max is None else None


def suite_sizes(cfg, suite: Suite, device: str) -> list[int]:
    """The suite's sweep: its own range (and ladder) unless sizes.min/max are set; capped without
    a GPU; [] for a suite that sizes itself (no `sizes` declared)."""
    if suite.sizes is None:
        return []
    s, own = cfg.sizes, getattr(cfg.sizes, suite.name)
    lo = s.min if s.min is not None else own.min
    hi = s.max if s.max is not None else own.max
    sizes = ladder(lo, hi, s.factor, own.ladder if s.ladders else ())
    cap = size_cap(cfg, device)
    return sizes if cap is None else ([x for x in sizes if x <= cap] or [min(sizes)])


def context(cfg, suite: Suite, machine: Machine, explicit: frozenset[str] = frozenset(), sized: bool = True) -> Context:
    """What the driver tells `suite` about this run and `machine`; without its sweep unless `sized`."""
    layout = machine.layout
    return Context(
        device=machine.device, timing=timing_config(cfg),
        sizes=suite_sizes(cfg, suite, machine.device) if sized else [],
        gpu_count=machine.gpus,
        launches=tuple(str(x) for x in cfg.timing.launch) if machine.device == "cuda" else ("eager",),
        graph_max_bytes=parse_size(cfg.timing.graph_max_size, "timing.graph_max_size"),
        held_max_bytes=parse_size(cfg.timing.held_max_size, "timing.held_max_size"),
        links=dict(machine.speeds.classes), size_cap=size_cap(cfg, machine.device), here=machine.here,
        planning=bool(cfg.plan),
        launcher=layout is not None, explicit=explicit, numa=machine.numa, gpu_nodes=machine.gpu_nodes,
        cores=machine.cores,
        rank=layout.rank if layout else 0, world_size=layout.world_size if layout else 1,
        nnodes=layout.nnodes if layout else 1)


def suite_ops(planned: list[Planned]) -> set[tuple[str, str]]:
    """The (suite, op)s the planned suites measure: a run that lacks one of them is missing it."""
    return {(p.suite.name, point.op) for p in planned for point in p.points()}


def plan_suites(cfg, machine: Machine, explicit: frozenset[str] = frozenset()) -> tuple[list[Planned], list[str]]:
    """Every suite of the config that this machine runs, checked (ConfigError on bad input, before
    anything is allocated), and a line for each it skips, saying why."""
    planned, skipped = [], []
    for name in map(str, cfg.suites):
        suite = suites.get(name)
        settings = getattr(cfg, name)
        # Skipped before its sweep is read: its own range need not fit the sizes given for the others.
        if machine.layout is not None and suite.distribution(settings, context(cfg, suite, machine, explicit,
                                                                               sized=False)) is None:
            skipped.append(f"{name}: skipped under torchrun/Slurm (run it without a launcher, once per node)")
            continue
        ctx = context(cfg, suite, machine, explicit)
        reason = suite.check(settings, ctx)
        if reason:
            skipped.append(f"{name}: skipped, {reason}")
        else:
            planned.append(Planned(suite, settings, ctx, suite.rank_limit(settings, ctx) if ctx.here else 0))
    if not planned and machine.here:
        raise ConfigError("nothing to run here: " + "; ".join(skipped))
    return planned, skipped
