"""Rows no measurement gives: what loading refuses in a samples file (results.read_samples names
the file and line of the first such row).

A measured row's time is a number, a whole operation's positive; a size is not negative; a
bandwidth, where one is recorded, is its bytes over its time. How many bytes an op moves per
byte of its size is a property of its variant (both directions, every GPU at once, a round's
copies), the same at every size and trial: each variant and part of a file moves one whole
number of them (or one share, for a part), and a row at another is an edited figure. Every
committed run holds to it (tests/test_untrusted.py loads them all).
"""
from __future__ import annotations

from typing import Callable

from bench import lazy
from bench.points import VARIANT_KEYS

# Loaded as rows are first checked: importing results (the registry, a plan) needs neither.
np = lazy.module("numpy")
pd = lazy.module("pandas")

# The most bytes one op moves per byte of its size: every GPU of a large machine, both ways.
MOST_BYTES_PER_BYTE = 64
# An imported figure is printed to 0.01 GB/s: half of that, or 1%, is rounding, not an edit.
ROUNDING, ROUNDING_GBPS = 0.01, 0.006

Found = tuple[int, str] | None   # the first refused row's position in the file, and why


def _first(mask: np.ndarray, why: Callable[[int], str]) -> Found:
    if not mask.any():
        return None
    i = int(np.argmax(mask))
    return i, why(i)


def _off(figure: np.ndarray, implied: np.ndarray, printed_slack: float | np.ndarray = ROUNDING_GBPS) -> np.ndarray:
    """Further from what size and time imply than rounding: 1%, or where the figure was printed
    to 0.01 GB/s (a whole number of hundredths), that printing's slack."""
    printed = np.abs(figure * 100 - np.round(figure * 100)) < 1e-6
    return np.abs(figure - implied) > np.maximum(ROUNDING * np.abs(figure), np.where(printed, printed_slack, 0))


def _usual(variant: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row, the value most rows of its variant hold (ties: the smallest)."""
    if not len(values):
        return values
    codes, value_id = np.unique(values, return_inverse=True)
    pairs, counts = np.unique(variant.astype(np.int64) * len(codes) + value_id, return_counts=True)
    of, value = pairs // len(codes), pairs % len(codes)
    order = np.lexsort((value, -counts, of))   # by variant, then most rows first, then smallest
    first = order[np.r_[True, of[order][1:] != of[order][:-1]]]
    usual = np.full(int(variant.max()) + 1, np.nan)
    usual[of[first]] = codes[value[first]]
    return usual[variant]


def _any(variant: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row, whether any row of its variant is in `mask`."""
    return (np.bincount(variant, weights=mask, minlength=int(variant.max(initial=0)) + 1) > 0)[variant]


def _median(variant: np.ndarray, values: np.ndarray, variants: int) -> np.ndarray:
    """Per variant (0 to variants - 1), the (lower) median of its values; NaN for one without."""
    median = np.full(variants, np.nan)
    if len(values):
        order = np.lexsort((values, variant))
        sorted_variant = variant[order]
        starts = np.flatnonzero(np.r_[True, sorted_variant[1:] != sorted_variant[:-1]])
        counts = np.diff(np.r_[starts, len(order)])
        median[sorted_variant[starts]] = values[order][starts + (counts - 1) // 2]
    return median


def _algbw(frame: pd.DataFrame, measured: np.ndarray, time: np.ndarray, size: np.ndarray,
           variant: np.ndarray) -> Found:
    """A recorded algbw that is not a number of 0 or more, missing where its variant records one,
    or not its bytes over its time times the whole number of bytes per byte its variant moves."""
    algbw = frame["algbw_gbps"].to_numpy(float)
    moved = measured & (size > 0) & (time > 0)      # a part that took no time has no bandwidth
    recorded = ~np.isnan(algbw)
    records = _any(variant, recorded & moved)
    # 0 is a figure an import may print (0.00 GB/s at 8 B): only its time then says anything.
    for mask, why in ((measured & recorded & ~(np.isfinite(algbw) & (algbw >= 0)), "is not a bandwidth"),
                      (moved & ~recorded & records, "where the other rows of its variant record one")):
        if found := _first(mask, lambda i: f"algbw_gbps={algbw[i]:g} {why}"):
            return found
    rows = np.flatnonzero(moved & (algbw > 0))
    ratio = algbw[rows] * 1e9 * time[rows] / size[rows]
    # algbw x time over size: a whole number of bytes moved per byte asked, or a part's share of one.
    factor = np.where(ratio >= 1, np.round(ratio), 1 / np.maximum(np.round(1 / ratio), 1))
    usual = _usual(variant[rows], factor)
    plain = size[rows] / time[rows] / 1e9
    # Judged at its variant's factor: a figure printed to 0.01 GB/s (an import's smallest sizes)
    # may round to another factor of its own, and still be its variant's within rounding.
    bad = _off(algbw[rows], usual * plain) | (usual > MOST_BYTES_PER_BYTE)

    def why(k: int) -> str:
        if _off(algbw[rows[k]], factor[k] * plain[k]) or max(factor[k], usual[k]) > MOST_BYTES_PER_BYTE:
            return f"algbw_gbps={algbw[rows[k]]:g} is not size_bytes / time_s ({plain[k]:.4g})"
        return (f"algbw_gbps={algbw[rows[k]]:g} is {factor[k]:g} x size_bytes / time_s ({plain[k]:.4g}) where the "
                f"other rows of its variant are {usual[k]:g} x")

    found = _first(bad, why)
    return (int(rows[found[0]]), found[1]) if found else None


def _busbw(frame: pd.DataFrame, measured: np.ndarray, variant: np.ndarray) -> Found:
    """busbw not algbw times its variant's bus factor (one number for an op at a world size), or
    missing where the other rows of its variant record one (a row made by hand may record none)."""
    algbw, busbw = frame["algbw_gbps"].to_numpy(float), frame["busbw_gbps"].to_numpy(float)
    rows = np.flatnonzero(measured & (algbw > 0) & np.isfinite(algbw))
    recorded = ~np.isnan(busbw[rows])
    records = _any(variant[rows], recorded)
    # The median over the variant: rows printed to 0.01 GB/s (an import's small sizes) scatter about it.
    of = variant[rows]
    usual = _median(of[recorded], busbw[rows][recorded] / algbw[rows][recorded], int(variant.max()) + 1)[of]
    expected = usual * algbw[rows]
    # Both figures printed to 0.01 GB/s (an import): the bus factor carries algbw's rounding too.
    off = _off(busbw[rows], expected, ROUNDING_GBPS * (1 + usual))
    found = _first(recorded & (~(np.isfinite(busbw[rows]) & (busbw[rows] >= 0)) | off) | ~recorded & records,
                   lambda k: f"busbw_gbps={busbw[rows[k]]:g} is not algbw_gbps x its op's bus factor ({expected[k]:.4g})")
    return (int(rows[found[0]]), found[1]) if found else None


def first_refused(frame: pd.DataFrame) -> Found:
    """The first row no measurement can give, and why (None: every row can be trusted): a
    measured row's time not a number (a whole operation's not positive), a negative size, a
    bandwidth that is not its bytes over its time or not its variant's (_algbw, _busbw), or a
    point's trial recorded twice."""
    measured = (frame["status"] == "ok").to_numpy()
    time, size = frame["time_s"].to_numpy(float), frame["size_bytes"].to_numpy(float)
    # A part may be a difference (what a synchronization costs beside the work: below 0 in noise),
    # and an op may move no bytes (size 0): a whole operation's time is positive and finite.
    whole_op = (frame["part"] == "total").to_numpy() & (size > 0)
    bad_time = measured & ~np.isfinite(time) | measured & whole_op & (time <= 0)
    found = (_first(bad_time, lambda i: f"time_s={float(time[i])!r} is not a time")
             or _first(~(size >= 0), lambda i: f"size_bytes={int(size[i]) if np.isfinite(size[i]) else size[i]} "
                                               "is not a size"))
    variant = frame.groupby(VARIANT_KEYS + ["part"], sort=False, dropna=False).ngroup().to_numpy()
    if not found and measured.any():
        found = _algbw(frame, measured, time, size, variant) or _busbw(frame, measured, variant)
    if found:
        return found[0], f"{found[1]}: not a measured row (edited?)"
    # A point is its variant at a size: one row per trial and part.
    twice = pd.DataFrame({"variant": variant, "size": size, "trial": frame["trial"].to_numpy()}).duplicated()
    return _first(twice.to_numpy(),
                  lambda i: f"trial {int(frame['trial'].iloc[i])} of this point is recorded twice (two writers?)")
