"""The suite registry, and what every suite shares: the run context and the sweep point.

A suite is one module with NAME, DISTRIBUTED, `check(cfg, ctx) -> skip reason or None`
(raising ConfigError on bad input), `points(cfg, ctx) -> list[Point]` and
`measure(point, cfg, ctx) -> list[Sample]`. A distributed suite's measure runs on every
rank and returns rows on rank 0 only.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from bench import ConfigError
from bench.results import Sample
from bench.timing import Trial, TimingConfig

SUITES = ("copy", "p2p", "collectives", "overlap", "pipeline")


def check_fits(what: str, need: int, devices) -> None:
    """ConfigError unless `need` bytes are free on every listed GPU (before anything is allocated)."""
    import torch

    for dev in devices:
        free = torch.cuda.mem_get_info(dev)[0]
        if need > free:
            raise ConfigError(f"sizes.max: {what} needs {format_bytes(need)} on cuda:{dev} but only "
                              f"{format_bytes(free)} is free; lower sizes.max")


def host_available_bytes() -> int | None:
    """Memory this process can still take: MemAvailable, or the cgroup's limit if lower."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max" and available is not None:
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def check_host_fits(what: str, need: int) -> None:
    """ConfigError unless `need` bytes of host memory are available (before anything is allocated)."""
    available = host_available_bytes()
    if available is not None and need > available:
        raise ConfigError(f"sizes.max: {what} needs {format_bytes(need)} of host memory but only "
                          f"{format_bytes(available)} is available; lower sizes.max")


# Host memory one spawned rank costs before its buffers: a Python process with torch and bench
# imported and its process group joined. Measured on the CPU path (torch 2.13 CPU build, x86-64,
# gloo): 330 MB resident, 245 MB proportional (shared libraries split among the ranks), 200 MB
# of it anonymous. A CUDA rank costs more (its context), which this leaves out.
RANK_HOST_BYTES = 256 << 20


def cpu_cores() -> int:
    """The CPU cores this process may run on: its affinity, else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def local_rank_limit(what: str, per_rank_bytes: int = 0, buffers: str = "", oversubscribe: bool = False
                     ) -> tuple[int, str]:
    """The most ranks this machine runs at once (0: no limit known), and what sets that number:
    one rank per CPU core this process may use (unless `oversubscribe`), and as many as fit in the
    host memory available, each a process (RANK_HOST_BYTES) with `per_rank_bytes` of buffers
    (`buffers` says which). ConfigError, before anything is spawned, when not one rank fits."""
    cores = cpu_cores()
    available = host_available_bytes()
    each = RANK_HOST_BYTES + per_rank_bytes
    fit = available // each if available is not None else None
    if fit is not None and fit < 1:
        parts = f"a Python process with torch, {format_bytes(RANK_HOST_BYTES)}" + (f", and {buffers}" if buffers else "")
        raise ConfigError(f"{'sizes.max: ' if buffers else ''}{what} needs about {format_bytes(each)} of host memory "
                          f"a rank ({parts}) but only {format_bytes(available)} is available; free host memory"
                          + (" or lower sizes.max" if buffers else ""))
    if fit is not None and (oversubscribe or fit < cores):
        return fit, (f"the {_plural(fit, 'rank')} that fit in the {format_bytes(available)} of host memory "
                     f"available (about {format_bytes(each)} each)")
    if oversubscribe:
        return 0, ""
    return cores, f"the {_plural(cores, 'CPU core')} here"


def format_bytes(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def get(name: str) -> ModuleType:
    if name not in SUITES:
        raise ConfigError(f"suite {name!r} is unknown; choose from: {', '.join(SUITES)}")
    return importlib.import_module(f"bench.suites.{name}")


@dataclass
class Context:
    device: str                      # "cuda" or "cpu"
    timing: TimingConfig
    sizes: list[int]
    gpu_count: int = 0
    launches: tuple[str, ...] = ("eager",)
    graph_max_bytes: int = 0
    rank: int = 0
    world_size: int = 1
    nnodes: int = 1
    local_rank: int = 0
    # The settings the user named on the command line: a note about a setting this machine cannot
    # honour is for these, not for defaults.
    explicit: frozenset[str] = frozenset()
    max_ranks: int = 0               # local ranks this machine holds (check() sets it); 0: no limit known
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    """One sweep step: the fields that identify it in the results (results.POINT_KEYS)."""

    suite: str
    op: str
    size_bytes: int
    memory: str = ""
    mode: str = ""
    backend: str = ""
    src: str = ""
    dst: str = ""
    world_size: int = 1
    nnodes: int = 1
    dtype: str = "uint8"
    launch: str = "eager"
    api: str = ""
    engine: str = ""
    numa: str = ""

    def sample(self, **values: Any) -> Sample:
        return Sample(**{**asdict(self), **values})

    def skipped(self, reason: str, status: str = "skipped") -> Sample:
        return self.sample(status=status, note=reason)

    def label(self) -> str:
        from bench.sizes import format_size

        parts = [self.op, self.memory, self.mode, self.dtype if self.dtype != "uint8" else "", self.launch,
                 f"{self.src}->{self.dst}" if self.src and self.suite == "p2p" else "", format_size(self.size_bytes)]
        return " ".join(p for p in parts if p)


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
                time_fastest_rank_s=t.fastest_rank_s / t.iters,
                algbw_gbps=algbw, busbw_gbps=algbw * bus_factor, verified=verified,
                status="ok" if verified else "failed",
                note="; ".join(n for n in (point_note, short) if n),
            ))
    return rows
