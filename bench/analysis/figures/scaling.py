"""The scaling figure: per family measured at several GPU counts, each count's figure per GPU
over the smallest count's (1.0 is ideal: every added GPU brings as much as the first ones), one
panel for collectives' bus bandwidth, one for traffic of several GPUs at once, one for
collectives' small-message time; one line per family and run."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from bench.analysis.figures.style import DASHES, PANEL_IN, Canvas, legend_columns, series_handles
from bench.analysis.scaling import BUS, FAMILY, scaling_table
from bench.points import variant_label
from bench.suite_view import LATENCY_BOUND, view

def _panels(table: pd.DataFrame, catalog) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) of each panel drawn: the bus-bandwidth suites' busbw (their titles name them),
    every GPU at once, and the bus-bandwidth suites' smallest message."""
    bus = table.suite.isin([name for name, suite in catalog.items() if suite.bandwidth == BUS])
    named = ", ".join(dict.fromkeys(view(catalog, s).title or s for s in table.suite[bus]))
    picks = ((f"{named}: busbw per GPU", bus & (table.kind == "bandwidth")),
             ("Every GPU at once: GB/s per GPU or peer", ~bus & (table.kind == "bandwidth")),
             (f"{named}: smallest message, time per op", table.kind == LATENCY_BOUND))
    return [(title, table[pick]) for title, pick in picks if pick.any()]


def scaling_figure(frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
    table = scaling_table(frame, canvas.catalog, [canvas.SERIES])
    # collectives as a PyTorch job runs them; the table has every api and launch
    bus = table.suite.isin([name for name, suite in canvas.catalog.items() if suite.bandwidth == BUS])
    table = table[~bus | ((table.api == "torch") & (table.launch == "eager"))]
    if table.empty:
        return []
    panels = _panels(table, canvas.catalog)
    fig, axes = plt.subplots(1, len(panels), figsize=(PANEL_IN[0] * 1.25 * len(panels), PANEL_IN[1] * 1.6),
                             layout="constrained", squeeze=False)
    counts = sorted(set(table.gpus))
    styles: dict[str, str] = {}
    for ax, (title, part) in zip(axes[0], panels):
        for (series, *_), family in part.groupby([canvas.SERIES, *FAMILY], sort=False):
            name = variant_label(family.iloc[0][FAMILY])
            op = str(family.op.iloc[0])
            styles.setdefault(op, DASHES[len(styles) % len(DASHES)])
            ax.plot(family.gpus, family.of_first, marker="o", color=canvas.colours.get(series, "0.3"),
                    linestyle=styles[op], linewidth=1.4, markersize=4, label=name)
            ax.annotate(op, (family.gpus.iloc[-1], family.of_first.iloc[-1]), fontsize=7, xytext=(3, 0),
                        textcoords="offset points", va="center")
        ax.axhline(1.0, color="0.4", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(counts))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(min(counts) / 1.3, max(counts) * 1.6)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("per GPU, against the fewest GPUs" if "time" not in title else "fewest GPUs' time / this time")
        ax.set_title(title, fontsize=10)
    fig.suptitle("Scaling with GPU count (1.0: ideal)\nbandwidth at the largest size, time at the smallest",
                 fontsize=10)
    handles = series_handles(canvas.colours, 2.5) + [
        Line2D([], [], color="0.3", linestyle=ls, label=op) for op, ls in list(styles.items())[:8]]
    fig.legend(handles=handles, loc="outside lower center", ncols=legend_columns(fig, handles, 6), frameon=False,
               fontsize=9)
    return canvas.save(fig, "scaling", "Each family's figure per GPU at each GPU count over its figure at the "
                                       "fewest GPUs measured: 1.0 means each added GPU brought as much as the first.")
