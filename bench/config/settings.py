"""Typed settings every suite shares: allowed values as enums, timing, sizes and the instance.

Each suite declares its own `Settings` dataclass in its module; bench.driver.schema gathers them
into the root config that Hydra's ConfigStore validates against. Range checks live in
`__post_init__` and raise ConfigError naming the key, so bad input is one line.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import List, Optional

from bench import ConfigError
from bench.sizes import parse_size, parse_steps


class Choice(str, Enum):
    """An allowed value: a plain string everywhere it is printed, compared or written to a file.

    OmegaConf looks enum members up by name, so every member's name is its value.
    """

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Launch(Choice):
    eager = "eager"   # launched one by one as the host gets to them: the launch path an eager loop pays
    held = "held"     # queued behind a sleep latch, timed once it ends: the device's own time (the link)
    graph = "graph"   # captured once in a CUDA graph and replayed


class HostMemory(Choice):
    """Host memory a copy reads or writes."""

    pinned = "pinned"
    pageable = "pageable"


class Engine(Choice):
    """Who moves the bytes of a copy."""

    ce = "ce"   # the copy engines, through cudaMemcpyAsync
    sm = "sm"   # a Triton copy kernel: the SMs load and store across the link


def require(ok: bool, key: str, value: object, rule: str) -> None:
    """ConfigError `key=value: rule` unless ok."""
    if not ok:
        raise ConfigError(f"{key}={value}: {rule}")


def nonempty(key: str, values: list) -> None:
    if not values:
        raise ConfigError(f"{key} is empty; name at least one value")


def positive(key: str, value: float) -> None:
    """ConfigError unless value is a positive, finite number (inf would overflow a time or a count)."""
    require(0 < value < math.inf, key, value, "must be a positive, finite number")


# A name that becomes a folder (instance label, run_id): one path component, safe in a shell and
# in a spreadsheet (no leading '-' or formula character), never '.' or '..'.
_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]*")


def check_name(key: str, value: str | None) -> None:
    """ConfigError in one line unless `value` is a usable folder name."""
    if value is None or not _NAME.fullmatch(value) or ".." in value or value == ".":
        raise ConfigError(f"{key}={value!r}: a folder name: use letters, digits, '.', '_' and '-', not starting "
                          "with '-', without '..' or '/'")


@dataclass
class TimingSettings:
    warmup: int = 3                 # untimed operations before calibration
    trials: int = 5                 # timed trials per point, one result row each
    min_trial_s: float = 0.004      # a trial repeats the operation until it lasts this long
    min_iters: int = 1
    max_iters: int = 10000
    graph_max_size: str = "16MiB"   # graph mode only up to this size
    held_max_size: str = "64KiB"    # held launches only up to this size: above it the launch hides behind the transfer
    launch: List[Launch] = field(default_factory=lambda: [Launch.eager, Launch.held])

    def __post_init__(self) -> None:

        require(self.warmup >= 0, "timing.warmup", self.warmup, "must be >= 0")
        require(self.trials >= 1, "timing.trials", self.trials, "must be >= 1")
        positive("timing.min_trial_s", self.min_trial_s)
        require(self.min_iters >= 1, "timing.min_iters", self.min_iters, "must be >= 1")
        require(self.min_iters <= self.max_iters, "timing.min_iters", self.min_iters,
                f"is above timing.max_iters={self.max_iters}")
        nonempty("timing.launch", self.launch)
        parse_size(self.graph_max_size, "timing.graph_max_size")
        parse_size(self.held_max_size, "timing.held_max_size")


@dataclass
class SizeRange:
    min: str = "4KiB"
    max: str = "1GiB"
    # ["1MiB:x2", ...]: from that size on, steps of that factor (never finer than sizes.factor);
    # [] = sizes.factor throughout. A list, so an override replaces it rather than merging.
    ladder: List[str] = field(default_factory=list)

    def check(self, key: str) -> None:

        parse_size(self.min, f"{key}.min")
        parse_size(self.max, f"{key}.max")
        parse_steps(self.ladder, f"{key}.ladder")


@dataclass
class SizesSettings:
    """What every suite's sweep shares; the schema adds one SizeRange per suite that has a sweep
    (its `sizes` declaration), so `sizes.copy.max=256MiB` names that suite's range."""

    min: Optional[str] = None       # when set, overrides every suite's own range
    max: Optional[str] = None
    factor: int = 2
    ladders: bool = True            # false: every suite steps by `factor` throughout (sizes=quick)
    cpu_max: Optional[str] = "16MiB"  # without a GPU, sweeps stop here unless sizes.max is set

    def __post_init__(self) -> None:

        require(self.factor >= 2, "sizes.factor", self.factor, "must be an integer >= 2")
        # Each value parses here; whether a suite's range is in order is checked for the suites run.
        for key in ("min", "max", "cpu_max"):
            if getattr(self, key) is not None:
                parse_size(getattr(self, key), f"sizes.{key}")
        for f in fields(self):
            if isinstance(getattr(self, f.name), SizeRange):
                getattr(self, f.name).check(f"sizes.{f.name}")


@dataclass
class InstanceSettings:
    """An instance entry (conf/instance/*.yaml): the machine's label, links and price."""

    name: str = "local"
    provider: Optional[str] = None
    gpu: Optional[str] = None
    gpu_count: Optional[int] = None
    pcie_gen: Optional[int] = None
    pcie_width: Optional[int] = None
    nvlink_gen: Optional[int] = None
    nvlink_gbps_per_gpu: Optional[float] = None   # NVLink per GPU, one direction, GB/s
    network_gbps: Optional[float] = None
    usd_per_hour: Optional[float] = None
    price_date: Optional[str] = None
    cpu_cores: Optional[int] = None   # the host's CPU cores (vCPUs): a plan for it caps worker counts there

    def __post_init__(self) -> None:
        check_name("instance.name", self.name)   # the run folder's parent: <out_dir>/<name>/<run_id>
        # results/reference/<instance>/<run_id> holds the project's reference runs, where no run lands.
        require(self.name != "reference", "instance.name", self.name, "is kept for the project's reference runs")
        for key in ("gpu_count", "pcie_gen", "pcie_width", "nvlink_gen", "nvlink_gbps_per_gpu", "network_gbps",
                    "usd_per_hour", "cpu_cores"):
            value = getattr(self, key)
            require(value is None or 0 <= value < math.inf, f"instance.{key}", value, "must be a finite number >= 0")
