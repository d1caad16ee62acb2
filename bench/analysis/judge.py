"""Is this normal? One run's figures judged against what a healthy machine of its kind delivers.

Families are xferbench-compare's: one op variant of one GPU or pair (every point key but the
size) at one size class, a point's level y = -log(its median time per op). Each point's
expectation comes, in order, from (point_expectations.py)
1. the expectation table (expected.py): healthy runs of the same machine class, looked up by the
   point's role (GPU-agnostic), interpolated on a log-log line within the reference's sizes;
2. where the table has no curve of the class: at bandwidth-bound sizes, link theory (the suite's
   `expectation` hook on the device's own NVML readings) times the share the other classes
   reach in the role (learned from the table; the suite's declared `efficiency` where no class
   has the role); at other sizes, the time the other classes take (any NVIDIA GPU is judged so);
and besides, 3. siblings: each GPU or pair against the median of the same role on its peers in
this run, where it has two or more, with their spread read without it (leave-one-out).

A launch path (launch_path.py: an eager, latency-bound transfer on a GPU) is judged only against
the spread of launch paths between the class's healthy hosts, and a host-bound family is not
called normal while a device-side figure of its op is low (_by_device_side).

Each family ends in one state, and the run in an exit status (verdicts.py).

A family's change D is the median over its sizes (bandwidth-bound: the upper half, the plateau) of
y - y_expected. It is low when
D < log(1 - tolerance) - z * sigma * sqrt(1 + c_m / m): sigma the between-run noise measured on
the class's own healthy runs of the role, moderated by the suite's declared noise (compare's
moderation); where the class has one run of the role, or none, its noise was never measured
there: the declared sigma times UNMEASURED (and, for expectations learned from other classes,
at least how far those classes differ). m the healthy runs behind the expectation (the peers,
for siblings; theory has none and a wider tolerance of its own), c_m compare's factor for a
median of m runs, z = z(1 - alpha / 2F) over the F tests of the run (compare's Bonferroni). A
low family gets the causes that can explain the size of its drop (causes.py).
"""
from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import NormalDist
from typing import Mapping

import numpy as np
import pandas as pd

from bench.analysis import causes, launch_path as lp
from bench.analysis.cache import short_of_hbm
from bench.analysis.compare import HOST_SLOW_NOISE, JUDGED_CLASSES, point_levels
from bench.analysis.expected import Expected, machine_class, shipped, shipped_noise
from bench.analysis.healthy_hosts import usual_pace
from bench.analysis.noise import PAIR_MEDIAN_TO_SIGMA, default_noise, family_sigma, median_factor, run_noise
from bench.analysis.point_expectations import JudgedPoint, judged_points
from bench.analysis.records import tuples
from bench.analysis.verdicts import (FAILED, HIGH, INCONSISTENT, JUDGED, LOW, MIN_JUDGED, NOISY, NORMAL, NOT_JUDGED,
                                     THEORY_TOLERANCE, Judgement, Verdict, short_number)
from bench.points import ROLE_KEYS, VARIANT_KEYS, variant_label
from bench.results import PACE_SLACK, SCHEMA_VERSION, run_status, status_said
from bench.suite_view import LATENCY_BOUND, Catalog, view

TOLERANCE = 0.05          # as xferbench-compare: a smaller drop never counts
ALPHA = 0.01
CAN_CATCH = 0.55          # a family whose limit would not catch a halved figure by a margin: too noisy
UNMEASURED = 1.5          # noise never measured on the class: the declared sigma, widened this much
FAR_ABOVE = 1.25          # this much above healthy machines of the class: not the class it says
PHYSICAL_MARGIN = 1.03    # above the recorded link's figure by more than timing's error
SIBLING_FLOOR = 0.01      # siblings never agree closer than timing itself repeats
OTHER_WORLDS = 0.15       # the noise of a share learned from other world sizes (a 4-rank sendrecv reached
                          # 0.65 of the share of 2 ranks on H200s)
PLATEAU = 0.9   # a bandwidth-bound family is judged where its expected rate is this near its peak


@dataclass
class _Family:
    variant: tuple
    role: tuple
    size_class: str
    points: list[JudgedPoint]
    change: float = math.nan      # D against the expectation
    limit: float = math.nan
    sibling_change: float = math.nan
    sibling_limit: float = math.nan
    peers: int = 0
    peer_y: dict = field(default_factory=dict)   # size -> peers' median level
    sibling_sigma: float = math.nan   # how far its siblings in this run stray from their median (log units)
    group_sigma: float = math.nan     # how far it and its siblings stray from theirs
    role_y: dict = field(default_factory=dict)   # size -> its role's median level in the run, itself among them

    @property
    def expected(self) -> list[JudgedPoint]:
        return [p for p in self.points if math.isfinite(p.y_expected)]

    @property
    def key(self) -> dict:
        return dict(self._key)   # a copy: a verdict keeps it

    @functools.cached_property
    def _key(self) -> dict:
        # Read for every test of the family, and each plain value costs a lookup: made once.
        return {k: _plain(v) for k, v in zip(VARIANT_KEYS, self.variant)}

    @property
    def bandwidth(self) -> bool:
        return any(p.bandwidth for p in self.points)

    @property
    def launch_path(self) -> bool:
        return lp.launch_path(self.key, self.size_class, self.bandwidth)


def _families(points: list[JudgedPoint]) -> list[_Family]:
    grouped: dict[tuple, list[JudgedPoint]] = {}
    for p in points:
        if p.size_class in JUDGED_CLASSES:
            grouped.setdefault((p.variant, p.size_class), []).append(p)
    out = []
    for (variant, size_class), members in grouped.items():
        with_table = [p for p in members if p.runs]   # a table's expectation wins over theory's
        if with_table:
            for p in members:
                if not p.runs and math.isfinite(p.y_expected):
                    p.y_expected, p.source = math.nan, ""
        out.append(_Family(variant, members[0].role, size_class, sorted(members, key=lambda p: p.size)))
    return out


def _siblings(families: list[_Family]) -> None:
    """Each family against the median of its peers (same role and size class, other GPUs or
    pairs) at the sizes it shares with two or more of them."""
    by_role: dict[tuple, list[_Family]] = {}
    for f in families:
        by_role.setdefault((f.role, f.size_class), []).append(f)
    for group in by_role.values():
        if len(group) < 3:
            continue
        levels = [_compared(f) for f in group]
        spread = _sibling_spread(levels)
        for k, f in enumerate(group):
            f.group_sigma = spread
            # Its peers' spread, read without it: a GPU out of line must not widen its own limit.
            f.sibling_sigma = max(_sibling_spread([lv for j, lv in enumerate(levels) if j != k]), SIBLING_FLOOR)
            diffs, peers = [], []
            for p in f.points:
                if p.size not in levels[k]:
                    continue
                others = [lv[p.size] for j, lv in enumerate(levels) if j != k and p.size in lv]
                if len(others) >= 2:
                    f.peer_y[p.size] = float(np.median(others))
                    diffs.append(p.y - f.peer_y[p.size])
                    peers.append(len(others))
            if diffs:
                f.sibling_change, f.peers = float(np.median(diffs)), min(peers)
            f.role_y = {size: float(np.median(values)) for size in levels[k]
                        if len(values := [lv[size] for lv in levels if size in lv]) >= 3}


def _compared(f: _Family) -> dict[int, float]:
    """The levels by size a family is held against its siblings at: not a point that measured the
    host (its own memory, its moods); bandwidth-bound, its own plateau (within PLATEAU of its
    highest rate): smaller sizes still pay a launch whose cost moves with the moment."""
    levels = {p.size: p.y for p in f.points if not p.set_aside}
    if f.size_class != "bandwidth" or not levels:
        return levels
    top = max(math.log(size) + y for size, y in levels.items())
    return {size: y for size, y in levels.items() if math.log(size) + y >= top + math.log(PLATEAU)}


def _sibling_spread(levels: list[dict]) -> float:
    """How far siblings stray from their median, each size where two or more have a level:
    within one run they share its host, not its moments (a host-bound launch cost comes in moods
    that catch some siblings and not others), so it is read at the 90th percentile."""
    at: dict[int, list[float]] = {}   # per size, the siblings' levels there, in their order
    for lv in levels:
        for size, y in lv.items():
            at.setdefault(size, []).append(y)
    median = {size: np.median(ys) for size, ys in at.items() if len(ys) >= 2}
    deviations = [abs(y - median[size]) for lv in levels for size, y in lv.items() if size in median]
    return float(np.quantile(deviations, 0.9)) / NormalDist().inv_cdf(0.95) if deviations else 0.0


def _plateau(points: list[JudgedPoint]) -> list[JudgedPoint]:
    """A bandwidth-bound family's plateau: its sizes whose expected rate is within PLATEAU of the
    family's highest. A link shared with another process, or throttled, shows there, while
    smaller sizes may slip through in a time slice, and those still paying a launch (a kernel's
    host cost in its moods) move with the host, not the link. An expectation interpolated along
    the reference's ramp is no plateau's figure."""
    points = [p for p in points if not p.on_ramp]
    points = [p for p in points if not p.in_cache] or points
    if not points:
        return []
    rates = [math.log(p.size) + p.y_expected for p in points]
    top = max(rates)
    return [p for p, rate in zip(points, rates) if rate >= top + math.log(PLATEAU)]


def _spread(sigma: float, runs: int) -> float:
    """sigma of one run's level against an expectation from `runs` runs (0: theory, exact)."""
    return sigma * math.sqrt(1 + (median_factor(runs) / runs if runs else 0))


def _representative(f: _Family, change: float, expected: dict[int, float]) -> JudgedPoint:
    """The size whose change is nearest the family's: where its figures are shown."""
    return min((p for p in f.points if p.size in expected), key=lambda p: abs(p.y - expected[p.size] - change))


def _shown(p: JudgedPoint, y_expected: float, size_class: str) -> tuple[float, float, str]:
    """(expected, measured, unit) at a point: GB/s at bandwidth-bound sizes, else µs per op."""
    if p.bandwidth and size_class == "bandwidth":
        return p.value * math.exp(y_expected - p.y), p.value, "GB/s"
    return math.exp(-y_expected) * 1e6, math.exp(-p.y) * 1e6, "µs"


def _label(key: dict, size_class: str, launch: bool = False) -> str:
    bound = "launch path" if launch else size_class if size_class in ("data check", "not measured", "not judged") \
        else f"{size_class}-bound"
    return f"{variant_label(key)} ({bound})"


def _noun(role: tuple, n: int) -> str:
    pair = dict(zip(ROLE_KEYS, role))["link"]
    return f"{n} {'pairs' if pair else 'GPUs'}"


def _noise(f: _Family, key: dict, catalog: Catalog, table: Expected, noise: Expected | None,
           machine: str) -> tuple[float, str]:
    """The run-to-run sigma of the family's level and where it came from: measured on the class's
    identical runs of a noise study (results/noise, kept apart from the reference runs), else
    between the class's own healthy reference runs of the role, moderated by the suite's
    declared noise (worth PRIOR_DF degrees of freedom); where neither has two runs of it, never
    measured on the class: the declared sigma times UNMEASURED, and at least how far the other
    classes differ where they gave the expectation."""
    declared = default_noise(catalog, key, f.size_class)
    role = dict(zip(ROLE_KEYS, f.role))
    sizes = [p.size for p in f.points]
    for source, where in ((noise, "the class's noise runs"), (table, "this class's reference runs")):
        spreads = source.spreads(role, min(sizes), max(sizes), machine) if source is not None else []
        if len(spreads):
            measured = run_noise(spreads)
            return family_sigma(declared, measured, len(spreads)), f"measured between {where} ({measured:.3f}; declared {declared:.3f})"
    widened = declared * UNMEASURED
    if any(p.learned is not None and p.learned.relaxed for p in f.expected):
        return max(widened, OTHER_WORLDS), (f"never measured on this class, its share learned from other world sizes: "
                                            f"at least {OTHER_WORLDS}")
    times = ""
    if f.size_class == LATENCY_BOUND and any(p.learned is not None for p in f.expected):
        widened, times = widened * lp.OTHER_HOSTS, f" x {lp.OTHER_HOSTS} (other hosts' launch paths)"
    between = [p.learned.spread for p in f.expected if p.learned is not None and math.isfinite(p.learned.spread)]
    if between:
        across = float(np.median(between)) / PAIR_MEDIAN_TO_SIGMA
        return max(widened, across), f"never measured on this class: declared {declared:.3f} x {UNMEASURED}{times}, " \
                                     f"or how far the other classes differ ({across:.3f})"
    return widened, f"never measured on this class: declared {declared:.3f} x {UNMEASURED}{times}"


def _above(f: _Family, limit: float) -> tuple[str, list[str]]:
    """HIGH or INCONSISTENT where the family is faster than its evidence allows, with what; ('', [])
    where it is not: above the link its run recorded (a record or a figure is wrong), far above
    healthy machines of the class (not the machine its record says), or above them beyond noise."""
    physical = [p for p in f.points if math.isfinite(p.physical)]
    if physical and np.median([p.value for p in physical]) > PHYSICAL_MARGIN * np.median([p.physical for p in physical]):
        top = max(physical, key=lambda p: p.value / p.physical)
        return INCONSISTENT, [f"{short_number(top.value)} GB/s is more than {top.physical_link} carries "
                              f"({short_number(top.physical)} GB/s): the record or the figure is wrong"]
    table_judged = [p for p in f.expected if p.runs]
    same_gpu = [p for p in (_plateau(f.expected) or f.points) if math.isfinite(p.model_y)]
    if f.size_class == "bandwidth" and same_gpu and not table_judged:
        ratio = math.exp(float(np.median([p.y - p.model_y for p in same_gpu])))
        if ratio > FAR_ABOVE:
            return INCONSISTENT, [f"{ratio:.2f}x what healthy machines of its GPU model reach "
                                  f"({same_gpu[0].model_source}): is this the GPU its record says?"]
    bounded = bool(physical)   # a link bounds it: what its class reaches is a property of GPU and link
    if f.size_class == "bandwidth" and table_judged and bounded and math.isfinite(f.change):
        ratio = math.exp(f.change)
        if ratio > FAR_ABOVE and f.change > -limit:
            return INCONSISTENT, [f"{ratio:.2f}x what healthy machines of its class reach: is this the GPU and "
                                  "link its record says?"]
        if f.change > -limit:
            return HIGH, [f"{ratio:.2f}x what healthy machines of its class reach, beyond their noise"]
    return "", []


def _sigma(f: _Family, judged: list[JudgedPoint], catalog: Catalog, table: Expected, noise: Expected | None,
           machine: str) -> tuple[float, str, int]:
    """The family's sigma, where it came from, and how many its expectation stands on: its runs,
    or its hosts where the spread between the class's hosts is the wider (a new host is judged;
    hosts differ in what they carry), at least its role's spread in the run; a launch path's:
    the spread of launch paths between hosts,
    at least the run-to-run noise, wider where its class stands on fewer than MIN_HOSTS hosts and
    where its sizes ran while the host was slow."""
    sigma, said = _noise(f, f.key, catalog, table, noise, machine)
    runs, hosts = min((p.runs for p in judged), default=0), min((p.hosts for p in judged), default=0)
    if not judged:
        return sigma, said, runs
    role, sizes = dict(zip(ROLE_KEYS, f.role)), [p.size for p in judged]
    declared = default_noise(catalog, f.key, f.size_class)
    if not f.launch_path:
        # A GPU or pair is held against its role's median: where the role's GPUs or pairs in this
        # run stray from theirs more than runs do (held staged copies come in two modes), so may it.
        if f.group_sigma > sigma:
            sigma, said = f.group_sigma, f"its role's GPUs or pairs in the run ({f.group_sigma:.3f}), more than {said}"
        between, where = lp.between_hosts(role, sizes, table, machine, declared, hosts) if runs else (math.nan, "")
        return (between, f"{where}, more than {said}", hosts) if between > sigma else (sigma, said, runs)
    between, where = lp.host_sigma(role, sizes, table, machine, declared, hosts)
    said = where if between >= sigma else f"{where}; at least {said} ({sigma:.3f})"
    sigma, said = lp.widened(max(between, sigma), hosts, said)
    if any(p.host_slow for p in judged):
        # As the gate judges it: the spread between hosts is of their usual moods, and a spell
        # that slows the host moves its launch paths further (docs/judging.md, a launch path's limit).
        sigma, said = sigma * HOST_SLOW_NOISE, f"{said}; x {HOST_SLOW_NOISE:g}: sizes ran while the host was slow"
    return sigma, said, hosts if runs else 0


def _siblings_verdict(f: _Family, v: Verdict, sigma: float, z: float, tolerance: float) -> None:
    """Siblings find a GPU or pair out of line with its peers; like them, a whole machine may still
    be slow: they can make a family low, never normal. A launch path is judged by hosts alone."""
    if not math.isfinite(f.sibling_change) or f.launch_path:
        return
    # A latency's host-bound moods come and go between siblings measured at other moments:
    # they are judged with the noise between runs at least.
    sibling_sigma = max(f.sibling_sigma, sigma) if f.size_class == LATENCY_BOUND else f.sibling_sigma
    f.sibling_limit = math.log1p(-tolerance) - z * _spread(sibling_sigma, f.peers)
    ratio = math.exp(f.sibling_change)
    v.siblings = f"median of {_noun(f.role, f.peers)}: {ratio:.2f}x"
    if f.sibling_change < f.sibling_limit and v.verdict != LOW:
        rep = _representative(f, f.sibling_change, f.peer_y)   # the figures shown: the siblings'
        v.expected, v.measured, v.unit = _shown(rep, f.peer_y[rep.size], f.size_class)
        v.at_size, v.source = rep.size, f"siblings: median of {_noun(f.role, f.peers)}"
        v.ratio, v.limit, v.verdict = ratio, math.exp(f.sibling_limit), LOW


def _verdict(f: _Family, rows: pd.DataFrame, facts: causes.Facts, links: Mapping, catalog: Catalog,
             table: Expected, noise: Expected | None, z: float, tolerance: float, machine: str) -> Verdict:
    key = f.key
    v = Verdict(_label(key, f.size_class, f.launch_path), key, f.size_class, NOT_JUDGED, [p.size for p in f.points])
    judged = _plateau(f.expected) if f.size_class == "bandwidth" else f.expected
    sigma, v.noise, count = _sigma(f, judged, catalog, table, noise, machine)
    if judged:
        allowed = tolerance if min(p.runs for p in judged) else THEORY_TOLERANCE
        # A launch path is the host's, whose moods land on some of a role's pairs and not others
        # in one run: it is judged by its role's median over the run's GPUs or pairs, as the
        # class's table holds a host's (launch_path.py).
        own = {p.size: p.y for p in judged}
        level = {size: f.role_y.get(size, y) for size, y in own.items()} if f.launch_path else own
        f.change = float(np.median([level[p.size] - p.y_expected for p in judged]))
        f.limit = math.log1p(-allowed) - z * _spread(sigma, count)
        if f.launch_path:   # what healthy hosts' launch paths reach, whatever few hosts a table shows
            f.limit = lp.bounded(f.limit)
        rep = _representative(f, f.change, {p.size: p.y_expected - p.y + level[p.size] for p in judged})
        v.expected, v.measured, v.unit = _shown(replace(rep, y=level[rep.size]), rep.y_expected, f.size_class)
        if level != own:
            v.noise += "; judged by its role's median over the run's GPUs or pairs (the host's launch path)"
        v.at_size, v.source = rep.size, rep.source
        v.ratio, v.limit = math.exp(f.change), math.exp(f.limit)
        v.verdict = NORMAL if f.change >= f.limit else LOW
        if v.limit < CAN_CATCH and v.verdict == NORMAL:
            v.verdict, v.reason = NOISY, "too noisy to judge: its limit lets a halved figure pass"
    elif f.expected:
        v.reason = "its sizes fall between the reference's along its ramp: no plateau to judge"
    else:
        v.reason = Counter(p.reason for p in f.points).most_common(1)[0][0]
    _siblings_verdict(f, v, sigma, z, tolerance)
    state, said = _above(f, f.limit if math.isfinite(f.limit) else -math.inf)
    if state:
        v.verdict, v.causes, v.reason = state, said, ""
        top = max(f.points, key=lambda p: p.value)
        if state == INCONSISTENT and math.isfinite(top.physical):
            v.unit, v.at_size, v.measured = "GB/s", top.size, top.value
    elif v.verdict == LOW:
        judged_value = float(np.median([p.value for p in (judged or f.points)])) if f.size_class == "bandwidth" else math.nan
        v.causes = causes.explain(facts, causes.subject(key, links, catalog, _notes(rows, key), judged_value, f.launch_path))
        slow = [p for p in judged if p.host_slow]
        if f.launch_path and slow:
            v.causes.append(f"{len(slow)} of its {len(judged)} sizes ran while the host was slow "
                            f"(host_pace_s above {PACE_SLACK}x its usual reading in all their trials but one at most)")
    return v


def _by_device_side(families: list[_Family], verdicts: list[Verdict]) -> None:
    """A host-bound family against the device-side figures of its op in the run (launch_path.py):
    not normal while one is low (not judged: it cannot tell a slow link from its host; where it
    is low itself, the low figure is named beside); one too noisy for a halved figure (a launch
    path, a pageable copy: hosts' launch and memory paths differ) is judged normal where one of
    them, judged, would catch a halved link."""
    device = {}
    for f, v in zip(families, verdicts):
        if lp.device_side(f.key, f.size_class) and v.verdict in JUDGED:
            device.setdefault(lp.op_key(f.key), []).append(v)
    for f, v in zip(families, verdicts):
        if not lp.host_bound(f.key, f.size_class, f.bandwidth) or v.verdict not in (NORMAL, LOW, NOISY):
            continue
        twins = device.get(lp.op_key(f.key), [])
        low = sorted((t for t in twins if t.verdict == LOW), key=lambda t: t.ratio or 0)
        if low:
            said = f"{low[0].family} is low ({low[0].ratio:.2f}x)"
            if v.verdict == LOW:
                v.causes = [*v.causes, f"the link: {said}"]
            else:
                v.verdict, v.reason = NOT_JUDGED, f"its link is low: {said}, which it cannot tell from its host"
        elif v.verdict == LOW and twins:
            v.causes = [*v.causes, f"not the link: {twins[0].family} is {twins[0].verdict}"]
        elif v.verdict == NOISY and twins:
            v.verdict, v.reason = NORMAL, ""
            v.noise += f"; a halved link is caught by {twins[0].family}"


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def _notes(rows: pd.DataFrame, key: dict) -> tuple[str, ...]:
    mask = np.ones(len(rows), dtype=bool)
    for k, value in key.items():
        mask &= (rows[k].astype(str) == str(value)).to_numpy()
    return tuple(sorted({n for n in rows.loc[mask, "note"] if n}))


def _unmeasured(rows: pd.DataFrame, measured: set) -> list[Verdict]:
    """A family a verdict each for points that did not measure: failed (a data check failed) and,
    where a variant has no figure at all, not judged (skipped, with the run's reason)."""
    out = []
    rows = rows[rows["status"] != "ok"]
    for variant, group in rows.groupby(VARIANT_KEYS, sort=False, dropna=False):
        key = {k: _plain(v) for k, v in zip(VARIANT_KEYS, variant)}
        sizes = sorted({int(s) for s in group["size_bytes"]})
        notes = "; ".join(dict.fromkeys(n for n in group["note"] if n)) or "no note"
        failed = group[group["status"] == "failed"]
        if len(failed):
            n = failed["size_bytes"].nunique()
            out.append(Verdict(_label(key, "data check"), key, "", FAILED, sizes,
                               reason=f"{n} size{'s' * (n != 1)} failed: {notes}"))
        elif tuple(variant) not in measured:
            out.append(Verdict(_label(key, "not measured"), key, "", NOT_JUDGED, sizes,
                               reason=f"{group['status'].iloc[0]}: {notes}"))
    return out


def _nothing_judged(rows: pd.DataFrame, levels: pd.DataFrame, catalog: Catalog) -> list[Verdict]:
    """Not judged, each variant of a suite that measured rows but none it is judged by (its
    `judged` hook gave none: an older run's pipeline), saying what it is judged by."""
    measured = rows[rows["status"] == "ok"]
    judged = set(levels["suite"]) if not levels.empty else set()
    out = []
    for variant, group in measured[~measured["suite"].isin(judged)].groupby(VARIANT_KEYS, sort=False, dropna=False):
        key = {k: _plain(v) for k, v in zip(VARIANT_KEYS, variant)}
        by = view(catalog, key["suite"]).judged_by
        out.append(Verdict(_label(key, "not judged"), key, "", NOT_JUDGED, sorted({int(s) for s in group["size_bytes"]}),
                           reason=f"none of its rows is what {key['suite']} is judged by: {by}"))
    return out


def host_record(rows: pd.DataFrame | None, machine: str) -> causes.HostRecord:
    """A run's host as a launch path is held against it: the run's usual pace (NaN where it has no
    rows or read none) beside its class's healthy hosts' (`machine`: its class's key)."""
    return causes.HostRecord(usual_pace(rows) if rows is not None and len(rows) else math.nan,
                             causes.healthy_paces(machine))


def judge(rows: pd.DataFrame, meta: Mapping, catalog: Catalog, expected: Expected | None = None,
          run_dir: str | Path | None = None, tolerance: float = TOLERANCE, alpha: float = ALPHA,
          planned: set[tuple[str, str]] | None = None, min_judged: float = MIN_JUDGED,
          unplanned: str = "", noise: Expected | None = None) -> Judgement:
    """One run's verdicts: its rows (a results.load() frame of that run alone), its meta.json, the
    catalog of suites, the expectation table (default: the shipped one) and, for NCCL's log
    lines in RUN/ranks/, its folder. `planned`: the (suite, op)s its config asks for that its
    machine can measure (the command line plans them, bench/cli/doctor.py); None with
    `unplanned` saying why they could not be planned. `noise`: the noise studies' table
    (default: the shipped one)."""
    table = (shipped() if expected is None else expected).measured_as(meta, catalog)
    machine = machine_class(meta).key
    run = str(run_dir or meta.get("run_id", ""))
    status = run_status(dict(meta))
    if meta.get("schema_version") != SCHEMA_VERSION:
        planned, unplanned = None, f"made by an older xferbench (schema {meta.get('schema_version')}), whose plan differs"
    measured_ops = set(tuples(rows[["suite", "op"]])) if len(rows) else set()
    missing = sorted(f"{suite} {op}: asked for and measurable here, not measured"
                     for suite, op in (planned or set()) - measured_ops)
    checked = "" if planned is not None else (unplanned or "not planned")
    levels = point_levels(rows, catalog) if len(rows) else pd.DataFrame()
    host = host_record(rows, machine)
    facts = causes.facts(meta, run_dir, causes.healthy_clocks(machine), host)
    verdicts: list[Verdict] = []
    z = math.nan
    if not levels.empty:
        short = rows[short_of_hbm(rows, catalog)]
        in_cache = frozenset(tuples(short[["op", "src", "size_bytes"]]))
        families = _families(judged_points(levels, meta, catalog, table, in_cache, facts))
        _siblings(families)
        tests = sum(bool(f.expected) for f in families) + sum(math.isfinite(f.sibling_change) for f in families)
        z = NormalDist().inv_cdf(1 - alpha / (2 * max(tests, 1)))
        links = (meta.get("system") or {}).get("links") or {}
        noise = shipped_noise() if noise is None else noise
        noise = noise.measured_as(meta, catalog) if noise is not None else None
        verdicts = [_verdict(f, rows, facts, links, catalog, table, noise, z, tolerance, machine) for f in families]
        _by_device_side(families, verdicts)
    measured = set(tuples(levels[VARIANT_KEYS])) if not levels.empty else set()
    verdicts += (_unmeasured(rows, measured) + _nothing_judged(rows, levels, catalog)) if len(rows) else []
    order = {LOW: 0, INCONSISTENT: 1, FAILED: 2, HIGH: 3, NORMAL: 4, NOISY: 5, NOT_JUDGED: 6}
    verdicts.sort(key=lambda v: (order[v.verdict], v.family))
    return Judgement(run, machine, tolerance, alpha, z, verdicts, status, missing, checked, min_judged,
                     status_said(dict(meta)))
