"""How the overlap suite's rows read: its own tables and figures (pairs, synchronizations,
make_tensor) in place of the common curves."""
from __future__ import annotations

import math
import re

from bench import lazy
from bench.results import params, usable_rows
from bench.sizes import format_size
from bench.suite_view import SuiteView
from bench.suites.overlap.model import OPS, PAIR_OPS, PAIR_PARTS, SYNCS, Product

pd = lazy.module("pandas")


def _ok(frame: pd.DataFrame, parts) -> pd.DataFrame:
    return frame[(frame["suite"] == OverlapView.name) & (frame["status"] == "ok") & frame["part"].isin(parts)]


def _run_keys(rows: pd.DataFrame) -> list[str]:
    """instance and run_id where the rows come from more than one."""
    return [k for k in ("instance", "run_id") if k in rows.columns and rows[k].nunique() > 1]


def _flops_of(mode: str) -> float:
    """The flops of the product a pair's mode names ('mm8192'); NaN for any other mode."""
    match = re.fullmatch(r"mm(\d+)", str(mode))
    return Product(int(match.group(1))).flops if match else math.nan


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per pair: GB/s of the transfer alone and during the product (algbw), TFLOP/s of the
    product alone and during the transfer, overlap on two streams and on one (medians of trials)."""
    rows = _ok(frame, PAIR_PARTS)
    rows = rows[rows["op"].isin(PAIR_OPS)]
    if rows.empty:
        return pd.DataFrame()
    # The product's flops from its params; older runs (no params) name it in the mode: mm<n>.
    rows = rows.assign(flops=[Product(d["matmul"]).flops if "matmul" in d else _flops_of(mode)
                              for d, mode in zip(params(rows), rows["mode"])])
    keys = _run_keys(rows) + ["op", "memory", "mode", "world_size", "size_bytes"]
    med = rows.pivot_table(index=keys, columns="part", values=["time_s", "algbw_gbps", "iters"], aggfunc="median")
    med = med.iloc[med.index.get_level_values("op").map(PAIR_OPS.index).argsort(kind="stable")]
    out = med.index.to_frame(index=False)
    flops = rows.groupby(keys)["flops"].first().reindex(med.index).to_numpy()
    t, bw, iters = med["time_s"], med["algbw_gbps"], med["iters"]
    out["size"] = out.pop("size_bytes").map(format_size)
    out["round"] = [f"{c:.0f}+{m:.0f}" for c, m in zip(iters["copy_during_compute"] / iters["total"],
                                                       iters["compute_during_copy"] / iters["total"])]
    out["copy_gbps"] = bw["copy_alone"].to_numpy().round(1)
    out["copy_gbps_computing"] = bw["copy_during_compute"].to_numpy().round(1)
    out["tflops"] = (flops / t["compute_alone"].to_numpy() / 1e12).round(1)
    out["tflops_copying"] = (flops / t["compute_during_copy"].to_numpy() / 1e12).round(1)
    out["overlap"] = (t["serial"] / t["total"]).to_numpy().round(2)
    out["overlap_one_stream"] = (t["serial"] / t["one_stream"]).to_numpy().round(2)
    return out.drop(columns=[c for c in ("world_size",) if out[c].nunique() == 1])


def sync_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Median cost of each synchronization in µs (a step less the work alone), idle and busy, with
    the busy work's own time."""
    rows = _ok(frame, ("cost", "work"))
    rows = rows[rows["op"].str.startswith("sync_")]
    if rows.empty:
        return pd.DataFrame()
    med = rows.pivot_table(index=_run_keys(rows) + ["op"], columns=["part", "mode"], values="time_s", aggfunc="median")
    out = (med * 1e6).round(2)
    out.columns = [f"{part}_us_{mode}" for part, mode in out.columns]
    order = [c for c in ("cost_us_idle", "cost_us_busy", "work_us_busy") if c in out.columns]
    out = out[order].reset_index()
    return out.sort_values("op", key=lambda ops: ops.map(lambda o: SYNCS.index(o.removeprefix("sync_"))))


def make_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Median µs to make a tensor of each size: filled on the host and moved, or on the device."""
    rows = _ok(frame, ("total",))
    rows = rows[rows["op"] == "make_tensor"]
    if rows.empty:
        return pd.DataFrame()
    med = rows.pivot_table(index=_run_keys(rows) + ["size_bytes"], columns="memory", values="time_s", aggfunc="median")
    out = (med * 1e6).round(1)
    out.columns = [f"{m}_us" for m in out.columns]
    out = out.reset_index()
    out["size_bytes"] = out["size_bytes"].map(format_size)
    return out.rename(columns={"size_bytes": "size"})


def overlap_figure(frame: pd.DataFrame, canvas) -> list:
    """The overlap suite's pairs: transfer GB/s and product TFLOP/s, alone (light) and at once
    (solid), and the overlap with both on one stream (light) and on two (solid)."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    import matplotlib.pyplot as plt

    from bench.analysis.figures.bars import paired, per_series, with_series_line
    from bench.analysis.figures.style import add_legend

    pairs = per_series(frame, table)
    if pairs.empty:
        return []
    colours, SERIES = canvas.colours, canvas.SERIES
    names = pairs["op"] + " " + pairs["memory"].replace("device", "") + " " + pairs["size"]
    labels = with_series_line(names.str.replace("  ", " "), pairs[SERIES])
    panels = (("copy_gbps", "copy_gbps_computing", "%.1f", "Transfer GB/s (all_reduce: algbw)"),
              ("tflops", "tflops_copying", "%.0f", "bf16 product TFLOP/s"),
              ("overlap_one_stream", "overlap", "%.2f", "Overlap = serial time / time at once"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.55 * len(pairs) + 1.9), sharey=True, layout="constrained")
    for ax, (light, solid, fmt, xlabel) in zip(axes, panels):
        paired(ax, list(zip(labels, pairs[SERIES], pairs[light], pairs[solid])), colours, fmt)
        ax.set_xlabel(xlabel, fontsize=9)
    for x in (1.0, 2.0):
        axes[2].axvline(x, color="black", linewidth=0.8, linestyle="--")
    axes[2].set_xlim(0, 2.3)
    fig.suptitle("A transfer on its own stream beside a bf16 matrix product\n"
                 "light: each alone (overlap: both on one stream); solid: both at once on two streams", fontsize=10)
    add_legend(fig, {s: colours[s] for s in sorted(pairs[SERIES].unique())}, {}, None)
    return canvas.save(fig, "overlap", "A transfer on a stream of its own beside a bf16 matrix product: what each keeps.")


def sync_figure(frame: pd.DataFrame, canvas) -> list:
    """The overlap suite's synchronizations, the µs each adds to a step on an idle (light) and a
    busy (solid) GPU; and the time to make a tensor on the host and move it, or on the device."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    import matplotlib.pyplot as plt
    import numpy as np

    from bench.analysis.figures.bars import paired, per_series, with_series_line
    from matplotlib.lines import Line2D

    from bench.analysis.figures.style import DASHES, add_legend, log_y_axis, in_order, size_axis

    syncs = per_series(frame, sync_table)
    made = usable_rows(frame)
    made = made[(made["suite"] == OverlapView.name) & (made["op"] == "make_tensor")]
    if syncs.empty and made.empty:
        return []
    colours, SERIES = canvas.colours, canvas.SERIES
    fig, axes = plt.subplots(1, 2, figsize=(11, max(3.4, 0.55 * len(syncs) + 1.8)), layout="constrained")
    if not syncs.empty:
        idle, busy = (syncs.get(c, pd.Series(np.nan, index=syncs.index)) for c in ("cost_us_idle", "cost_us_busy"))
        labels = with_series_line(syncs["op"].str.removeprefix("sync_"), syncs[SERIES])
        paired(axes[0], list(zip(labels, syncs[SERIES], idle, busy)), colours, "%.1f")
        axes[0].set_xlabel("µs a synchronization adds to a step", fontsize=9)
        axes[0].set_title("light: idle GPU; solid: busy GPU", fontsize=9)
    else:
        axes[0].set_axis_off()
    if not made.empty:
        styles = dict(zip(["pageable", "pinned", "device"], DASHES))
        stats = made.groupby([SERIES, "memory", "size_bytes"])["time_s"].median().mul(1e6).reset_index()
        for (series, memory), g in stats.groupby([SERIES, "memory"]):
            axes[1].plot(g["size_bytes"], g["time_s"], color=colours[series], linestyle=styles.get(memory, ":"),
                         marker="o", markersize=3)
        # the memory by its dashes here; the series by colour in the figure's legend (capped there)
        axes[1].legend(handles=[Line2D([], [], color="0.3", linestyle=styles.get(m, ":"), label=m)
                                for m in in_order(stats["memory"], list(styles))], fontsize=8, frameon=False)
        size_axis(axes[1], stats["size_bytes"].unique())
        log_y_axis(axes[1], stats["time_s"].max() / stats["time_s"].min())
        axes[1].set_xlabel("Tensor size", fontsize=9)
        axes[1].set_ylabel("µs per tensor", fontsize=9)
        axes[1].set_title("made on the host and moved (pageable, pinned), or on the device", fontsize=9)
    else:
        axes[1].set_axis_off()
    fig.suptitle("What synchronizing costs, and where to make a tensor", fontsize=10)
    drawn = sorted(set(syncs.get(SERIES, [])) | set(made[SERIES]))
    add_legend(fig, {s: colours[s] for s in drawn}, {}, None)
    return canvas.save(fig, "sync", "What a synchronization adds to a step, and where to make a tensor.")


class OverlapView(SuiteView):
    name = "overlap"
    ops = OPS
    title = "Overlap"
    curves = False          # its own figures say what its rows mean
    # Between-run sigma of log time: 3 identical runs on nvidia-h200 (results/noise/h200-x1-fit,
    # not the study in results/noise/h200-x1 that tests it). Host-side work (pageable copies,
    # tensors made on the host) moves between runs far more than pinned copies and the GPU.
    noise = {("gpu", "latency"): 0.432, ("gpu", "bandwidth"): 0.023,
             ("gpu", "bandwidth", "pageable"): 0.114, ("gpu", "bandwidth", "make_tensor"): 0.094}

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        return [(title, part) for title, part in (
            ("overlap pairs: a transfer beside a bf16 product", table(frame)),
            ("overlap synchronizations: µs a step gains", sync_table(frame)),
            ("overlap make_tensor: µs per tensor", make_table(frame))) if not part.empty]

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        return overlap_figure(frame, canvas) + sync_figure(frame, canvas)

