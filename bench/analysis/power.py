"""The regression gate's power: the smallest drop of a bandwidth-bound family that
bench.analysis.compare flags, from its limit formula, and verified by injecting drops into a
real run.

The formula. A family of m baseline and n current runs is a regression when its change is
below log_limit(sigma, m, n, tolerance, z), so on runs that otherwise agree a drop d (bandwidth
down by the fraction d, time up by 1 / (1 - d)) is caught when d > -expm1(log_limit). With one
run a side, sigma is the suite's declared noise; with a store of m runs against one, the
declared noise moderated by the sigma measured between identical runs at the family's sizes
(family_sigma, df = sizes x (m - 1)); either never less than the spread the compared runs' own
trials give their medians (compare.trial_instability). z is the comparison's, from its number
of families.

The injection. A current run's rows of every bandwidth-bound family are scaled by a drop
(time_s / (1 - d), bandwidth x (1 - d)), each family by its own, and judged by compare()
against a baseline; bisection finds each family's smallest drop flagged. Two real runs already
differ by the family's own change D0, so the drop flagged is 1 - exp(low - D0) (`expected`), not
the formula's -expm1(low): both are reported, and they agree to the bisection's resolution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from bench.suite_view import Catalog
from bench.points import VARIANT_KEYS
from bench.analysis.compare import Comparison, Family, compare, log_limit, point_levels, trial_instability
from bench.analysis.noise import default_noise, family_sigma, run_noise

STORE = 5               # the store of runs the gate's power is stated for
RESOLUTION = 0.002      # the bisection's: drops found to within 0.2%


@dataclass
class Caught:
    """The smallest drop one comparison flags in a family, found by injection, beside what its
    limit and the family's own change between the two sides predict."""

    injected: float             # smallest drop flagged (0: flagged with none; 1: not even at 99.9%)
    expected: float             # 1 - exp(low - D0), clipped to [0, 1]
    own_change: float           # D0 as a relative change: how the sides differ before any drop


@dataclass
class FamilyPower:
    label: str                  # points.variant_label: 'copy h2d pinned eager ce numa=local host->cuda:0'
    key: tuple                  # family_key()
    sizes: list[int]
    declared: float             # the suite's sigma of one run (log time)
    measured: float             # sigma between the identical runs at the family's sizes (NaN: one run)
    one_run: float              # smallest drop caught, one baseline run against one (formula)
    store: float                # ... a store of STORE runs against one, sigma measured (formula)
    one_run_injected: Caught | None = None
    store_injected: Caught | None = None


def family_key(family: Family) -> tuple:
    """What tells families apart: every variant key and the size class."""
    return tuple(str(family.variant[k]) for k in VARIANT_KEYS), family.size_class


def bandwidth_bound(result: Comparison) -> list[Family]:
    return [f for f in result.families if f.size_class == "bandwidth"]


def _rows_of(frame: pd.DataFrame, family: Family) -> np.ndarray:
    """Positional mask of the frame's rows of a family: its variant, at its sizes."""
    mask = frame["size_bytes"].isin(family.sizes).to_numpy().copy()
    for k in VARIANT_KEYS:
        mask &= (frame[k].map(str) == str(family.variant[k])).to_numpy()
    return mask


def inject(frame: pd.DataFrame, drops: dict[tuple, float], families: Sequence[Family]) -> pd.DataFrame:
    """The frame with each family's rows slower by its drop: time / (1 - d), bandwidth x (1 - d)."""
    factor = np.ones(len(frame))
    for family in families:
        factor[_rows_of(frame, family)] = 1 - drops.get(family_key(family), 0.0)
    out = frame.copy()
    for column in ("time_s", "time_fastest_rank_s"):
        out[column] = out[column] / factor
    for column in ("algbw_gbps", "busbw_gbps"):
        out[column] = out[column] * factor
    return out


def smallest_flagged(baseline: pd.DataFrame, current: pd.DataFrame, catalog: Catalog, tolerance: float = 0.05,
                     alpha: float = 0.01, resolution: float = RESOLUTION) -> dict[tuple, Caught]:
    """Per bandwidth-bound family of compare(baseline, current): the smallest drop injected into
    `current` that the gate flags, by bisection over every family at once (each family's verdict
    depends on its own rows only), beside the drop its limit and own change predict."""
    levels = point_levels(baseline, catalog)   # the baseline's, once: each step injects into the current run alone
    plain = compare(baseline, current, catalog, tolerance, alpha, levels)
    families = bandwidth_bound(plain)
    low = {family_key(f): math.log1p(f.limit) for f in families}
    own = {family_key(f): math.log1p(f.change) for f in families}
    lo = {k: 0.0 for k in low}
    hi = {k: 0.999 for k in low}

    def flagged(drops: dict) -> set:
        result = compare(baseline, inject(current, drops, families), catalog, tolerance, alpha, levels)
        return {family_key(f) for f in result.regressions}

    at_zero, at_most = {family_key(f) for f in plain.regressions}, flagged(hi)
    for k in low:
        if k in at_zero:
            hi[k] = 0.0
        elif k not in at_most:
            lo[k] = hi[k] = 1.0
    while any(hi[k] - lo[k] > resolution for k in low):
        mid = {k: (lo[k] + hi[k]) / 2 for k in low}
        caught = flagged(mid)
        for k in low:
            if hi[k] - lo[k] > resolution:
                (hi if k in caught else lo)[k] = mid[k]
    return {k: Caught(hi[k], min(1.0, max(0.0, -math.expm1(low[k] - own[k]))), math.expm1(own[k])) for k in low}


def measured_sigma(identical: pd.DataFrame, family: Family, catalog: Catalog) -> float:
    """Between-run sigma of one run at a family's sizes, from every pair of the identical runs."""
    return _sigma_in(point_levels(identical, catalog), family)


def _sigma_in(levels: pd.DataFrame, family: Family) -> float:
    """measured_sigma, from the identical runs' point_levels."""
    pairs = levels.loc[_rows_of(levels, family), "pairs"]
    differences = np.concatenate(list(pairs)) if len(pairs) else np.array([])
    return run_noise(differences) if len(differences) else math.nan


def _instability(sides: Sequence[pd.DataFrame], family: Family) -> float:
    """compare.trial_instability of two sides (their point_levels) at a family's sizes."""
    sides = [levels.loc[_rows_of(levels, family)].set_index("size_bytes")["trial_spread"] for levels in sides]
    joined = pd.concat(sides, axis=1, keys=["trial_spread_base", "trial_spread_cur"], join="inner")
    return trial_instability(joined.to_dict("records")) if len(joined) else 0.0


def _store_sides(identical: Sequence[pd.DataFrame], store: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The store gate_power injects into: the last run against the ones before it (at most `store`)."""
    return pd.concat(identical[-1 - min(store, len(identical) - 1):-1]), identical[-1]


def formula(identical: Sequence[pd.DataFrame], catalog: Catalog, tolerance: float = 0.05, alpha: float = 0.01,
            store: int = STORE) -> list[FamilyPower]:
    """Each bandwidth-bound family's smallest drop caught, from the limit formula: one run a
    side (declared sigma), and a store of `store` runs against one (sigma measured between the
    `identical` runs, each a run's rows); each at least the compared runs' trial instability
    (the first two; the store gate_power injects into). Families and z are those of comparing
    the first two."""
    pair = compare(identical[0], identical[1], catalog, tolerance, alpha)
    out = []
    families = bandwidth_bound(pair)
    # Each side's levels once, not once a family: a study has a hundred families and more.
    every = point_levels(pd.concat(identical), catalog) if families else None
    first = [point_levels(frame, catalog) for frame in identical[:2]] if families else []
    stored = [point_levels(frame, catalog) for frame in _store_sides(identical, store)] if families else []
    for family in families:
        declared = default_noise(catalog, family.variant, "bandwidth")
        measured = _sigma_in(every, family)
        sigma = family_sigma(declared, 0.0 if math.isnan(measured) else measured,
                             0 if math.isnan(measured) else len(family.sizes) * (store - 1))
        one = max(declared, _instability(first, family))
        many = max(sigma, _instability(stored, family))
        out.append(FamilyPower(family.label, family_key(family), family.sizes, declared, measured,
                               -math.expm1(log_limit(one, 1, 1, tolerance, pair.z)),
                               -math.expm1(log_limit(many, store, 1, tolerance, pair.z))))
    return out


def gate_power(identical: Sequence[pd.DataFrame], catalog: Catalog, tolerance: float = 0.05, alpha: float = 0.01,
               store: int = STORE, resolution: float = RESOLUTION) -> list[FamilyPower]:
    """formula(), verified: drops injected into the second identical run against the first (one
    run a side), and into the last against a store of the ones before it (at most `store`)."""
    powers = formula(identical, catalog, tolerance, alpha, store)
    one = smallest_flagged(identical[0], identical[1], catalog, tolerance, alpha, resolution)
    stored = smallest_flagged(*_store_sides(identical, store), catalog, tolerance, alpha, resolution) \
        if len(identical) >= 3 else {}
    for power in powers:
        power.one_run_injected, power.store_injected = one.get(power.key), stored.get(power.key)
    return powers


def summary(powers: Sequence[FamilyPower], store: int = STORE) -> str:
    """The gate's power in one sentence: median and worst over the bandwidth-bound families."""
    if not powers:
        return "no bandwidth-bound family: no power to state"
    one = sorted(powers, key=lambda p: p.one_run)
    many = sorted(powers, key=lambda p: p.store)
    return (f"Over {len(powers)} bandwidth-bound families, the gate catches a drop larger than "
            f"{np.median([p.one_run for p in powers]):.1%} (median; worst {one[-1].one_run:.1%}, {one[-1].label}) "
            f"with one baseline run, and larger than {np.median([p.store for p in powers]):.1%} "
            f"(worst {many[-1].store:.1%}, {many[-1].label}) with a store of {store}.")
