"""Regression or noise: judge current runs against baseline runs, one verdict per op and size class.

The evidence is runs, not trials: the trials of one run share its clocks, neighbours, placement
and NCCL channel layout, so their spread understates how far a rerun moves. A point
(points.POINT_KEYS) of one run is y = -log(median time of its trials), so that larger is better
and a difference in y is the relative change in bandwidth (algbw and busbw are size / time).
A side's level of a point is the median of y over its runs.

Points are judged in families: one op variant (every point key but the size) and one size
class, read off the baseline's curve of that variant:
- bandwidth-bound: from the first size whose bandwidth reaches BANDWIDTH_SHARE of the variant's
  peak, every size (one that falls out of a cache still moves data for most of its time),
  judged at its plateau: the sizes within PLATEAU of the family's highest rate, and within its
  noise beyond that (plateau());
- latency-bound: the other sizes whose time per op is at most LATENCY_RATIO times the
  variant's shortest (the fixed cost is most of the time). Eager on a GPU, such a family times
  the host's launch path (noise.launch_path);
- the sizes in between, and copies the L2 holds (cache.py), are listed per size but not judged.
A point measured on one side while the host was slow (at its usual pace in fewer than two of its
trials or rounds: results.slow_throughout) is judged too (HOST_SLOW_NOISE).

A family's change D is the median over its sizes of y_current - y_baseline. It is a regression
when D < log(1 - tolerance) - z * sigma * sqrt(c_m / m + c_n / n), for m baseline and n current
runs (c_k: how much noisier a median of k runs is than their mean). sigma is the between-run
noise of one run: the median |y_i - y_j| over pairs of runs of the family's sizes on either
side, scaled to a standard deviation, moderated by its suite's declared noise (worth PRIOR_DF
degrees of freedom; noise.py); with one run a side, the default alone; and never less than the
spread the runs' own trials give their medians (trial_instability: a host that split them
between two moods). z = z(1 - alpha / 2F) for F families: Bonferroni over the families, and a
factor 2 because a median falls below a bound only when half its sizes do (Markov), however
their noise is correlated. So with Gaussian log noise of that sigma, unchanged runs raise a
false alarm with probability at most alpha per comparison (default 1%); improvements are judged
the same way and do not fail.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Iterable

import numpy as np
import pandas as pd

from bench.analysis.cache import cache_resident, short_of_hbm
from bench.analysis.records import records, tuples
from bench.analysis.noise import (PRIOR_DF, default_noise, family_sigma, launch_path, launch_path_noise,
                                  median_factor, run_noise)
from bench.config.settings import Launch
from bench.suite_view import LATENCY_BOUND, Catalog, bandwidth_column, view
from bench.points import POINT_KEYS, VARIANT_KEYS, point_label, variant_label
from bench.results import ResultsError, find_runs, load, usable_and_slow
from bench.sizes import format_size

BANDWIDTH_SHARE = 0.5
LATENCY_RATIO = 1.5
JUDGED_CLASSES = (LATENCY_BOUND, "bandwidth")
# An eager latency-bound family with a side that never read the host's pace (runs before schema 4)
# holds the host's moods in its trials: its declared noise, which is of trials read at the usual pace, twice.
UNPACED_NOISE = 2.0
# A family holding a point measured on one side while the host was slow: judged, with its declared
# noise this many times. A launch path's too: its noise is of the host's usual moods, read at its
# usual pace (a spell moved two launch paths of one host 0.29x and 0.37x between its runs).
HOST_SLOW_NOISE = 2.0


@dataclass
class PointChange:
    key: dict
    label: str
    size_class: str             # latency | middle | bandwidth | cache
    metric: str                 # what baseline/current hold: algbw_gbps, busbw_gbps or time_s
    baseline: float             # geometric mean over the side's runs of each run's median
    current: float
    change: float               # relative change in performance: > 0 better, < 0 worse
    n_baseline: int             # runs
    n_current: int
    host_slow: bool = False     # on one side, measured while the host was slow (results.slow_throughout)


@dataclass
class Family:
    variant: dict
    label: str
    size_class: str             # latency | bandwidth
    sizes: list[int]
    change: float               # exp(median over sizes of the log change) - 1
    limit: float                # a drop counts beyond this (negative) relative change; a gain beyond 1/(1+limit)-1
    noise: float                # between-run sigma of one run, log units (about a relative change)
    noise_df: int               # degrees of freedom measured between runs; 0: the default alone
    verdict: str                # regression | improvement | unchanged
    launch_path: bool = False   # eager and latency-bound on a GPU: the host's launch path (noise.launch_path)
    host_slow: int = 0          # its sizes measured only while the host was slow, on one side


@dataclass
class Comparison:
    tolerance: float
    alpha: float
    z: float                    # the one-sided normal quantile each family is judged at
    baseline_runs: list[str]
    current_runs: list[str]
    families: list[Family]
    points: list[PointChange]
    failed_now: list[str] = field(default_factory=list)        # measured before, data check fails now
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """A real regression: a family slower beyond its threshold, or a point whose data check now fails."""
        return bool(self.regressions or self.failed_now)

    def with_verdict(self, verdict: str) -> list[Family]:
        # Worst first for regressions, best first for improvements.
        return sorted((f for f in self.families if f.verdict == verdict), key=lambda f: f.change,
                      reverse=verdict == "improvement")

    @property
    def regressions(self) -> list[Family]:
        return self.with_verdict("regression")

    @property
    def improvements(self) -> list[Family]:
        return self.with_verdict("improvement")

    def to_json(self) -> dict:
        return {
            "verdict": "fail" if self.regressed else "pass",
            "tolerance": self.tolerance, "alpha": self.alpha, "z": self.z,
            "baseline_runs": self.baseline_runs, "current_runs": self.current_runs,
            "regressions": [f.label + f" ({f.size_class}-bound)" for f in self.regressions],
            "improvements": [f.label + f" ({f.size_class}-bound)" for f in self.improvements],
            "families": [asdict(f) for f in self.families],
            "points": [asdict(p) for p in self.points],
            "failed_now": self.failed_now,
            "only_in_baseline": self.only_in_baseline,
            "only_in_current": self.only_in_current,
        }

    def to_markdown(self) -> str:
        return "\n".join(_markdown(self))


def _plain1(value):
    return value.item() if hasattr(value, "item") else value   # numpy scalars to Python's, for JSON


def _plain(values: tuple) -> tuple:
    return tuple(_plain1(v) for v in values)


def _instances(frame: pd.DataFrame) -> list[str]:
    return sorted(set(frame["instance"].astype(str))) if "instance" in frame else []


@functools.cache
def _upper_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, k=1)   # kept: a run's hundreds of points have a few run counts among them


def _pair_differences(y: np.ndarray) -> np.ndarray:
    i, j = _upper_pairs(len(y))
    return np.abs(y[i] - y[j])


def _judged(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Each suite's rows as it asks to be judged (its `judged` hook: e.g. the pipeline's loops by
    the fraction of their own bound, not by GB/s that move with the host's pace)."""
    if frame.empty:
        return frame
    parts = [view(catalog, suite).judged(rows) for suite, rows in frame.groupby("suite", sort=False)]
    return pd.concat(parts, ignore_index=True) if parts else frame


def _median_spread(trials: pd.DataFrame) -> pd.Series:
    """Per (point, run) of `trials` (columns point, run, time): how far the median of its trials
    could have fallen, in log time: half the distance between the order statistics that hold the
    median with about 68% (ranks n/2 -+ sqrt(n)/2 of n). Trials of one mood give about 0; trials
    split between two moods of the host (some preempted, some not) give half the gap between
    them, and their median lands in either from one run to the next."""
    ordered = trials.sort_values(["point", "run", "time"])
    by = ordered.groupby(["point", "run"], sort=True)
    rank = by.cumcount().to_numpy()
    n = by["time"].transform("size").to_numpy()
    low_rank = np.floor(n / 2 - np.sqrt(n) / 2).clip(0)
    high_rank = np.ceil(n / 2 + np.sqrt(n) / 2).clip(1, n) - 1
    log_time = np.log(ordered["time"].to_numpy())
    index = pd.MultiIndex.from_frame(ordered[["point", "run"]])

    def at(where: np.ndarray) -> pd.Series:
        return pd.Series(log_time[where], index=index[where])

    return (at(rank == high_rank) - at(rank == low_rank)) / 2


def point_levels(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """One row per point: its POINT_KEYS, runs n, level y (median over runs of -log median time),
    how far a run's median of its trials could fall (trial_spread, log units, median over runs;
    _median_spread), the |differences| of y between its runs (pairs), whether it was measured
    while the host was slow (host_slow: results.slow_throughout) and whether any read the host's pace (paced), the
    value shown (median bandwidth, or time) and its metric. Each suite's rows as it asks to be
    judged (_judged), then of those the trials taken at the host's usual pace (results.usable_and_slow: host_slow
    read on every trial of a point, as the summary reads it)."""
    rows, throughout = usable_and_slow(_judged(frame, catalog))
    rows = rows[rows["time_s"] > 0]
    if rows.empty:   # nothing judged: a suite's judged rows may be none (an older run's pipeline)
        return pd.DataFrame(columns=POINT_KEYS + ["y", "trial_spread", "n", "pairs", "cache_resident", "short_of_hbm",
                                                  "host_slow", "paced", "metric", "value"])
    # Integer ids for points and runs: grouping by the 15 key columns once, not at every step.
    point = rows.groupby(POINT_KEYS, sort=False).ngroup().to_numpy()
    metric = rows["suite"].map({suite: bandwidth_column(catalog, suite) for suite in rows["suite"].unique()}).to_numpy()
    bw = np.where(metric == "busbw_gbps", rows["busbw_gbps"], rows["algbw_gbps"])
    trials = pd.DataFrame({"point": point, "run": pd.factorize(rows["run_dir"])[0], "time": rows["time_s"].to_numpy(),
                           "bw": bw})
    per_run = trials.groupby(["point", "run"]).median()          # sorted by point
    per_run["y"] = -np.log(per_run["time"])
    per_run["trial_spread"] = _median_spread(trials)
    points = per_run.groupby(level="point")
    out = points.median()
    out["n"] = points.size()
    ends = np.cumsum(out["n"].to_numpy())
    out["pairs"] = [_pair_differences(y) for y in np.split(per_run["y"].to_numpy(), ends[:-1])]
    first = np.unique(point, return_index=True)[1]
    keys = rows.iloc[first][POINT_KEYS].set_axis(out.index)
    out["cache_resident"] = pd.Series(cache_resident(rows, catalog)).groupby(point).any().to_numpy()
    out["short_of_hbm"] = pd.Series(short_of_hbm(rows, catalog)).groupby(point).any().to_numpy()
    out["host_slow"] = pd.Series(throughout.loc[rows.index].to_numpy()).groupby(point).any().to_numpy()
    out["paced"] = rows["host_pace_s"].notna().groupby(point).any().to_numpy()
    has_bw = out["bw"] > 0
    out["metric"] = np.where(has_bw, metric[first], "time_s")
    out["value"] = out["bw"].where(has_bw, out["time"])
    return pd.concat([keys, out.drop(columns=["bw", "time"])], axis=1).reset_index(drop=True)


def size_classes(levels: pd.DataFrame, y: str = "y") -> np.ndarray:
    """latency | middle | bandwidth per point, from the curve of levels[y] of each variant."""
    time = np.exp(-levels[y].to_numpy())
    size = levels["size_bytes"].to_numpy(float)
    rate = size / time
    variant = levels.groupby(VARIANT_KEYS, sort=False).ngroup().to_numpy()
    by_variant = pd.DataFrame({"time": time, "rate": rate}).groupby(variant)
    # Bandwidth-bound from the first size at half the peak on: larger sizes that fall out of a
    # cache, below half of the cached peak, still move data for most of their time.
    reached = np.where(rate >= BANDWIDTH_SHARE * by_variant["rate"].transform("max").to_numpy(), size, np.inf)
    bandwidth = size >= pd.Series(reached).groupby(variant).transform("min").to_numpy()
    latency = time <= LATENCY_RATIO * by_variant["time"].transform("min").to_numpy()
    # A figure of time alone (a dependent load's latency) is latency-bound at any size.
    metric = levels.get("metric" + y[1:])       # metric_base in a joined frame
    timed = (metric == "time_s").to_numpy() if metric is not None else np.zeros(len(levels), bool)
    return np.select([timed, bandwidth, latency], [LATENCY_BOUND, "bandwidth", LATENCY_BOUND], "middle")


def family_z(alpha: float, families: int) -> float:
    """The one-sided normal quantile each of `families` families is judged at (see the module's docstring)."""
    return NormalDist().inv_cdf(1 - alpha / (2 * max(families, 1)))


def log_limit(sigma: float, m: int, n: int, tolerance: float, z: float) -> float:
    """The log change in performance below which a family of m baseline and n current runs is a
    regression: log(1 - tolerance) - z * sigma * sqrt(c_m / m + c_n / n)."""
    return math.log1p(-tolerance) - z * sigma * math.sqrt(median_factor(m) / m + median_factor(n) / n)


PLATEAU = 0.9   # a bandwidth-bound family is judged where the baseline's rate is this near its peak


def plateau(rows: list[dict], sigma: float = 0.0) -> list[dict]:
    """A bandwidth-bound family's sizes whose baseline rate (size / time) is within PLATEAU of its
    highest, and within `sigma` (the family's between-run noise, log units) beyond that: where the
    link sets the pace. Sizes short of it still pay a launch, whose cost moves with the host (an SM
    copy of 16 MiB read 192 to 323 GB/s between runs of one 4x H200 host, and 363 at 256 MiB in
    every one). The noise widens the band because the highest reading may owe its lead to luck:
    a band that holds that one size alone carries its luck into the change as a false drop (a
    gloo sendrecv of 512 KiB read 0.2 or 3 ms from run to run; judged alone where the baseline
    read 0.2, it failed 17 of 380 pairs of identical runs). The sizes are the baseline's choice
    alone, so a larger drop never passes where a smaller one fails."""
    rows = [r for r in rows if not r.get("short_of_hbm_base")] or rows   # an L2 figure is no plateau of HBM
    rates = [math.log(r["size_bytes"]) + r["y_base"] for r in rows]
    return [r for r, rate in zip(rows, rates) if rate >= max(rates) + math.log(PLATEAU) - sigma]


def trial_instability(rows: list[dict]) -> float:
    """How far two runs' medians of their own trials could differ by where those medians fell, as
    sigma of one run: the median over the family's sizes of sqrt((s_base^2 + s_cur^2) / 2), s a
    side's trial_spread (point_levels). Near 0 where trials agree; where a host split them between
    two moods, the gap between the moods."""
    return float(np.median([math.sqrt((r["trial_spread_base"] ** 2 + r["trial_spread_cur"] ** 2) / 2) for r in rows]))


def _prior(rows: list[dict], key: dict, size_class: str, catalog: Catalog) -> float:
    """The family's declared sigma of one run: the launch path's where it is one; twice where an
    eager latency-bound side never read the host's pace (a device-side figure, held or graph,
    reads none and needs none), or where a side measured a size only while the host was slow."""
    launch = launch_path(key, size_class)
    prior = launch_path_noise(catalog, key, rerun=True) if launch else default_noise(catalog, key, size_class)
    eager_latency = size_class == LATENCY_BOUND and key.get("launch") == Launch.eager.value
    if eager_latency and not all(r["paced_base"] and r["paced_cur"] for r in rows):
        prior *= UNPACED_NOISE
    if any(r["host_slow_base"] or r["host_slow_cur"] for r in rows):
        prior *= HOST_SLOW_NOISE
    return prior


def _family(rows: list[dict], tolerance: float, z: float, catalog: Catalog) -> Family:
    """The verdict on one family, from the joined records of its sizes (bandwidth-bound: its plateau)."""
    key = {k: _plain1(rows[0][k]) for k in VARIANT_KEYS}
    size_class = rows[0]["size_class"]
    prior = _prior(rows, key, size_class, catalog)
    if size_class == "bandwidth":
        rows = plateau(rows, prior)
    df = sum(r["n_base"] - 1 + r["n_cur"] - 1 for r in rows)
    measured = run_noise(np.concatenate([r[p] for r in rows for p in ("pairs_base", "pairs_cur")])) if df else 0.0
    sigma = max(family_sigma(prior, measured, df), trial_instability(rows))
    m, n = min(r["n_base"] for r in rows), min(r["n_cur"] for r in rows)
    low = log_limit(sigma, m, n, tolerance, z)
    change = float(np.median([r["y_cur"] - r["y_base"] for r in rows]))
    verdict = "regression" if change < low else "improvement" if change > -low else "unchanged"
    sizes = sorted(int(r["size_bytes"]) for r in rows)
    slow = sum(bool(r["host_slow_base"] or r["host_slow_cur"]) for r in rows)
    return Family(key, variant_label(key), size_class, sizes, math.expm1(change), math.expm1(low), sigma, int(df),
                  verdict, launch_path(key, size_class), slow)


def _points(joined: list[dict]) -> list[PointChange]:
    """Per-size details, by variant then size."""
    out = []
    for row in joined:
        key = {k: _plain1(row[k]) for k in POINT_KEYS}
        out.append(PointChange(key, point_label(key), row["size_class"], row["metric_base"], float(row["value_base"]),
                               float(row["value_cur"]), math.expm1(row["y_cur"] - row["y_base"]),
                               int(row["n_base"]), int(row["n_cur"]), bool(row["host_slow_base"] or row["host_slow_cur"])))
    return sorted(out, key=lambda p: (variant_label(p.key), p.key["size_bytes"]))


def _point_keys(frame: pd.DataFrame) -> set[tuple]:
    return {_plain(r) for r in tuples(frame[POINT_KEYS])}


def _label(key: tuple) -> str:
    return point_label(dict(zip(POINT_KEYS, key)))


def compare(baseline: pd.DataFrame, current: pd.DataFrame, catalog: Catalog, tolerance: float = 0.05,
            alpha: float = 0.01, baseline_levels: pd.DataFrame | None = None) -> Comparison:
    """Judge the runs in `current` against those in `baseline` (load() frames); ResultsError when
    they cannot be compared. alpha: the family-wise false-alarm rate of one comparison.
    `baseline_levels`: point_levels(baseline), where the caller judges one baseline many times."""
    if not 0 <= tolerance < 1:
        raise ResultsError(f"tolerance {tolerance!r}: must be a fraction in [0, 1), e.g. 0.05 for 5%")
    if not 0 < alpha < 1:
        raise ResultsError(f"alpha {alpha!r}: must be a probability in (0, 1), e.g. 0.01")
    for name, frame in (("baseline", baseline), ("current", current)):
        if len(_instances(frame)) > 1:
            raise ResultsError(f"{name} holds runs of several instances ({', '.join(_instances(frame))}); "
                               "compare one instance's runs at a time")
    base = point_levels(baseline, catalog) if baseline_levels is None else baseline_levels
    cur = point_levels(current, catalog)
    joined = base.merge(cur, on=POINT_KEYS, suffixes=("_base", "_cur"))
    if joined.empty:
        raise ResultsError("no common points: the two result sets measured nothing in common "
                           f"(baseline has {len(base)} points, current {len(cur)})")
    # A copy the L2 holds measures the cache's state from one run to the next, not the link: it
    # is shown but not gated, as it is kept out of peaks.
    # A held op stops at timing.held_max_size: at its largest still a short op, timed on the device.
    classes = np.where(joined["launch"] == Launch.held.value, LATENCY_BOUND, size_classes(joined, "y_base"))
    joined["size_class"] = np.where(joined["cache_resident_base"] | joined["cache_resident_cur"], "cache", classes)
    by_point = records(joined)
    families_of: dict[tuple, list[dict]] = {}
    for r in by_point:
        if r["size_class"] in JUDGED_CLASSES:
            families_of.setdefault(tuple(r[k] for k in VARIANT_KEYS + ["size_class"]), []).append(r)
    z = family_z(alpha, len(families_of))
    families = [_family(rows, tolerance, z, catalog) for rows in families_of.values()]
    base_keys, cur_keys = _point_keys(base), _point_keys(cur)
    failed = _point_keys(current[current["status"] == "failed"]) & base_keys
    return Comparison(tolerance, alpha, z, sorted(set(baseline["run_dir"])), sorted(set(current["run_dir"])),
                      families, _points(by_point),
                      failed_now=[_label(k) for k in sorted(failed)],
                      only_in_baseline=[_label(k) for k in sorted(base_keys - cur_keys - failed)],
                      only_in_current=[_label(k) for k in sorted(cur_keys - base_keys)])


def _run_folders(paths: Iterable[str | Path] | str | Path) -> set[Path]:
    return {run.resolve() for run in find_runs([paths] if isinstance(paths, (str, Path)) else paths)}


def compare_paths(baseline: Iterable[str | Path] | str | Path, current: Iterable[str | Path] | str | Path,
                  catalog: Catalog, tolerance: float = 0.05, alpha: float = 0.01, **load_args) -> Comparison:
    """compare() on the runs at or below two sets of paths (ResultsError on unusable input, and
    when a run is on both sides: judged against itself, a run shows no change whatever changed);
    load_args go to results.load (warn: where a skipped, unreadable run is reported)."""
    both = sorted(_run_folders(baseline) & _run_folders(current))
    if both:
        shown = ", ".join(map(str, both[:3])) + (", ..." if len(both) > 3 else "")
        raise ResultsError(f"{len(both)} run(s) on both sides, baseline and current ({shown}): "
                           "judge runs against other runs")
    return compare(load(baseline, **load_args), load(current, **load_args), catalog, tolerance, alpha)


def write_outputs(result: Comparison, markdown: str | Path | None = None, json_path: str | Path | None = None) -> None:
    """Append the markdown (a GitHub job summary is appended to) and write the JSON report."""
    if markdown:
        with open(markdown, "a") as f:
            f.write(result.to_markdown() + "\n")
    if json_path:
        Path(json_path).write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")


# --- markdown --------------------------------------------------------------------------------

def _fmt(value: float, metric: str) -> str:
    return f"{value * 1e6:.4g} µs" if metric == "time_s" else f"{value:.4g} GB/s"   # small values keep digits


def _runs_line(result: Comparison) -> str:
    def names(runs: list[str]) -> str:
        shown = ", ".join(Path(r).name for r in runs[-3:])
        return f"{len(runs)} run(s) ({'…, ' if len(runs) > 3 else ''}{shown})"

    return f"Baseline: {names(result.baseline_runs)}; current: {names(result.current_runs)}."


def _family_cell(f: Family | None) -> str:
    if f is None:
        return ""
    word = {"regression": "**regression**", "improvement": "improvement", "unchanged": "ok"}[f.verdict]
    sizes = "–".join(dict.fromkeys(format_size(s) for s in (f.sizes[0], f.sizes[-1])))
    path = ", launch path" if f.launch_path else ""
    return f"{word} {f.change:+.1%} (limit {f.limit:+.1%}, {sizes}{path})"


def _verdict_table(result: Comparison) -> list[str]:
    by_variant: dict[str, dict[str, Family]] = {}
    for f in result.families:
        by_variant.setdefault(f.label, {})[f.size_class] = f
    order = sorted(by_variant, key=lambda label: (min(f.change for f in by_variant[label].values()), label))
    lines = ["| op | latency-bound sizes | bandwidth-bound sizes |", "| --- | --- | --- |"]
    lines += [f"| {label} | {_family_cell(by_variant[label].get(LATENCY_BOUND))} | "
              f"{_family_cell(by_variant[label].get('bandwidth'))} |" for label in order]
    return lines


def _noise_lines(result: Comparison) -> list[str]:
    lines = ["| size class | families | σ of one run (log time), median | max | measured between runs |",
             "| --- | ---: | ---: | ---: | --- |"]
    groups = [(f"{c}-bound", [f for f in result.families if f.size_class == c and not f.launch_path])
              for c in JUDGED_CLASSES]
    groups.insert(1, ("launch path (eager, latency-bound, GPU)", [f for f in result.families if f.launch_path]))
    for name, fams in groups:
        if fams:
            noise = [f.noise for f in fams]
            measured = sum(f.noise_df > 0 for f in fams)
            source = (f"{measured} of {len(fams)} families (with the default worth {PRIOR_DF} df)" if measured
                      else "no: one run a side, the default per suite")
            lines.append(f"| {name} | {len(fams)} | {np.median(noise):.1%} | {max(noise):.1%} | {source} |")
    return lines


def _point_rows(points: list[PointChange]) -> list[str]:
    lines = ["| point | size class | baseline | current | change |", "| --- | --- | ---: | ---: | ---: |"]
    return lines + [f"| {p.label} | {p.size_class} | {_fmt(p.baseline, p.metric)} | {_fmt(p.current, p.metric)} | "
                    f"{p.change:+.1%} |" for p in points]


def _markdown(result: Comparison) -> list[str]:
    regs, imps = result.regressions, result.improvements
    status = "FAIL" if result.regressed else "PASS"
    lines = [f"## xferbench comparison: {status}", "", _runs_line(result), "",
             f"**{len(regs)} regression(s), {len(imps)} improvement(s), {len(result.failed_now)} point(s) failing "
             f"their data check** among {len(result.families)} families (op × size class). A family's change is "
             f"the median over its sizes; it counts beyond tolerance {result.tolerance:.0%} plus {result.z:.2f} × "
             f"the between-run noise, which keeps the chance of any false alarm in this comparison under "
             f"{result.alpha:.0%}.", ""]
    if result.failed_now:
        lines += ["### Failing now", "", "Measured in the baseline; now fails its data check:", ""]
        lines += [f"- {label}" for label in result.failed_now] + [""]
    slow = [p for p in result.points if p.host_slow and p.size_class in JUDGED_CLASSES]
    if slow:
        lines += [f"{len(slow)} point(s) measured only while the host was slow on one side (host_pace_s; "
                  f"docs/method.md): judged, their families' noise {HOST_SLOW_NOISE:g}x.", ""]
    lines += ["### Verdict per op", ""] + _verdict_table(result) + [""]
    largest = sorted(result.points, key=lambda p: abs(math.log1p(p.change)), reverse=True)[:5]
    lines += ["### Largest changes", ""] + _point_rows(largest) + [""]
    lines += ["### Baseline noise", ""] + _noise_lines(result) + [""]
    lines += ["<details><summary>Every point</summary>", ""] + _point_rows(result.points) + ["", "</details>", ""]
    for title, labels in (("Only in baseline (skipped or not run now)", result.only_in_baseline),
                          ("Only in current", result.only_in_current)):
        if labels:
            shown = ", ".join(labels[:20]) + (f", ... ({len(labels) - 20} more)" if len(labels) > 20 else "")
            lines += [f"{title}: {len(labels)} point(s): {shown}", ""]
    return lines
