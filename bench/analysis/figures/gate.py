"""The regression gate against a noise study (scripts/noise_study.py): per family, one row, the
change between each pair of identical runs and between each handicapped run and each identical
run (one run a side), against the limit beyond which a drop is flagged."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bench.analysis.figures.style import DPI

IDENTICAL = "identical"
TICKS = (-0.99, -0.95, -0.9, -0.75, -0.5, -0.25, -0.1, -0.05, -0.02, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


def _ticks(low: float, high: float) -> list[float]:
    """Relative changes to label on a log(1 + change) axis from low to high: 0, then outwards
    those at least a tenth of the axis from the last one kept."""
    gap, kept = (high - low) / 10, [0.0]
    for side in ([t for t in TICKS if t > 0], [t for t in reversed(TICKS) if t < 0]):
        last = 0.0
        for t in side:
            x = math.log1p(t)
            if low <= x <= high and abs(x - last) >= gap:
                kept.append(t)
                last = x
    return sorted(kept)


def gate_figure(points: pd.DataFrame, path: Path, title: str) -> Path:
    """`points`: a row per comparison and family: family ('copy h2d pinned eager (bandwidth-bound)'),
    kind ('identical' for a pair of identical runs, else the handicap's label), change and limit
    (relative changes, as bench.analysis.compare's Family). The x axis is log(1 + change), labelled
    in percent; a family's row shades the drops its limit flags."""
    families = sorted(points["family"].unique(), key=lambda f: (not f.endswith("(bandwidth-bound)"), f))
    kinds = [k for k in dict.fromkeys(points["kind"]) if k != IDENTICAL]
    colours = dict(zip(kinds, sns.color_palette("Set1", max(len(kinds), 1))))
    x = np.log1p(points["change"].clip(lower=-0.99))
    # the axis: every change, and the limits unless one is beyond -90% (then it is written, not drawn)
    low = min(x.min(), np.log1p(points["limit"].clip(lower=-0.9)).min()) - 0.05
    high = max(math.log1p(0.1), x.max()) + 0.05
    with sns.axes_style("whitegrid"):
        fig, ax = plt.subplots(figsize=(9, 0.24 * len(families) + 1.6), layout="constrained")
    for i, family in enumerate(families):
        rows = points[points["family"] == family]
        limit = rows["limit"].median()
        edge = max(math.log1p(max(limit, -0.999)), low)
        ax.barh(i, edge - low, left=low, height=0.8, color=(0.85, 0.2, 0.2), alpha=0.10, linewidth=0)
        if edge > low:
            ax.plot([edge, edge], [i - 0.4, i + 0.4], color="black", linewidth=1.2)
        ax.text(low, i, f" {limit:.1%}" if limit < -0.99 else f" {limit:.0%}", va="center", ha="left", fontsize=6,
                color="0.3")
        same = rows[rows["kind"] == IDENTICAL]
        ax.scatter(np.log1p(same["change"]), np.full(len(same), i), s=14, color="0.4", alpha=0.7, zorder=4)
        for kind in kinds:
            hit = rows[rows["kind"] == kind]
            ax.scatter(np.log1p(hit["change"].clip(lower=-0.99)), np.full(len(hit), i), s=16, marker="D",
                       color=colours[kind], alpha=0.6, zorder=3)
    ax.set_yticks(range(len(families)), families, fontsize=7)
    ax.set_ylim(len(families) - 0.5, -0.5)
    ticks = _ticks(low, high)
    ax.set_xticks([math.log1p(t) for t in ticks], [f"{t:+.0%}" if t else "0" for t in ticks], fontsize=8)
    ax.set_xlim(low, high)
    ax.axvline(0, color="0.6", linewidth=0.8)
    ax.grid(True, axis="x", alpha=0.35)
    ax.grid(False, axis="y")
    ax.set_xlabel("change in bandwidth, current against baseline, one run a side (log scale)", fontsize=9)
    handles = [Line2D([], [], linestyle="none", marker="o", color="0.45", label="a pair of identical runs"),
               *(Line2D([], [], linestyle="none", marker="D", color=colours[k], label=f"{k} against each identical run")
                 for k in kinds),
               Line2D([], [], color="black", label="the gate's limit (its value at the left)"),
               Patch(color=(0.85, 0.2, 0.2), alpha=0.2, label="flagged as a regression")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path
