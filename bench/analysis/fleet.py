"""Which node of a fleet is not like the others: many hosts of one kind judged against each other
and against the class's expectation table (xferbench-doctor --fleet; docs/judging.md).

Families are the single-run judge's: an op variant of one GPU or pair at latency-bound or
bandwidth-bound sizes (bandwidth-bound: its plateau), their classes read off the class's
reference curve where it has one (point_expectations.judged_points on the fleet's median curve).
A node is a host (fleet_nodes): its level at a point is the median over its runs. Per family, a
node's change D is the median over the family's sizes of its level less the fleet's (the median
over nodes at that size); the fleet's spread is the MAD of D over the nodes, scaled to a sigma and
moderated by the suite's declared noise (noise.family_sigma: a fleet of three is not left to its
own spread), so a few bad nodes move neither the baseline nor the spread. A node's family is low
when D < log(1 - tolerance) - z * sigma * sqrt(1 + c_m / m) (m nodes behind the median), z
Bonferroni over every node's families at alpha for the whole fleet; and low against the class's
table (its own healthy runs, where it has the family), by the judge's rule with the spread a
healthy host of the class shows about it (_table_sigma), or the fleet's where wider. A family
whose limit would pass a halved figure is too noisy to judge, as in the judge (a launch path: then
judged by its op's device-side figures). Where a node's low family sits (fleet_places) and why
(causes.py) are read from its siblings in the node and the node's own record.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.analysis import causes
from bench.analysis.compare import HOST_SLOW_NOISE, JUDGED_CLASSES, family_z, plateau
from bench.analysis.expected import Expected, machine_class, roles, shipped_noise
from bench.analysis.fleet_levels import RunLevels, many_levels
from bench.analysis.fleet_nodes import RunMatrix, Survey, by_node, node_of, run_matrix, survey
from bench.analysis.fleet_places import NodeCauses, Place, places
from bench.analysis.fleet_verdicts import FleetFamily, FleetJudgement, Low, Node
from bench.analysis.judge import CAN_CATCH, UNMEASURED
from bench.analysis.launch_path import (between_hosts, bounded, device_side, host_bound, host_sigma, launch_path, op_key,
                                        widened)
from bench.analysis.medians import nanmedian
from bench.analysis.noise import GPU_BACKENDS, default_noise, family_sigma, launch_path_noise, median_factor, run_noise
from bench.analysis.point_expectations import HOST_SLOW, OLDEST_JUDGED, JudgedPoint, judged_points
from bench.methods import generation
from bench.points import ROLE_KEYS, VARIANT_KEYS, variant_label
from bench.results import ResultsError, read_meta
from bench.suite_view import LATENCY_BOUND, Catalog, view

MIN_NODES = 3          # a family is judged against its peers where this many nodes measured it
MAD_TO_SIGMA = 1.4826  # a normal distribution's sigma over its median absolute deviation
SIGMA_FLOOR = 0.01     # nodes never agree closer than timing itself repeats
# Why a run's point is set aside, as the single-run judge sets it aside (point_expectations).
ASIDE = {1: HOST_SLOW, 2: f"made by an older xferbench (schema below {OLDEST_JUDGED})"}
TOO_NOISY = "too noisy to judge: its limit lets a halved figure pass"
TOO_FEW = f"fewer than {MIN_NODES} nodes measured it, and the class's table has no expectation of it"


@dataclass
class _Family:
    key: dict
    size_class: str
    cols: np.ndarray            # the points judged (plateau, for bandwidth-bound)
    all_cols: np.ndarray        # every point of the family: what a node measured
    expected: np.ndarray        # per judged point: the class's table's level; NaN where it has none
    runs: int                   # healthy runs behind the table's expectation (0: none)
    source: str
    role: tuple
    bandwidth: bool             # its figure a bandwidth, not a dependent load's time

    @property
    def launch_path(self) -> bool:
        """An eager latency-bound transfer on a GPU: the host's launch path (launch_path.py)."""
        return launch_path(self.key, self.size_class, self.bandwidth)


def _fleet_points(matrix: RunMatrix, y: np.ndarray, value: np.ndarray, meta: dict, catalog: Catalog,
                  table: Expected) -> list[JudgedPoint]:
    """Each point's class and the table's expectation, read as the judge reads one run, on the
    fleet's median curve (`y`, `value`: each node's median over its runs; their medians over nodes)."""
    levels = matrix.points.assign(y=nanmedian(y, 0), value=nanmedian(value, 0), host_slow=False)
    in_cache = frozenset((op, src, size) for op, src, size, short in
                         zip(levels["op"], levels["src"], levels["size_bytes"], levels["short_of_hbm"]) if short)
    return judged_points(levels, meta, catalog, table, in_cache, causes.facts(meta))


def _aside(matrix: RunMatrix, survey: Survey, points: list[JudgedPoint]) -> np.ndarray:
    """runs x points: 0 where a run's figure is judged, else the ASIDE code of why not, as the
    judge sets a run's points aside: on a host backend, a latency-bound point measured while the
    host was slow (a GPU's launch path is judged, moods and all); a run of schema 1."""
    latency = np.array([p.size_class == LATENCY_BOUND for p in points])
    host = ~matrix.points["backend"].isin(GPU_BACKENDS).to_numpy()
    codes = np.zeros(matrix.y.shape, dtype=np.int8)
    codes[matrix.slow & latency & host] = 1
    older = np.array([isinstance(r.schema, int) and r.schema < OLDEST_JUDGED for r in survey.runs])
    codes[older] = 2
    return np.where(np.isnan(matrix.y), 0, codes).astype(np.int8)


def _families(points: list[JudgedPoint], matrix: RunMatrix, fleet_y: np.ndarray, links: dict) -> list[_Family]:
    """The judge's families (variant and size class) of the points with a fleet figure, each with
    its judged sizes (bandwidth-bound: the plateau of the fleet's curve) and the class's table there."""
    grouped: dict[tuple, list[int]] = {}
    for col, p in enumerate(points):
        if p.size_class in JUDGED_CLASSES and not p.set_aside and math.isfinite(fleet_y[col]):
            grouped.setdefault((p.variant, p.size_class), []).append(col)
    point_roles = list(roles(matrix.points, links).itertuples(index=False, name=None))
    out = []
    for (variant, size_class), cols in grouped.items():
        cols = sorted(cols, key=lambda c: points[c].size)
        judged = cols
        if size_class == "bandwidth":
            rows = [{"col": c, "size_bytes": points[c].size, "y_base": fleet_y[c],
                     "short_of_hbm_base": bool(matrix.points["short_of_hbm"].iat[c])} for c in cols]
            judged = [r["col"] for r in plateau(rows)]
        # The class's own table only: theory and other classes' figures are the single-run judge's
        # way to judge a class with no healthy runs; a fleet has its peers.
        expected = np.array([points[c].y_expected if points[c].runs else math.nan for c in judged])
        known = [points[c] for c, e in zip(judged, expected) if math.isfinite(e)]
        key = dict(zip(VARIANT_KEYS, (v.item() if hasattr(v, "item") else v for v in variant)))
        out.append(_Family(key, size_class, np.array(judged), np.array(cols), expected,
                           min((p.runs for p in known), default=0), known[0].source if known else "",
                           point_roles[cols[0]], points[cols[0]].bandwidth))
    return out


def _without_mixed_generations(fams: list[_Family], survey: Survey, catalog: Catalog) -> list[_Family]:
    """The families, those whose runs measured them in different generations (bench/methods.py:
    held collectives before and after held-4) judged against the fleet alone: one table cannot
    hold both, and the newer reads up to 1.46x the older."""
    methods = {run.method for run in survey.runs}   # a fleet's thousands of runs share a few
    for f in fams:
        splits = view(catalog, f.key["suite"]).splits
        if len({generation(method, splits, f.key["launch"]) for method in methods}) > 1:
            f.expected, f.runs, f.source = np.full(len(f.cols), np.nan), 0, ""
    return fams


def _median_change(y: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the median of y - base over the columns, where the row has figures at half of them
    or more, else NaN; and how much wider its noise is than a typical row's (sqrt of the typical
    count of figures over its own, at least 1: a median of fewer sizes moves more)."""
    if not base.size:
        return np.full(len(y), np.nan), np.ones(len(y))
    diff = y - base
    count = np.isfinite(diff).sum(axis=1)
    enough = count >= math.ceil(base.size / 2)
    typical = float(np.median(count[enough])) if enough.any() else 1.0
    change = np.where(enough, nanmedian(diff, 1), np.nan)
    return change, np.sqrt(np.maximum(typical / np.maximum(count, 1), 1.0))


def _changes(fam: _Family, y: np.ndarray, fleet_y: np.ndarray) -> tuple[tuple, tuple]:
    """Per node (rows of y): D against the fleet and against the table (NaN where it has too few
    figures), each with its widening."""
    known = np.isfinite(fam.expected)
    return (_median_change(y[:, fam.cols], fleet_y[fam.cols]),
            _median_change(y[:, fam.cols[known]], fam.expected[known]))


def _widened(limit: float, tolerance: float, widen: float) -> float:
    """A limit for a node whose change is `widen` times noisier than the fleet's typical node's."""
    return math.log1p(-tolerance) - (math.log1p(-tolerance) - limit) * widen


def _spread(change: np.ndarray, prior: float) -> tuple[float, int]:
    """The fleet's sigma of a family's change (MAD over nodes, moderated by the declared noise)
    and the nodes behind it."""
    seen = change[np.isfinite(change)]
    if len(seen) < MIN_NODES:
        return math.nan, len(seen)
    mad = MAD_TO_SIGMA * float(np.median(np.abs(seen - np.median(seen))))
    return max(family_sigma(prior, mad, len(seen) - 1), SIGMA_FLOOR), len(seen)


def _table_sigma(f: _Family, points: list[JudgedPoint], catalog: Catalog, table: Expected, noise: Expected | None,
                 machine: str) -> float:
    """How far a healthy host of the class strays from the table's expectation of a family, as the
    judge reads it: the run-to-run noise measured on the class (its noise runs, else its reference
    runs) moderated by the declared noise (else that noise x UNMEASURED), and the spread between
    the class's healthy hosts where wider (a launch path's: between hosts, wider on few hosts). A
    tight fleet's own spread says nothing of how far the table's hosts stood from it."""
    role, sizes = dict(zip(ROLE_KEYS, f.role)), [points[c].size for c in f.cols]
    declared = default_noise(catalog, f.key, f.size_class)
    found = [s for s in (src.spreads(role, min(sizes), max(sizes), machine) for src in (noise, table) if src) if len(s)]
    sigma = family_sigma(declared, run_noise(found[0]), len(found[0])) if found else declared * UNMEASURED
    hosts = min((points[c].hosts for c in f.cols if points[c].runs), default=0)
    if f.launch_path:
        between, said = host_sigma(role, sizes, table, machine, declared, hosts)
        return widened(max(between, sigma), hosts, said)[0]
    between, _ = between_hosts(role, sizes, table, machine, declared, hosts)
    return max(sigma, between) if math.isfinite(between) else sigma


def _limits(fams: list[_Family], peer: np.ndarray, table: np.ndarray, table_sigmas: list[float], catalog: Catalog,
            tolerance: float, alpha: float) -> tuple[list[FleetFamily], float]:
    """Each family's spread and limits against the fleet and the table (`table_sigmas`: a healthy
    host's spread about it, _table_sigma), and the z they share."""
    declared = [launch_path_noise(catalog, f.key) if f.launch_path else default_noise(catalog, f.key, f.size_class)
                for f in fams]
    spreads = [_spread(peer[k], declared[k]) for k in range(len(fams))]
    tests = sum(n for (s, n) in spreads if math.isfinite(s)) + int(np.isfinite(table).sum())
    z = family_z(alpha, tests)
    out = []
    for k, (f, (sigma, n)) in enumerate(zip(fams, spreads)):
        if not math.isfinite(sigma):   # too few nodes for a spread: never measured here, as the judge widens it
            sigma = declared[k] * UNMEASURED
            peer_limit = math.nan
        else:
            peer_limit = math.log1p(-tolerance) - z * sigma * math.sqrt(1 + median_factor(n) / n)
            if f.launch_path:   # a process draws some pairs' launch paths slow: nodes alike say nothing of that
                peer_limit = bounded(peer_limit)
        has_table = bool(np.isfinite(table[k]).any())
        spread = max(sigma, table_sigmas[k])
        table_limit = (math.log1p(-tolerance) - z * spread * math.sqrt(1 + median_factor(f.runs) / f.runs)
                       if has_table else math.nan)
        if f.launch_path and has_table:   # as the judge holds it: what healthy hosts' launch paths reach
            table_limit = bounded(table_limit)
        label = f"{variant_label(f.key)} ({f.size_class}-bound)"
        out.append(FleetFamily(label, f.key, f.size_class, n, sigma, peer_limit, table_limit, f.source,
                               [int(s) for s in f.cols], declared[k]))
    return out, z


def _noisy(limit: float) -> bool:
    return math.isfinite(limit) and math.exp(limit) < CAN_CATCH


def judge_fleet(survey: Survey, matrix: RunMatrix, catalog: Catalog, table: Expected,
                tolerance: float, alpha: float, min_judged: float) -> FleetJudgement:
    """The fleet's verdict on the surveyed runs' levels (a row of `matrix` each): each node's
    families against the fleet's and the table's, the node wrong, normal or not judged, with where
    its low families sit and why."""
    hosts, node = node_of(survey.runs)
    meta = read_meta(max(survey.runs, key=lambda r: (r.schema or 0, str(r.run))).run)
    links = (meta.get("system") or {}).get("links") or {}
    table = table.measured_as(meta, catalog)
    raw = by_node(matrix.y, node, len(hosts))
    points = _fleet_points(matrix, raw, by_node(matrix.value, node, len(hosts)), meta, catalog, table)
    aside = _aside(matrix, survey, points)
    y_runs = np.where(aside == 0, matrix.y, np.nan)
    y = by_node(y_runs, node, len(hosts))
    fleet_y = nanmedian(y, 0)
    fams = _without_mixed_generations(_families(points, matrix, fleet_y, links), survey, catalog)
    peer, tab, widen = (np.empty((len(fams), len(hosts))) for _ in range(3))
    widen_tab = np.empty_like(widen)
    for k, f in enumerate(fams):
        (peer[k], widen[k]), (tab[k], widen_tab[k]) = _changes(f, y, fleet_y)
    machine = machine_class(meta).key
    noise = shipped_noise()
    noise = noise.measured_as(meta, catalog) if noise is not None else None
    table_sigmas = [_table_sigma(f, points, catalog, table, noise, machine) for f in fams]
    stats, z = _limits(fams, peer, tab, table_sigmas, catalog, tolerance, alpha)
    ctx = FleetContext(survey, matrix, node, hosts, points, y_runs, y, fleet_y, fams, stats, peer, tab, widen,
                       widen_tab, z, tolerance, links, catalog)
    ctx.judge(~np.isnan(raw), by_node(aside, node, len(hosts), np.max))
    moved, missing = ctx.moved(), ctx.missing(~np.isnan(raw))
    nodes = [ctx.node(n, min_judged, moved.get(n, []), missing.get(n, [])) for n in range(len(hosts))]
    return FleetJudgement(survey.machine, len(survey.runs), nodes, stats, survey.left_out, tolerance, alpha, z,
                          min_judged, np.exp(np.where(np.isfinite([s.peer_limit for s in stats])[:, None], peer,
                                                      np.nan)).T)


# A node's family: not measured, low against the fleet or the table, judged, or not judged: its
# figures set aside, too noisy, too few nodes and no table.
ABSENT, LOW_FLEET, LOW_TABLE, JUDGED, SET_ASIDE, NOISY, FEW = range(7)
AGAINST = {LOW_FLEET: "the fleet", LOW_TABLE: "the class's table"}


@dataclass
class FleetContext:
    """The fleet's figures as each node's verdict reads them: families x nodes, nodes x points."""

    survey: Survey
    matrix: RunMatrix
    node_index: np.ndarray
    hosts: list[str]
    points: list[JudgedPoint]
    y_runs: np.ndarray
    y: np.ndarray
    fleet_y: np.ndarray
    fams: list[_Family]
    stats: list[FleetFamily]
    peer: np.ndarray
    table: np.ndarray
    widen: np.ndarray             # families x nodes: how much noisier each node's change is (fewer sizes)
    widen_table: np.ndarray
    z: float
    tolerance: float
    links: dict
    catalog: Catalog
    state: np.ndarray = None      # families x nodes: ABSENT ... FEW (judge())
    aside: np.ndarray = None      # families x nodes: the ASIDE code of a family set aside

    def runs_of(self, n: int) -> np.ndarray:
        return np.flatnonzero(self.node_index == n)

    def limits(self, k: int, against: int) -> np.ndarray:
        """Family k's limit for each node, against the fleet or the table, widened for its sizes."""
        s = self.stats[k]
        if against == LOW_FLEET:
            return _widened(s.peer_limit, self.tolerance, self.widen[k])
        return _widened(s.table_limit, self.tolerance, self.widen_table[k])

    def judge(self, present: np.ndarray, aside: np.ndarray) -> None:
        """Every node's state per family; `present`: nodes x points with a figure (set aside or not),
        `aside`: nodes x points, the ASIDE code of a node's figures."""
        self.state = np.zeros(self.peer.shape, dtype=np.int8)
        self.aside = np.zeros(self.peer.shape, dtype=np.int8)
        for k, (f, s) in enumerate(zip(self.fams, self.stats)):
            peer_on = math.isfinite(s.peer_limit) and not _noisy(s.peer_limit)
            table_on = math.isfinite(s.table_limit) and not _noisy(s.table_limit)
            d, t = self.peer[k], self.table[k]
            with np.errstate(invalid="ignore"):
                low_fleet = peer_on & (d < self.limits(k, LOW_FLEET))
                low_table = table_on & (t < self.limits(k, LOW_TABLE))
            judged = (peer_on & np.isfinite(d)) | (table_on & np.isfinite(t))
            self.state[k] = np.select(
                [~present[:, f.all_cols].any(axis=1), low_fleet, low_table, judged, ~np.isfinite(d) & ~np.isfinite(t),
                 np.full(len(d), _noisy(s.peer_limit) or _noisy(s.table_limit))],
                [ABSENT, LOW_FLEET, LOW_TABLE, JUDGED, SET_ASIDE, NOISY], FEW)
            self.aside[k] = aside[:, f.cols].max(axis=1)
        self._by_device_side()

    def _by_device_side(self) -> None:
        """A host-bound family too noisy to judge (a launch path, a pageable copy) is judged by its
        op's device-side figures, as the judge judges it (launch_path.py): judged where the node's
        device-side figure of its op was."""
        twins: dict[tuple, list[int]] = {}
        for k, f in enumerate(self.fams):
            if device_side(f.key, f.size_class):
                twins.setdefault(op_key(f.key), []).append(k)
        for k, f in enumerate(self.fams):
            same = twins.get(op_key(f.key), [])
            if same and host_bound(f.key, f.size_class, f.bandwidth):
                judged = np.isin(self.state[same], (LOW_FLEET, LOW_TABLE, JUDGED)).any(axis=0)
                self.state[k] = np.where((self.state[k] == NOISY) & judged, JUDGED, self.state[k])

    def _low(self, k: int, n: int, against: int, place: Place, why: NodeCauses) -> Low:
        f, s = self.fams[k], self.stats[k]
        change = self.peer[k, n] if against == LOW_FLEET else self.table[k, n]
        base = self.fleet_y[f.cols] if against == LOW_FLEET else f.expected
        node_y = self.y[n, f.cols]
        ok = np.isfinite(node_y) & np.isfinite(base)
        at = int(np.argmin(np.where(ok, np.abs(node_y - base - change), np.inf)))
        col = int(f.cols[at])
        rows = self.runs_of(n)
        value = float(np.nanmedian(self.matrix.value[rows, col]))
        bandwidth = self.matrix.points["metric"].iat[col] != "time_s"
        if bandwidth and f.size_class == "bandwidth":
            shown, unit = (value, value * math.exp(base[at] - node_y[at])), "GB/s"
        else:
            shown, unit = (math.exp(-node_y[at]) * 1e6, math.exp(-base[at]) * 1e6), "µs"
        return Low(s.family, f.key, f.size_class, math.exp(change), math.exp(self.limits(k, against)[n]),
                   AGAINST[against], shown[0], shown[1], unit, self.points[col].size, str(place), place.kind,
                   list(place.gpus), why.explain(f.key, bandwidth and f.size_class == "bandwidth", f.launch_path, rows, f.cols))

    def moved(self) -> dict[int, list[str]]:
        """Per node of several runs: its families whose runs lie further apart than runs of one host
        do. That noise is measured here, between the runs of every node of several (the median of
        their spans, as between two runs), moderated by the suite's declared noise: the fleet's
        spread is of nodes' medians, which one run's moods do not reach."""
        rows = np.flatnonzero(np.bincount(self.node_index)[self.node_index] > 1)
        rows = rows[np.argsort(self.node_index[rows], kind="stable")]        # each node's runs together
        starts = np.flatnonzero(np.r_[True, self.node_index[rows][1:] != self.node_index[rows][:-1]]) if rows.size else []
        out: dict[int, list[str]] = {}
        for f, s in zip(self.fams, self.stats) if rows.size else ():
            each, widen = _median_change(self.y_runs[np.ix_(rows, f.cols)], self.fleet_y[f.cols])
            seen = np.isfinite(each)
            lo = np.minimum.reduceat(np.where(seen, each, np.inf), starts)
            hi = np.maximum.reduceat(np.where(seen, each, -np.inf), starts)
            several = np.add.reduceat(seen, starts) >= 2
            spans = (hi - lo)[several]
            sigma = family_sigma(s.declared, run_noise(spans) if spans.size else 0.0, spans.size)
            # A node with a run measured while its host was slow: its noise twice, as the gate
            # and the single-run judge take a launch path's in a spell.
            spell = np.maximum.reduceat(self.matrix.slow[np.ix_(rows, f.cols)].any(axis=1), starts)
            wider = np.maximum.reduceat(np.where(seen, widen, 1.0), starts) * np.where(spell, HOST_SLOW_NOISE, 1.0)
            limit = _widened(math.log1p(-self.tolerance) - self.z * sigma * math.sqrt(2), self.tolerance, wider)
            with np.errstate(invalid="ignore"):
                apart = several & (lo - hi < limit) & (np.exp(limit) >= CAN_CATCH)
            for j in np.flatnonzero(apart):
                runs = rows[starts[j]:starts[j + 1] if j + 1 < len(starts) else len(rows)]
                ends = each[starts[j]:starts[j] + len(runs)]
                a, b = runs[np.nanargmin(ends)], runs[np.nanargmax(ends)]
                out.setdefault(int(self.node_index[a]), []).append(
                    f"{s.family}: {math.exp(np.nanmin(ends)):.2f}x the fleet in {self.survey.runs[a].run.name}, "
                    f"{math.exp(np.nanmax(ends)):.2f}x in {self.survey.runs[b].run.name}")
        return out

    def missing(self, present: np.ndarray) -> dict[int, list[str]]:
        """Per node: the suites its runs asked for and most nodes measured, of which it measured nothing
        (skipped at run time: no peer access, no NCCL). Suites, not ops: versions differ in their ops."""
        suites = self.matrix.points["suite"].to_numpy()
        per_suite = pd.DataFrame(present.T).groupby(suites).any()          # suite x nodes
        asked = np.zeros(per_suite.shape, dtype=bool)
        # a fleet's runs ask for one or two lists of suites: each list looked up once
        of = {wanted: per_suite.index.isin(wanted) for wanted in {run.suites for run in self.survey.runs}}
        for run, n in zip(self.survey.runs, self.node_index):
            asked[:, n] |= of[run.suites]
        lacking = (per_suite.sum(axis=1).to_numpy() > len(self.hosts) / 2)[:, None] & asked & ~per_suite.to_numpy()
        return {int(n): [f"{suite}: asked for, and most nodes measured it; this one measured none of it"
                         for suite in per_suite.index[lacking[:, n]]] for n in np.flatnonzero(lacking.any(axis=0))}

    def _unjudged(self, n: int) -> dict[str, int]:
        state, aside = self.state[:, n], self.aside[:, n]
        out = Counter(ASIDE.get(int(code), "no figure at the family's judged sizes") for code in aside[state == SET_ASIDE])
        out.update({TOO_NOISY: int((state == NOISY).sum()), TOO_FEW: int((state == FEW).sum())})
        return {why: k for why, k in out.items() if k}

    def node(self, n: int, min_judged: float, moved: list[str], missing: list[str]) -> Node:
        rows = self.runs_of(n)
        state = self.state[:, n]
        lows = [(int(k), int(state[k])) for k in np.flatnonzero((state == LOW_FLEET) | (state == LOW_TABLE))]
        why = NodeCauses(self)
        where = places([k for k, _ in lows], n, self)
        low = sorted((self._low(k, n, against, place, why) for (k, against), place in zip(lows, where)),
                     key=lambda v: v.ratio)
        runs = [self.survey.runs[r] for r in rows]
        failed = sorted({v for r in rows for v in self.matrix.failed[r]})
        return Node(self.hosts[n], ", ".join(sorted({r.hostname for r in runs})), [str(r.run) for r in runs], low,
                    moved, failed, missing, judged=int(np.isin(state, (LOW_FLEET, LOW_TABLE, JUDGED)).sum()),
                    measured=int((state != ABSENT).sum()), unjudged=self._unjudged(n), min_judged=min_judged,
                    causes=why.summary(low))


def judge_runs(found: Survey, catalog: Catalog, table: Expected, tolerance: float, alpha: float,
               min_judged: float) -> FleetJudgement:
    """The surveyed runs' levels read (fleet_levels) and judged. ResultsError, naming the first, where
    a run's rows cannot be read or are refused: the doctor judges no fleet with such a run in it."""
    kept: list = []
    unread: list[str] = []

    def readable():
        for run, levels in zip(found.runs, many_levels([r.run for r in found.runs], catalog)):
            if isinstance(levels, RunLevels):
                kept.append(run)
                yield levels
            else:
                unread.append(levels)

    matrix = run_matrix(readable())
    if unread:
        more = f" (and {len(unread) - 1} more runs)" if len(unread) > 1 else ""
        raise ResultsError(f"{unread[0]}{more}")
    return judge_fleet(Survey(kept, found.left_out, found.machine), matrix, catalog, table, tolerance, alpha,
                       min_judged)


def fleets(paths: list, catalog: Catalog, table: Expected, tolerance: float, alpha: float,
           min_judged: float) -> list[FleetJudgement]:
    """Each machine class among the runs at `paths` with runs of MIN_NODES hosts or more, judged as
    a fleet (the report's fleet section); [] where none has."""
    found = survey(paths, any_class=True)
    out = []
    for machine in dict.fromkeys(r.machine for r in found.runs):
        runs = [r for r in found.runs if r.machine == machine]
        if len({r.host for r in runs}) >= MIN_NODES:
            out.append(judge_runs(Survey(runs, [], machine), catalog, table, tolerance, alpha, min_judged))
    return out

