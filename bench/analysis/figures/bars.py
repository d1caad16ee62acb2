"""Bars: compact horizontal bars per variant (one thin bar per series), light-and-solid pairs
(alone and at once), and per-GPU bars of traffic on every GPU at once."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from bench.analysis.figures.style import PANEL_IN, SERIES, Canvas, device_key, legend_columns, series_handles
from bench.points import AT_ONCE_KEYS
from bench.sizes import format_size

AT_ONCE, ALONE = "at once", "alone"


def dot_bars(peaks: pd.DataFrame, x: str, fmt: str, colours: dict, xlabel: str, title: str):
    """Compact horizontal bars: a row per `label` (in the frame's order), one thin bar per series
    measured there (no empty slots for series that lack the variant), the value at the bar's end;
    the legend lists the first few series, then 'and N more'."""
    rows = list(dict.fromkeys(peaks["label"]))
    bar_h, gap = 0.18, 0.2   # inches
    heights = [peaks[peaks["label"] == r][SERIES].nunique() * bar_h + gap for r in rows]
    fig, ax = plt.subplots(figsize=(8.5, sum(heights) + 1.3), layout="constrained")
    top, ticks = 0.0, []
    for row, h in zip(rows, heights):
        d = peaks[peaks["label"] == row].sort_values(SERIES)
        ys = top + gap / 2 + bar_h * (np.arange(len(d)) + 0.5)
        ax.barh(ys, d[x], height=bar_h * 0.85, color=[colours[s] for s in d[SERIES]])
        for yy, v in zip(ys, d[x]):
            ax.text(v, yy, " " + fmt % v, va="center", fontsize=8)
        ticks.append(top + h / 2)
        top += h
        ax.axhline(top, color="0.9", linewidth=0.8)
    ax.set_yticks(ticks, rows, fontsize=9)
    ax.set_ylim(top, 0)
    ax.set_xlabel(xlabel, fontsize=9)
    fig.suptitle(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.35)
    ax.grid(False, axis="y")
    handles = series_handles({s: colours[s] for s in sorted(peaks[SERIES].unique())}, 6)
    fig.legend(handles=handles, loc="outside lower center", ncols=legend_columns(fig, handles, 5), fontsize=9,
               frameon=False)
    return fig, ax


def paired(ax, rows: list[tuple[str, str, float, float]], colours: dict, fmt: str) -> None:
    """Per row (label, series, light value, solid value): a light bar above a solid one, both in
    the series' colour, each value at its bar's end (a missing value draws no bar)."""
    for i, (_, series, light, solid) in enumerate(rows):
        for dy, value, alpha in ((-0.2, light, 0.35), (0.2, solid, 1.0)):
            if pd.notna(value):
                ax.barh(i + dy, value, height=0.38, color=colours[series], alpha=alpha)
                ax.text(value, i + dy, " " + fmt % value, va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [label for label, *_ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(True, axis="x", alpha=0.35)
    ax.grid(False, axis="y")


def per_series(frame: pd.DataFrame, table) -> pd.DataFrame:
    """table(rows of one series) for every series, stacked, with the SERIES column."""
    parts = [table(d).assign(**{SERIES: s}) for s, d in frame.groupby(SERIES, sort=True)]
    parts = [p for p in parts if len(p.columns) > 1]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def with_series_line(labels: pd.Series, series: pd.Series) -> list[str]:
    return list(labels + "\n" + series) if series.nunique() > 1 else list(labels)


def _gbps(values: pd.Series) -> str:
    return f"{values.sum():.1f} GB/s"


def _concurrent_title(keys: tuple, d: pd.DataFrame, one_series: bool) -> str:
    """The panel's variant and size, then its totals, like with like: the GPUs measured alone
    summed alone and at once, and the total of every GPU at once (named as such where not every
    GPU was measured alone)."""
    series, suite, op, memory, mode, engine, numa = keys
    words = [suite, op, memory if memory != "device" else mode, engine, f"numa {numa}" if numa else "",
             format_size(int(d["size_bytes"].iloc[0]))]
    parts = d[d["gpu"] != "total"].set_index(["when", "gpu"])["gbps"]
    at_once = parts.get(AT_ONCE, pd.Series(dtype=float))
    alone = parts.get(ALONE, pd.Series(dtype=float))
    both = [g for g in at_once.index if g in alone.index]
    total = d.loc[(d["gpu"] == "total") & (d["when"] == AT_ONCE), "gbps"]
    every = f"{total.iloc[0]:.1f} GB/s" if len(total) else _gbps(at_once)
    if both and len(both) == len(at_once):
        line = f"total {every} at once; {_gbps(alone[both])} alone (sum)"
    elif both:
        which = ", ".join(both)
        line = (f"{which} (measured alone): {_gbps(at_once[both])} at once, {_gbps(alone[both])} alone\n"
                f"all {len(at_once)} GPUs at once: {every}")
    else:
        line = f"all {len(at_once)} GPUs at once: {every} (none measured alone)"
    return ("" if one_series else f"{series}\n") + " · ".join(w for w in words if w) + "\n" + line


def concurrent(table: pd.DataFrame, canvas: Canvas, stem: str, title: str) -> list[Path]:
    """Per-GPU bars of traffic on every GPU at once (a long table: bench.analysis.tables'
    CONCURRENT_COLUMNS and SERIES): each GPU's part 'at once' beside the same GPU 'alone' where
    the table has it (no alone bar where it has not), the totals in each panel's title, like
    with like (_concurrent_title). A panel per run and variant."""
    if table.empty:
        return []
    colours = canvas.colours
    panels = list(table.groupby([SERIES, *AT_ONCE_KEYS], sort=False))
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_IN[0] * 1.3 * ncols, PANEL_IN[1] * 1.4 * nrows),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for ax, (keys, d) in zip(axes.flat, panels):
        bars = d[d["gpu"] != "total"]
        hues = [w for w in (ALONE, AT_ONCE) if w in set(bars["when"])]
        order = sorted(bars["gpu"].unique(), key=device_key)
        sns.barplot(bars, x="gpu", y="gbps", hue="when", hue_order=hues, ax=ax, order=order,
                    palette={ALONE: (0.75, 0.75, 0.75), AT_ONCE: colours[keys[0]]})
        for container in ax.containers:
            ax.bar_label(container, fmt="%.0f", fontsize=7)
        if ALONE in hues:    # the empty slot beside a GPU at once says why it is empty
            measured = set(bars.loc[bars["when"] == ALONE, "gpu"])
            for i, gpu in enumerate(order):
                if gpu not in measured:
                    ax.text(i - 0.2, 0, " not measured alone", rotation=90, ha="center", va="bottom", fontsize=7,
                            color="0.45")
        ax.set_title(_concurrent_title(keys, d, table[SERIES].nunique() == 1), fontsize=9)
        ax.set_xlabel("")
        ax.set_ylabel("GB/s", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, title=None, loc="lower right")
    runs = table[SERIES].unique()
    fig.suptitle(title + (f"\n{runs[0]}" if len(runs) == 1 else ""), fontsize=11)
    return canvas.save(fig, stem, title + ".")
