"""Regression or noise: compare two result sets point by point.

A point (results.POINT_KEYS) regresses when its median got worse by more than a tolerance
*and* its trials say the change is real: a one-sided Mann-Whitney U test (scipy), or without
scipy a bootstrap interval of the median difference; with fewer than 3 trials on a side, the
trial ranges must not overlap. Bandwidth is compared where a point has one, time otherwise.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from bench.results import POINT_KEYS, ResultsError, bandwidth_column, load, usable_rows
from bench.sizes import format_size

# The bandwidth a suite is judged by: nccl-tests' bus bandwidth for collectives (comparable
# across world sizes), the bytes actually moved for copies and peer-to-peer.
MIN_TRIALS_FOR_TEST = 3
BOOTSTRAP_DRAWS = 2000


@dataclass
class PointChange:
    key: dict
    label: str
    metric: str                 # the column compared: algbw_gbps, busbw_gbps or time_s
    baseline: float             # medians
    current: float
    change: float               # relative change in performance: > 0 better, < 0 worse
    verdict: str                # regression | improvement | unchanged
    test: str                   # how the spread was judged
    p_value: float | None
    n_baseline: int
    n_current: int


@dataclass
class Comparison:
    tolerance: float
    alpha: float
    changes: list[PointChange]
    failed_now: list[str] = field(default_factory=list)        # measured before, data check fails now
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """A real regression: slower beyond tolerance and noise, or a point whose data check now fails."""
        return bool(self.regressions or self.failed_now)

    def with_verdict(self, verdict: str) -> list[PointChange]:
        # Worst first for regressions, best first for improvements.
        return sorted((c for c in self.changes if c.verdict == verdict), key=lambda c: c.change,
                      reverse=verdict == "improvement")

    @property
    def regressions(self) -> list[PointChange]:
        return self.with_verdict("regression")

    @property
    def improvements(self) -> list[PointChange]:
        return self.with_verdict("improvement")

    @property
    def unchanged(self) -> int:
        return sum(c.verdict == "unchanged" for c in self.changes)

    def to_json(self) -> dict:
        return {
            "tolerance": self.tolerance,
            "alpha": self.alpha,
            "regressions": [asdict(c) for c in self.regressions],
            "improvements": [asdict(c) for c in self.improvements],
            "unchanged": self.unchanged,
            "failed_now": self.failed_now,
            "only_in_baseline": self.only_in_baseline,
            "only_in_current": self.only_in_current,
        }

    def to_markdown(self) -> str:
        regs, imps = self.regressions, self.improvements
        noisy = sum(c.verdict == "unchanged" and abs(c.change) > self.tolerance for c in self.changes)
        lines = ["## xferbench comparison", "",
                 f"**{len(regs)} regression(s), {len(imps)} improvement(s), {self.unchanged} unchanged** "
                 f"of {len(self.changes)} common points (tolerance {self.tolerance:.0%}, "
                 f"significance {self.alpha:g})."
                 + (f" {noisy} of the unchanged moved beyond the tolerance but within the trials' spread."
                    if noisy else ""), ""]
        if self.failed_now:
            lines += ["### Failing now", "", "Measured in the baseline; every trial now fails its data check:", ""]
            lines += [f"- {label}" for label in self.failed_now] + [""]
        for title, rows in (("Regressions", regs), ("Improvements", imps)):
            if rows:
                lines += [f"### {title}", "", "| point | metric | baseline | current | change | evidence |",
                          "| --- | --- | ---: | ---: | ---: | --- |"]
                lines += [f"| {c.label} | {_metric_name(c.metric)} | {_fmt(c.baseline, c.metric)} | "
                          f"{_fmt(c.current, c.metric)} | {c.change:+.1%} | {_evidence(c)} |" for c in rows]
                lines.append("")
        for title, labels in (("Only in baseline (skipped or not run now)", self.only_in_baseline),
                              ("Only in current", self.only_in_current)):
            if labels:
                shown = ", ".join(labels[:20]) + (f", ... ({len(labels) - 20} more)" if len(labels) > 20 else "")
                lines += [f"{title}: {len(labels)} point(s): {shown}", ""]
        return "\n".join(lines)


def _metric_name(metric: str) -> str:
    return {"algbw_gbps": "algbw", "busbw_gbps": "busbw", "time_s": "time"}[metric]


def _fmt(value: float, metric: str) -> str:
    return f"{value * 1e6:.4g} µs" if metric == "time_s" else f"{value:.4g} GB/s"   # small values keep digits


def _evidence(c: PointChange) -> str:
    p = f", p={c.p_value:.3g}" if c.p_value is not None else ""
    return f"{c.test}{p} (n={c.n_baseline}/{c.n_current})"


def point_label(key: dict) -> str:
    """A short human name: 'copy h2d pinned eager 64MiB', defaults left out."""
    parts = [key["suite"], key["op"], key["memory"], key["mode"],
             key["backend"] if key["suite"] == "collectives" else "",
             f"{key['src']}->{key['dst']}" if key["suite"] == "p2p" else "",
             key["dtype"] if key["dtype"] != "uint8" else "",
             f"n={key['world_size']}" if int(key["world_size"]) > 1 else "",
             f"{key['nnodes']} nodes" if int(key["nnodes"]) > 1 else "",
             key["launch"], format_size(int(key["size_bytes"]))]
    return " ".join(str(p) for p in parts if p not in ("", None))


def _one_sided_p(worse: np.ndarray, better: np.ndarray) -> float:
    """P-value that `worse` is stochastically smaller than `better` (both oriented: larger = better)."""
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(worse, better, alternative="less").pvalue)


def _bootstrap_upper(first: np.ndarray, second: np.ndarray, alpha: float, rng: np.random.Generator) -> float:
    """The (1 - alpha) upper bound of median(first) - median(second), resampling each side."""
    a = rng.choice(first, size=(BOOTSTRAP_DRAWS, len(first))).astype(float)
    b = rng.choice(second, size=(BOOTSTRAP_DRAWS, len(second))).astype(float)
    return float(np.quantile(np.median(a, axis=1) - np.median(b, axis=1), 1 - alpha))


@functools.lru_cache(maxsize=1)
def _have_scipy() -> bool:
    try:
        import scipy.stats  # noqa: F401
    except ImportError:
        return False
    return True


def judge(base: np.ndarray, cur: np.ndarray, higher_is_better: bool, tolerance: float, alpha: float,
          use_scipy: bool | None, rng: np.random.Generator) -> tuple[float, str, str, float | None]:
    """(relative change, verdict, test name, p-value) for one point's trials.

    use_scipy None: the rank test when scipy is installed, else the bootstrap.
    """
    if not higher_is_better:  # orient time so that larger is better: compare 1/time
        base, cur = 1.0 / base, 1.0 / cur
    mb, mc = float(np.median(base)), float(np.median(cur))
    change = mc / mb - 1.0
    if abs(change) <= tolerance:
        return change, "unchanged", "within tolerance", None
    worse, better = (cur, base) if change < 0 else (base, cur)
    if min(len(base), len(cur)) < MIN_TRIALS_FOR_TEST:
        real, p = bool(worse.max() < better.min()), None
        test = "trial ranges disjoint" if real else "trial ranges overlap"
    elif _have_scipy() if use_scipy is None else use_scipy:  # scipy is imported only when needed
        p = _one_sided_p(worse, better)
        real, test = p <= alpha, "Mann-Whitney U"
    else:
        real, test, p = _bootstrap_upper(worse, better, alpha, rng) < 0, "bootstrap median", None
    if not real:
        return change, "unchanged", test, p
    return change, "regression" if change < 0 else "improvement", test, p


METRICS = ["algbw_gbps", "busbw_gbps", "time_s"]


def _trials(frame: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """Point key -> its trials' metric columns (only those: slicing string columns is slow)."""
    rows = usable_rows(frame)[POINT_KEYS + METRICS]
    return {tuple(v.item() if hasattr(v, "item") else v for v in k): g[METRICS]
            for k, g in rows.groupby(POINT_KEYS, sort=False, dropna=False)}


def _instances(frame: pd.DataFrame) -> list[str]:
    return sorted(set(frame["instance"].astype(str))) if "instance" in frame else []


def compare(baseline: pd.DataFrame, current: pd.DataFrame, tolerance: float = 0.05,
            alpha: float = 0.05, use_scipy: bool | None = None, seed: int = 0) -> Comparison:
    """Match points of two load() frames and judge each; ResultsError when they cannot be compared.

    use_scipy None: Mann-Whitney U when scipy is installed, else the bootstrap interval.
    """
    if not 0 <= tolerance < 1:
        raise ResultsError(f"tolerance {tolerance!r}: must be a fraction in [0, 1), e.g. 0.05 for 5%")
    for name, frame in (("baseline", baseline), ("current", current)):
        if len(_instances(frame)) > 1:
            raise ResultsError(f"{name} holds runs of several instances ({', '.join(_instances(frame))}); "
                               "compare one instance's runs at a time")
    base, cur = _trials(baseline), _trials(current)
    common = sorted(base.keys() & cur.keys())
    if not common:
        raise ResultsError("no common points: the two result sets measured nothing in common "
                           f"(baseline has {len(base)} points, current {len(cur)})")
    rng = np.random.default_rng(seed)
    changes = []
    for k in common:
        key = dict(zip(POINT_KEYS, k))
        b, c = base[k], cur[k]
        metric = bandwidth_column(key["suite"])
        if b[metric].isna().all() or c[metric].isna().all():
            metric = "time_s"
        bv, cv = b[metric].dropna().to_numpy(float), c[metric].dropna().to_numpy(float)
        if len(bv) == 0 or len(cv) == 0 or (bv <= 0).any() or (cv <= 0).any():
            continue  # nothing measurable on one side: no basis for a verdict
        change, verdict, test, p = judge(bv, cv, metric != "time_s", tolerance, alpha, use_scipy, rng)
        changes.append(PointChange(key, point_label(key), metric, float(np.median(bv)), float(np.median(cv)),
                                   change, verdict, test, p, len(bv), len(cv)))
    failed = _failed_points(current)
    gone = sorted(base.keys() - cur.keys())
    return Comparison(tolerance, alpha, changes,
                      failed_now=[_label(k) for k in gone if k in failed],
                      only_in_baseline=[_label(k) for k in gone if k not in failed],
                      only_in_current=[_label(k) for k in sorted(cur.keys() - base.keys())])


def _label(key: tuple) -> str:
    return point_label(dict(zip(POINT_KEYS, key)))


def _failed_points(frame: pd.DataFrame) -> set[tuple]:
    failed = frame.loc[frame["status"] == "failed", POINT_KEYS].drop_duplicates()
    return {tuple(v.item() if hasattr(v, "item") else v for v in row) for row in failed.itertuples(index=False)}


def compare_paths(baseline: Iterable[str | Path] | str | Path, current: Iterable[str | Path] | str | Path,
                  tolerance: float = 0.05, alpha: float = 0.05) -> Comparison:
    """compare() on the runs at or below two sets of paths (ResultsError on unusable input)."""
    return compare(load(baseline), load(current), tolerance, alpha)


def write_outputs(result: Comparison, markdown: str | Path | None = None, json_path: str | Path | None = None) -> None:
    """Append the markdown (a GitHub job summary is appended to) and write the JSON report."""
    if markdown:
        with open(markdown, "a") as f:
            f.write(result.to_markdown() + "\n")
    if json_path:
        Path(json_path).write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
