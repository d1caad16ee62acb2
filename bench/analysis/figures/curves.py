"""Curves against message size, a figure per suite: bandwidth, and time per operation at small
sizes. A line is the median of a point's trials, its band their full range (min to max); points
that differ only in device (P2P pairs, the GPUs of an nvbandwidth import) share a line; variants
(memory, mode, launch, dtype, api, engine, numa) get panels of their own."""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bench.analysis.catalog import bandwidth_column, view
from bench.analysis.figures.style import (DASHES, LOG_SPAN, OP_ORDER, PANEL_IN, SERIES, SMALL_BYTES, VALUE_ORDER, Canvas,
                                          _legend, _log_y, _order, _rank, _size_axis, _slug, with_bandwidth)
from bench.results import usable_rows


# Keys that get a panel of their own when they vary within a suite (api, engine, numa: schema 2).
FACET_KEYS = ["memory", "mode", "launch", "dtype", "api", "engine", "numa"]
# Keys compared across instances by colour; should one vary within a run, it gets a dash style.
LINE_KEYS = ["backend", "world_size", "nnodes"]
BANDWIDTH_LABEL = {"algbw_gbps": "Bandwidth (GB/s)", "busbw_gbps": "Bus bandwidth (GB/s)"}


def _curves(frame: pd.DataFrame, canvas: Canvas) -> pd.DataFrame:
    return with_bandwidth(usable_rows(frame), canvas.catalog)


def _facets(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """The keys with two or more set values here. A blank (a run from before the key existed, or
    one that does not record it) is no value of its own: runs that differ only by it share panels."""
    return [k for k in keys if k in frame.columns and frame[k].astype(str).replace("", np.nan).nunique() > 1]


def _panels(data: pd.DataFrame, facets: list[str]) -> list[tuple]:
    """(op, facet values...) of every panel, ops in OP_ORDER, facet values in VALUE_ORDER."""
    present = data[["op"] + facets].astype(str).drop_duplicates().itertuples(index=False, name=None)
    return sorted(present, key=lambda p: ([_rank(p[0], OP_ORDER)] + [_rank(v, VALUE_ORDER) for v in p[1:]], p))


def _layout(panels: list[tuple]) -> tuple[int, int, list[int]]:
    """Rows, columns and each panel's cell (flat index). Up to 4 panels an op: rows wrap, with
    as many columns as an op has panels (or a multiple), so ops with the same variants line up.
    More: each op starts a row of its own, up to 6 panels wide."""
    per_op = Counter(p[0] for p in panels)
    widest = max(per_op.values())
    if widest <= 4:
        ncols = min(len(panels), widest * (4 // widest))
        return math.ceil(len(panels) / ncols), ncols, list(range(len(panels)))
    ncols, cells, row = min(widest, 6), [], 0
    for op, count in per_op.items():     # panels come grouped by op
        cells += [row * ncols + i for i in range(count)]
        row += math.ceil(count / ncols)
    return row, ncols, cells


def _draw_panel(ax, d: pd.DataFrame, y: str, styles: dict, colours: dict, style_key: str | None) -> None:
    keys = [SERIES, style_key] if style_key else [SERIES]
    stats = d.groupby(keys + ["size_bytes"])[y].agg(["median", "min", "max"]).reset_index()
    for key, g in stats.groupby(keys, sort=True):
        series, style = (key if style_key else (key[0], None))
        colour = colours[series]
        ax.fill_between(g["size_bytes"], g["min"], g["max"], color=colour, alpha=0.22, linewidth=0)
        ax.plot(g["size_bytes"], g["median"], color=colour, linestyle=styles.get(style, "-"), linewidth=1.6,
                marker="o", markersize=2.5)


def _share_y(axes: list, values: pd.Series, log_y: bool | None) -> None:
    """One y range and scale for an op's panels, so its variants compare by eye; log where the
    values span more than LOG_SPAN (or always / never when log_y says so)."""
    positive = values[values > 0]
    span = positive.max() / positive.min() if len(positive) else 1.0
    log = log_y if log_y is not None else span > LOG_SPAN
    low = positive.min() / 1.3 if log else min(ax.get_ylim()[0] for ax in axes)
    high = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:
        if log:
            _log_y(ax, span)
        ax.set_ylim(low, high)
        ax.tick_params(which="both", labelsize=8)


def _panel_title(panel: tuple) -> str:
    return " · ".join(v for v in panel if v not in ("", "nan"))


def _size_figure(data: pd.DataFrame, y: str, ylabel: str, title: str, colours: dict, facets: list[str],
                 style_key: str | None = None, log_y: bool | None = None):
    """One panel per op and facet values, x = message size, one colour per series; the one
    legend holds every series drawn and the style key's dash styles."""
    panels = _panels(data, facets)
    nrows, ncols, cells = _layout(panels)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_IN[0] * ncols + 0.4, PANEL_IN[1] * nrows + 1.0),
                             squeeze=False, layout="constrained")
    for i, ax in enumerate(axes.flat):
        if i not in cells:
            ax.set_axis_off()
    axes = [axes.flat[i] for i in cells]
    styles = {}
    if style_key:
        styles = dict(zip(_order(data[style_key].astype(str), VALUE_ORDER), DASHES * 4))
        data = data.assign(**{style_key: data[style_key].astype(str)})
    keyed = data.assign(_panel=list(data[["op"] + facets].astype(str).itertuples(index=False, name=None)))
    sizes = data["size_bytes"].unique()
    for cell, ax, panel in zip(cells, axes, panels):
        _draw_panel(ax, keyed[keyed["_panel"] == panel], y, styles, colours, style_key)
        _size_axis(ax, sizes)
        ax.set_xlim(sizes.min() / 1.5, sizes.max() * 1.5)   # one x range: graph panels line up with eager
        ax.grid(True, which="major", alpha=0.35)
        ax.set_title(_panel_title(panel), fontsize=10)
        ax.set_xlabel("Message size" if cell + ncols not in cells else "", fontsize=9)
        ax.set_ylabel(ylabel if cell % ncols == 0 else "", fontsize=9)
    for op in dict.fromkeys(p[0] for p in panels):
        _share_y([ax for ax, p in zip(axes, panels) if p[0] == op], data.loc[data["op"] == op, y], log_y)
    fig.suptitle(title, fontsize=12)
    _legend(fig, {s: colours[s] for s in sorted(data[SERIES].unique())}, styles, style_key)
    return fig


def _suite_groups(data: pd.DataFrame, canvas: Canvas):
    """Each suite's rows, in the catalog's order (the order a run measures them)."""
    known = list(canvas.catalog)
    for suite in sorted(set(data["suite"]), key=lambda s: (known.index(s) if s in known else len(known), s)):
        if view(canvas.catalog, suite).curves:
            yield suite, data[data["suite"] == suite]


def _band_note(d: pd.DataFrame) -> str:
    pairs = " and GPU pairs" if d.groupby([SERIES, "op"])["src"].nunique().max() > 1 else ""
    return f"line: median of a run's trials; band: their min-max (over trials{pairs})"


def _line_style_key(d: pd.DataFrame, facets: list[str]) -> str | None:
    """A key that varies within one series and panel (not separated by facets): it gets dashes
    rather than being merged into one line. At most one is expected; the first is used."""
    keys = [k for k in LINE_KEYS if k not in facets]
    inner = [k for k in keys if d.groupby([SERIES, "op"] + facets)[k].nunique().max() > 1]
    return inner[0] if inner else None


def _title(canvas: Canvas, suite: str) -> str:
    return getattr(canvas.catalog.get(suite), "title", "") or suite


def bandwidth_figures(frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
    """Bandwidth against size, one figure per suite, a panel per op and variant."""
    data = _curves(frame, canvas).dropna(subset=["bandwidth_gbps"])
    paths = []
    for suite, d in _suite_groups(data, canvas):
        facets = _facets(d, FACET_KEYS)
        title = f"{_title(canvas, suite)}: bandwidth vs message size\n{_band_note(d)}"
        fig = _size_figure(d, "bandwidth_gbps", BANDWIDTH_LABEL[bandwidth_column(canvas.catalog, suite)], title,
                           canvas.colours, facets, _line_style_key(d, facets))
        paths += canvas.save(fig, f"bandwidth_{_slug(suite)}",
                             f"{_title(canvas, suite)}: {BANDWIDTH_LABEL[bandwidth_column(canvas.catalog, suite)].lower()} "
                             "against message size.")
    return paths


def latency_figures(frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
    """Time per operation at small sizes (<= 1 MiB), where launch cost shows: eager and graph
    share a panel (solid and dashed) so the launch overhead reads off directly."""
    data = _curves(frame, canvas)
    data = data[(data["size_bytes"] <= SMALL_BYTES) & (data["time_s"] > 0)].assign(time_us=lambda d: d["time_s"] * 1e6)
    paths = []
    for suite, d in _suite_groups(data, canvas):
        facets = [k for k in _facets(d, FACET_KEYS) if k != "launch"]
        title = f"{_title(canvas, suite)}: time per operation at small sizes\n{_band_note(d)}"
        fig = _size_figure(d, "time_us", "Time per operation (µs)", title, canvas.colours, facets,
                           style_key="launch", log_y=True)
        paths += canvas.save(fig, f"latency_{_slug(suite)}", f"{_title(canvas, suite)} at small sizes: solid lines "
                             "are eager launches, dashed lines CUDA-graph replays.")
    return paths
