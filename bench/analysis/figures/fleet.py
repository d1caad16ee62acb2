"""A fleet's heat map: each node's families as a ratio to the fleet (bench/analysis/fleet.py), the
worst nodes and the worst families first, for the report's fleet section."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from bench.analysis.figures.style import Canvas
from bench.analysis.fleet_verdicts import FleetJudgement

NODES, FAMILIES = 40, 40     # the worst shown; the JSON holds every one
SPAN = 2.0                   # the colours run from half the fleet's figure to twice it


def heat_map(fleet: FleetJudgement, canvas: Canvas, stem: str = "fleet") -> list[Path]:
    """Nodes x families, ratio to the fleet on a log scale (red below, blue above), the NODES worst
    nodes (by their lowest family) and FAMILIES worst families (by their lowest node); [] where no
    family was judged against the fleet."""
    ratios = fleet.ratios
    judged = np.isfinite(ratios)
    if not judged.any():
        return []
    with np.errstate(invalid="ignore"):
        node_worst = np.where(judged.any(axis=1), np.nanmin(np.where(judged, ratios, np.inf), axis=1), np.inf)
        family_worst = np.where(judged.any(axis=0), np.nanmin(np.where(judged, ratios, np.inf), axis=0), np.inf)
    rows = np.argsort(node_worst, kind="stable")[:NODES]
    cols = np.argsort(family_worst, kind="stable")[:FAMILIES]
    shown = np.log2(ratios[np.ix_(rows, cols)])
    fig, ax = plt.subplots(figsize=(2.5 + 0.22 * len(cols), 3.5 + 0.22 * len(rows)))
    sns.heatmap(shown, cmap="vlag_r", center=0, vmin=-np.log2(SPAN), vmax=np.log2(SPAN), ax=ax,
                cbar_kws={"label": "node / fleet (log2: -1 is half)", "shrink": 0.6},
                xticklabels=[fleet.families[c].family for c in cols],
                yticklabels=[fleet.name(fleet.nodes[r]) for r in rows])
    ax.tick_params(labelsize=7)
    ax.set_xlabel("family (worst first)", fontsize=9)
    ax.set_ylabel("node (worst first)", fontsize=9)
    more = f" of {len(ratios)}" if len(ratios) > len(rows) else ""
    ax.set_title(f"{fleet.machine}: {len(rows)}{more} nodes against the fleet's median", fontsize=10)
    fig.tight_layout()
    return canvas.save(fig, stem, "Each node's families as a ratio to the fleet's median (blank: not judged "
                                  "against the fleet), the worst nodes and families first.")
