"""Figures from load() frames: bandwidth and latency against message size, P2P matrices, peaks
as a share of the link's theoretical peak, and bandwidth per dollar. One file per figure; a
figure whose data is absent is skipped, never drawn empty.

Curves use measured whole operations only (status ok, part total). A line is the median of a
point's trials, its band their full range (min to max); points that differ only in device
(P2P pairs, the GPUs of an nvbandwidth import) share a line. GB/s = 1e9 bytes/s throughout.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")  # files only: no window, works headless (CI, SSH)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from bench.results import bandwidth_column, usable_rows  # noqa: E402
from bench.summary import p2p_peak_table  # noqa: E402
from bench.sizes import format_size  # noqa: E402

SMALL_BYTES = 1 << 20           # the latency figure's upper size
HUES = ("instance", "run_id")
# Keys that tell lines of one suite apart beyond op and hue; only those that vary are used.
VARIANT_KEYS = ["memory", "mode", "backend", "dtype", "world_size", "nnodes", "launch"]
OP_ORDER = ["h2d", "d2h", "uni", "bidir", "d2d", "h2h", "all_reduce", "all_gather", "reduce_scatter",
            "broadcast", "reduce", "all_to_all", "sendrecv"]
SUITE_NAMES = {"copy": "Copies", "p2p": "Peer-to-peer", "collectives": "Collectives"}
BANDWIDTH_LABEL = {"algbw_gbps": "Bandwidth (GB/s)", "busbw_gbps": "Bus bandwidth (GB/s)"}


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


def _curves(frame: pd.DataFrame) -> pd.DataFrame:
    return with_bandwidth(usable_rows(frame))


def _variant(frame: pd.DataFrame) -> pd.Series | None:
    """A label such as 'pinned, graph' from the variant keys that vary here; None if none does."""
    keys = [k for k in VARIANT_KEYS if frame[k].astype(str).nunique() > 1]
    if not keys:
        return None
    suffix = {"world_size": " ranks", "nnodes": " nodes"}
    parts = [frame[k].astype(str) + suffix.get(k, "") for k in keys]
    label = parts[0]
    for p in parts[1:]:
        label = label + ", " + p
    return label.replace({"": "-"})


def _ops(frame: pd.DataFrame) -> list[str]:
    ops = list(dict.fromkeys(frame["op"]))
    return sorted(ops, key=lambda op: (OP_ORDER.index(op) if op in OP_ORDER else len(OP_ORDER), op))


def _size_axis(ax, sizes: Iterable[int]) -> None:
    """log2 x axis labelled 4KiB, 1MiB, ...: at most 8 ticks, on the sweep's own sizes where they
    are powers of two, counted down from the largest (the size that matters most for bandwidth)."""
    sizes = [int(s) for s in sizes if s > 0]
    exps = sorted({s.bit_length() - 1 for s in sizes if s & (s - 1) == 0})
    if len(exps) < 2:
        exps = list(range(math.floor(math.log2(min(sizes))), math.ceil(math.log2(max(sizes))) + 1))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0**e for e in exps[::-1][::math.ceil(len(exps) / 8)]]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(int(round(v))) if v >= 1 else ""))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.tick_params(axis="x", labelrotation=45)


def _slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(value)).strip("_") or "unnamed"


def _save(fig, out_dir: Path, stem: str, formats: Iterable[str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        fig.savefig(path, dpi=120)  # layouts are set when drawn: no second, bbox 'tight' draw
        paths.append(path)
    plt.close(fig)
    return paths


def _check_hue(frame: pd.DataFrame, hue: str) -> None:
    if hue not in HUES or hue not in frame.columns:
        raise ValueError(f"hue={hue!r}: choose from {', '.join(HUES)}")


def _size_figure(data: pd.DataFrame, y: str, ylabel: str, title: str, hue: str, log_y: bool):
    """One panel per op, x = message size. Each panel is drawn with the same hue and style order,
    so colours and dashes mean the same everywhere and one legend serves all."""
    ops = _ops(data)
    variant = _variant(data)
    style = None if variant is None else "variant"
    if variant is not None:
        data = data.assign(variant=variant)
    # markers always: a sweep of one size (nvbandwidth imports) is a single point, no line
    marks = {"markers": True, "dashes": True, "style": style, "style_order": sorted(variant.unique())} \
        if variant is not None else {"marker": "o"}
    ncols = min(4, len(ops))
    nrows = math.ceil(len(ops) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.9 * ncols + 2.2, 3.1 * nrows + 0.5), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[len(ops):]:
        ax.set_axis_off()
    sizes, hue_order = data["size_bytes"].unique(), sorted(data[hue].unique())
    for i, (ax, op) in enumerate(zip(axes.flat, ops)):
        sns.lineplot(data=data[data["op"] == op], x="size_bytes", y=y, hue=hue,
                     hue_order=hue_order, estimator="median", errorbar=("pi", 100),
                     legend=i == 0, ax=ax, **marks)
        _size_axis(ax, sizes)
        if log_y:
            ax.set_yscale("log")
            # plain 1, 2, 5, 10 rather than 10^0, 2x10^0: minor ticks labelled at 2 and 5 only
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:e}"[0] in "25" else ""))
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(op)
        ax.set_xlabel("Message size")
        ax.set_ylabel(ylabel if i % ncols == 0 else "")
    first = axes.flat[0]
    if first.get_legend() is not None:
        handles, labels = first.get_legend_handles_labels()
        legend_title = first.get_legend().get_title().get_text()   # the hue's name when there is no style
        first.get_legend().remove()
        fig.legend(handles, labels, title=legend_title or None, loc="outside right center", frameon=False)
    fig.suptitle(title)
    return fig


def bandwidth_figures(frame: pd.DataFrame, out_dir: str | Path, hue: str = "instance",
                      formats: Iterable[str] = ("png",)) -> list[Path]:
    """Bandwidth against size, one figure per suite, one panel per op."""
    _check_hue(frame, hue)
    data = _curves(frame).dropna(subset=["bandwidth_gbps"])
    paths = []
    for suite, d in data.groupby("suite"):
        ylabel = BANDWIDTH_LABEL[bandwidth_column(suite)]
        title = (f"{SUITE_NAMES.get(suite, suite)}: bandwidth vs message size\n"
                 "line: median; band: min-max over trials and devices")
        fig = _size_figure(d, "bandwidth_gbps", ylabel, title, hue, log_y=False)
        paths += _save(fig, Path(out_dir), f"bandwidth_{_slug(suite)}", formats)
    return paths


def latency_figures(frame: pd.DataFrame, out_dir: str | Path, hue: str = "instance",
                    formats: Iterable[str] = ("png",)) -> list[Path]:
    """Time per operation at small sizes (<= 1 MiB), where launch cost shows: eager vs graph."""
    _check_hue(frame, hue)
    data = _curves(frame)
    data = data[(data["size_bytes"] <= SMALL_BYTES) & (data["time_s"] > 0)].assign(time_us=lambda d: d["time_s"] * 1e6)
    paths = []
    for suite, d in data.groupby("suite"):
        title = (f"{SUITE_NAMES.get(suite, suite)}: latency at small sizes\n"
                 "line: median; band: min-max over trials and devices")
        fig = _size_figure(d, "time_us", "Time per operation (µs)", title, hue, log_y=True)
        paths += _save(fig, Path(out_dir), f"latency_{_slug(suite)}", formats)
    return paths


def _device_key(name: str) -> tuple:
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def p2p_peaks(frame: pd.DataFrame, by: str = "instance") -> pd.DataFrame:
    """Per (by, op, mode, src, dst): the peak over sizes of the per-size median bandwidth."""
    return p2p_peak_table(frame, [by]).rename(columns={"algbw_gbps": "bandwidth_gbps"})


def p2p_heatmaps(frame: pd.DataFrame, out_dir: str | Path, hue: str = "instance",
                 formats: Iterable[str] = ("png",)) -> list[Path]:
    """Source x destination matrices of peak P2P bandwidth: one figure per hue value, a panel per op and mode."""
    _check_hue(frame, hue)
    peaks = p2p_peaks(frame, hue)
    paths = []
    for value, d in peaks.groupby(hue):
        ops = _ops(d)
        panels = sorted({(op, mode) for op, mode in zip(d["op"], d["mode"])}, key=lambda p: (ops.index(p[0]), p[1]))
        devices = sorted(set(d["src"]) | set(d["dst"]), key=_device_key)
        ncols = min(3, len(panels))
        nrows = math.ceil(len(panels) / ncols)
        side = 0.55 * len(devices) + 2.2
        # tight_layout: constrained layout is several times slower with a colorbar per panel
        fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols * 1.15, side * nrows + 0.4), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.set_axis_off()
        for ax, (op, mode) in zip(axes.flat, panels):
            cell = d[(d["op"] == op) & (d["mode"] == mode)]
            matrix = (cell.pivot(index="src", columns="dst", values="bandwidth_gbps")
                      .reindex(index=devices, columns=devices))
            sns.heatmap(matrix, annot=True, fmt=".0f", cmap="viridis", vmin=0, square=True, ax=ax,
                        cbar_kws={"label": "GB/s"}, annot_kws={"fontsize": 8})
            ax.set_title(f"{op}, {mode}")
            ax.grid(False)
            ax.set_xlabel("destination")
            ax.set_ylabel("source")
        fig.suptitle(f"P2P peak bandwidth (GB/s; max over sizes of the median), {hue} {value}")
        fig.tight_layout()
        paths += _save(fig, Path(out_dir), f"p2p_heatmap_{_slug(value)}", formats)
    return paths


def _theoretical(row) -> tuple[float, str]:
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
             f"{row['world_size']} ranks" if int(row["world_size"]) > 1 else ""]
    return " ".join(str(p) for p in parts if p)


def peak_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Peak bandwidth per run and variant (max over sizes, and pairs, of the per-size median),
    with the link's theoretical peak, the achieved share, and the instance's price."""
    data = _curves(frame).dropna(subset=["bandwidth_gbps"])
    # Graph mode stops at timing.graph_max_size, so its largest figure is no peak: eager only.
    data = data[data["launch"] != "graph"]
    if data.empty:
        return pd.DataFrame(columns=["instance", "run_id", "label", "peak_gbps", "link", "link_gbps",
                                     "percent", "usd_per_hour"])
    variant = ["suite", "op", "memory", "mode", "backend", "dtype", "world_size", "nnodes", "launch"]
    med = data.groupby(["instance", "run_id"] + variant + ["src", "dst", "size_bytes"])["bandwidth_gbps"].median()
    peaks = med.groupby(level=["instance", "run_id"] + variant).max().rename("peak_gbps").reset_index()
    links = data.groupby(["instance", "run_id"])[["pcie_gen", "pcie_width", "nvlink_gbps_per_gpu",
                                                  "usd_per_hour"]].first()
    peaks = peaks.join(links, on=["instance", "run_id"])
    bounds = peaks.apply(_theoretical, axis=1, result_type="expand")
    peaks["link_gbps"], peaks["link"] = pd.to_numeric(bounds[0], errors="coerce"), bounds[1]
    peaks["percent"] = 100 * peaks["peak_gbps"] / peaks["link_gbps"]
    peaks["usd_per_hour"] = pd.to_numeric(peaks["usd_per_hour"], errors="coerce")
    peaks["label"] = peaks.apply(_peak_label, axis=1)
    return peaks


def _bar_figure(data: pd.DataFrame, x: str, xlabel: str, title: str, hue: str, fmt: str):
    labels = sorted(data["label"].unique())
    height = 0.32 * len(labels) * max(1, data[hue].nunique()) + 1.8
    fig, ax = plt.subplots(figsize=(11, height), layout="constrained")
    sns.barplot(data=data, y="label", x=x, hue=hue, order=labels, orient="h", errorbar=None, ax=ax)
    for container in ax.containers:
        ax.bar_label(container, fmt=fmt, padding=3, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlim(0, data[x].max() * 1.15)   # room for the bar labels
    return fig, ax


def peak_fraction_figure(frame: pd.DataFrame, out_dir: str | Path, hue: str = "instance",
                         formats: Iterable[str] = ("png",)) -> list[Path]:
    """Peak bandwidth as % of the link's theoretical peak (PCIe for copies, NVLink for P2P and NCCL)."""
    _check_hue(frame, hue)
    peaks = peak_table(frame).dropna(subset=["percent"])
    if peaks.empty:
        return []
    peaks = peaks.assign(label=peaks["label"] + " (" + peaks["link"] + ")")
    fig, ax = _bar_figure(peaks, "percent",
                          "Peak bandwidth, % of the link's theoretical peak\n"
                          "PCIe per direction: gen3 x16 15.75, gen4 31.5, gen5 63 GB/s\n"
                          "NVLink per GPU and direction: from the instance catalogue",
                          "Peak bandwidth vs the link's theoretical peak", hue, "%.0f%%")
    ax.axvline(100, color="black", linewidth=1, linestyle="--")
    ax.set_xlim(0, max(110, peaks["percent"].max() * 1.15))
    return _save(fig, Path(out_dir), "peak_vs_link", formats)


def per_dollar_figure(frame: pd.DataFrame, out_dir: str | Path, hue: str = "instance",
                      formats: Iterable[str] = ("png",)) -> list[Path]:
    """Peak bandwidth per on-demand dollar an hour, for instances with a known price."""
    _check_hue(frame, hue)
    peaks = peak_table(frame)
    peaks = peaks[peaks["usd_per_hour"] > 0]
    if peaks.empty:
        return []
    peaks = peaks.assign(per_dollar=peaks["peak_gbps"] / peaks["usd_per_hour"])
    fig, _ = _bar_figure(peaks, "per_dollar", "Peak bandwidth per price (GB/s per $/hour, on-demand)",
                         "Bandwidth per dollar", hue, "%.2f")
    return _save(fig, Path(out_dir), "bandwidth_per_dollar", formats)


FIGURES = (bandwidth_figures, latency_figures, p2p_heatmaps, peak_fraction_figure, per_dollar_figure)


def render(frame: pd.DataFrame, out_dir: str | Path, hue: str = "instance",
           formats: Iterable[str] = ("png",)) -> list[Path]:
    """Every figure the data allows, written to out_dir; returns the files written."""
    _check_hue(frame, hue)
    formats = list(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in ("png", "svg")]
    if unknown:
        raise ValueError(f"format {unknown[0]!r}: choose png or svg")
    paths: list[Path] = []
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):  # no global style change
        for figure in FIGURES:
            paths += figure(frame, out_dir, hue, formats)
    return paths
