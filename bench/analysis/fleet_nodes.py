"""A fleet's runs as nodes: each run's host, machine class and status from its meta.json, the
complete runs' levels (fleet_levels) as a matrix of runs by points, and the runs of one host
gathered into one node.

A node is a host (bench/hosts.py: a hash of its GPUs' UUIDs), not a folder: runs of one host
filed under several folders are one node, and its runs are compared with each other too. A run
that did not complete is listed and never judged: its points stop where it stopped.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from bench.analysis.expected import machine_class
from bench.analysis.fleet_levels import FLAGS, RunLevels, point_fields
from bench.analysis.medians import nanmedian
from bench.hosts import host_id
from bench.results import COMPLETE, ResultsError, find_runs, read_meta, run_status


@dataclass(frozen=True)
class FleetRun:
    """What the fleet reads of a run before its rows: its host, class and status."""

    run: Path
    host: str          # host_id; the run folder where it recorded none (a CPU run of an older version)
    hostname: str
    machine: str       # its machine class (expected.machine_class)
    status: str
    schema: int | None
    suites: tuple[str, ...]   # the suites its config asked for (none recorded: an import)
    method: str | None = None   # how it measured (bench/methods.py; meta.json's tool.method)


@dataclass
class Survey:
    runs: list[FleetRun]            # complete, to judge
    left_out: list[str]             # one line each: did not complete, or unreadable
    machine: str                    # the class judged ('a, b' with --any-class)


def _run(run: Path) -> FleetRun:
    meta = read_meta(run)
    system = meta.get("system") or {}
    return FleetRun(run, host_id(system) or f"run {run}", str(system.get("hostname") or ""),
                    machine_class(meta).key, run_status(meta), meta.get("schema_version"),
                    tuple((meta.get("config") or {}).get("suites") or ()), (meta.get("tool") or {}).get("method"))


def survey(paths: Iterable[str | Path], any_class: bool = False) -> Survey:
    """The runs at or below `paths`: the complete ones, and a line for each left out. ResultsError
    (one line, before any rows are read) where there is no run, no complete one, or runs of
    several machine classes without `any_class`."""
    found, left_out = [], []
    for run in dict.fromkeys(find_runs(paths)):
        try:
            found.append(_run(run))
        except ResultsError as exc:
            left_out.append(f"UNREADABLE {run}: {' '.join(str(exc).split())}")
    classes = Counter(r.machine for r in found)
    if len(classes) > 1 and not any_class:
        listed = ", ".join(f"{machine} ({n} run{'s' * (n != 1)})" for machine, n in classes.most_common())
        raise ResultsError(f"runs of {len(classes)} machine classes: {listed}; a fleet is one kind: name one "
                           "kind's runs, or pass --any-class to judge them together")
    complete = [r for r in found if r.status in COMPLETE]
    left_out += [f"NOT COMPLETE {r.run} ({r.status}): listed, never judged" for r in found if r.status not in COMPLETE]
    if not complete:
        raise ResultsError(f"no complete run among the {len(found)} found ({', '.join(map(str, paths))}): "
                           "nothing to judge")
    return Survey(complete, left_out, ", ".join(c for c, _ in classes.most_common()))


@dataclass
class RunMatrix:
    """The complete runs' levels side by side: a row per run, a column per point."""

    points: pd.DataFrame      # per point: POINT_KEYS, metric, and its FLAGS over the runs (any)
    y: np.ndarray             # runs x points: -log median time; NaN where the run has no figure
    value: np.ndarray         # GB/s, or time where the point has no bandwidth
    slow: np.ndarray          # runs x points: measured while the host was slow (results.slow_throughout)
    failed: list[list[str]]   # per run: the variants whose data check failed


def run_matrix(levels: Iterable[RunLevels]) -> RunMatrix:
    """The runs' levels on one grid of points (a point any run measured), each run's key strings
    let go as it is read: a fleet's thousands of runs share a few hundred points."""
    index: dict[str, int] = {}
    metric: list[str] = []
    held = []
    for lv in levels:
        cols = [index.setdefault(k, len(index)) for k in lv.keys]
        if len(index) > len(metric):   # new points, in order (most runs bring none)
            metric += [m for c, m in zip(cols, lv.metric) if c >= len(metric)]
        held.append((np.array(cols, dtype=np.int64), lv.y, lv.value, lv.flags, lv.failed))
    shape = (len(held), len(index))
    y, value = np.full(shape, np.nan), np.full(shape, np.nan)
    slow = np.zeros(shape, dtype=bool)
    flags = {f: np.zeros(len(index), dtype=bool) for f in FLAGS}
    for row, (cols, run_y, run_value, run_flags, _) in enumerate(held):
        y[row, cols], value[row, cols] = run_y, run_value
        slow[row, cols] = run_flags["host_slow"]
        for f in FLAGS:
            flags[f][cols] |= run_flags[f]
    points = pd.DataFrame([point_fields(k) for k in index])
    points["metric"] = metric
    for f in FLAGS:
        points[f] = flags[f]
    return RunMatrix(points, y, value, slow, [h[4] for h in held])


def node_of(runs: list[FleetRun]) -> tuple[list[str], np.ndarray]:
    """The hosts in order of first appearance, and each run's node (an index into them)."""
    hosts = list(dict.fromkeys(r.host for r in runs))
    where = {h: i for i, h in enumerate(hosts)}
    return hosts, np.array([where[r.host] for r in runs], dtype=np.int64)


def by_node(matrix: np.ndarray, node: np.ndarray, nodes: int, reduce=nanmedian) -> np.ndarray:
    """A runs x points matrix as nodes x points: each node's runs reduced (default: the median,
    NaN-aware; NaN where none of its runs has a figure)."""
    out = np.full((nodes, matrix.shape[1]), np.nan, dtype=np.result_type(matrix, np.float64))
    counts = np.bincount(node, minlength=nodes)
    single = counts[node] == 1
    out[node[single]] = matrix[single]
    for n in np.flatnonzero(counts > 1):
        out[n] = reduce(matrix[node == n], axis=0)
    return out
