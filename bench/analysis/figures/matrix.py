"""Source x destination matrices of GPU pairs: a heatmap per series, a panel per op and mode."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

import pandas as pd

from bench.analysis.figures.style import SERIES, Canvas, device_key, file_slug, rank_in
from bench.analysis.runs import unmarked
from bench.ops import op_order


def heatmaps(peaks: pd.DataFrame, canvas: Canvas, stem: str, title: str) -> list[Path]:
    """Source x destination matrices (`peaks`: SERIES, op, mode, src, dst, algbw_gbps): one figure
    per series, <stem>_<series>, a panel per op and mode; `title` may name {series}."""
    paths, ops = [], op_order(canvas.catalog)
    for series, d in peaks.groupby(SERIES):
        panels = sorted({(op, mode) for op, mode in zip(d["op"], d["mode"])},
                        key=lambda p: (rank_in(p[0], ops), p))
        devices = sorted(set(d["src"]) | set(d["dst"]), key=device_key)
        ncols = min(4, len(panels))
        nrows = math.ceil(len(panels) / ncols)
        side = 0.5 * len(devices) + 1.9
        # tight_layout: constrained layout is several times slower with a colorbar per panel
        fig, axes = plt.subplots(nrows, ncols, figsize=(side * ncols * 1.2, side * nrows + 0.6), squeeze=False)
        for ax in axes.flat[len(panels):]:
            ax.set_axis_off()
        for ax, (op, mode) in zip(axes.flat, panels):
            cell = d[(d["op"] == op) & (d["mode"] == mode)]
            matrix = (cell.pivot(index="src", columns="dst", values="algbw_gbps")
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
        fig.suptitle(title.format(series=series), fontsize=11)
        fig.tight_layout()
        paths += canvas.save(fig, f"{stem}_{file_slug(unmarked(series))}", "Every ordered GPU pair's best figure.")
    return paths
