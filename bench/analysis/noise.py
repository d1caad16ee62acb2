"""Between-run noise, as the gate (compare.py) and the doctor (judge.py) read it: a suite's
declared sigma for a family, the sigma measured between runs, and the one moderated by the other.

A suite's between-run noise of one run (its `noise`: sigma of log per-point median time between
identical runs, per platform and size class) sets the threshold when each side has one run, and
counts as PRIOR_DF degrees of freedom against the spread measured between several runs, so that
a few runs that happened to agree cannot make the threshold tiny.

The launch path: a GPU op launched eagerly at a latency-bound size is timed around the host's
launch of it (Python, torch, the driver), which moves with the host's pace by 2x between runs
of one host; operations queued behind a held stream or replayed from a graph are timed on the
device. The fleet judges such a family against the spread of launch paths healthy hosts show:
the suite's ("gpu", "launch") entry, never less than its latency-bound one; the gate, between two
runs, against its ("gpu", "launch", "rerun") entry where a suite declares a wider one.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Mapping

import numpy as np

from bench.config.settings import Launch
from bench.suite_view import LATENCY_BOUND, RERUN, Catalog, view

GPU_BACKENDS = ("cuda", "nccl")
PRIOR_DF = 4
FALLBACK_NOISE = 0.2      # sigma where no suite of the catalog says: a fifth, loose on purpose
# The median of |y_i - y_j| for two draws of N(0, sigma^2) is sigma * sqrt(2) * z(0.75).
PAIR_MEDIAN_TO_SIGMA = math.sqrt(2) * NormalDist().inv_cdf(0.75)


def platform(backend: str) -> str:
    return "gpu" if backend in GPU_BACKENDS else "cpu"


def default_noise(catalog: Catalog, variant: Mapping, size_class: str) -> float:
    """The suite's noise for a family (its variant keys): of the entries tagged with its values
    (e.g. ("gpu", "bandwidth", "pageable"), or ("gpu", "bandwidth", "staged", "held"): every tag one
    of them), the largest of those with the most tags, else its (platform, size class) entry; a
    suite without its own figure gets the platform's largest."""
    plat = platform(variant["backend"])
    declared = view(catalog, variant["suite"]).noise
    values = {str(v) for v in variant.values()}
    tagged = [(len(key), v) for key, v in declared.items()
              if key[:2] == (plat, size_class) and key[2:] and set(key[2:]) <= values]
    if tagged:
        return max(tagged)[1]
    known = [v for s in catalog.values() for key, v in s.noise.items() if key == (plat, size_class)]
    return declared.get((plat, size_class), max(known, default=FALLBACK_NOISE))


def launch_path(variant: Mapping, size_class: str) -> bool:
    """Whether a family (its variant keys and size class) times the host's launch path: latency-bound,
    launched eagerly, on a GPU backend."""
    return size_class == LATENCY_BOUND and variant.get("launch") == Launch.eager.value and platform(variant["backend"]) == "gpu"


def launch_path_noise(catalog: Catalog, variant: Mapping, rerun: bool = False) -> float:
    """A launch path's sigma of one run: its suite's ("gpu", "launch") entry (a suite without
    one: the largest declared), at least its latency-bound one; `rerun` (between two runs, as the
    gate compares them): its ("gpu", "launch", RERUN) entry where that is wider (the spread between
    hosts is what the fleet and the doctor judge a node by)."""
    spread = max(default_noise(catalog, variant, "launch"), default_noise(catalog, variant, LATENCY_BOUND))
    if not rerun:
        return spread
    return max(spread, view(catalog, variant["suite"]).noise.get((platform(variant["backend"]), "launch", RERUN), 0.0))


def run_noise(differences: np.ndarray) -> float:
    """Between-run sigma from |y_i - y_j| of pairs of runs: their median, scaled to a standard deviation.

    A median, not a mean square, so that one disturbed run among many moves it little.
    """
    return float(np.median(differences)) / PAIR_MEDIAN_TO_SIGMA if len(differences) else math.nan


def median_factor(runs: int) -> float:
    """Variance of a median of `runs` normal draws over that of their mean: 1 up to 2, at most pi/2 beyond."""
    return 1.0 if runs <= 2 else math.pi / 2


def family_sigma(prior: float, measured: float, df: int) -> float:
    """A family's between-run sigma of one run: the suite's default worth PRIOR_DF degrees of
    freedom, moderated by the sigma measured between runs (df of them; 0: the default alone)."""
    return math.sqrt((PRIOR_DF * prior**2 + df * (measured**2 if df else 0.0)) / (PRIOR_DF + df))
