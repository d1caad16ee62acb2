"""Is this normal? One run's figures judged against what a healthy machine of its kind delivers.

Families are xferbench-compare's: one op variant of one GPU or pair (every point key but the
size) at one size class, a point's level y = -log(its median time per op). Each point's
expectation comes, in order, from
1. the expectation table (expected.py): healthy runs of the same machine class, looked up by the
   point's role (GPU-agnostic), interpolated on a log-log line within the reference's sizes;
2. where the table has no curve of the class: at bandwidth-bound sizes, link theory (the suite's
   `expectation` hook on the device's own NVML readings) times the share the other classes
   reach in the role (learned from the table; the suite's declared `efficiency` where no class
   has the role); at other sizes, the time the other classes take (any NVIDIA GPU is judged so);
and besides, 3. siblings: each GPU or pair against the median of the same role on its peers in
this run, where it has two or more.

Each family ends in one state: normal, low, high (faster than healthy machines, within what the
record allows), inconsistent (a recorded fact contradicts the figure: above what the recorded
link, slot, peer access or class can carry), failed (a data check failed), too noisy (its
limit could not catch a halved figure), or not judged (why). The run adds its status and the
families its config asked for and its machine should have but it did not measure (missing).
Exit 0 only when nothing is low, failed, inconsistent or missing, the run completed, and at
least MIN_JUDGED of its measured families were judged; 1 when anything is; 3 when nothing is
wrong but too little was judged (exit_code).

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
from bench.suite_view import Catalog, view
from bench.analysis.compare import (GPU_BACKENDS, JUDGED_CLASSES, PAIR_MEDIAN_TO_SIGMA, default_noise, family_sigma,
                                    median_factor, point_levels, run_noise, size_classes)
from bench.analysis.expected import (Expected, Learned, alternatives, machine_class, machine_row, pair_class, roles,
                                     shipped, shipped_noise)
from bench.links import pcie_gbps
from bench.points import ROLE_KEYS, VARIANT_KEYS, variant_label
from bench.results import COMPLETE, SCHEMA_VERSION, run_status
from bench.sizes import format_size

TOLERANCE = 0.05          # as xferbench-compare: a smaller drop never counts
# Link theory's shares were measured on three machines and vary between hosts (bidir: 0.69 of
# PCIe on the H100 host, 0.79 on the H200s): a machine is low by theory only 15% below them.
THEORY_TOLERANCE = 0.15
ALPHA = 0.01
MIN_JUDGED = 0.9          # exit 0 needs at least this share of the measured families judged
CAN_CATCH = 0.55          # a family whose limit would not catch a halved figure by a margin: too noisy
UNMEASURED = 1.5          # noise never measured on the class: the declared sigma, widened this much
OTHER_HOSTS = 2.0         # and again for a latency learned from other classes: their hosts' launch paths differ
FAR_ABOVE = 1.25          # this much above healthy machines of the class: not the class it says
PHYSICAL_MARGIN = 1.03    # above the recorded link's figure by more than timing's error
SIBLING_FLOOR = 0.01      # siblings never agree closer than timing itself repeats
OTHER_WORLDS = 0.15       # the noise of a share learned from other world sizes (a 4-rank sendrecv reached
                          # 0.65 of the share of 2 ranks on H200s)
NORMAL, LOW, HIGH, INCONSISTENT, FAILED, NOISY, NOT_JUDGED = (
    "normal", "low", "high", "inconsistent", "failed", "too noisy", "not judged")
WRONG = (LOW, INCONSISTENT, FAILED)       # states that make a run not normal
JUDGED = (NORMAL, LOW, HIGH, INCONSISTENT)


@dataclass
class Verdict:
    family: str                   # variant_label, class: 'copy h2d pinned eager ce host->cuda:0 (bandwidth-bound)'
    key: dict                     # the variant: every point key but the size
    size_class: str               # latency | bandwidth
    verdict: str                  # normal | low | high | inconsistent | failed | too noisy | not judged
    sizes: list[int]
    ratio: float | None = None    # measured / expected as performance (> 1: faster)
    limit: float | None = None    # the ratio below which it is low
    expected: float | None = None   # at at_size, in unit
    measured: float | None = None
    unit: str = ""                # GB/s | µs
    at_size: int | None = None
    source: str = ""              # where the expectation came from
    siblings: str = ""            # its peers in the run, where compared: 'median of 7 GPUs: 0.98x'
    causes: list[str] = field(default_factory=list)   # low: what explains it; high, inconsistent: what
    reason: str = ""              # not judged, too noisy, failed: why
    noise: str = ""               # where its between-run noise came from


@dataclass
class Judgement:
    run: str
    machine: str                  # the machine class
    tolerance: float
    alpha: float
    z: float
    verdicts: list[Verdict]
    status: str = "complete"      # the run's: complete, failed, interrupted, running, "" (not recorded)
    missing: list[str] = field(default_factory=list)   # asked for and expected here, not measured
    missing_checked: str = ""     # why missing was not checked ("" where it was)
    min_judged: float = MIN_JUDGED

    def state(self, state: str) -> list[Verdict]:
        out = [v for v in self.verdicts if v.verdict == state]
        return sorted(out, key=lambda v: v.ratio or 0) if state == LOW else out

    @property
    def low(self) -> list[Verdict]:
        """The families below their expectation, worst first."""
        return self.state(LOW)

    @property
    def high(self) -> list[Verdict]:
        return self.state(HIGH)

    @property
    def judged(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict in JUDGED]

    @property
    def measured(self) -> list[Verdict]:
        """Families with measured figures that a machine's kind sets: every family but the failed
        ones and the host's own (HOST_OWN)."""
        return [v for v in self.verdicts if v.verdict != FAILED and v.reason != HOST_OWN]

    @property
    def host_own(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.reason == HOST_OWN]

    @property
    def judged_share(self) -> float:
        return len(self.judged) / len(self.measured) if self.measured else 0.0

    def not_judged(self) -> Counter:
        return Counter(v.reason for v in self.verdicts if v.verdict in (NOT_JUDGED, NOISY))

    def wrong(self) -> list[str]:
        """What makes the run not normal, one phrase each ([] when nothing does)."""
        out = [f"{len(self.state(s))} {s}" for s in WRONG if self.state(s)]
        if self.missing:
            out.append(f"{len(self.missing)} missing")
        if self.status not in COMPLETE:
            out.append(f"the run is {self.status}")
        if not self.verdicts:
            out.append("nothing measured")
        return out

    def exit_code(self) -> int:
        """0: checked and normal; 1: something is wrong (wrong()); 3: nothing wrong, but less than
        min_judged of the measured families judged."""
        if self.wrong():
            return 1
        return 3 if self.judged_share < self.min_judged else 0

    @property
    def result(self) -> str:
        return {0: "normal", 1: "not normal", 3: "not enough judged"}[self.exit_code()]

    def to_json(self) -> dict:
        """verdicts.json: the verdict, how it was reached, and every family."""
        return {"verdict": self.result, "exit_code": self.exit_code(), "wrong": self.wrong(),
                "run": self.run, "machine": self.machine, "status": self.status,
                "tolerance": self.tolerance, "theory_tolerance": THEORY_TOLERANCE, "alpha": self.alpha, "z": self.z,
                "judged_share": round(self.judged_share, 4), "min_judged": self.min_judged,
                "counts": dict(Counter(v.verdict for v in self.verdicts)),
                "missing": self.missing, "missing_checked": self.missing_checked or "yes",
                "lines": self.lines(),
                "families": [asdict(v) for v in self.verdicts]}

    def lines(self) -> list[str]:
        """The end-of-run block: a line per family that is not normal, what is missing, how many
        families were judged, and the result with its exit status."""
        out = [_line(v) for state in (LOW, INCONSISTENT, FAILED, HIGH) for v in self.state(state)]
        out += [f"MISSING {m}" for m in self.missing]
        if self.status not in COMPLETE:
            out.append(f"RUN {self.status}: the points after it stopped were never measured")
        counts = Counter(v.verdict for v in self.verdicts)
        if self.verdicts:
            parts = [f"{counts[s]} {s}" for s in (NORMAL, LOW, HIGH, INCONSISTENT, FAILED) if counts[s]]
            own = f" ({len(self.host_own)} more the host's own, reported, not judged)" if self.host_own else ""
            summary = (f"verdict: {len(self.verdicts)} families: {', '.join(parts) or 'none judged'}; judged "
                       f"{len(self.judged)} of {len(self.measured)} measured{own} ({_share(self.judged_share)})")
        else:
            summary = "verdict: nothing measured to judge"
        reasons = self.not_judged()
        reasons.pop(HOST_OWN, None)
        if reasons:
            grouped = "; ".join(f"{reason}: {n}" for reason, n in reasons.most_common())
            summary += f"; {sum(reasons.values())} not judged ({grouped})"
        if self.missing_checked:
            summary += f"; missing families not checked ({self.missing_checked})"
        code = self.exit_code()
        why = {0: "checked and normal",
               1: ", ".join(self.wrong()),
               3: f"nothing wrong found, but {_share(self.judged_share)} of the measured families judged, under "
                  f"{self.min_judged:.0%} (--min-judged)"}[code]
        return out + [summary, f"result: {self.result} (xferbench-doctor exits {code}): {why}"]


def _older(meta: Mapping) -> str:
    """Why a run is too old to judge, or ''."""
    schema = meta.get("schema_version")
    return OLDER.format(schema) if isinstance(schema, int) and schema < OLDEST_JUDGED else ""


def _share(share: float) -> str:
    """A share as a percentage that never rounds across a limit: 89.7%, not 90%."""
    return f"{share:.0%}" if round(share * 100, 6).is_integer() else f"{math.floor(share * 1000) / 10:.1f}%"


def _number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _figure(value: float | None, unit: str) -> str:
    return "?" if value is None or not math.isfinite(value) else f"{_number(value)} {unit}"


def _line(v: Verdict) -> str:
    at = f" at {format_size(v.at_size)}" if v.at_size else ""
    if v.verdict in (HIGH, INCONSISTENT):
        return f"{v.verdict.upper()} {v.family}: {_figure(v.measured, v.unit)}{at}; {'; '.join(v.causes)}"
    if v.verdict == FAILED:
        return f"FAILED {v.family}: {v.reason}"
    shown = v.measured / v.expected if v.measured and v.expected else math.nan
    if v.unit == "µs" and math.isfinite(shown):
        shown = 1 / shown
    # The family's ratio is its median over sizes; where the size shown differs, say so.
    own = f"; {shown:.2f}x at that size" if math.isfinite(shown) and abs(math.log(shown / v.ratio)) > 0.05 else ""
    versus = (f"{v.ratio:.2f}x expected ({_figure(v.measured, v.unit)} against {_figure(v.expected, v.unit)}{at}"
              f"{own}")
    where = f"; {v.source}" if v.source else ""
    peers = f"; siblings: {v.siblings}" if v.siblings and not v.source.startswith("siblings") else ""
    return f"LOW  {v.family}: {versus}{where}{peers}); cause: {'; '.join(v.causes)}"


# ---- the machine as the suites' hooks read it ---------------------------------------------

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
    runs: int = 0                 # healthy runs behind y_expected (0: theory, or other classes)
    curve_role: dict | None = None   # the table's role that gave it (its class's)
    learned: Learned | None = None   # the other classes that gave it
    source: str = ""
    physical: float = math.nan    # the link's limit in GB/s, as the run recorded it
    physical_link: str = ""
    reason: str = ""              # why no expectation
    in_cache: bool = False        # an on-GPU copy the L2 holds (cache.py): no plateau of device memory
    set_aside: bool = False       # judged by nothing: it measured the host, or by a method since changed


def _reference(point: _Point, role: dict, table: Expected, machine: str) -> str:
    """Fills in the class's expectation from the table; '' or why there is none."""
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


def _learned(point: _Point, role: dict, table: Expected, machine: str, theory, own_class: str) -> str:
    """Where the class has no reference: theory times the share the other classes reach (the
    suite's declared share where none has the role) at bandwidth-bound sizes, else the time the
    other classes take; '' or why neither."""
    if theory and point.bandwidth and own_class == "bandwidth":
        gbps, declared_share, link = theory
        learned = table.learned_share(machine, role, point.size)
        share = learned.value if learned else declared_share
        if not share > 0:
            return "no other class has this variant, nor a declared share of its link"
        point.y_expected = point.y - math.log(point.value / (gbps * share))
        point.learned = learned
        whose = learned.source if learned else "declared by the suite"
        point.source = f"theory: {link} = {_number(gbps)} GB/s x {share:.2f} ({whose})"
        return ""
    if point.bandwidth and own_class == "bandwidth":   # another GPU's time is no measure of this one's link
        return "no link theory for this GPU's variant"
    learned = table.learned_time(machine, role, point.size)
    if learned is None:
        return "no other class has this variant at this size" + ("" if theory else ", nor link theory")
    point.y_expected, point.learned = -learned.value, learned
    point.size_class = own_class if point.bandwidth else "latency"
    point.source = f"the time {learned.source} take"
    return ""


def _recorded_limit(f: causes.Facts, record: dict, theory) -> tuple[float, str]:
    """What the link this point crossed could carry as the run recorded it (GB/s, its name):
    a host copy's PCIe link at its generation and width while busy (else its slot's); a peer copy
    between GPUs with peer access recorded off, PCIe through the host; else the link theory."""
    src, dst, op = str(record["src"]), str(record["dst"]), str(record["op"])
    both = 2 if op == "bidir" else 1
    gpu = causes.gpu_of(dst if src == "host" else src)
    if "host" in (src, dst) and gpu is not None and record["suite"] == "copy":
        gen, width, when = causes.recorded_pcie(f, gpu)
        gbps = pcie_gbps(gen, width)
        if gbps > 0:
            return gbps * both, f"PCIe Gen{gen} x{width} as recorded {when}"
    pair = causes.peer_pair(src, dst)
    if record["suite"] == "p2p" and record["mode"] == "peer" and pair and causes.peer_access_off(f, *pair):
        gen, width, _ = causes.recorded_pcie(f, pair[0])
        gbps = pcie_gbps(gen, width)
        if gbps > 0:
            return gbps * both, f"PCIe Gen{gen} x{width} through the host, as peer access is recorded off"
    return (theory[0], theory[2]) if theory else (math.nan, "")


def _points(levels: pd.DataFrame, meta: Mapping, catalog: Catalog, table: Expected,
            in_cache: frozenset, facts: causes.Facts) -> list[_Point]:
    machine = machine_class(meta).key
    links = (meta.get("system") or {}).get("links") or {}
    role_rows = roles(levels, links).to_dict("records")
    own = size_classes(levels)   # where no reference curve says
    hooks = machine_row(meta)
    # A GPU run made before xferbench read the host's pace: its host-bound figures hold the host's moods.
    unpaced = levels["backend"].isin(GPU_BACKENDS).any() and not levels["paced"].any()
    older = _older(meta)
    out = []
    for record, role, own_class in zip(levels.to_dict("records"), role_rows, own):
        bandwidth = record["metric"] != "time_s"
        point = _Point(tuple(record[k] for k in VARIANT_KEYS), tuple(role[k] for k in ROLE_KEYS),
                       int(record["size_bytes"]), own_class, float(record["y"]), float(record["value"]), bandwidth)
        pair = pair_class(links, record["src"], record["dst"])
        theory = _theory(catalog, {**hooks, **record, "link_class": "" if pair == "?" else pair})
        # A copy the GPU's L2 holds is rightly above HBM's limit: not a figure to hold against it.
        point.in_cache = (record["op"], record["src"], record["size_bytes"]) in in_cache
        if bandwidth and not point.in_cache:
            point.physical, point.physical_link = _recorded_limit(facts, record, theory)
        point.reason = _reference(point, role, table, machine)
        if point.reason:
            why = _learned(point, role, table, machine, theory, own_class)
            point.reason = f"{point.reason}; {why}" if why else ""
        aside = (older or (HOST_OWN if record["op"] in view(catalog, record["suite"]).host_own else "")
                 or (HOST_SLOW if record["host_slow"] and point.size_class == "latency" else "")   # the host's mood
                 or (UNPACED if unpaced and point.size_class == "latency" and record["launch"] == "eager" else ""))
        if aside:
            point.y_expected, point.reason, point.set_aside = math.nan, aside, True
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
    sibling_sigma: float = math.nan   # how far siblings of this run stray from their median (log units)

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
        # A point that measured the host (its own memory, its moods) is no sibling's yardstick.
        levels = [{p.size: p.y for p in f.points if not p.set_aside} for f in group]
        # Within one run siblings share its host, not its moments: a host-bound launch cost comes
        # in moods that catch some siblings and not others. Their spread about their median, read
        # at its 90th percentile, is the noise one of them is judged against.
        deviations = [abs(y - np.median([lv[size] for lv in levels if size in lv]))
                      for lv in levels for size, y in lv.items() if sum(size in other for other in levels) >= 3]
        sigma = float(np.quantile(deviations, 0.9)) / NormalDist().inv_cdf(0.95) if deviations else math.nan
        for k, f in enumerate(group):
            f.sibling_sigma = max(sigma, SIBLING_FLOOR)
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


HOST_SLOW = "every trial ran while the host was slow (host_pace_s): it measured the host's mood"
HOST_OWN = "the host's own memory: hosts of one kind differ, so no kind sets it (reported, not judged)"
UNPACED = ("recorded before xferbench read the host's pace (schema 3 or older): a host-bound figure cannot be "
           "told from the host's moods")
OLDER = "made by an older xferbench (schema {}): its methods have changed since; run it again to judge it"
OLDEST_JUDGED = 2   # schema 1's graph timings have changed since
PLATEAU = 0.9   # a bandwidth-bound family is judged where its expected rate is this near its peak


def _plateau(points: list[_Point]) -> list[_Point]:
    """A bandwidth-bound family's plateau: its sizes whose expected rate is within PLATEAU of the
    family's highest. A link shared with another process, or throttled, shows there, while
    smaller sizes may slip through in a time slice, and those still paying a launch (a kernel's
    host cost in its moods) move with the host, not the link."""
    points = [p for p in points if not p.in_cache] or points
    if not points:
        return []
    rates = [math.log(p.size) + p.y_expected for p in points]
    top = max(rates)
    return [p for p, rate in zip(points, rates) if rate >= top + math.log(PLATEAU)]


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
    bound = size_class if size_class in ("data check", "not measured") else f"{size_class}-bound"
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
    if f.size_class == "latency" and any(p.learned is not None for p in f.expected):
        widened, times = widened * OTHER_HOSTS, f" x {OTHER_HOSTS} (other hosts' launch paths)"
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
        return INCONSISTENT, [f"{_number(top.value)} GB/s is more than {top.physical_link} carries "
                              f"({_number(top.physical)} GB/s): the record or the figure is wrong"]
    table_judged = [p for p in f.expected if p.runs]
    bounded = bool(physical)   # a link bounds it: what its class reaches is a property of GPU and link
    if f.size_class == "bandwidth" and table_judged and bounded and math.isfinite(f.change):
        ratio = math.exp(f.change)
        if ratio > FAR_ABOVE and f.change > -limit:
            return INCONSISTENT, [f"{ratio:.2f}x what healthy machines of its class reach: is this the GPU and "
                                  "link its record says?"]
        if f.change > -limit:
            return HIGH, [f"{ratio:.2f}x what healthy machines of its class reach, beyond their noise"]
    return "", []


def _verdict(f: _Family, rows: pd.DataFrame, facts: causes.Facts, links: Mapping, catalog: Catalog,
             table: Expected, noise: Expected | None, z: float, tolerance: float, machine: str) -> Verdict:
    key = {k: _plain(v) for k, v in zip(VARIANT_KEYS, f.variant)}
    v = Verdict(_label(key, f.size_class), key, f.size_class, NOT_JUDGED, [p.size for p in f.points])
    sigma, v.noise = _noise(f, key, catalog, table, noise, machine)
    judged = _plateau(f.expected) if f.size_class == "bandwidth" else f.expected
    if judged:
        runs = min(p.runs for p in judged)
        allowed = tolerance if runs else THEORY_TOLERANCE
        f.change = float(np.median([p.y - p.y_expected for p in judged]))
        f.limit = math.log1p(-allowed) - z * _spread(sigma, runs)
        rep = _representative(f, f.change, {p.size: p.y_expected for p in judged})
        v.expected, v.measured, v.unit = _shown(rep, rep.y_expected, f.size_class)
        v.at_size, v.source = rep.size, rep.source
        v.ratio, v.limit = math.exp(f.change), math.exp(f.limit)
        v.verdict = NORMAL if f.change >= f.limit else LOW
        if v.limit < CAN_CATCH and v.verdict == NORMAL:
            v.verdict, v.reason = NOISY, "too noisy to judge: its limit lets a halved figure pass"
    else:
        v.reason = Counter(p.reason for p in f.points).most_common(1)[0][0]
    if math.isfinite(f.sibling_change):
        # A latency's host-bound moods come and go between siblings measured at other moments:
        # they are judged with the noise between runs at least.
        sibling_sigma = max(f.sibling_sigma, sigma) if f.size_class == "latency" else f.sibling_sigma
        f.sibling_limit = math.log1p(-tolerance) - z * _spread(sibling_sigma, f.peers)
        ratio = math.exp(f.sibling_change)
        v.siblings = f"median of {_noun(f.role, f.peers)}: {ratio:.2f}x"
        # Siblings find a GPU or pair out of line with its peers; like them, a whole machine may
        # still be slow: they can make a family low, never normal.
        if f.sibling_change < f.sibling_limit and v.verdict != LOW:
            rep = _representative(f, f.sibling_change, f.peer_y)   # the figures shown: the siblings'
            v.expected, v.measured, v.unit = _shown(rep, f.peer_y[rep.size], f.size_class)
            v.at_size, v.source = rep.size, f"siblings: median of {_noun(f.role, f.peers)}"
            v.ratio, v.limit, v.verdict = ratio, math.exp(f.sibling_limit), LOW
    state, said = _above(f, f.limit if math.isfinite(f.limit) else -math.inf)
    if state:
        v.verdict, v.causes, v.reason = state, said, ""
        top = max(f.points, key=lambda p: p.value)
        if state == INCONSISTENT and math.isfinite(top.physical):
            v.unit, v.at_size, v.measured = "GB/s", top.size, top.value
    elif v.verdict == LOW:
        judged_value = float(np.median([p.value for p in (judged or f.points)])) if f.size_class == "bandwidth" else math.nan
        v.causes = causes.explain(facts, causes.subject(key, links, _notes(rows, key), judged_value))
    return v


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
    table = shipped() if expected is None else expected
    machine = machine_class(meta).key
    run = str(run_dir or meta.get("run_id", ""))
    status = run_status(dict(meta))
    if meta.get("schema_version") != SCHEMA_VERSION:
        planned, unplanned = None, f"made by an older xferbench (schema {meta.get('schema_version')}), whose plan differs"
    measured_ops = set(zip(rows["suite"], rows["op"])) if len(rows) else set()
    missing = sorted(f"{suite} {op}: asked for and measurable here, not measured"
                     for suite, op in (planned or set()) - measured_ops)
    checked = "" if planned is not None else (unplanned or "not planned")
    levels = point_levels(rows, catalog) if len(rows) else pd.DataFrame()
    facts = causes.facts(meta, run_dir, causes.healthy_clocks(machine))
    verdicts: list[Verdict] = []
    z = math.nan
    if not levels.empty:
        short = rows[short_of_hbm(rows)]
        in_cache = frozenset(zip(short["op"], short["src"], short["size_bytes"]))
        families = _families(_points(levels, meta, catalog, table, in_cache, facts))
        _siblings(families)
        tests = sum(bool(f.expected) for f in families) + sum(math.isfinite(f.sibling_change) for f in families)
        z = NormalDist().inv_cdf(1 - alpha / (2 * max(tests, 1)))
        links = (meta.get("system") or {}).get("links") or {}
        noise = shipped_noise() if noise is None else noise
        verdicts = [_verdict(f, rows, facts, links, catalog, table, noise, z, tolerance, machine) for f in families]
    measured = {tuple(r) for r in levels[VARIANT_KEYS].itertuples(index=False)} if not levels.empty else set()
    verdicts += _unmeasured(rows, measured) if len(rows) else []
    order = {LOW: 0, INCONSISTENT: 1, FAILED: 2, HIGH: 3, NORMAL: 4, NOISY: 5, NOT_JUDGED: 6}
    verdicts.sort(key=lambda v: (order[v.verdict], v.family))
    return Judgement(run, machine, tolerance, alpha, z, verdicts, status, missing, checked, min_judged)
