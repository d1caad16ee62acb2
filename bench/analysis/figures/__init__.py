"""Figures from load() frames: bandwidth and latency against message size, P2P matrices, peaks
as a share of the link's theoretical peak, and bandwidth per dollar. One file per figure; a
figure whose data is absent is skipped, never drawn empty.

Which runs: select_runs() keeps one run per instance unless runs are named (see its docstring);
render() draws whatever frame it is given, one colour per run ("series": the instance's name
when it has one run here, else instance/run_id, marked ' (failed)' or ' (interrupted)' where the
run did not complete), so a band never merges two runs.

Where: xferbench-plot writes into --out, or without it into the one run's folder (RUN/plots/;
several runs need --out). write_figures() first removes the figures it wrote there before, as
listed in the folder's MANIFEST, and nothing else.

Curves use measured whole operations only (status ok, part total). A line is the median of a
point's trials, its band their full range (min to max); points that differ only in device
(P2P pairs, the GPUs of an nvbandwidth import) share a line. Variants (memory, mode, launch,
dtype, api, engine, numa) get panels of their own. GB/s = 1e9 bytes/s throughout.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import matplotlib

matplotlib.use("Agg")  # files only: no window, works headless (CI, SSH)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

from bench.results import (ResultsError, bandwidth_column, find_runs, load, read_meta, set_aside_note,  # noqa: E402
                           usable_rows)
from bench.sizes import format_size  # noqa: E402
from bench.summary import ALONE, AT_ONCE, concurrent_table, p2p_peak_table  # noqa: E402

SMALL_BYTES = 1 << 20           # the latency figure's upper size
SERIES = "series"               # the column that colours lines: one value per run drawn
# Keys that get a panel of their own when they vary within a suite (api, engine, numa: schema 2).
FACET_KEYS = ["memory", "mode", "launch", "dtype", "api", "engine", "numa"]
# Keys compared across instances by colour; should one vary within a run, it gets a dash style.
LINE_KEYS = ["backend", "world_size", "nnodes"]
OP_ORDER = ["h2d", "d2h", "uni", "bidir", "d2d", "h2h", "all_reduce", "all_gather", "reduce_scatter",
            "broadcast", "reduce", "all_to_all", "sendrecv"]
VALUE_ORDER = ["pinned", "pageable", "device", "host", "peer", "staged", "default", "socket", "eager", "graph",
               "float32", "bfloat16", "float16", "torch", "nccl", "ce", "sm", "local", "remote", "none"]
SUITE_NAMES = {"copy": "Copies", "p2p": "Peer-to-peer", "collectives": "Collectives"}
SUITE_ORDER = ["copy", "p2p", "collectives"]
BANDWIDTH_LABEL = {"algbw_gbps": "Bandwidth (GB/s)", "busbw_gbps": "Bus bandwidth (GB/s)"}
DASHES = ["-", "--", ":", "-."]
LOG_SPAN = 20                   # a panel whose values span more than this factor gets a log y axis
PANEL_IN = (3.5, 2.55)          # one panel's width and height, inches
DPI = 100
COMPLETE = ("complete", "")     # "": no status recorded (imports, hand-made folders): taken as whole
MANIFEST = ".xferbench-plots"   # in an output folder: the figures written there last, which the next call removes
MANIFEST_HEADER = "# figures xferbench-plot wrote here; its next call into this folder removes them\n"


def pcie_gbps(gen, width) -> float:
    """Theoretical PCIe bandwidth per direction in GB/s: gen3 x16 15.75, gen4 31.5, gen5 63.0.

    Gen1/2 use 8b/10b encoding (0.25, 0.5 GB/s a lane); gen3 on 128b/130b at 8 GT/s, and each
    later generation doubles the rate. NaN when either is unknown.
    """
    try:
        gen, width = int(gen), int(width)
    except (TypeError, ValueError):
        return math.nan
    if gen <= 0 or width <= 0:
        return math.nan
    lane = {1: 0.25, 2: 0.5}.get(gen, 8 * 128 / 130 / 8 * 2 ** (gen - 3))
    return lane * width


def with_bandwidth(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame plus 'bandwidth_gbps': the column each suite is judged by (busbw for collectives)."""
    out = frame.copy()
    cols = out["suite"].map(bandwidth_column)
    out["bandwidth_gbps"] = np.where(cols == "busbw_gbps", out["busbw_gbps"], out["algbw_gbps"])
    return out


# ---------------------------------------------------------------- which runs


def _run_statuses(frame: pd.DataFrame) -> pd.Series:
    """run_dir -> the run's status; the run_status column where load() provides it, else meta.json."""
    dirs = frame["run_dir"].unique()
    if "run_status" in frame.columns:
        return frame.groupby("run_dir")["run_status"].first().fillna("").astype(str).reindex(dirs)
    statuses = {}
    for run_dir in dirs:
        try:
            statuses[run_dir] = str(read_meta(run_dir).get("status") or "")
        except ResultsError:
            statuses[run_dir] = ""
    return pd.Series(statuses)


def _matches(name: str, run_id: str, run_dir: str, instance: str) -> bool:
    if name in (run_id, f"{instance}/{run_id}"):
        return True
    return Path(name).resolve() == Path(run_dir).resolve()


def run_index(frame: pd.DataFrame, names: Sequence[str] = (), every: bool = False) -> pd.DataFrame:
    """One row per run in the frame, with 'chosen' and 'why'. The rule, per instance:

    - runs named (a run id, instance/run_id, or a run folder) are chosen, and only those;
    - else, among its complete runs (any run when none is complete), the main sweep: the run
      covering the most suites, then the most ops, then the newest. Special-purpose runs (one
      suite, a few ops) are left out in favour of the default sweep beside them;
    - every=True chooses every run.
    """
    ok = usable_rows(frame)
    runs = frame.groupby("run_dir", sort=False).agg(
        instance=("instance", "first"), run_id=("run_id", "first"), start_time=("start_time", "first"))
    runs["status"] = _run_statuses(frame)
    runs["suites"] = ok.groupby("run_dir")["suite"].nunique().reindex(runs.index, fill_value=0)
    runs["ops"] = (ok["suite"] + ":" + ok["op"]).groupby(ok["run_dir"]).nunique().reindex(runs.index, fill_value=0)
    runs = runs.reset_index()
    named = {n: [i for i, r in runs.iterrows() if _matches(n, r.run_id, r.run_dir, r.instance)] for n in names}
    unknown = [n for n, hits in named.items() if not hits]
    if unknown:
        known = ", ".join(f"{r.instance}/{r.run_id}" for r in runs.itertuples())
        raise ResultsError(f"run {unknown[0]!r} is not among the runs loaded ({known})")
    picked = {i for hits in named.values() for i in hits}
    runs["chosen"], runs["why"] = every, "every run" if every else ""
    if not every:
        for instance, group in runs.groupby("instance", sort=False):
            mine = picked & set(group.index)
            if mine:
                runs.loc[list(mine), ["chosen", "why"]] = True, "named"
                continue
            complete = group[group["status"].isin(COMPLETE)]
            pool = complete if len(complete) else group
            best = pool.sort_values(["suites", "ops", "start_time", "run_id"]).index[-1]
            runs.loc[best, ["chosen", "why"]] = True, "main sweep" if len(complete) else "no complete run"
    return runs


def select_runs(frame: pd.DataFrame, names: Sequence[str] = (), every: bool = False) -> pd.DataFrame:
    """The rows of the runs run_index() chooses."""
    runs = run_index(frame, names, every)
    return frame[frame["run_dir"].isin(runs.loc[runs["chosen"], "run_dir"])]


def with_series(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame plus SERIES: the instance's name where it has one run here, else instance/run_id;
    a run that did not complete (run_status failed, interrupted, running) says so: 'h200-x2 (failed)'."""
    per_instance = frame.groupby("instance")["run_dir"].transform("nunique")
    label = frame["instance"].where(per_instance == 1, frame["instance"] + "/" + frame["run_id"]).astype(str)
    if "run_status" in frame.columns:
        status = frame["run_status"].fillna("").astype(str)
        label = label.where(status.isin(COMPLETE), label + " (" + status + ")")
    return frame.assign(**{SERIES: label})


def _unmarked(series: str) -> str:
    """A series without with_series()'s status mark: file names stay the same whatever the status."""
    return re.sub(r" \([a-z]+\)$", "", series)


def palette(frame: pd.DataFrame) -> dict[str, tuple]:
    """One colour per series, fixed for every figure of a frame."""
    names = sorted(with_series(frame)[SERIES].unique())
    return dict(zip(names, sns.color_palette("colorblind" if len(names) <= 10 else "husl", len(names))))


# ---------------------------------------------------------------- curves against size


def _curves(frame: pd.DataFrame) -> pd.DataFrame:
    return with_series(with_bandwidth(usable_rows(frame)))


def _rank(value: str, order: list[str]) -> int:
    return order.index(value) if value in order else len(order)


def _order(values: Iterable, order: list[str]) -> list:
    return sorted(set(values), key=lambda v: (_rank(v, order), str(v)))


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


def _size_axis(ax, sizes: Iterable[int]) -> None:
    """log2 x axis labelled 4KiB, 1MiB, ...: at most 6 ticks, on the sweep's own sizes where they
    are powers of two, counted down from the largest (the size that matters most for bandwidth)."""
    sizes = [int(s) for s in sizes if s > 0]
    exps = sorted({s.bit_length() - 1 for s in sizes if s & (s - 1) == 0})
    if len(exps) < 2:
        exps = list(range(math.floor(math.log2(min(sizes))), math.ceil(math.log2(max(sizes))) + 1))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0**e for e in exps[::-1][::math.ceil(len(exps) / 6)]]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(int(round(v))) if v >= 1 else ""))
    ax.xaxis.set_minor_locator(NullLocator())


def _log_y(ax, span: float) -> None:
    """Log y axis labelled 0.1, 1, 10 (not 10^0); over less than three decades also 2 and 5."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if span < 1000:
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2, 5)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:
        ax.yaxis.set_minor_locator(NullLocator())   # unlabelled minor ticks cost most of the drawing time


def _draw_panel(ax, d: pd.DataFrame, y: str, styles: dict, colours: dict, style_key: str | None) -> None:
    keys = [SERIES, style_key] if style_key else [SERIES]
    stats = d.groupby(keys + ["size_bytes"])[y].agg(["median", "min", "max"]).reset_index()
    for key, g in stats.groupby(keys, sort=True):
        series, style = (key if style_key else (key[0], None))
        colour = colours[series]
        ax.fill_between(g["size_bytes"], g["min"], g["max"], color=colour, alpha=0.22, linewidth=0)
        ax.plot(g["size_bytes"], g["median"], color=colour, linestyle=styles.get(style, "-"), linewidth=1.6,
                marker="o", markersize=2.5)


def _legend(fig, colours: dict, styles: dict, style_title: str | None) -> None:
    handles = [Line2D([], [], color=c, linewidth=2.5, label=s) for s, c in colours.items()]
    if len(styles) > 1:
        handles += [Line2D([], [], color="0.3", linestyle=ls, linewidth=1.6, label=f"{style_title}: {v}")
                    for v, ls in styles.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False,
               fontsize=9)


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


def _suite_groups(data: pd.DataFrame):
    for suite in _order(data["suite"], SUITE_ORDER):
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


def bandwidth_figures(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                      colours: dict | None = None) -> list[Path]:
    """Bandwidth against size, one figure per suite, a panel per op and variant."""
    data = _curves(frame).dropna(subset=["bandwidth_gbps"])
    colours = colours or palette(frame)
    paths = []
    for suite, d in _suite_groups(data):
        facets = _facets(d, FACET_KEYS)
        title = f"{SUITE_NAMES.get(suite, suite)}: bandwidth vs message size\n{_band_note(d)}"
        fig = _size_figure(d, "bandwidth_gbps", BANDWIDTH_LABEL[bandwidth_column(suite)], title, colours,
                           facets, _line_style_key(d, facets))
        paths += _save(fig, Path(out_dir), f"bandwidth_{_slug(suite)}", formats)
    return paths


def latency_figures(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                    colours: dict | None = None) -> list[Path]:
    """Time per operation at small sizes (<= 1 MiB), where launch cost shows: eager and graph
    share a panel (solid and dashed) so the launch overhead reads off directly."""
    data = _curves(frame)
    data = data[(data["size_bytes"] <= SMALL_BYTES) & (data["time_s"] > 0)].assign(time_us=lambda d: d["time_s"] * 1e6)
    colours = colours or palette(frame)
    paths = []
    for suite, d in _suite_groups(data):
        facets = [k for k in _facets(d, FACET_KEYS) if k != "launch"]
        title = f"{SUITE_NAMES.get(suite, suite)}: time per operation at small sizes\n{_band_note(d)}"
        fig = _size_figure(d, "time_us", "Time per operation (µs)", title, colours, facets,
                           style_key="launch", log_y=True)
        paths += _save(fig, Path(out_dir), f"latency_{_slug(suite)}", formats)
    return paths


# ---------------------------------------------------------------- P2P matrices


def _device_key(name: str) -> tuple:
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def p2p_peaks(frame: pd.DataFrame, by: str = "instance") -> pd.DataFrame:
    """Per (by, op, mode, src, dst): the peak over sizes of the per-size median bandwidth."""
    return p2p_peak_table(frame, [by]).rename(columns={"algbw_gbps": "bandwidth_gbps"})


def p2p_heatmaps(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                 colours: dict | None = None) -> list[Path]:
    """Source x destination matrices of peak P2P bandwidth: one figure per series, a panel per op and mode."""
    peaks = p2p_peaks(with_series(frame), SERIES)
    paths = []
    for series, d in peaks.groupby(SERIES):
        panels = sorted({(op, mode) for op, mode in zip(d["op"], d["mode"])},
                        key=lambda p: (OP_ORDER.index(p[0]) if p[0] in OP_ORDER else 99, p))
        devices = sorted(set(d["src"]) | set(d["dst"]), key=_device_key)
        ncols = min(4, len(panels))
        nrows = math.ceil(len(panels) / ncols)
        side = 0.5 * len(devices) + 1.9
        # tight_layout: constrained layout is several times slower with a colorbar per panel
        fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols * 1.2, side * nrows + 0.6), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.set_axis_off()
        for ax, (op, mode) in zip(axes.flat, panels):
            cell = d[(d["op"] == op) & (d["mode"] == mode)]
            matrix = (cell.pivot(index="src", columns="dst", values="bandwidth_gbps")
                      .reindex(index=devices, columns=devices))
            sns.heatmap(matrix, annot=True, fmt=".0f", cmap="viridis", vmin=0, square=True, ax=ax,
                        cbar_kws={"shrink": 0.8}, annot_kws={"fontsize": 9})
            ax.set_title(f"{op} · {mode}", fontsize=10)
            ax.grid(False)
            ax.set_xlabel("destination", fontsize=9)
            ax.set_ylabel("source", fontsize=9)
            ax.tick_params(labelsize=8)
            ax.tick_params(axis="y", labelrotation=0)
            colorbar = ax.collections[0].colorbar
            colorbar.ax.tick_params(labelsize=8)
            colorbar.set_label("GB/s", fontsize=9)
        fig.suptitle(f"P2P peak bandwidth, {series}\nGB/s, the highest per-size median over sizes", fontsize=11)
        fig.tight_layout()
        paths += _save(fig, Path(out_dir), f"p2p_heatmap_{_slug(_unmarked(series))}", formats)
    return paths


# ---------------------------------------------------------------- every GPU at once


def _concurrent_title(keys: tuple, d: pd.DataFrame, one_series: bool) -> str:
    series, suite, op, memory, mode, engine, numa = keys
    words = ["" if one_series else series, suite, op, memory if suite == "copy" else mode, engine, f"numa {numa}" if numa else "",
             format_size(int(d["size_bytes"].iloc[0]))]
    totals = d[d["gpu"] == "total"].set_index("when")["gbps"]
    total = "; ".join(f"total {totals[w]:.1f} GB/s {w}" for w in (AT_ONCE, ALONE) if w in totals)
    return " · ".join(w for w in words if w) + (f"\n{total}" if total else "")


def concurrent_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                      colours: dict | None = None) -> list[Path]:
    """Per-GPU bars for traffic on every GPU at once, at the largest size measured so: for copies
    each GPU while all copy together beside the same GPU alone (the totals in the title); for peer
    traffic (all_to_one, one_to_all) the traffic into or out of each GPU. A panel per run and variant."""
    table = concurrent_table(with_series(frame), [SERIES])
    if table.empty:
        return []
    colours = colours or palette(frame)
    panels = list(table.groupby([SERIES, "suite", "op", "memory", "mode", "engine", "numa"], sort=False))
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_IN[0] * 1.3 * ncols, PANEL_IN[1] * 1.4 * nrows),
                             squeeze=False, layout="constrained")
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for ax, (keys, d) in zip(axes.flat, panels):
        bars = d[d["gpu"] != "total"]
        hues = [w for w in (ALONE, AT_ONCE) if w in set(bars["when"])]
        sns.barplot(bars, x="gpu", y="gbps", hue="when", hue_order=hues, ax=ax,
                    order=sorted(bars["gpu"].unique(), key=_device_key),
                    palette={ALONE: (0.75, 0.75, 0.75), AT_ONCE: colours[keys[0]]})
        for container in ax.containers:
            ax.bar_label(container, fmt="%.0f", fontsize=7)
        ax.set_title(_concurrent_title(keys, d, table[SERIES].nunique() == 1), fontsize=9)
        ax.set_xlabel("")
        ax.set_ylabel("GB/s", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, title=None, loc="lower right")
    runs = table[SERIES].unique()
    fig.suptitle("Every GPU at once: GB/s per GPU (copies: beside the same GPU alone)"
                 + (f"\n{runs[0]}" if len(runs) == 1 else ""), fontsize=11)
    return _save(fig, Path(out_dir), "concurrent_traffic", formats)


# ---------------------------------------------------------------- peaks against links and price


def link_peak(row) -> tuple[float, str]:
    """The link a peak is bounded by, in GB/s, and its name; NaN where unknown or not a link."""
    pcie = pcie_gbps(row["pcie_gen"], row["pcie_width"])
    nvlink = pd.to_numeric(row["nvlink_gbps_per_gpu"], errors="coerce")
    both = 2 if row["op"] == "bidir" else 1  # a bidirectional total moves data both ways at once
    if row["suite"] == "copy" and row["op"] in ("h2d", "d2h", "bidir"):
        return pcie * both, "PCIe"
    if row["suite"] == "p2p":
        return (pcie * both, "PCIe") if row["mode"] == "staged" else (nvlink * both, "NVLink")
    # busbw is per direction; only single-node NCCL rides NVLink (socket mode and gloo do not)
    if (row["suite"] == "collectives" and row["backend"] == "nccl" and int(row["nnodes"]) == 1
            and row["mode"] != "socket"):
        return nvlink, "NVLink"
    return math.nan, ""


def _peak_label(row) -> str:
    # memory tells copies apart; elsewhere it is always device memory
    parts = [row["suite"], row["op"], row["memory"] if row["suite"] == "copy" else "",
             row["mode"] if row["mode"] != "default" else "",
             row["dtype"] if row["dtype"] != "uint8" else "",
             row["api"] if row["api"] not in ("", "torch") else "",
             row["engine"] if row["engine"] not in ("", "ce") else "",
             row["numa"] if row["numa"] not in ("", "none", "local") else "",
             f"{row['world_size']} ranks" if int(row["world_size"]) > 1 else ""]
    return " ".join(str(p) for p in parts if p)


PEAK_VARIANT = ["suite", "op", "memory", "mode", "backend", "dtype", "world_size", "nnodes", "launch",
                "api", "engine", "numa"]


def peak_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Peak bandwidth per run and variant (max over sizes, and pairs, of the per-size median),
    with the link's theoretical peak, the achieved share, and the instance's price."""
    data = _curves(frame).dropna(subset=["bandwidth_gbps"])
    # Graph mode stops at timing.graph_max_size, so its largest figure is no peak: eager only.
    # Collectives through NCCL directly peak where torch.distributed's do (the wire, not the host,
    # bounds large messages): one row, torch's, what a job calls.
    # Every GPU at once is many links' traffic: concurrent_figure shows it, not one link's share.
    data = data[(data["launch"] != "graph") & (data["api"] != "nccl") & (data["src"] != "all") & (data["dst"] != "all")]
    if data.empty:
        return pd.DataFrame(columns=["instance", "run_id", SERIES, "label", "peak_gbps", "link", "link_gbps",
                                     "percent", "usd_per_hour"])
    runs = ["instance", "run_id", SERIES]
    med = data.groupby(runs + PEAK_VARIANT + ["src", "dst", "size_bytes"])["bandwidth_gbps"].median()
    peaks = med.groupby(level=runs + PEAK_VARIANT).max().rename("peak_gbps").reset_index()
    links = data.groupby(runs)[["pcie_gen", "pcie_width", "nvlink_gbps_per_gpu", "usd_per_hour"]].first()
    peaks = peaks.join(links, on=runs)
    bounds = peaks.apply(link_peak, axis=1, result_type="expand")
    peaks["link_gbps"], peaks["link"] = pd.to_numeric(bounds[0], errors="coerce"), bounds[1]
    peaks["percent"] = 100 * peaks["peak_gbps"] / peaks["link_gbps"]
    peaks["usd_per_hour"] = pd.to_numeric(peaks["usd_per_hour"], errors="coerce")
    peaks["label"] = peaks.apply(_peak_label, axis=1)
    return peaks


def _row_order(peaks: pd.DataFrame) -> list[str]:
    first = peaks.drop_duplicates("label")
    key = first.apply(lambda r: (_rank(r["suite"], SUITE_ORDER), r["link"], _rank(r["op"], OP_ORDER),
                                 _rank(r["memory"], VALUE_ORDER), _rank(r["mode"], VALUE_ORDER), r["label"]), axis=1)
    return list(first.loc[key.sort_values().index, "label"])


def _short_labels(peaks: pd.DataFrame) -> pd.Series:
    """Labels without the words every row of a suite shares beyond suite and op (float32, 2 ranks)."""
    words = peaks["label"].str.split()
    common = {suite: set.intersection(*(set(w[2:]) for w in words[peaks["suite"] == suite]))
              for suite in peaks["suite"].unique()}
    return pd.Series([" ".join(x for i, x in enumerate(w) if i < 2 or x not in common[suite])
                      for w, suite in zip(words, peaks["suite"])], index=peaks.index)


def _dot_bars(peaks: pd.DataFrame, x: str, fmt: str, colours: dict, xlabel: str, title: str):
    """Compact horizontal bars: a row per variant, one thin bar per series measured there (no
    empty slots for series that lack the variant), the value at the bar's end."""
    rows = _row_order(peaks)
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
    drawn = sorted(peaks[SERIES].unique())
    fig.legend(handles=[Line2D([], [], color=colours[s], linewidth=6, label=s) for s in drawn],
               loc="outside lower center", ncols=min(len(drawn), 5), fontsize=9, frameon=False)
    return fig, ax


def peak_fraction_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                         colours: dict | None = None) -> list[Path]:
    """Peak bandwidth as % of the link's theoretical peak (PCIe for copies, NVLink for P2P and NCCL)."""
    peaks = peak_table(frame).dropna(subset=["percent"])
    if peaks.empty:
        return []
    peaks = peaks.assign(label=_short_labels(peaks) + " (" + peaks["link"] + ")")
    fig, ax = _dot_bars(peaks, "percent", "%.0f%%", colours or palette(frame),
                        "% of the link's theoretical peak",
                        "Peak bandwidth vs the link's theoretical peak\n"
                        "eager launch, highest per-size median\n"
                        "PCIe: gen × width, per direction; NVLink: the instance catalogue")
    ax.axvline(100, color="black", linewidth=1, linestyle="--")
    ax.set_xlim(0, max(115, peaks["percent"].max() * 1.12))
    return _save(fig, Path(out_dir), "peak_vs_link", formats)


def per_dollar_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                      colours: dict | None = None) -> list[Path]:
    """Peak bandwidth per on-demand dollar an hour, for instances with a known price."""
    peaks = peak_table(frame)
    peaks = peaks[peaks["usd_per_hour"] > 0]
    if peaks.empty:
        return []
    peaks = peaks.assign(per_dollar=peaks["peak_gbps"] / peaks["usd_per_hour"])
    peaks = peaks.assign(label=_short_labels(peaks))
    fig, ax = _dot_bars(peaks, "per_dollar", "%.2f", colours or palette(frame),
                        "Peak bandwidth per price (GB/s per $/hour, on-demand)", "Bandwidth per dollar")
    ax.set_xlim(0, peaks["per_dollar"].max() * 1.15)
    return _save(fig, Path(out_dir), "bandwidth_per_dollar", formats)


def api_overhead_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                        colours: dict | None = None) -> list[Path]:
    """torch.distributed's time per op over NCCL's own, per op at 8 B and 1 MiB, eager and graph:
    what a PyTorch job pays over the library's floor (1.0: nothing)."""
    from bench.summary import OVERHEAD_SIZES, api_overhead

    table = _per_series(frame, api_overhead)
    rows = []
    for size in OVERHEAD_SIZES:
        column = f"torch/nccl@{format_size(size)}"
        if column in table:
            rows += [{SERIES: r[SERIES], "label": f"{r.op} {r.launch} @{format_size(size)}", "ratio": r[column],
                      "suite": "collectives", "link": format_size(size), "op": r.op, "memory": "",
                      "mode": r.launch} for _, r in table.dropna(subset=[column]).iterrows()]
    if not rows:
        return []
    ratios = pd.DataFrame(rows)
    fig, ax = _dot_bars(ratios, "ratio", "%.2fx", colours or palette(frame),
                        "time per op through torch.distributed / through NCCL directly",
                        "What torch.distributed adds over NCCL\n"
                        "eager: the host's launch cost; graph: replays, where it should vanish")
    ax.axvline(1, color="black", linewidth=1, linestyle="--")
    ax.set_xlim(0, max(2.2, ratios["ratio"].max() * 1.15))
    return _save(fig, Path(out_dir), "api_overhead", formats)


# ---------------------------------------------------------------- overlap and the input pipeline


def _paired_bars(ax, rows: list[tuple[str, str, float, float]], colours: dict, fmt: str) -> None:
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


def _per_series(frame: pd.DataFrame, table) -> pd.DataFrame:
    """table(rows of one series) for every series, stacked, with the SERIES column."""
    parts = [table(d).assign(**{SERIES: s}) for s, d in with_series(frame).groupby(SERIES, sort=True)]
    parts = [p for p in parts if len(p.columns) > 1]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _with_series_line(labels: pd.Series, series: pd.Series) -> list[str]:
    return list(labels + "\n" + series) if series.nunique() > 1 else list(labels)


def overlap_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                   colours: dict | None = None) -> list[Path]:
    """The overlap suite's pairs: transfer GB/s and product TFLOP/s, alone (light) and at once
    (solid), and the overlap with both on one stream (light) and on two (solid)."""
    if not (frame["suite"] == "overlap").any():
        return []
    from bench.suites import overlap

    pairs = _per_series(frame, overlap.table)
    if pairs.empty:
        return []
    colours = colours or palette(frame)
    names = pairs["op"] + " " + pairs["memory"].replace("device", "") + " " + pairs["size"]
    labels = _with_series_line(names.str.replace("  ", " "), pairs[SERIES])
    panels = (("copy_gbps", "copy_gbps_computing", "%.1f", "Transfer GB/s (all_reduce: algbw)"),
              ("tflops", "tflops_copying", "%.0f", "bf16 product TFLOP/s"),
              ("overlap_one_stream", "overlap", "%.2f", "Overlap = serial time / time at once"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.55 * len(pairs) + 1.9), sharey=True, layout="constrained")
    for ax, (light, solid, fmt, xlabel) in zip(axes, panels):
        _paired_bars(ax, list(zip(labels, pairs[SERIES], pairs[light], pairs[solid])), colours, fmt)
        ax.set_xlabel(xlabel, fontsize=9)
    for x in (1.0, 2.0):
        axes[2].axvline(x, color="black", linewidth=0.8, linestyle="--")
    axes[2].set_xlim(0, 2.3)
    fig.suptitle("A transfer on its own stream beside a bf16 matrix product\n"
                 "light: each alone (overlap: both on one stream); solid: both at once on two streams", fontsize=10)
    _legend(fig, {s: colours[s] for s in sorted(pairs[SERIES].unique())}, {}, None)
    return _save(fig, Path(out_dir), "overlap", formats)


def sync_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                colours: dict | None = None) -> list[Path]:
    """The overlap suite's synchronizations, the µs each adds to a step on an idle (light) and a
    busy (solid) GPU; and the time to make a tensor on the host and move it, or on the device."""
    if not (frame["suite"] == "overlap").any():
        return []
    from bench.suites import overlap

    syncs = _per_series(frame, overlap.sync_table)
    made = with_series(usable_rows(frame))
    made = made[(made["suite"] == "overlap") & (made["op"] == "make_tensor")]
    if syncs.empty and made.empty:
        return []
    colours = colours or palette(frame)
    fig, axes = plt.subplots(1, 2, figsize=(11, max(3.4, 0.55 * len(syncs) + 1.8)), layout="constrained")
    if not syncs.empty:
        idle, busy = (syncs.get(c, pd.Series(np.nan, index=syncs.index)) for c in ("cost_us_idle", "cost_us_busy"))
        labels = _with_series_line(syncs["op"].str.removeprefix("sync_"), syncs[SERIES])
        _paired_bars(axes[0], list(zip(labels, syncs[SERIES], idle, busy)), colours, "%.1f")
        axes[0].set_xlabel("µs a synchronization adds to a step", fontsize=9)
        axes[0].set_title("light: idle GPU; solid: busy GPU", fontsize=9)
    else:
        axes[0].set_axis_off()
    if not made.empty:
        styles = dict(zip(["pageable", "pinned", "device"], DASHES))
        stats = made.groupby([SERIES, "memory", "size_bytes"])["time_s"].median().mul(1e6).reset_index()
        several = stats[SERIES].nunique() > 1
        for (series, memory), g in stats.groupby([SERIES, "memory"]):
            axes[1].plot(g["size_bytes"], g["time_s"], color=colours[series], linestyle=styles.get(memory, ":"),
                         marker="o", markersize=3, label=f"{memory} ({series})" if several else memory)
        _size_axis(axes[1], stats["size_bytes"].unique())
        _log_y(axes[1], stats["time_s"].max() / stats["time_s"].min())
        axes[1].set_xlabel("Tensor size", fontsize=9)
        axes[1].set_ylabel("µs per tensor", fontsize=9)
        axes[1].set_title("made on the host and moved (pageable, pinned), or on the device", fontsize=9)
        axes[1].legend(fontsize=8, frameon=False)
    else:
        axes[1].set_axis_off()
    fig.suptitle("What synchronizing costs, and where to make a tensor", fontsize=10)
    drawn = sorted(set(syncs.get(SERIES, [])) | set(made[SERIES]))
    _legend(fig, {s: colours[s] for s in drawn}, {}, None)
    return _save(fig, Path(out_dir), "sync", formats)


def pipeline_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                    colours: dict | None = None) -> list[Path]:
    """The pipeline suite, a column per producer and sample size: above, GB/s each loop delivers
    against the batch size (dashed black: the link; dotted grey: the bound of the best loop);
    below, each stage alone (solid: the most workers measured, dashed: none, dotted: between),
    the link and the best loop in black."""
    from bench.suites import pipeline

    loops = _per_series(frame, pipeline.table)
    if loops.empty:
        return []
    stages = _per_series(frame, pipeline.stage_table)
    loops = loops.assign(producer=loops["mode"].str.split().str[0],
                         setting=(loops["memory"] + " " + loops["mode"].str.split(n=1).str[1].fillna("")).str.strip())
    columns = sorted(set(zip(loops["producer"], loops["sample"])))
    series = sorted(loops[SERIES].unique())
    settings = sorted(loops["setting"].unique())
    line_colours = dict(zip(settings, sns.color_palette("tab10", len(settings))))
    stage_names = [st.removeprefix("stage_") for st in pipeline.STAGES]
    stage_colours = dict(zip(stage_names, sns.color_palette("Dark2", len(stage_names))))
    fig, axes = plt.subplots(2 * len(series), len(columns), squeeze=False, layout="constrained",
                             figsize=(5.2 * len(columns) + 0.4, 3.4 * 2 * len(series) + 1.6))
    sizes = loops["size_bytes"].unique()
    for r, run in enumerate(series):
        for c, (producer, sample) in enumerate(columns):
            top, bottom = axes[2 * r][c], axes[2 * r + 1][c]
            d = loops[(loops[SERIES] == run) & (loops["producer"] == producer) & (loops["sample"] == sample)]
            for setting, g in d.groupby("setting"):
                g = g.sort_values("size_bytes")
                top.plot(g["size_bytes"], g["gbps"], color=line_colours[setting], marker="o", markersize=3)
            best = d.loc[d.groupby("size_bytes")["gbps"].idxmax()].sort_values("size_bytes")
            if "bound_gbps" in best:
                top.plot(best["size_bytes"], best["bound_gbps"], color="grey", linestyle=":", linewidth=1.2)
            if "link_gbps" in d:
                link = d.groupby("size_bytes")["link_gbps"].first().dropna()
                top.plot(link.index, link.values, color="black", linestyle="--", linewidth=1.2)
            top.set_title(f"{run} · {producer} samples of {sample}", fontsize=10)
            top.set_ylabel("GB/s the loop delivers", fontsize=9)
            s = stages[(stages[SERIES] == run) & (stages["sample"] == sample)] if not stages.empty else stages
            if not s.empty:
                s = s[~s["stage"].isin(["make", "collate"]) | (s["producer"] == producer)]
                most = s["workers"].max()
                for (stage, memory, w), g in s.groupby(["stage", "memory", "workers"]):
                    g = g.sort_values("size_bytes")
                    if stage == "h2d" and memory == "pinned":   # the link, as above
                        bottom.plot(g["size_bytes"], g["gbps"], color="black", linestyle="--", linewidth=1.2)
                        continue
                    style = "-" if w in (-1, most) else "--" if w == 0 else ":"
                    bottom.plot(g["size_bytes"], g["gbps"], color=stage_colours[stage], linestyle=style, marker="o",
                                markersize=2.5, linewidth=1.3)
            bottom.plot(best["size_bytes"], best["gbps"], color="black", linewidth=2)
            bottom.set_ylabel("GB/s of each stage alone", fontsize=9)
            for ax in (top, bottom):
                values = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()])
                values = values[values > 0]
                _size_axis(ax, sizes)
                _log_y(ax, values.max() / values.min() if len(values) else 10)
                ax.grid(True, which="major", alpha=0.35)
                ax.set_xlabel("Batch size", fontsize=9)
    handles = [Line2D([], [], color=col, linewidth=2, label=name) for name, col in line_colours.items()]
    handles.append(Line2D([], [], color="grey", linestyle=":", label="bound of the best loop (its slowest stages)"))
    if "link_gbps" in loops:
        handles.append(Line2D([], [], color="black", linestyle="--", label="pinned h2d copy (the link)"))
    handles.append(Line2D([], [], color="black", linewidth=2, label="below: the best loop"))
    drawn = set()   # stages drawn in colour: the pinned copy is the link's black
    if not stages.empty:
        drawn = set(stages["stage"][(stages["stage"] != "h2d") | (stages["memory"] == "pageable")])
    handles += [Line2D([], [], color=col, linewidth=2, label=f"stage: {name}" + (" pageable" if name == "h2d" else ""))
                for name, col in stage_colours.items() if name in drawn]
    handles += [Line2D([], [], color="grey", linestyle=style, label=f"stage with {what}")
                for style, what in (("-", "the most workers"), ("--", "no workers"), (":", "other worker counts"))]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False, fontsize=8)
    fig.suptitle("Input pipeline: what a DataLoader-fed loop delivers, and each of its stages alone", fontsize=11)
    return _save(fig, Path(out_dir), "pipeline", formats)


def _per_world(g: pd.DataFrame, pick, column: str) -> pd.Series:
    """Per world size, the median of `column` at the size `pick` (min or max) chooses there:
    split ops round sizes to whole elements per rank, so each world has its own."""
    at = g["size_bytes"] == g.groupby("world_size")["size_bytes"].transform(pick)
    return g[at].groupby("world_size")[column].median()


def scaling_figure(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",),
                   colours: dict | None = None) -> list[Path]:
    """Collectives against GPU count (collectives.nproc=[2,4,8]): per op, bus bandwidth at the
    largest size and the time of the smallest message (8 B), eager launches. Drawn for runs
    that measured two or more world sizes."""
    data = _curves(frame)
    data = data[(data["suite"] == "collectives") & (data["launch"] == "eager")]
    data = data[data.groupby(SERIES)["world_size"].transform("nunique") > 1]
    if data.empty:
        return []
    ops = _order(data["op"], OP_ORDER)
    colours = colours or palette(frame)
    styles = dict(zip(_order(data["api"].astype(str), VALUE_ORDER), DASHES))
    fig, axes = plt.subplots(2, len(ops), figsize=(PANEL_IN[0] * len(ops) + 0.4, PANEL_IN[1] * 2 + 1.0),
                             squeeze=False, layout="constrained")
    rows = (("max", "bandwidth_gbps", f"Bus bandwidth (GB/s) at {format_size(int(data['size_bytes'].max()))}"),
            ("min", "time_us", "Time per op (µs) at 8 B"))
    data = data.assign(time_us=data["time_s"] * 1e6)
    worlds = sorted(data["world_size"].unique())
    for col, op in enumerate(ops):
        for row, (pick, column, label) in enumerate(rows):
            ax = axes[row][col]
            for (series, api), g in data[data["op"] == op].groupby([SERIES, "api"]):
                values = _per_world(g, pick, column)
                ax.plot(values.index, values.to_numpy(), color=colours[series], linestyle=styles[str(api)],
                        marker="o", markersize=3, linewidth=1.6)
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_locator(FixedLocator(worlds))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_ylim(bottom=0)
            ax.grid(True, which="major", alpha=0.35)
            ax.tick_params(labelsize=8)
            ax.set_title(op if row == 0 else "", fontsize=10)
            ax.set_xlabel("GPUs (ranks)" if row == 1 else "", fontsize=9)
            ax.set_ylabel(label if col == 0 else "", fontsize=9)
    fig.suptitle("Collectives against GPU count: bus bandwidth at the largest size, time of the smallest "
                 "message\nmedian of each point's trials, eager launches", fontsize=12)
    _legend(fig, {s: colours[s] for s in sorted(data[SERIES].unique())}, styles, "api")
    return _save(fig, Path(out_dir), "scaling_collectives", formats)


# ---------------------------------------------------------------- files and entry point


def _slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(value)).strip("_") or "unnamed"


def _save(fig, out_dir: Path, stem: str, formats: Iterable[str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        # layouts are set when drawn: no second, bbox 'tight' draw; no timestamp, so files diff cleanly
        fig.savefig(path, dpi=DPI, metadata={"Software": None} if fmt == "png" else {"Date": None})
        paths.append(path)
    plt.close(fig)
    return paths


FIGURES = (peak_fraction_figure, bandwidth_figures, latency_figures, p2p_heatmaps, concurrent_figure,
           per_dollar_figure, api_overhead_figure,
           overlap_figure, sync_figure, pipeline_figure, scaling_figure)


def _draw(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str]) -> Iterator[Path]:
    """render()'s files, each as soon as it is written."""
    formats = list(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in ("png", "svg")]
    if unknown:
        raise ValueError(f"format {unknown[0]!r}: choose png or svg")
    colours = palette(frame)
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):  # no global style change
        for figure in FIGURES:
            yield from figure(frame, out_dir, formats, colours)


def render(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",)) -> list[Path]:
    """Every figure the data allows, written to out_dir; returns the files written. Draws every
    run in the frame: choose runs first with select_runs()."""
    return list(_draw(frame, out_dir, formats))


def _written_before(out_dir: Path) -> list[Path]:
    """The figures the MANIFEST names: plain file names of figure formats in out_dir, nothing else."""
    try:
        names = (out_dir / MANIFEST).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    return [out_dir / n for n in names if n and n == Path(n).name and Path(n).suffix in (".png", ".svg")]


def write_figures(frame: pd.DataFrame, out_dir: str | Path, formats: Iterable[str] = ("png",)) -> list[Path]:
    """render() into out_dir, first removing the figures an earlier call wrote there (those its
    MANIFEST names: never another file), so the folder holds this call's figures and the user's
    own files; the manifest then names the new ones. OSError when out_dir cannot be written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in _written_before(out_dir):
        old.unlink(missing_ok=True)
    written: list[Path] = []
    try:
        for path in _draw(frame, out_dir, formats):
            written.append(path)
    finally:   # a figure that failed half-way still leaves the ones before it named
        (out_dir / MANIFEST).write_text(MANIFEST_HEADER + "".join(f"{p.name}\n" for p in written))
    return written


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """RESULTS, --runs and --all-runs: the run choice shared by xferbench-plot and xferbench-report."""
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="run folders (each is used), or folders holding runs (one run per instance "
                             "is chosen: the newest complete main sweep; the project's committed runs in "
                             "results/reference and results/noise only when such a folder is named)")
    parser.add_argument("--runs", nargs="+", default=[], metavar="RUN",
                        help="use these runs (run id, instance/run_id, or folder) for their instances")
    parser.add_argument("--all-runs", action="store_true", help="use every run found, one colour each")


def load_runs(args: argparse.Namespace,
              warn: Callable[[str], None] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The chosen runs' rows and run_index() of every run found; ResultsError on unusable input.
    `warn` (default: stderr) gets a line when committed runs below a folder given were left out."""
    aside: list[Path] = []
    folders = list(dict.fromkeys(p.resolve() for p in find_runs(args.results, aside)))
    if aside:
        (warn or (lambda line: print(line, file=sys.stderr)))(set_aside_note(aside))
    named = [str(Path(p)) for p in args.results if (Path(p) / "meta.json").is_file()] + list(args.runs)
    frame = load(folders)
    runs = run_index(frame, named, args.all_runs)
    return frame[frame["run_dir"].isin(runs.loc[runs["chosen"], "run_dir"])], runs


def default_out(runs: pd.DataFrame, name: str, option: str) -> Path:
    """Where an output goes without --out: `name` in the folder of the one run chosen.
    ResultsError when several runs are chosen: they have no folder of their own to share."""
    chosen = runs[runs["chosen"]]
    if len(chosen) != 1:
        shown = ", ".join(f"{r.instance}/{r.run_id}" for r in chosen.itertuples())
        raise ResultsError(f"{len(chosen)} runs chosen ({shown}): say where the output goes with {option} "
                           "(without it, it goes into the run's own folder, which needs one run)")
    return Path(chosen["run_dir"].iloc[0]) / name


def describe_choice(runs: pd.DataFrame) -> list[str]:
    """One line per instance with runs left out: which run is used, and how to name another."""
    lines = []
    for instance, group in runs.groupby("instance", sort=False):
        left = group[~group["chosen"]]
        if len(left):
            used = ", ".join(group.loc[group["chosen"], "run_id"])
            lines.append(f"{instance}: using {used} ({group.loc[group['chosen'], 'why'].iloc[0]}); "
                         f"{len(left)} other run(s) left out, name them with --runs or use --all-runs")
    return lines


def cannot_write(path: str | Path, exc: OSError) -> str:
    """The one line for an output that could not be written: which, and why."""
    return f"cannot write {path}: {exc.strerror or exc}"


def main(argv: list[str] | None = None) -> int:
    """xferbench-plot: figures for the chosen runs, one file per figure kind. Exit 0: figures
    written; 1: no measured rows to draw; 2: unusable input, or the figures could not be written."""
    parser = argparse.ArgumentParser(
        prog="xferbench-plot",
        description="Plot xferbench results: bandwidth and latency against size, P2P heatmaps, peaks against "
                    "the link, bandwidth per dollar. Figures without data are skipped. The output folder "
                    f"keeps a list of the figures written ({MANIFEST}); the next call removes those, and only "
                    "those, before it writes.",
        epilog="example: xferbench-plot results/ --out /tmp/plots --format png svg")
    add_run_arguments(parser)
    parser.add_argument("--out", metavar="DIR",
                        help="where figures go (default: RUN/plots/ when one run is drawn; with several, "
                             "--out is needed)")
    parser.add_argument("--format", nargs="+", choices=("png", "svg"), default=["png"], dest="formats",
                        help="file formats to write (default: png)")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"xferbench-plot: {line}", file=sys.stderr)

    try:
        frame, runs = load_runs(args, say)
        out = Path(args.out) if args.out else default_out(runs, "plots", "--out DIR")
    except ResultsError as exc:
        say(str(exc))
        return 2
    for line in describe_choice(runs):
        say(line)
    if usable_rows(frame).empty:
        say("no measured rows to plot (every point failed or was skipped)")
        return 1
    try:
        paths = write_figures(frame, out, formats=args.formats)
    except OSError as exc:
        say(cannot_write(out, exc))
        return 2
    if not paths:
        say("no figure to draw from these rows")
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
