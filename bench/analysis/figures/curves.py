"""Curves against message size, a figure per suite: bandwidth, and time per operation at small
sizes. A line is the median of a point's trials, its band their full range (min to max); points
that differ only in device (P2P pairs, the GPUs of an nvbandwidth import) share a line; variants
(memory, mode, launch, dtype, api, engine, numa) get panels of their own, and so does the
traffic of every GPU at once (src or dst 'all'): its total, labelled as one, never on the axes
of one GPU's figures. A panel that holds one size draws bars, not a point on an empty axis.
Bandwidth figures mark medians above the link's limit (a red ring) and draw on-GPU copies in
or near L2 apart (hollow markers, dotted: bench.analysis.cache)."""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from matplotlib.lines import Line2D

from bench.analysis.cache import short_of_hbm
from bench.suite_view import Catalog, bandwidth_column, view
from bench.analysis.figures.style import (DASHES, LOG_SPAN, PANEL_IN, SERIES, SMALL_BYTES, VALUE_ORDER, Canvas,
                                          add_legend, log_y_axis, in_order, rank_in, size_axis, file_slug, suptitle,
                                          with_bandwidth)
from bench.ops import op_order
from bench.points import CURVE_KEYS, SERIES_KEYS
from bench.results import usable_rows
from bench.sizes import format_size


GPUS = "gpus"       # '' for one GPU's traffic; 'total of N GPUs at once' for every GPU at once
SHORT = "_short"    # an on-GPU copy in or near L2: no HBM figure
LIMIT = "_limit"    # GB/s the point's link(s) carry at most (NaN: no limit known)
# Keys compared across instances by colour; should one vary within a run, it gets a dash style.
LINE_KEYS = ["backend", "world_size", "nnodes"]
# The other keys of a curve get a panel of their own when they vary within a suite (api, engine,
# numa: schema 2).
FACET_KEYS = [k for k in CURVE_KEYS if k not in LINE_KEYS]
BANDWIDTH_LABEL = {"algbw_gbps": "Bandwidth (GB/s)", "busbw_gbps": "Bus bandwidth (GB/s)"}
ABOVE_LIMIT = dict(s=70, facecolors="none", edgecolors="red", linewidths=1.4, zorder=5)


def _every_gpu(rows: pd.DataFrame) -> np.ndarray:
    return ((rows["src"].astype(str) == "all") | (rows["dst"].astype(str) == "all")).to_numpy()


def _curves(frame: pd.DataFrame, canvas: Canvas) -> pd.DataFrame:
    """Usable rows with the suite's bandwidth and GPUS: every GPU at once with the host, or
    every other GPU with one GPU (P2P's all_to_one, one_to_all)."""
    data = with_bandwidth(usable_rows(frame), canvas.catalog)
    n = data["world_size"].astype(int)
    with_one = data["src"].astype(str).str.startswith("cuda:") | data["dst"].astype(str).str.startswith("cuda:")
    peers = (n - 1).astype(str) + np.where(n == 2, " peer", " peers")
    totals = np.where(with_one, "total of " + peers + " with one GPU at once", "total of " + n.astype(str) + " GPUs at once")
    return data.assign(**{GPUS: np.where(_every_gpu(data), totals, "")})


def _parts(frame: pd.DataFrame) -> pd.Series:
    """Per point of every GPU at once (run, suite, op, src, dst, world size): how many GPUs' parts its total sums."""
    rows = frame[_every_gpu(frame) & frame["part"].astype(str).str.startswith("cuda:").to_numpy()]
    return rows.groupby(["run_dir", "suite", "op", "src", "dst", "world_size"])["part"].nunique().rename("parts")


def link_limits(data: pd.DataFrame, frame: pd.DataFrame, catalog: Catalog) -> np.ndarray:
    """Per row of `data`, the most its link can carry (the suite's link_limit), times the GPUs
    whose parts a total of every GPU at once sums; NaN where no limit is known."""
    columns = [c for c in (*SERIES_KEYS, "pcie_gen", "pcie_width", "nvlink_gbps_per_gpu") if c in data.columns]
    group = data[columns].astype(str).groupby(columns, sort=False, dropna=False).ngroup().to_numpy()
    firsts = data.iloc[np.unique(group, return_index=True)[1]]
    limit = np.array([view(catalog, row["suite"]).link_limit(row)[0] for row in firsts.to_dict("records")], float)
    per_row = limit[group] if len(data) else np.array([], float)
    parts = data.join(_parts(frame), on=["run_dir", "suite", "op", "src", "dst", "world_size"])["parts"]
    return per_row * parts.fillna(1).to_numpy(float)


def _facets(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """The keys with two or more set values here. A blank (a run from before the key existed, or
    one that does not record it) is no value of its own: runs that differ only by it share panels."""
    return [k for k in keys if k in frame.columns and frame[k].astype(str).replace("", np.nan).nunique() > 1]


def _is_total(panel: tuple) -> bool:
    return any(str(v).startswith("total of ") for v in panel[1:])


def _panels(data: pd.DataFrame, facets: list[str], ops: list[str]) -> list[tuple]:
    """(op, facet values...) of every panel, ops in `ops`' order (bench.ops.op_order), an op's totals of every GPU at once
    after its own panels, facet values in VALUE_ORDER."""
    present = data[["op"] + facets].astype(str).drop_duplicates().itertuples(index=False, name=None)
    return sorted(present, key=lambda p: ([rank_in(p[0], ops), _is_total(p)] + [rank_in(v, VALUE_ORDER) for v in p[1:]],
                                          p))


def _layout(panels: list[tuple]) -> tuple[int, int, list[int]]:
    """Rows, columns and each panel's cell (flat index). Up to 4 panels an op: rows wrap, with
    as many columns as an op has panels (or a multiple), so ops with the same variants line up.
    More: each op starts a row of its own, up to 6 panels wide, and so do its totals of every
    GPU at once."""
    per_op = Counter(p[0] for p in panels)
    widest = max(per_op.values())
    if widest <= 4:
        ncols = min(len(panels), widest * (4 // widest))
        return math.ceil(len(panels) / ncols), ncols, list(range(len(panels)))
    groups = Counter((p[0], _is_total(p)) for p in panels)     # panels come grouped so
    ncols, cells, row = min(max(groups.values()), 6), [], 0
    for count in groups.values():
        cells += [row * ncols + i for i in range(count)]
        row += math.ceil(count / ncols)
    return row, ncols, cells


def _stats(d: pd.DataFrame, y: str, keys: list[str]) -> pd.DataFrame:
    """Per key and size: the median, min and max of y, whether the size is short of HBM, and the
    link's limit (where the frame has those columns)."""
    extra = {c: (c, "max") for c in (SHORT, LIMIT) if c in d.columns}
    return d.groupby(keys + ["size_bytes"]).agg(median=(y, "median"), min=(y, "min"), max=(y, "max"),
                                                **extra).reset_index()


def _runs(flags: np.ndarray) -> list[tuple[int, int, bool]]:
    """(start, end, flag) of each stretch of equal flags."""
    cuts = [0, *np.flatnonzero(np.diff(flags.astype(int))) + 1, len(flags)]
    return [(a, b, bool(flags[a])) for a, b in zip(cuts[:-1], cuts[1:])]


def _draw_line(ax, g: pd.DataFrame, colour, linestyle: str) -> None:
    """A median line, marked at each size; the stretch through sizes in or near L2 dotted, with
    hollow markers."""
    x, y = g["size_bytes"].to_numpy(), g["median"].to_numpy()
    short = g[SHORT].to_numpy(bool) if SHORT in g else np.zeros(len(g), bool)
    joins = short[:-1] | short[1:]            # join i runs from point i to point i + 1
    for a, b, dotted in _runs(joins) if len(g) > 1 else []:
        ax.plot(x[a:b + 1], y[a:b + 1], color=colour, linewidth=1.6, linestyle=":" if dotted else linestyle)
    ax.plot(x[~short], y[~short], color=colour, linestyle="none", marker="o", markersize=2.5)
    if short.any():
        ax.plot(x[short], y[short], color=colour, linestyle="none", marker="o", markersize=4, markerfacecolor="white")


def _mark_above(ax, x, y, limit) -> bool:
    """Red rings on the values above their link's limit; whether there were any."""
    above = np.asarray(y, float) > np.asarray(limit, float)
    if above.any():
        ax.scatter(np.asarray(x)[above], np.asarray(y, float)[above], **ABOVE_LIMIT)
    return bool(above.any())


def _draw_panel(ax, d: pd.DataFrame, y: str, styles: dict, colours: dict, style_key: str | None) -> bool:
    """The panel's lines and bands; whether a value is above its link's limit."""
    keys = [SERIES, style_key] if style_key else [SERIES]
    above = False
    for key, g in _stats(d, y, keys).groupby(keys, sort=True):
        series, style = (key if style_key else (key[0], None))
        colour = colours[series]
        ax.fill_between(g["size_bytes"], g["min"], g["max"], color=colour, alpha=0.22, linewidth=0)
        _draw_line(ax, g, colour, styles.get(style, "-"))
        if LIMIT in g:
            above |= _mark_above(ax, g["size_bytes"], g["median"], g[LIMIT])
    return above


def _draw_bars(ax, d: pd.DataFrame, y: str, styles: dict, colours: dict, style_key: str | None) -> bool:
    """A panel of one size: a bar per series (grouped by the style key's values, hatched beyond
    the first), the trials' min-max as an error bar, the value on bars when few; whether a value
    is above its link's limit."""
    keys = [SERIES, style_key] if style_key else [SERIES]
    stats = _stats(d, y, keys)
    groups = [g for g in styles if (stats[style_key] == g).any()] if style_key else [None]
    series = sorted(stats[SERIES].unique())
    width, above = 0.8 / len(series), False
    for i, group in enumerate(groups):
        part = stats if group is None else stats[stats[style_key] == group]
        for j, name in enumerate(series):
            rows = part[part[SERIES] == name]
            if rows.empty:
                continue
            row = rows.iloc[0]
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(x, row["median"], width=width * 0.9, color=colours[name], hatch="//" if i else None,
                   edgecolor="white" if i else None, yerr=[[row["median"] - row["min"]], [row["max"] - row["median"]]],
                   error_kw={"elinewidth": 0.8, "ecolor": "0.3"})
            if len(series) * len(groups) <= 6:
                ax.text(x, row["max"], f"{row['median']:.3g}", ha="center", va="bottom", fontsize=7)
            if LIMIT in row:
                above |= _mark_above(ax, [x], [row["median"]], [row[LIMIT]])
    ax.set_xticks(range(len(groups)), [f"{style_key}: {g}" if g else "" for g in groups], fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(0, stats["max"].max() * 1.15)
    ax.grid(True, axis="y", alpha=0.35)
    ax.grid(False, axis="x")
    return above


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
            log_y_axis(ax, span)
        ax.set_ylim(low, high)
        ax.tick_params(which="both", labelsize=8)


def _panel_title(panel: tuple, one_size: int | None = None) -> str:
    """The panel's op and values; a total of every GPU at once, and the one size of a bar panel,
    on a line of their own."""
    shown = [v for v in panel if v not in ("", "nan")]
    lines = [" · ".join(v for v in shown if not v.startswith("total of "))]
    lines += [v for v in shown if v.startswith("total of ")]
    if one_size is not None:
        lines.append(f"at {format_size(one_size)} only")
    return "\n".join(lines)


def _size_figure(data: pd.DataFrame, y: str, ylabel: str, title: str, colours: dict, facets: list[str],
                 style_key: str | None = None, log_y: bool | None = None, ops: list[str] = ()):
    """One panel per op and facet values, x = message size, one colour per series (bars where a
    panel holds one size); the one legend holds the series drawn (the first few), the style
    key's dash styles, and the marks drawn: above the link's limit, in or near L2."""
    panels = _panels(data, facets, list(ops))
    nrows, ncols, cells = _layout(panels)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_IN[0] * ncols + 0.4, PANEL_IN[1] * nrows + 1.0),
                             squeeze=False, layout="constrained")
    for i, ax in enumerate(axes.flat):
        if i not in cells:
            ax.set_axis_off()
    axes = [axes.flat[i] for i in cells]
    styles = {}
    if style_key:
        styles = dict(zip(in_order(data[style_key].astype(str), VALUE_ORDER), DASHES * 4))
        data = data.assign(**{style_key: data[style_key].astype(str)})
    keyed = data.assign(_panel=list(data[["op"] + facets].astype(str).itertuples(index=False, name=None)))
    sizes = data["size_bytes"].unique()
    curves, above = [], False
    for cell, ax, panel in zip(cells, axes, panels):
        d = keyed[keyed["_panel"] == panel]
        one = int(d["size_bytes"].iloc[0]) if d["size_bytes"].nunique() == 1 and len(sizes) > 1 else None
        if one is None:
            above |= _draw_panel(ax, d, y, styles, colours, style_key)
            size_axis(ax, sizes)
            ax.set_xlim(sizes.min() / 1.5, sizes.max() * 1.5)   # one x range: graph panels line up with eager
            ax.grid(True, which="major", alpha=0.35)
            ax.set_xlabel("Message size" if cell + ncols not in cells else "", fontsize=9)
            curves.append((ax, panel))
        else:
            above |= _draw_bars(ax, d, y, styles, colours, style_key)
            ax.tick_params(labelsize=8)
        ax.set_title(_panel_title(panel, one), fontsize=10)
        ax.set_ylabel(ylabel if cell % ncols == 0 else "", fontsize=9)
    for op in dict.fromkeys(p[0] for _, p in curves):
        _share_y([ax for ax, p in curves if p[0] == op], data.loc[data["op"] == op, y], log_y)
    suptitle(fig, title)
    marks = []
    if above:
        marks.append(Line2D([], [], linestyle="none", marker="o", markersize=8, markerfacecolor="none",
                            markeredgecolor="red", label="above the link's limit"))
    if SHORT in data and data[SHORT].any():
        marks.append(Line2D([], [], color="0.3", linestyle=":", marker="o", markersize=4, markerfacecolor="white",
                            label="in or near L2: not an HBM figure"))
    add_legend(fig, {s: colours[s] for s in sorted(data[SERIES].unique())}, styles, style_key, marks)
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
    """Bandwidth against size, one figure per suite, a panel per op and variant; totals of every
    GPU at once in panels of their own."""
    data = _curves(frame, canvas).dropna(subset=["bandwidth_gbps"])
    data = data.assign(**{SHORT: short_of_hbm(data, canvas.catalog), LIMIT: link_limits(data, frame, canvas.catalog)})
    paths = []
    for suite, d in _suite_groups(data, canvas):
        facets = _facets(d, FACET_KEYS) + ([GPUS] if (d[GPUS] != "").any() else [])
        title = f"{_title(canvas, suite)}: bandwidth vs message size\n{_band_note(d)}"
        fig = _size_figure(d, "bandwidth_gbps", BANDWIDTH_LABEL[bandwidth_column(canvas.catalog, suite)], title,
                           canvas.colours, facets, _line_style_key(d, facets), ops=op_order(canvas.catalog))
        paths += canvas.save(fig, f"bandwidth_{file_slug(suite)}",
                             f"{_title(canvas, suite)}: {BANDWIDTH_LABEL[bandwidth_column(canvas.catalog, suite)].lower()} "
                             "against message size.")
    return paths


def latency_figures(frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
    """Time per operation at small sizes (<= 1 MiB), where launch cost shows: eager and graph
    share a panel (solid and dashed) so the launch overhead reads off directly; one GPU's
    operations only."""
    data = _curves(frame, canvas)
    # every GPU at once is a bandwidth figure (bandwidth_figures' totals), not a launch cost
    data = data[(data["size_bytes"] <= SMALL_BYTES) & (data["time_s"] > 0) & (data[GPUS] == "")]
    data = data.assign(time_us=data["time_s"] * 1e6)
    paths = []
    for suite, d in _suite_groups(data, canvas):
        facets = [k for k in _facets(d, FACET_KEYS) if k != "launch"]
        title = f"{_title(canvas, suite)}: time per operation at small sizes\n{_band_note(d)}"
        fig = _size_figure(d, "time_us", "Time per operation (µs)", title, canvas.colours, facets,
                           style_key="launch", log_y=True, ops=op_order(canvas.catalog))
        paths += canvas.save(fig, f"latency_{file_slug(suite)}", f"{_title(canvas, suite)} at small sizes: solid lines "
                             "are eager launches, dashed lines CUDA-graph replays.")
    return paths
