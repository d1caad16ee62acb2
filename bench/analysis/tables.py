"""The tables a run ends with: each variant's peak bandwidth and small-message latency, the
helpers suites build their own tables with, and the whole summary (`format_summary`)."""
from __future__ import annotations

import math
from typing import Iterable, NamedTuple

from bench import lazy
from bench.analysis.cache import short_of_hbm
from bench.suite_view import Catalog, view
from bench.analysis.scaling import TITLE as SCALING_TITLE
from bench.analysis.scaling import format_scaling, scaling_table
from bench.ops import every
from bench.points import AT_ONCE_KEYS, ENDS, SERIES_KEYS, VARIANT_KEYS
from bench.results import PACE_SLACK, usable_and_slow, usable_rows
from bench.sizes import format_size

np = lazy.module("numpy")
pd = lazy.module("pandas")

CONCURRENT_COLUMNS = [*AT_ONCE_KEYS, "size_bytes", "when", "gpu", "gbps"]
# A time per op that grew less than FLAT_GROWTH x while the bytes grew FLAT_SPAN x or more, from a
# size that is not latency-bound (the gate's classes: compare.size_classes), is a fixed cost's (a
# busy host's stalls, a timer's floor), not a link's: an op bound by its bytes takes FLAT_SPAN x
# as long, and a latency-heavy one's time still grows with them.
FLAT_SPAN, FLAT_GROWTH = 16, 1.25
CAVEATS = {"host slow": f"that latency-bound size ran while the host was slow (its pace over {PACE_SLACK}x the "
                        "run's usual in all its trials but one at most: docs/method.md, \"The host's pace\"): its "
                        "time is the host's",
           "time flat": f"once off the op's latency, the time per op grew less than {FLAT_GROWTH:g}x over the sizes "
                        f"named ({FLAT_SPAN}x the bytes or more): a fixed cost set it (a busy host, a timer), not the "
                        "bytes, and the bandwidth quoted there is not the link's"}


def summarize(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """One row per op/memory/mode/launch: peak of the per-size medians, latency at small sizes.
    On-GPU copies in or near L2 give no peak (bench.analysis.cache); a variant with no other
    size says so in peak_note."""
    ok, throughout = usable_and_slow(frame)
    timed = {(suite, op.name) for suite, op in every(catalog) if not op.bandwidth}
    # no bandwidth: the suites' latency tables have them
    ok = ok[[key not in timed for key in zip(ok["suite"], ok["op"])]]
    if ok.empty:
        return pd.DataFrame()
    # Each row's bandwidth by its suite's column, and the medians per size of every series and of
    # every variant grouped once (a group's own groupby costs ~1 ms, and a sweep has hundreds).
    bandwidth = pd.Series(np.nan, index=ok.index)
    for suite in ok["suite"].unique():
        mine = (ok["suite"] == suite).to_numpy()
        bandwidth[mine] = ok.loc[mine, view(catalog, suite).bandwidth]
    ok = ok.assign(bw=bandwidth, host_slow=throughout.reindex(ok.index, fill_value=False), short=short_of_hbm(ok, catalog))
    per_size = ok.groupby([*SERIES_KEYS, "size_bytes"], sort=False).agg(
        bw=("bw", "median"), t=("time_s", "median"), short=("short", "min")).reset_index()
    per_size = ((keys, rows.set_index("size_bytes").sort_index())
                for keys, rows in per_size.groupby(SERIES_KEYS, sort=False))
    curves = ok[ok["size_bytes"] > 0].groupby([*VARIANT_KEYS, "size_bytes"], sort=False, dropna=False).agg(
        t=("time_s", "median"), bw=("bw", "median"), slow=("host_slow", "any")).reset_index()
    curves = curves.sort_values("size_bytes", kind="stable", ignore_index=True)
    columns = {c: curves[c].to_numpy() for c in ("size_bytes", "t", "bw", "slow")}
    of_series: dict[tuple, list[Curve]] = {}
    for variant, at in curves.groupby(VARIANT_KEYS, sort=False, dropna=False).indices.items():
        series = tuple(v for k, v in zip(VARIANT_KEYS, variant) if k in SERIES_KEYS)
        of_series.setdefault(series, []).append(Curve(*(columns[c][at] for c in columns)))
    rows = []
    for keys, medians in per_size:   # in the order the rows first name each series
        suite = view(catalog, keys[0])
        row = dict(zip(SERIES_KEYS, keys))
        peaks = medians.bw[~medians.short.astype(bool)].dropna()
        if len(peaks):
            row["peak_gbps"] = round(float(peaks.max()), 2)
            row["at_size"] = format_size(int(peaks.idxmax()))
        else:
            row["peak_gbps"], row["at_size"] = math.nan, ""
            row["peak_note"] = f"no HBM peak: up to {format_size(int(medians.index[-1]))}, in or near L2"
        row["gbps@max"] = round(float(medians.bw.iloc[-1]), 2)
        row["max_size"] = format_size(int(medians.index[-1]))
        quoted = [int(medians.index[-1])] + ([int(peaks.idxmax())] if len(peaks) else [])
        sized = [s for s in medians.index if s > 0]   # rows of no size (the pipeline's host pace) have no latency
        for size in suite.latency_sizes if sized else ():
            # Split collectives round sizes to whole elements per rank: take the nearest size.
            nearest = min(sized, key=lambda s: abs(math.log2(s / size)))
            if abs(math.log2(nearest / size)) < 0.5:
                row[f"lat_us@{format_size(size)}"] = round(float(medians.t[nearest]) * 1e6, 2)
                quoted.append(int(nearest))
        row["caveat"] = _caveat(of_series.get(tuple(keys), []), quoted, keys[1] in suite.host_own, suite.curves)
        rows.append(row)
    table = pd.DataFrame(rows)
    # Columns that say the same thing on every row are noise in a terminal table.
    keep = [c for c in table.columns if c in ("suite", "op") or c.startswith(("peak", "at_", "lat", "gbps", "max_"))
            or table[c].nunique() > 1]
    caveat = ["caveat"] if table["caveat"].any() else []   # last: what it says is of the figures before it
    return table[[c for c in keep if c != "caveat"] + caveat]


class Curve(NamedTuple):
    """One variant's medians per size, smallest first: time per op, bandwidth, whether it ran slow."""
    sizes: np.ndarray
    t: np.ndarray
    bw: np.ndarray
    slow: np.ndarray


def _caveat(curves: list[Curve], quoted: list[int], host_own: bool, curves_drawn: bool) -> str:
    """Why a series' figures at the `quoted` sizes are not the link's ('' for none), read off each
    of its variants' `curves` with the gate's size classes: a latency-bound size it quotes (where
    the host's pace sets the time) measured while the host was slow (results.slow_throughout), unless the op
    measures the host itself (`host_own`: its own threads slow the pace read after them); or, for
    a bandwidth against size (`curves_drawn`), a time per op that stopped growing with the bytes
    above the op's latency."""
    from bench.analysis.compare import BANDWIDTH_SHARE, LATENCY_RATIO   # the gate's size classes

    said: dict[str, str] = {}
    for curve in curves:
        if not np.nanmax(curve.bw, initial=-np.inf) > 0:   # moved nothing: no bandwidth to doubt
            continue
        sizes, largest = [int(s) for s in curve.sizes], int(curve.sizes[-1])
        t = dict(zip(sizes, curve.t))
        bandwidth = min(s for s, bw in zip(sizes, curve.bw) if bw >= BANDWIDTH_SHARE * np.nanmax(curve.bw))
        latency = {s for s in sizes if s < bandwidth and t[s] <= LATENCY_RATIO * np.nanmin(curve.t)}
        slow = sorted(s for s, is_slow in zip(sizes, curve.slow) if is_slow and s in latency and s in quoted)
        if slow and not host_own:
            said.setdefault("host slow", f"host slow at {', '.join(format_size(s) for s in slow)}")
        # From above the smallest size: the time climbed off the op's latency, then stopped growing.
        flat = [s for s in sizes[1:] if s not in latency and s <= largest / FLAT_SPAN
                and t[largest] < FLAT_GROWTH * t[s]]
        if curves_drawn and flat and largest == max(quoted):
            said.setdefault("time flat", f"time flat {format_size(flat[0])}-{format_size(largest)} "
                                         f"({t[largest] * 1e3:.3g} ms)")
    return "; ".join(said.values())


# Positional (numpy) masks and keys below: frames joined from several runs may repeat index labels.
def matching(rows: pd.DataFrame, values: dict) -> pd.DataFrame:
    """The rows whose columns hold `values` (compared as strings)."""
    mask = np.ones(len(rows), dtype=bool)
    for column, value in values.items():
        mask &= (rows[column].astype(str) == str(value)).to_numpy()
    return rows[mask]


def median_by(rows: pd.DataFrame, key: np.ndarray) -> pd.Series:
    return rows.groupby(np.asarray(key))["algbw_gbps"].median()


def latency_table(frame: pd.DataFrame, timed: Iterable[str]) -> pd.DataFrame:
    """Link load latency (the ops `timed`: a time per access, no bandwidth): median ns per
    dependent load, per memory and GPU pair."""
    ok = usable_rows(frame)
    ok = ok[ok.op.isin(list(timed))]
    keys = [*SERIES_KEYS, *ENDS]
    table = (ok.groupby(keys, sort=False).time_s.median() * 1e9).round(1).rename("ns_per_access").reset_index()
    return table[[c for c in table.columns if c in ("src", "dst", "ns_per_access") or table[c].nunique() > 1]]


def _device_order(name: str) -> tuple:
    return (name == "total", int(name.split(":")[1]) if name.startswith("cuda:") else -1, name)


def format_concurrent(table: pd.DataFrame) -> pd.DataFrame:
    """A long table of traffic on every GPU at once (CONCURRENT_COLUMNS) as one row per variant,
    size and `when`, a column per GPU and the total."""
    wide = table.assign(size=table.size_bytes.map(lambda s: format_size(int(s)))).pivot_table(
        index=[*AT_ONCE_KEYS, "size", "when"], columns="gpu", values="gbps", sort=False).round(1)
    wide = wide[sorted(wide.columns, key=_device_order)].reset_index()
    keep = [c for c in wide.columns if c not in AT_ONCE_KEYS or c in ("suite", "op") or wide[c].nunique() > 1]
    shown = wide[keep].astype(object)
    return shown.where(shown.notna(), "")


def format_summary(frame: pd.DataFrame, catalog: Catalog) -> str:
    """The summary printed after a run: the peak table, then each suite's own tables."""
    table = summarize(frame, catalog)
    if table.empty:
        return "no measured points"
    text = [table.fillna("").to_string(index=False)]
    if "caveat" in table.columns:
        said = " ".join(table["caveat"])
        text += ["caveat: a figure the row quotes that is not the link's"] + [
            f"  {mark}: {why}" for mark, why in CAVEATS.items() if mark in said]
    for suite in dict.fromkeys(frame["suite"]):
        for title, part in view(catalog, suite).tables(frame):
            shown = part if isinstance(part, str) else part.to_string(index=not isinstance(part.index, pd.RangeIndex))
            text.append(f"\n{title}\n{shown}")
    scaled = scaling_table(frame, catalog)
    if not scaled.empty:
        text.append(f"\n{SCALING_TITLE}\n{format_scaling(scaled).to_string(index=False)}")
    return "\n".join(text)
