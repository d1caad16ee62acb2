"""Is this normal? One run's figures judged against what a healthy machine of its kind delivers.

Families are xferbench-compare's: one op variant of one GPU or pair (every point key but the
size) at one size class, a point's level y = -log(its median time per op). Each point's
expectation comes, in order, from
1. the expectation table (expected.py): healthy runs of the same machine class, looked up by the
   point's role (GPU-agnostic), interpolated on a log-log line within the reference's sizes;
2. link theory, where the table has no curve for the role: the suite's `expectation` hook (the
   link's figure times the share a healthy machine reaches; docs/judging.md), at the
   bandwidth-bound sizes of the run's own curve;
and besides, 3. siblings: each GPU or pair against the median of the same role on its peers in
this run, where it has two or more.

A family's change D is the median over its sizes (bandwidth-bound: the upper half, the plateau) of
y - y_expected. It is low when
D < log(1 - tolerance) - z * sigma * sqrt(1 + c_m / m): sigma the suite's declared between-run
noise for its platform and size class, or where the table's healthy runs of the role moved
further, that (compare's moderation); m the healthy runs behind the expectation (the peers, for
siblings; theory has no runs behind it and a wider tolerance of its own), c_m compare's factor
for a median of m runs, z = z(1 - alpha / 2F) over the F tests of the run (compare's Bonferroni).
It is high when its median bandwidth exceeds the link's physical limit (bytes miscounted, or data
a cache holds; on-GPU copies the L2 holds are exempt, cache.py). A low family gets its causes
(causes.py).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Mapping

import numpy as np
import pandas as pd

from bench.analysis import causes
from bench.analysis.cache import short_of_hbm
from bench.analysis.catalog import Catalog, view
from bench.analysis.compare import (JUDGED_CLASSES, PRIOR_DF, VARIANT_KEYS, default_noise, median_factor,
                                    point_levels, run_noise, size_classes, variant_label)
from bench.analysis.expected import ROLE_KEYS, Expected, alternatives, machine_class, pair_class, roles, shipped
from bench.links import NVLINK_LINK_GBPS, hbm_gbps
from bench.results import meta_columns
from bench.sizes import format_size

TOLERANCE = 0.05          # as xferbench-compare: a smaller drop never counts
# Link theory's shares were measured on three machines and vary between hosts (bidir: 0.69 of
# PCIe on the H100 host, 0.79 on the H200s): a machine is low by theory only 15% below them.
THEORY_TOLERANCE = 0.15
ALPHA = 0.01
OK, LOW, HIGH, NOT_JUDGED = "ok", "low", "high", "not judged"


@dataclass
class Verdict:
    family: str                   # 'copy h2d pinned ce numa=local eager host->cuda:0 (bandwidth-bound)'
    key: dict                     # the variant: every point key but the size
    size_class: str               # latency | bandwidth
    verdict: str                  # ok | low | high | not judged
    sizes: list[int]
    ratio: float | None = None    # measured / expected as performance (> 1: faster)
    limit: float | None = None    # the ratio below which it is low
    expected: float | None = None   # at at_size, in unit
    measured: float | None = None
    unit: str = ""                # GB/s | µs
    at_size: int | None = None
    source: str = ""              # where the expectation came from
    siblings: str = ""            # its peers in the run, where compared: 'median of 7 GPUs: 0.98x'
    causes: list[str] = field(default_factory=list)   # low: what explains it; high: why suspicious
    reason: str = ""              # not judged: why


@dataclass
class Judgement:
    run: str
    machine: str                  # the machine class
    tolerance: float
    alpha: float
    z: float
    verdicts: list[Verdict]

    @property
    def low(self) -> list[Verdict]:
        """The families below their expectation, worst first."""
        return sorted((v for v in self.verdicts if v.verdict == LOW), key=lambda v: v.ratio or 0)

    @property
    def high(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict == HIGH]

    @property
    def judged(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict != NOT_JUDGED]

    def not_judged(self) -> Counter:
        return Counter(v.reason for v in self.verdicts if v.verdict == NOT_JUDGED)

    def to_json(self) -> dict:
        """verdicts.json: the verdict, how it was reached, and every family."""
        verdict = LOW if self.low else HIGH if self.high else OK if self.judged else NOT_JUDGED
        return {"verdict": verdict,
                "run": self.run, "machine": self.machine, "tolerance": self.tolerance,
                "theory_tolerance": THEORY_TOLERANCE, "alpha": self.alpha, "z": self.z,
                "counts": dict(Counter(v.verdict for v in self.verdicts)),
                "lines": self.lines(),
                "families": [asdict(v) for v in self.verdicts]}

    def lines(self) -> list[str]:
        """The end-of-run block: a line per family that is not ok, then how many were judged."""
        out = [_line(v) for v in [*self.low, *self.high]]
        judged, counts = self.judged, Counter(v.verdict for v in self.verdicts)
        if not self.verdicts:
            return ["verdict: nothing measured to judge"]
        if not judged:
            summary = "verdict: no family judged"
        elif not self.low and not self.high:
            summary = f"verdict: {len(judged)} famil{'y' if len(judged) == 1 else 'ies'} judged, all normal"
        else:
            summary = (f"verdict: {len(judged)} families judged: {counts[LOW]} low, {counts[HIGH]} high, "
                       f"{counts[OK]} normal")
        reasons = self.not_judged()
        if reasons:
            grouped = "; ".join(f"{reason}: {n}" for reason, n in reasons.most_common())
            summary += f"; {sum(reasons.values())} not judged ({grouped})"
        return out + [summary]


def _number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _figure(value: float | None, unit: str) -> str:
    return "?" if value is None or not math.isfinite(value) else f"{_number(value)} {unit}"


def _line(v: Verdict) -> str:
    at = f" at {format_size(v.at_size)}" if v.at_size else ""
    if v.verdict == HIGH:
        return f"HIGH {v.family}: {_figure(v.measured, v.unit)}{at}; {'; '.join(v.causes)}"
    versus = f"{v.ratio:.2f}x expected ({_figure(v.measured, v.unit)} against {_figure(v.expected, v.unit)}{at}"
    where = f"; {v.source}" if v.source else ""
    peers = f"; siblings: {v.siblings}" if v.siblings and not v.source.startswith("siblings") else ""
    return f"LOW  {v.family}: {versus}{where}{peers}); cause: {'; '.join(v.causes)}"


# ---- the machine as the suites' hooks read it ---------------------------------------------

def machine_row(meta: Mapping) -> dict:
    """A run's machine columns (results.meta_columns) for the suites' hooks: NVLink per GPU from
    NVML's link count where no catalogue entry gives it; device memory's bandwidth."""
    row = meta_columns(meta)
    first = ((meta.get("system") or {}).get("gpus") or [{}])[0]
    if not row.get("nvlink_gbps_per_gpu") and first.get("nvlink_links"):
        row["nvlink_gbps_per_gpu"] = first["nvlink_links"] * NVLINK_LINK_GBPS
    row["hbm_gbps"] = hbm_gbps(first.get("mem_clock_max_mhz"), first.get("memory_bus_width"))
    return row


def _theory(catalog: Catalog, point: dict) -> tuple[float, float, str] | None:
    try:
        found = view(catalog, point["suite"]).expectation(point)
    except (KeyError, TypeError, ValueError):   # a hook that cannot read this machine's columns
        return None
    if found is None:
        return None
    gbps, share, link = found
    return (float(gbps), float(share), str(link)) if float(gbps) > 0 else None


# ---- per point ------------------------------------------------------------------------------

@dataclass
class _Point:
    variant: tuple
    role: tuple
    size: int
    size_class: str
    y: float
    value: float                  # median bandwidth (GB/s), or time per op where it has none
    bandwidth: bool
    y_expected: float = math.nan
    runs: int = 0                 # healthy runs behind y_expected (0: theory)
    curve_role: dict | None = None   # the table's role that gave it
    source: str = ""
    physical: float = math.nan    # the link's limit in GB/s
    reason: str = ""              # why no expectation


def _reference(point: _Point, role: dict, table: Expected, machine: str) -> str:
    """Fills in the table's expectation; '' or why there is none."""
    if machine not in table.origins:
        return f"no reference for machine class {machine}"
    found = [(r, c) for r in alternatives(role) if (c := table.curve(machine, r)) is not None]
    if not found:
        return f"no reference for this variant on {machine}"
    match = next(((r, c) for r, c in found if c.covers(point.size)), None)
    if match is None:
        lo, hi = min(int(c.sizes[0]) for _, c in found), max(int(c.sizes[-1]) for _, c in found)
        has = format_size(lo) if lo == hi else f"{format_size(lo)}-{format_size(hi)}"
        return f"no reference at these sizes (it has {has})"
    point.curve_role, curve = match
    log_time, point.runs = curve.at(point.size)
    point.y_expected = -log_time
    point.size_class = curve.size_class(point.size) if point.bandwidth else "latency"
    point.source = f"{table.origins[machine]} {curve.instances}, {point.runs} healthy run{'s' * (point.runs != 1)}"
    return ""


def _points(levels: pd.DataFrame, meta: Mapping, catalog: Catalog, table: Expected,
            in_cache: frozenset) -> list[_Point]:
    machine = machine_class(meta).key
    links = (meta.get("system") or {}).get("links") or {}
    role_rows = roles(levels, links).to_dict("records")
    own = size_classes(levels)   # where no reference curve says
    hooks = machine_row(meta)
    out = []
    for record, role, own_class in zip(levels.to_dict("records"), role_rows, own):
        bandwidth = record["metric"] != "time_s"
        point = _Point(tuple(record[k] for k in VARIANT_KEYS), tuple(role[k] for k in ROLE_KEYS),
                       int(record["size_bytes"]), own_class, float(record["y"]), float(record["value"]), bandwidth)
        pair = pair_class(links, record["src"], record["dst"])
        theory = _theory(catalog, {**hooks, **record, "link_class": "" if pair == "?" else pair})
        # A copy the GPU's L2 holds is rightly above HBM's limit: not a figure to call high.
        if theory and bandwidth and (record["op"], record["src"], record["size_bytes"]) not in in_cache:
            point.physical = theory[0]
        point.reason = _reference(point, role, table, machine)
        if point.reason and theory and bandwidth and own_class == "bandwidth" and theory[1] > 0:
            gbps, share, link = theory
            point.y_expected = point.y - math.log(point.value / (gbps * share))
            point.source = f"theory: {link} = {_number(gbps)} GB/s x {share:.2f}"
            point.reason = ""
        elif point.reason and theory and bandwidth:
            point.reason += ", nor link theory at these sizes" if own_class == "bandwidth" else \
                ", and link theory judges bandwidth-bound sizes only"
        elif point.reason:
            point.reason += ", nor link theory"
        out.append(point)
    return out


# ---- families ---------------------------------------------------------------------------------

@dataclass
class _Family:
    variant: tuple
    role: tuple
    size_class: str
    points: list[_Point]
    change: float = math.nan      # D against the expectation
    limit: float = math.nan
    sibling_change: float = math.nan
    sibling_limit: float = math.nan
    peers: int = 0
    peer_y: dict = field(default_factory=dict)   # size -> peers' median level

    @property
    def expected(self) -> list[_Point]:
        return [p for p in self.points if math.isfinite(p.y_expected)]


def _families(points: list[_Point]) -> list[_Family]:
    grouped: dict[tuple, list[_Point]] = {}
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
        levels = [{p.size: p.y for p in f.points} for f in group]
        for k, f in enumerate(group):
            diffs, peers = [], []
            for p in f.points:
                others = [lv[p.size] for j, lv in enumerate(levels) if j != k and p.size in lv]
                if len(others) >= 2:
                    f.peer_y[p.size] = float(np.median(others))
                    diffs.append(p.y - f.peer_y[p.size])
                    peers.append(len(others))
            if diffs:
                f.sibling_change, f.peers = float(np.median(diffs)), min(peers)


def _plateau(points: list[_Point]) -> list[_Point]:
    """A bandwidth-bound family's upper half of sizes: a link shared with another process, or
    throttled, shows at the plateau, while the smaller of its sizes may slip through in a time
    slice and would outvote it."""
    return points[len(points) // 2:] if len(points) > 2 else points


def _spread(sigma: float, runs: int) -> float:
    """sigma of one run's level against an expectation from `runs` runs (0: theory, exact)."""
    return sigma * math.sqrt(1 + (median_factor(runs) / runs if runs else 0))


def _representative(f: _Family, change: float, expected: dict[int, float]) -> _Point:
    """The size whose change is nearest the family's: where its figures are shown."""
    return min((p for p in f.points if p.size in expected), key=lambda p: abs(p.y - expected[p.size] - change))


def _shown(p: _Point, y_expected: float, size_class: str) -> tuple[float, float, str]:
    """(expected, measured, unit) at a point: GB/s at bandwidth-bound sizes, else µs per op."""
    if p.bandwidth and size_class == "bandwidth":
        return p.value * math.exp(y_expected - p.y), p.value, "GB/s"
    return math.exp(-y_expected) * 1e6, math.exp(-p.y) * 1e6, "µs"


def _label(key: dict, size_class: str) -> str:
    ends = f" {key['src']}->{key['dst']}" if key["suite"] != "p2p" and (key["src"] or key["dst"]) else ""
    return f"{variant_label(key)}{ends} ({size_class}-bound)"


def _noun(role: tuple, n: int) -> str:
    pair = dict(zip(ROLE_KEYS, role))["link"]
    return f"{n} {'pairs' if pair else 'GPUs'}"


def _noise(f: _Family, key: dict, catalog: Catalog, table: Expected) -> float:
    """The run-to-run sigma of the family's level: its suite's declared noise, or, where the
    table's healthy runs of its role moved further (pooled over classes), that (compare's
    moderation: the declaration worth PRIOR_DF degrees of freedom)."""
    declared = default_noise(catalog, key, f.size_class)
    reference = [p for p in f.expected if p.curve_role is not None]
    if not reference:
        return declared
    spreads = table.spreads(reference[0].curve_role, reference[0].size, reference[-1].size)
    if not len(spreads):
        return declared
    measured = run_noise(spreads)
    moderated = math.sqrt((PRIOR_DF * declared**2 + len(spreads) * measured**2) / (PRIOR_DF + len(spreads)))
    return max(declared, moderated)


def _verdict(f: _Family, rows: pd.DataFrame, facts: causes.Facts, links: Mapping, catalog: Catalog,
             table: Expected, z: float, tolerance: float) -> Verdict:
    key = {k: _plain(v) for k, v in zip(VARIANT_KEYS, f.variant)}
    v = Verdict(_label(key, f.size_class), key, f.size_class, NOT_JUDGED, [p.size for p in f.points])
    sigma = _noise(f, key, catalog, table)
    judged = _plateau(f.expected) if f.size_class == "bandwidth" else f.expected
    if judged:
        runs = min(p.runs for p in judged)
        allowed = tolerance if runs else THEORY_TOLERANCE
        f.change = float(np.median([p.y - p.y_expected for p in judged]))
        f.limit = math.log1p(-allowed) - z * _spread(sigma, runs)
        rep = _representative(f, f.change, {p.size: p.y_expected for p in judged})
        v.expected, v.measured, v.unit = _shown(rep, rep.y_expected, f.size_class)
        v.at_size, v.source = rep.size, rep.source
        v.ratio, v.limit, v.verdict = math.exp(f.change), math.exp(f.limit), OK if f.change >= f.limit else LOW
    else:
        v.reason = Counter(p.reason for p in f.points).most_common(1)[0][0]
    if math.isfinite(f.sibling_change):
        f.sibling_limit = math.log1p(-tolerance) - z * _spread(sigma, f.peers)
        ratio = math.exp(f.sibling_change)
        v.siblings = f"median of {_noun(f.role, f.peers)}: {ratio:.2f}x"
        if not judged:
            rep = _representative(f, f.sibling_change, f.peer_y)
            v.expected, v.measured, v.unit = _shown(rep, f.peer_y[rep.size], f.size_class)
            v.at_size, v.source, v.reason = rep.size, f"siblings: median of {_noun(f.role, f.peers)}", ""
            v.ratio, v.limit, v.verdict = ratio, math.exp(f.sibling_limit), OK
        if f.sibling_change < f.sibling_limit:
            v.verdict = LOW
    physical = [p for p in f.points if math.isfinite(p.physical)]
    if physical and np.median([p.value for p in physical]) > np.median([p.physical for p in physical]):
        top = max(physical, key=lambda p: p.value / p.physical)
        v.verdict, v.reason, v.unit, v.at_size, v.measured = HIGH, "", "GB/s", top.size, top.value
        v.causes = [f"above the link's limit ({_number(top.physical)} GB/s): cache-resident or miscounted"]
    elif v.verdict == LOW:
        notes = _notes(rows, key)
        v.causes = causes.explain(facts, causes.subject(key, links, notes))
    return v


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def _notes(rows: pd.DataFrame, key: dict) -> tuple[str, ...]:
    mask = np.ones(len(rows), dtype=bool)
    for k, value in key.items():
        mask &= (rows[k].astype(str) == str(value)).to_numpy()
    return tuple(sorted({n for n in rows.loc[mask, "note"] if n}))


def judge(rows: pd.DataFrame, meta: Mapping, catalog: Catalog, expected: Expected | None = None,
          run_dir: str | Path | None = None, tolerance: float = TOLERANCE, alpha: float = ALPHA) -> Judgement:
    """One run's verdicts: its rows (a results.load() frame of that run alone), its meta.json, the
    catalog of suites, the expectation table (default: the shipped one) and, for NCCL's log
    lines in RUN/ranks/, its folder."""
    table = shipped() if expected is None else expected
    machine = machine_class(meta).key
    run = str(run_dir or meta.get("run_id", ""))
    levels = point_levels(rows, catalog) if len(rows) else pd.DataFrame()
    if levels.empty:
        return Judgement(run, machine, tolerance, alpha, math.nan, [])
    short = rows[short_of_hbm(rows)]
    in_cache = frozenset(zip(short["op"], short["src"], short["size_bytes"]))
    families = _families(_points(levels, meta, catalog, table, in_cache))
    _siblings(families)
    tests = sum(bool(f.expected) for f in families) + sum(math.isfinite(f.sibling_change) for f in families)
    z = NormalDist().inv_cdf(1 - alpha / (2 * max(tests, 1)))
    links = (meta.get("system") or {}).get("links") or {}
    facts = causes.facts(meta, run_dir)
    verdicts = [_verdict(f, rows, facts, links, catalog, table, z, tolerance) for f in families]
    order = {LOW: 0, HIGH: 1, OK: 2, NOT_JUDGED: 3}
    verdicts.sort(key=lambda v: (order[v.verdict], v.family))
    return Judgement(run, machine, tolerance, alpha, z, verdicts)
