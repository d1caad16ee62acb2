"""The pipeline's figure: what each loop delivers against the batch size, and each stage alone."""
from __future__ import annotations

from bench import lazy


from bench.suites.pipeline.model import STAGE_NAMES, WORKER_STAGES
from bench.suites.pipeline.tables import stage_table, table

np = lazy.module("numpy")
pd = lazy.module("pandas")


def pipeline_figure(frame: pd.DataFrame, canvas) -> list:
    """The pipeline suite, a column per producer and sample size: above, GB/s each loop delivers
    against the batch size (dashed black: the link; dotted grey: the bound of the best loop);
    below, each stage alone (solid: the most workers measured, dashed: none, dotted: between),
    the link and the best loop in black."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    import matplotlib.pyplot as plt
    import seaborn as sns

    from bench.analysis.figures.bars import per_series

    SERIES = canvas.SERIES
    loops = per_series(frame, table)
    if loops.empty:
        return []
    stages = per_series(frame, stage_table)
    loops = loops.assign(producer=loops["mode"].str.split().str[0],
                         setting=(loops["memory"] + " " + loops["mode"].str.split(n=1).str[1].fillna("")).str.strip())
    columns = sorted(set(zip(loops["producer"], loops["sample"])))
    series = sorted(loops[SERIES].unique())
    settings = sorted(loops["setting"].unique())
    line_colours = dict(zip(settings, sns.color_palette("tab10", len(settings))))
    stage_colours = dict(zip(STAGE_NAMES, sns.color_palette("Dark2", len(STAGE_NAMES))))
    fig, axes = plt.subplots(2 * len(series), len(columns), squeeze=False, layout="constrained",
                             figsize=(5.2 * len(columns) + 0.4, 3.4 * 2 * len(series) + 1.6))
    sizes = loops["size_bytes"].unique()
    for r, run in enumerate(series):
        for c, (producer, sample) in enumerate(columns):
            top, bottom = axes[2 * r][c], axes[2 * r + 1][c]
            d = loops[(loops[SERIES] == run) & (loops["producer"] == producer) & (loops["sample"] == sample)]
            best = _draw_loops(top, d, line_colours)
            top.set_title(f"{run} · {producer} samples of {sample}", fontsize=10)
            top.set_ylabel("GB/s the loop delivers", fontsize=9)
            s = stages[(stages[SERIES] == run) & (stages["sample"] == sample)] if not stages.empty else stages
            _draw_stages(bottom, s, producer, stage_colours)
            bottom.plot(best["size_bytes"], best["gbps"], color="black", linewidth=2)
            bottom.set_ylabel("GB/s of each stage alone", fontsize=9)
            for ax in (top, bottom):
                _scale(ax, sizes)
    fig.legend(handles=_legend(line_colours, stage_colours, loops, stages), loc="outside lower center", ncols=3,
               frameon=False, fontsize=8)
    fig.suptitle("Input pipeline: what a DataLoader-fed loop delivers, and each of its stages alone", fontsize=11)
    return canvas.save(fig, "pipeline", "Input pipeline: what each loop delivers against the batch size, and each "
                       "stage alone.")


def _draw_loops(ax, d: pd.DataFrame, colours: dict) -> pd.DataFrame:
    """Each loop's GB/s against the batch size, the bound of the best loop and the link; the best
    loop's rows, a row a batch size."""
    for setting, g in d.groupby("setting"):
        g = g.sort_values("size_bytes")
        ax.plot(g["size_bytes"], g["gbps"], color=colours[setting], marker="o", markersize=3)
    best = d.loc[d.groupby("size_bytes")["gbps"].idxmax()].sort_values("size_bytes")
    if "bound_gbps" in best:
        ax.plot(best["size_bytes"], best["bound_gbps"], color="grey", linestyle=":", linewidth=1.2)
    if "link_gbps" in d:
        link = d.groupby("size_bytes")["link_gbps"].first().dropna()
        ax.plot(link.index, link.values, color="black", linestyle="--", linewidth=1.2)
    return best


def _draw_stages(ax, s: pd.DataFrame, producer: str, colours: dict) -> None:
    """Each stage alone, the workers' stages of this column's producer only; the pinned copy is
    the link, drawn as above."""
    if s.empty:
        return
    s = s[~s["stage"].isin(WORKER_STAGES) | (s["producer"] == producer)]
    most = s["workers"].max()
    for (stage, memory, w), g in s.groupby(["stage", "memory", "workers"]):
        g = g.sort_values("size_bytes")
        if stage == "h2d" and memory == "pinned":
            ax.plot(g["size_bytes"], g["gbps"], color="black", linestyle="--", linewidth=1.2)
            continue
        style = "-" if w in (-1, most) else "--" if w == 0 else ":"
        ax.plot(g["size_bytes"], g["gbps"], color=colours[stage], linestyle=style, marker="o",
                markersize=2.5, linewidth=1.3)


def _scale(ax, sizes) -> None:
    """Log axes over the batch sizes and the GB/s drawn."""
    from bench.analysis.figures.style import log_y_axis, size_axis

    values = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()])
    values = values[values > 0]
    size_axis(ax, sizes)
    log_y_axis(ax, values.max() / values.min() if len(values) else 10)
    ax.grid(True, which="major", alpha=0.35)
    ax.set_xlabel("Batch size", fontsize=9)


def _legend(line_colours: dict, stage_colours: dict, loops: pd.DataFrame, stages: pd.DataFrame) -> list:
    """The legend's entries: each loop setting, the bound, the link, the best loop, each stage
    drawn in colour and the worker counts' line styles."""
    from matplotlib.lines import Line2D

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
    return handles
