"""What healthy machines of a class measured: the expectation table the judge reads.

A machine class is a GPU model, its PCIe link's maximum generation and width, its NVLinks per
GPU and its GPU count ('h200 pcie5x16 nvlink18 x4'): the hosts of 2 and 4 H200s differ (their
CPUs set the eager launch cost; every GPU at once shares their memory). A point's role is its op variant with each GPU named by what it is, not which: 'gpu'
for cuda:i, and for a pair of GPUs their link class (NV18, PIX, SYS: `nvidia-smi topo -m`), so a
reference measured on GPUs 0 and 1 of a 2-GPU machine judges GPUs 5 and 6 of an 8-GPU one.
Whole-machine points keep their GPU count (world_size) in the role.

The table holds, per class, role and size, the median over healthy hosts of each host's median
over its runs of each run's median time per op (over its trials, and over its GPUs or pairs of
that role), how many runs and hosts (bench.hosts.host_id) that is, and where there are several,
how far they moved: the median |difference| of log time between two runs (`spread`; the judge's
run-to-run noise) and between two hosts, several runs of one host counting as one
(`host_spread`; the judge's spread of launch paths between hosts). Beside
it, the link theory of the class for the role (`theory_gbps`: the suite's `expectation` hook on
the class's NVML readings), so that a class with no runs of its own is judged by theory times
the share the other classes reach (`learned_share`), and a latency by what the other classes
take (`learned_time`). bench/analysis/expected.csv ships with the package (scripts/make_expected.py makes it from
results/reference); a user's own healthy runs make a table of their own (`from_runs`) that takes
precedence for their class (`over`).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from bench.hosts import host_id
from bench.methods import generation, generation_order
from bench.suite_view import Catalog, view
from bench.analysis.compare import point_levels
from bench.links import NVLINK_LINK_GBPS, hbm_gbps
from bench.points import ROLE_KEYS
from bench.analysis.causes import limiting_env
from bench.analysis.records import records
from bench.analysis.reference_curves import Curve, Curves, curves_of
from bench.results import COMPLETE, load, meta_columns, read_meta, run_status

SHIPPED = Path(__file__).with_name("expected.csv")
NOISE = Path(__file__).with_name("noise.csv")   # the same table made of identical runs (results/noise/*/identical)
COLUMNS = ["machine", "generation", "instances", *ROLE_KEYS, "size_bytes", "time_s", "runs", "hosts", "spread", "host_spread",
           "theory_gbps"]
_GPU = re.compile(r"cuda:(\d+)$")
_ROLE_OF = ["machine", "generation", *ROLE_KEYS]   # a curve's class, generation and role


@dataclass(frozen=True)
class MachineClass:
    """What makes machines draw the same curves; None where the run did not record it."""

    gpu: str                       # 'h200' (the model's first word, as bench.driver.machine.slug), 'cpu'
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_links: int | None = None   # per GPU
    gpus: int | None = None           # GPUs in the machine

    @property
    def key(self) -> str:
        if self.gpu == "cpu":
            return "cpu"

        def known(value: int | None) -> str:
            return "?" if value is None else str(value)

        return (f"{self.gpu} pcie{known(self.pcie_gen)}x{known(self.pcie_width)} nvlink{known(self.nvlink_links)} "
                f"x{known(self.gpus)}")

    @property
    def complete(self) -> bool:
        return self.gpu == "cpu" or None not in (self.pcie_gen, self.pcie_width, self.nvlink_links, self.gpus)


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


def gpu_pcie_gen(gpu: Mapping) -> int | None:
    """The PCIe generation a GPU supports (NVML's GPU maximum), else its link's maximum in its
    slot: a slot below the GPU is a fault of the host, judged as such, not a class of its own."""
    return _int(gpu.get("pcie_gen_gpu_max")) or _int(gpu.get("pcie_gen_max"))


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
    return MachineClass(gpu_model(str(first.get("name", ""))), gpu_pcie_gen(first) or _int(instance.get("pcie_gen")),
                        _int(first.get("pcie_width_max")) or _int(instance.get("pcie_width")),
                        nvlink, len(gpus) if gpus else _int(instance.get("gpu_count")))


def machine_row(meta: Mapping) -> dict:
    """A run's machine columns (results.meta_columns) for the suites' hooks, the device's own
    readings first: NVML's PCIe generation (the GPU's own, gpu_pcie_gen) and width and NVLink
    count, the catalogue's only where NVML recorded none; device memory's bandwidth from its clock
    and bus width."""
    row = meta_columns(meta)
    first = ((meta.get("system") or {}).get("gpus") or [{}])[0]
    row["pcie_gen"] = gpu_pcie_gen(first) or row.get("pcie_gen")
    row["pcie_width"] = first.get("pcie_width_max") or row.get("pcie_width")
    if first.get("nvlink_links") is not None:
        row["nvlink_gbps_per_gpu"] = first["nvlink_links"] * NVLINK_LINK_GBPS
    row["hbm_gbps"] = hbm_gbps(first.get("mem_clock_max_mhz"), first.get("memory_bus_width"))
    return row


def theory_gbps(catalog: Catalog, point: Mapping, machine: Mapping, link_class: str) -> float:
    """The link's figure for one point on a machine (the suite's `expectation` hook); NaN where none."""
    try:
        found = view(catalog, point["suite"]).expectation({**machine, **point, "link_class": link_class})
    except (KeyError, TypeError, ValueError):   # a hook that cannot read this machine's columns
        return math.nan
    return float(found[0]) if found is not None and float(found[0]) > 0 else math.nan


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
    if role["api"] == "" and role["backend"] == "nccl":
        out += [{**role, "api": "nccl"}, {**role, "api": "torch"}]
    if role["mode"] in ("read", "write"):
        out.append({**role, "mode": "peer"})
    return out


@dataclass(frozen=True)
class Learned:
    """What the other classes say of a role at a size: a share of link theory, or a time."""

    value: float         # the share (of theory), or the log time per op
    classes: tuple[str, ...]
    spread: float        # between those classes: median |difference| of log values; NaN with one
    relaxed: bool = False   # from other world sizes of the role (none had this one)

    @property
    def source(self) -> str:
        return f"{len(self.classes)} other class{'es' * (len(self.classes) != 1)}: {', '.join(self.classes)}"


def _pair_spread(values: list[float] | pd.Series) -> float:
    a = np.asarray(values, float)
    i, j = np.triu_indices(len(a), k=1)
    return float(np.median(np.abs(a[i] - a[j]))) if len(i) else math.nan


def _generations(method: str | None, frame: pd.DataFrame, catalog: Catalog) -> list[str]:
    """Each row's generation (bench/methods.py) in a run of `method`, by its suite and launch."""
    return [generation(method, view(catalog, suite).splits, launch)
            for suite, launch in zip(frame["suite"], frame["launch"])]


def _newest_generation(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of each class's newest generation of each role."""
    order = frame["generation"].map(generation_order)
    newest = order.groupby([frame[k] for k in ("machine", *ROLE_KEYS)]).transform("max")
    return frame[order == newest]


class Expected:
    """The expectation table: per machine class and role, a curve; `origins` says, per class,
    what made it ('reference': the shipped table; 'baseline DIR': a user's runs). A role whose
    figures a method split (bench/methods.py) has a curve per generation: the newest is the
    table's, `measured_as` gives those of a run's own."""

    def __init__(self, frame: pd.DataFrame, origin: str = "reference") -> None:
        if "generation" not in frame:
            frame = frame.assign(generation="")
        self.frame = frame[COLUMNS].reset_index(drop=True)
        self.origins = {m: origin for m in self.frame["machine"].unique()}
        self._measured_as: dict[str | None, Expected] = {}
        self.runs_of_role: dict[tuple, frozenset[str]] = {}   # made from runs: per (class, generation, role), its runs

    @functools.cached_property
    def _curves(self) -> Curves:
        """Made where first read: a table only filtered into another (measured_as, over) reads none."""
        return curves_of(_newest_generation(self.frame))

    @classmethod
    def read(cls, path: str | Path = SHIPPED, origin: str = "reference") -> Expected:
        frame = pd.read_csv(path, dtype={k: str for k in ("machine", "generation", "instances", *ROLE_KEYS)},
                            keep_default_na=False)
        for column in ("spread", "host_spread", "theory_gbps"):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
        frame = frame.astype({"world_size": int, "nnodes": int, "size_bytes": np.int64, "time_s": float, "runs": int,
                              "hosts": int})
        return cls(frame, origin)

    def write(self, path: str | Path) -> None:
        self.frame.to_csv(path, index=False, float_format="%.6g")

    def over(self, other: Expected) -> Expected:
        """This table's classes, and the other's for the classes this one lacks."""
        kept = other.frame[~other.frame["machine"].isin(self.origins)]
        merged = Expected(pd.concat([self.frame, kept]))
        merged.origins = {**{m: o for m, o in other.origins.items() if m not in self.origins}, **self.origins}
        return merged

    def measured_as(self, meta: Mapping, catalog: Catalog) -> Expected:
        """The table a run is judged by: of each suite and launch, the rows of the run's
        generation (bench/methods.py: measured by methods whose figures its own compare with), so
        a class without that generation of a role has no curve of it."""
        method = (meta.get("tool") or {}).get("method")
        if method not in self._measured_as:   # a doctor judges many runs of a few methods
            kept = Expected(self.frame[self.frame["generation"] == _generations(method, self.frame, catalog)])
            kept.origins = {m: o for m, o in self.origins.items() if m in kept.origins}
            self._measured_as[method] = kept
        return self._measured_as[method]

    def with_roles_of(self, older: Expected) -> tuple[Expected, set[tuple]]:
        """This table and the other's curves of the (class, generation, role)s this one lacks; those keys."""
        have = self.role_keys()
        new = older.frame[[key not in have for key in older.frame[_ROLE_OF].itertuples(index=False, name=None)]]
        merged = pd.concat([self.frame, new]).sort_values([*_ROLE_OF, "size_bytes"], kind="stable")
        return Expected(merged, next(iter(self.origins.values()), "reference")), older.role_keys() - have

    def role_keys(self) -> set[tuple]:
        """Its (class, generation, role)s."""
        return set(self.frame[_ROLE_OF].itertuples(index=False, name=None))

    def roles_of(self, run: str | Path, suite: str, launches: tuple[str, ...] | None = None) -> set[tuple]:
        """The (class, generation, role)s a run's points of one suite (of `launches`, where named)
        gave (a table made from runs)."""
        at, launch = _ROLE_OF.index("suite"), _ROLE_OF.index("launch")
        return {key for key, runs in self.runs_of_role.items()
                if key[at] == suite and (launches is None or key[launch] in launches) and str(run) in runs}

    def without(self, machines: Iterable[str]) -> Expected:
        """The table less some classes (a class judged by the others alone)."""
        gone = set(machines)
        kept = Expected(self.frame[~self.frame["machine"].isin(gone)])
        kept.origins = {m: o for m, o in self.origins.items() if m not in gone}
        return kept

    def classes(self) -> pd.DataFrame:
        """Per class: the instances, runs and hosts its table stands on."""
        return (_newest_generation(self.frame).groupby("machine", sort=True)
                .agg(instances=("instances", lambda s: "+".join(sorted(set("+".join(s).split("+"))))),
                     runs=("runs", "max"), hosts=("hosts", "max"), rows=("time_s", "size"))
                .reset_index())

    def roles(self) -> pd.DataFrame:
        """Per class, generation and suite: how many roles stand on how many runs and hosts (the fewest of their sizes)."""
        per_role = self.frame.groupby(["machine", "generation", *ROLE_KEYS], sort=True).agg(runs=("runs", "min"),
                                                                                            hosts=("hosts", "min"))
        return (per_role.reset_index().groupby(["machine", "generation", "suite", "runs", "hosts"], sort=True)
                .size().rename("roles").reset_index())

    def curve(self, machine: str, role: Mapping) -> Curve | None:
        return self._curves.by_key.get((machine, *(role[k] for k in ROLE_KEYS)))

    def _others(self, machine: str, role: Mapping, size: int, relax: tuple[str, ...] = ()) -> tuple[list[Curve], bool]:
        """Other classes' curves of this role covering `size`; where none, with the keys in
        `relax` taking any value (a collective's world size: busbw is normalized across it),
        and whether they did."""
        want = tuple(role[k] for k in ROLE_KEYS)
        found = [c for c in self._curves.by_role.get(want, []) if c.machine != machine and c.covers(size)]
        if found or not relax:
            return found, False
        free = [ROLE_KEYS.index(k) for k in relax]
        return [c for r, curves in self._curves.by_role.items()
                if all(a == b for i, (a, b) in enumerate(zip(r, want)) if i not in free)
                for c in curves if c.machine != machine and c.covers(size)], True

    def learned_share(self, machine: str, role: Mapping, size: int) -> Learned | None:
        """The median share of link theory the other classes reach in this role at this size."""
        shares: dict[str, float] = {}
        curves, relaxed = self._others(machine, role, size, relax=("world_size",))
        for c in curves:
            if math.isfinite(share := c.share(size)):
                shares.setdefault(c.machine, share)
        if not shares:
            return None
        logs = [math.log(v) for v in shares.values()]
        return Learned(float(np.exp(np.median(logs))), tuple(sorted(shares)), _pair_spread(logs), relaxed)

    def learned_time(self, machine: str, role: Mapping, size: int, same_gpu: bool = False) -> Learned | None:
        """The median log time per op the other classes take in this role at this size (same_gpu:
        the other classes of this class's GPU model alone)."""
        times: dict[str, float] = {}
        for c in self._others(machine, role, size)[0]:
            if not same_gpu or c.machine.split()[0] == machine.split()[0]:
                times.setdefault(c.machine, c.at(size)[0])
        if not times:
            return None
        return Learned(float(np.median(list(times.values()))), tuple(sorted(times)), _pair_spread(list(times.values())))

    def spreads(self, role: Mapping, smallest: int, largest: int, machine: str | None = None,
                between: str = "runs", others: bool = False) -> np.ndarray:
        """How far healthy runs (between="runs") or healthy hosts ("hosts") of this role moved at
        sizes from smallest to largest: in `machine`'s class (others: in every class but it), or
        in every class that has several (log time, one figure per class and size)."""
        role_key = tuple(role[k] for k in ROLE_KEYS)
        found = []
        for c in self._curves.by_role.get(role_key, []):
            if machine is None or (c.machine == machine) != others:
                spread = c.spread if between == "runs" else c.host_spread
                found.append(spread[(c.sizes >= smallest) & (c.sizes <= largest)])
        values = np.concatenate(found) if found else np.array([])
        return values[np.isfinite(values)]


def unhealthy(meta: Mapping) -> str:
    """Why a run cannot stand for a healthy machine ('' when it can): it did not complete, or an
    NCCL variable held NCCL back (causes.limiting_env)."""
    status = run_status(dict(meta))
    if status not in COMPLETE:
        return f"status {status}"
    limits = limiting_env((meta.get("system") or {}).get("env") or {})
    return f"handicapped ({', '.join(limits)})" if limits else ""


def _run_levels(run: Path, catalog: Catalog, parts: set[tuple[str, tuple[str, ...] | None]] | None = None) -> pd.DataFrame:
    """One run's points (of `parts`, where named: (suite, its launches or None for all)) as
    (machine, instance, role..., size_bytes, log_time, theory_gbps, host). The levels are read on
    the whole run (its usual pace is the whole run's), then kept to those parts."""
    meta = read_meta(run)
    rows = load(run, warn=lambda line: None)
    levels = point_levels(rows, catalog)
    if parts is not None:
        kept = np.zeros(len(levels), dtype=bool)
        for suite, launches in parts:
            kept |= (levels["suite"] == suite).to_numpy() & (levels["launch"].isin(launches).to_numpy()
                                                             if launches is not None else True)
        levels = levels[kept].reset_index(drop=True)
    links = (meta.get("system") or {}).get("links") or {}
    out = roles(levels, links)
    out["machine"] = machine_class(meta).key
    out["instance"] = str(rows["instance"].iloc[0])
    out["size_bytes"] = levels["size_bytes"].to_numpy(np.int64)
    out["log_time"] = -levels["y"].to_numpy(float)
    machine = machine_row(meta)
    # Theory in bytes per second moved (algbw), as the table's times are: a collective's busbw
    # theory over the bus factor of its point (busbw / algbw), so that shares compare across sizes.
    algbw = levels["size_bytes"].to_numpy(float) * np.exp(levels["y"].to_numpy(float)) / 1e9
    factor = np.where(levels["metric"].to_numpy() == "time_s", 1.0, levels["value"].to_numpy(float) / algbw)
    out["theory_gbps"] = [theory_gbps(catalog, point, machine, pair_class(links, point["src"], point["dst"])) / k
                          for point, k in zip(records(levels), factor)]
    out["run"] = str(run)
    out["host"] = host_id(meta.get("system") or {})
    out["generation"] = _generations((meta.get("tool") or {}).get("method"), out, catalog)
    return out


def from_runs(runs: Iterable[str | Path | tuple], catalog: Catalog, origin: str = "reference") -> Expected:
    """The table made from healthy runs (or (run, suite) pairs: that suite's points of the run;
    or (run, suite, launches): of those launches): per class, role and size, the median over hosts
    of each host's median over its runs of each run's median time (its GPUs or pairs of one role:
    their median)."""
    parts: dict[Path, set | None] = {}   # per run, the parts it gives (None: all), each run read once
    for item in runs:
        run, suite, launches = (Path(item[0]), item[1], item[2] if len(item) > 2 else None) \
            if isinstance(item, tuple) else (Path(item), None, None)
        if suite is None or parts.get(run, set()) is None:
            parts[run] = None
        else:
            parts.setdefault(run, set()).add((suite, launches))
    levels = pd.concat([_run_levels(run, catalog, named) for run, named in parts.items()], ignore_index=True)
    keys = ["machine", "generation", *ROLE_KEYS, "size_bytes"]
    per_run = levels.groupby([*keys, "run"], sort=False).agg(
        log_time=("log_time", "median"), instance=("instance", "first"), host=("host", "first"),
        theory_gbps=("theory_gbps", "median")).reset_index()
    # Several runs of one host are one host: its median, and one figure of the spread between hosts.
    per_host = per_run.groupby([*keys, "host"], sort=False)["log_time"].median().reset_index()
    by_host = per_host.groupby(keys, sort=False)["log_time"].agg(["median", _pair_spread])
    table = per_run.groupby(keys, sort=False).agg(
        runs=("run", "nunique"), hosts=("host", "nunique"),
        spread=("log_time", _pair_spread), theory_gbps=("theory_gbps", "median"),
        instances=("instance", lambda s: "+".join(sorted(set(s)))))
    table["log_time"], table["host_spread"] = by_host["median"], by_host["_pair_spread"]
    table = table.reset_index()
    table["time_s"] = np.exp(table["log_time"])
    order = table.sort_values(["machine", "generation", *ROLE_KEYS, "size_bytes"]).index
    made = Expected(table.loc[order, COLUMNS], origin)
    made.runs_of_role = per_run.groupby(_ROLE_OF, sort=False)["run"].agg(frozenset).to_dict()
    return made


@functools.cache   # read once a process: the doctor judges many runs by it, and nothing changes it
def shipped() -> Expected:
    return Expected.read(SHIPPED)


@functools.cache
def shipped_noise() -> Expected | None:
    """The noise studies' table (their spreads are the classes' between-run noise); None without one."""
    return Expected.read(NOISE, origin="noise runs") if NOISE.exists() else None
