"""What healthy machines of a class measured: the expectation table the judge reads.

A machine class is a GPU model, its PCIe link's maximum generation and width, and its NVLinks
per GPU ('h200 pcie5x16 nvlink18'); machines of one class draw the same curves, whatever their
GPU count. A point's role is its op variant with each GPU named by what it is, not which: 'gpu'
for cuda:i, and for a pair of GPUs their link class (NV18, PIX, SYS: `nvidia-smi topo -m`), so a
reference measured on GPUs 0 and 1 of a 2-GPU machine judges GPUs 5 and 6 of an 8-GPU one.
Whole-machine points keep their GPU count (world_size) in the role.

The table holds, per class, role and size, the median over healthy runs of each run's median
time per op (over its trials, and over its GPUs or pairs of that role), how many runs that is,
and where there are several, how far they moved: the median |difference| of log time between
two of them (`spread`; the judge's run-to-run noise, pooled over classes by role). bench/analysis/expected.csv ships with the package (scripts/make_expected.py makes it from
results/reference); a user's own healthy runs make a table of their own (`from_runs`) that takes
precedence for their class (`over`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from bench.analysis.catalog import Catalog
from bench.analysis.compare import BANDWIDTH_SHARE, LATENCY_RATIO, point_levels
from bench.links import NVLINK_LINK_GBPS
from bench.analysis.causes import limiting_env
from bench.results import load, read_meta, run_status

SHIPPED = Path(__file__).with_name("expected.csv")
ROLE_KEYS = ["suite", "op", "memory", "mode", "backend", "src", "dst", "link", "world_size", "nnodes", "dtype",
             "launch", "api", "engine", "numa", "params"]
COLUMNS = ["machine", "instances", *ROLE_KEYS, "size_bytes", "time_s", "runs", "spread"]
_GPU = re.compile(r"cuda:(\d+)$")


@dataclass(frozen=True)
class MachineClass:
    """What makes machines draw the same curves; None where the run did not record it."""

    gpu: str                       # 'h200' (the model's first word, as bench.driver.machine.slug), 'cpu'
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_links: int | None = None   # per GPU

    @property
    def key(self) -> str:
        if self.gpu == "cpu":
            return "cpu"

        def known(value: int | None) -> str:
            return "?" if value is None else str(value)

        return f"{self.gpu} pcie{known(self.pcie_gen)}x{known(self.pcie_width)} nvlink{known(self.nvlink_links)}"

    @property
    def complete(self) -> bool:
        return self.gpu == "cpu" or None not in (self.pcie_gen, self.pcie_width, self.nvlink_links)


def gpu_model(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100' (bench.driver.machine.slug's rule; the analysis side
    imports no driver)."""
    words = name.lower().replace("nvidia", "").split()
    return re.sub(r"[^a-z0-9]+", "-", words[0] if words else "gpu").strip("-")


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def machine_class(meta: Mapping) -> MachineClass:
    """A run's class from its meta.json: NVML's readings (system.gpus[0]), else the catalogue
    entry it names (instance), as imported runs have."""
    system, instance = meta.get("system") or {}, meta.get("instance") or {}
    gpus = system.get("gpus") or []
    if not gpus or meta.get("device") == "cpu":
        return MachineClass("cpu")
    first = gpus[0]
    nvlink = _int(first.get("nvlink_links"))
    if nvlink is None and "nvlink_gbps_per_gpu" in instance:   # a catalogue entry: null means none
        nvlink = round((instance["nvlink_gbps_per_gpu"] or 0) / NVLINK_LINK_GBPS)
    return MachineClass(gpu_model(str(first.get("name", ""))),
                        _int(first.get("pcie_gen_max")) or _int(instance.get("pcie_gen")),
                        _int(first.get("pcie_width_max")) or _int(instance.get("pcie_width")),
                        nvlink)


def pair_class(links: Mapping[str, str], src: str, dst: str) -> str:
    """The link class between two GPUs named 'cuda:i' ('NV18'; '?' where the run did not record
    it); '' unless src and dst are two different GPUs."""
    a, b = _GPU.match(str(src)), _GPU.match(str(dst))
    if not (a and b) or a.group(1) == b.group(1):
        return ""
    i, j = a.group(1), b.group(1)
    return links.get(f"{i},{j}") or links.get(f"{j},{i}") or "?"


def roles(points: pd.DataFrame, links: Mapping[str, str]) -> pd.DataFrame:
    """ROLE_KEYS of each point (POINT_KEYS rows): GPUs as 'gpu', a pair's link class in `link`."""
    out = points[[k for k in ROLE_KEYS if k not in ("src", "dst", "link")]].copy()
    out["link"] = [pair_class(links, s, d) for s, d in zip(points["src"], points["dst"])]
    for end in ("src", "dst"):
        out[end] = points[end].astype(str).str.replace(r"^cuda:\d+$", "gpu", regex=True)
    return out[ROLE_KEYS]


def alternatives(role: dict) -> list[dict]:
    """The role, then what an imported run's point matches among xferbench's own: nccl-tests'
    collectives (no api) as NCCL called directly, then through torch; nvbandwidth's peer reads and
    writes as peer copies."""
    out = [role]
    if role["suite"] == "collectives" and role["api"] == "" and role["backend"] == "nccl":
        out += [{**role, "api": "nccl"}, {**role, "api": "torch"}]
    if role["suite"] == "p2p" and role["mode"] in ("read", "write"):
        out.append({**role, "mode": "peer"})
    return out


@dataclass
class Curve:
    """One class's reference curve of one role: time per op against size."""

    sizes: np.ndarray    # ascending
    log_time: np.ndarray
    runs: np.ndarray
    spread: np.ndarray   # median |difference| of log time between two runs; NaN with one run
    instances: str       # the instances whose runs made it: 'h200-x2'

    def covers(self, size: int) -> bool:
        return bool(self.sizes[0] <= size <= self.sizes[-1])

    def at(self, size: int) -> tuple[float, int]:
        """(log time per op, runs behind it) at a size within the curve: a line on log-log axes
        between the two nearest sizes."""
        x = math.log(size)
        logs = np.log(self.sizes)
        k = int(np.searchsorted(self.sizes, size))
        if k < len(self.sizes) and self.sizes[k] == size:
            return float(self.log_time[k]), int(self.runs[k])
        return float(np.interp(x, logs, self.log_time)), int(min(self.runs[k - 1], self.runs[k]))

    def size_class(self, size: int) -> str:
        """latency | middle | bandwidth, by compare.size_classes' rule read off this curve: from the
        first size at BANDWIDTH_SHARE of its peak rate on; else within LATENCY_RATIO of its
        shortest time."""
        rate = self.sizes / np.exp(self.log_time)
        first = self.sizes[np.argmax(rate >= BANDWIDTH_SHARE * rate.max())]
        if size >= first:
            return "bandwidth"
        log_time, _ = self.at(size)
        return "latency" if log_time <= math.log(LATENCY_RATIO) + self.log_time.min() else "middle"


class Expected:
    """The expectation table: per machine class and role, a curve; `origins` says, per class,
    what made it ('reference': the shipped table; 'baseline DIR': a user's runs)."""

    def __init__(self, frame: pd.DataFrame, origin: str = "reference") -> None:
        self.frame = frame[COLUMNS].reset_index(drop=True)
        self.origins = {m: origin for m in self.frame["machine"].unique()}
        self._curves: dict[tuple, Curve] = {}
        self._by_role: dict[tuple, list[Curve]] = {}
        for (machine, *role), rows in self.frame.groupby(["machine", *ROLE_KEYS], sort=False):
            rows = rows.sort_values("size_bytes")
            curve = Curve(rows["size_bytes"].to_numpy(np.int64), np.log(rows["time_s"].to_numpy(float)),
                          rows["runs"].to_numpy(np.int64), rows["spread"].to_numpy(float),
                          str(rows["instances"].iloc[0]))
            self._curves[(machine, *role)] = curve
            self._by_role.setdefault(tuple(role), []).append(curve)

    @classmethod
    def read(cls, path: str | Path = SHIPPED, origin: str = "reference") -> Expected:
        frame = pd.read_csv(path, dtype={k: str for k in ("machine", "instances", *ROLE_KEYS)},
                            keep_default_na=False)
        frame["spread"] = pd.to_numeric(frame["spread"], errors="coerce")
        frame = frame.astype({"world_size": int, "nnodes": int, "size_bytes": np.int64, "time_s": float, "runs": int})
        return cls(frame, origin)

    def write(self, path: str | Path) -> None:
        self.frame.to_csv(path, index=False, float_format="%.6g")

    def over(self, other: Expected) -> Expected:
        """This table's classes, and the other's for the classes this one lacks."""
        kept = other.frame[~other.frame["machine"].isin(self.origins)]
        merged = Expected(pd.concat([self.frame, kept]))
        merged.origins = {**{m: o for m, o in other.origins.items() if m not in self.origins}, **self.origins}
        return merged

    def curve(self, machine: str, role: Mapping) -> Curve | None:
        return self._curves.get((machine, *(role[k] for k in ROLE_KEYS)))

    def spreads(self, role: Mapping, smallest: int, largest: int) -> np.ndarray:
        """How far healthy runs of this role moved at sizes from smallest to largest, in every
        class that has several runs (log time, one figure per class and size)."""
        found = [c.spread[(c.sizes >= smallest) & (c.sizes <= largest)]
                 for c in self._by_role.get(tuple(role[k] for k in ROLE_KEYS), [])]
        values = np.concatenate(found) if found else np.array([])
        return values[np.isfinite(values)]


def unhealthy(meta: Mapping) -> str:
    """Why a run cannot stand for a healthy machine ('' when it can): it did not complete, or an
    NCCL variable held NCCL back (causes.limiting_env)."""
    status = run_status(dict(meta))
    if status not in ("complete", ""):   # imports record no status: whole
        return f"status {status}"
    limits = limiting_env((meta.get("system") or {}).get("env") or {})
    return f"handicapped ({', '.join(limits)})" if limits else ""


def _run_levels(run: Path, catalog: Catalog) -> pd.DataFrame:
    """One run's points as (machine, instance, role..., size_bytes, log_time)."""
    meta = read_meta(run)
    rows = load(run, warn=lambda line: None)
    levels = point_levels(rows, catalog)
    out = roles(levels, (meta.get("system") or {}).get("links") or {})
    out["machine"] = machine_class(meta).key
    out["instance"] = str(rows["instance"].iloc[0])
    out["size_bytes"] = levels["size_bytes"].to_numpy(np.int64)
    out["log_time"] = -levels["y"].to_numpy(float)
    out["run"] = str(run)
    return out


def _spread(log_times: pd.Series) -> float:
    values = log_times.to_numpy(float)
    i, j = np.triu_indices(len(values), k=1)
    return float(np.median(np.abs(values[i] - values[j]))) if len(i) else math.nan


def from_runs(runs: Iterable[str | Path], catalog: Catalog, origin: str = "reference") -> Expected:
    """The table made from healthy runs: per class, role and size, the median over runs of each
    run's median time (its GPUs or pairs of one role: their median)."""
    levels = pd.concat([_run_levels(Path(r), catalog) for r in runs], ignore_index=True)
    keys = ["machine", *ROLE_KEYS, "size_bytes"]
    per_run = levels.groupby([*keys, "run"], sort=False).agg(log_time=("log_time", "median"),
                                                             instance=("instance", "first")).reset_index()
    table = per_run.groupby(keys, sort=False).agg(log_time=("log_time", "median"), runs=("run", "nunique"),
                                                  spread=("log_time", _spread),
                                                  instances=("instance", lambda s: "+".join(sorted(set(s)))))
    table = table.reset_index()
    table["time_s"] = np.exp(table["log_time"])
    order = table.sort_values(["machine", *ROLE_KEYS, "size_bytes"]).index
    return Expected(table.loc[order, COLUMNS], origin)


def shipped() -> Expected:
    return Expected.read(SHIPPED)

