"""How the collectives suite's rows read: judged by bus bandwidth against NVLink; the table and
figure of what torch.distributed adds over NCCL's own time; the figure against GPU count."""
from __future__ import annotations

import math

from bench import lazy
from bench.ops import op_order
from bench.results import usable_rows
from bench.sizes import format_size
from bench.suite_view import Metric, SuiteView
from bench.suites.collectives.ops import OPS

pd = lazy.module("pandas")

OVERHEAD_SIZES = (8, 1 << 20)     # where the summary compares torch's time per op with NCCL's


def api_overhead(frame: pd.DataFrame) -> pd.DataFrame:
    """Per op and launch: torch.distributed's time per op over NCCL's own, at 8 B and 1 MiB.

    What a PyTorch job pays over the library's floor; 1.0 means nothing. Empty without both apis.
    """
    ok = usable_rows(frame)
    ok = ok[(ok.suite == CollectivesView.name) & ok.api.isin(["torch", "nccl"])]
    if ok.api.nunique() < 2:
        return pd.DataFrame()
    med = ok.groupby(["op", "launch", "dtype", "world_size", "api", "size_bytes"]).time_s.median().unstack("api")
    rows = []
    for (op, launch, dtype, world), group in med.groupby(level=["op", "launch", "dtype", "world_size"], sort=False):
        sizes = group.index.get_level_values("size_bytes")
        row = {"op": op, "launch": launch, "dtype": dtype, "world_size": world}
        for size in OVERHEAD_SIZES:
            nearest = min(sizes, key=lambda s: abs(math.log2(s / size)))
            if abs(math.log2(nearest / size)) < 0.5:  # split ops round to whole elements per rank
                t = group.xs(nearest, level="size_bytes").iloc[0]
                row[f"torch_us@{format_size(size)}"] = round(t["torch"] * 1e6, 2)
                row[f"nccl_us@{format_size(size)}"] = round(t["nccl"] * 1e6, 2)
                row[f"torch/nccl@{format_size(size)}"] = round(t["torch"] / t["nccl"], 2)
        rows.append(row)
    table = pd.DataFrame(rows)
    keep = [c for c in table.columns if c not in ("dtype", "world_size") or table[c].nunique() > 1]
    return table[keep]


def api_overhead_figure(frame: pd.DataFrame, canvas) -> list:
    """torch.distributed's time per op over NCCL's own, per op at 8 B and 1 MiB, eager and graph:
    what a PyTorch job pays over the library's floor (1.0: nothing)."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    from bench.analysis.figures.bars import dot_bars, per_series

    table = per_series(frame, api_overhead)
    rows = []
    for size in OVERHEAD_SIZES:
        column = f"torch/nccl@{format_size(size)}"
        if column in table:
            rows += [{canvas.SERIES: r[canvas.SERIES], "label": f"{r.op} {r.launch} @{format_size(size)}",
                      "ratio": r[column]} for _, r in table.dropna(subset=[column]).iterrows()]
    if not rows:
        return []
    ratios = pd.DataFrame(rows)
    fig, ax = dot_bars(ratios, "ratio", "%.2fx", canvas.colours,
                       "time per op through torch.distributed / through NCCL directly",
                       "What torch.distributed adds over NCCL\n"
                       "eager: the host's launch cost; graph: replays, where it should vanish")
    ax.axvline(1, color="black", linewidth=1, linestyle="--")
    ax.set_xlim(0, max(2.2, ratios["ratio"].max() * 1.15))
    return canvas.save(fig, "api_overhead", "What torch.distributed adds to NCCL's own time per op.")


def _per_world(g: pd.DataFrame, pick, column: str) -> pd.Series:
    """Per world size, the median of `column` at the size `pick` (min or max) chooses there:
    split ops round sizes to whole elements per rank, so each world has its own."""
    at = g["size_bytes"] == g.groupby("world_size")["size_bytes"].transform(pick)
    return g[at].groupby("world_size")[column].median()


def scaling_figure(frame: pd.DataFrame, canvas) -> list:
    """Collectives against GPU count (collectives.nproc=[2,4,8]): per op, bus bandwidth at the
    largest size and the time of the smallest message (8 B), eager launches. Drawn for runs
    that measured two or more world sizes."""
    # figures load matplotlib: imported when one is drawn, not by a measuring run
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from bench.analysis.figures.style import DASHES, PANEL_IN, VALUE_ORDER, add_legend, in_order

    series = canvas.SERIES
    data = usable_rows(frame)
    data = data[(data["suite"] == CollectivesView.name) & (data["launch"] == "eager")]
    data = data[data.groupby(series)["world_size"].transform("nunique") > 1]
    if data.empty:
        return []
    ops = in_order(data["op"], op_order(canvas.catalog))
    styles = dict(zip(in_order(data["api"].astype(str), VALUE_ORDER), DASHES))
    fig, axes = plt.subplots(2, len(ops), figsize=(PANEL_IN[0] * len(ops) + 0.4, PANEL_IN[1] * 2 + 1.0),
                             squeeze=False, layout="constrained")
    rows = (("max", "busbw_gbps", f"Bus bandwidth (GB/s) at {format_size(int(data['size_bytes'].max()))}"),
            ("min", "time_us", "Time per op (µs) at 8 B"))
    data = data.assign(time_us=data["time_s"] * 1e6)
    worlds = sorted(data["world_size"].unique())
    for col, op in enumerate(ops):
        for row, (pick, column, label) in enumerate(rows):
            ax = axes[row][col]
            for (name, api), g in data[data["op"] == op].groupby([series, "api"]):
                values = _per_world(g, pick, column)
                ax.plot(values.index, values.to_numpy(), color=canvas.colours[name], linestyle=styles[str(api)],
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
    add_legend(fig, {s: canvas.colours[s] for s in sorted(data[series].unique())}, styles, "api")
    return canvas.save(fig, "scaling_collectives", "Collectives against GPU count.")


NCCL = (("mode", ("default",)),)


PLATEAU = 1 << 30   # busbw still climbs below 1 GiB (all_reduce on 2 GPUs: 0.72 of NVLink at 1 GiB, 0.76 at 4)


class CollectivesView(SuiteView):
    name = "collectives"
    title = "Collectives"
    bandwidth = "busbw_gbps"
    latency_sizes = (8, 65536)
    # Between-run sigma of log time (scripts/noise_study.py): cpu, 20 runs on the 2-core CI
    # machine (results/noise/cpu); gpu, 3 runs on nvidia-h200-x2 (results/noise/h200-x2); the
    # latency-bound figure above the 0.05 (median) that the trials read at the host's usual pace
    # moved between four identical runs of one 4x H200 host (results/noise/h200-x4/identical).
    # The launch path (eager at latency-bound sizes; analysis/noise.py): as the copy suite's
    # (docs/plots-and-gate.md).
    noise = {("cpu", "latency"): 1.143, ("cpu", "bandwidth"): 0.400,
             ("gpu", "latency"): 0.10, ("gpu", "bandwidth"): 0.014, ("gpu", "launch"): 0.16}
    ops = OPS
    # held-3: held calls start on one word of every rank; held-4: held in graphs (docs/method.md,
    # "Held collectives"), up to 1.46x faster than held-3's held calls.
    methods = (*SuiteView.methods, "held-3", "held-4")
    changed_launches = {"held-3": ("held",), "held-4": ("held",)}
    splits = {"held-4": ("held",)}
    headline = (
        Metric("all_reduce, bus bandwidth", "collectives", "all_reduce", NCCL),
        Metric("all_reduce latency: eager / on the device", "collectives", "all_reduce", NCCL, latency=True),
    )

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        overhead = api_overhead(frame)
        if overhead.empty:
            return []
        return [("collectives: time per op through torch.distributed and through NCCL directly "
                 "(torch/nccl = what the framework adds)", overhead.fillna(""))]

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        return api_overhead_figure(frame, canvas) + scaling_figure(frame, canvas)

    def link_limit(self, row) -> tuple[float, str]:
        # busbw is per direction; only single-node NCCL rides NVLink (socket mode and gloo do not)
        if row["backend"] == "nccl" and int(row["nnodes"]) == 1 and row["mode"] != "socket":
            return pd.to_numeric(row["nvlink_gbps_per_gpu"], errors="coerce"), "NVLink"
        return math.nan, ""

    def expectation(self, row) -> tuple[float, float, str] | None:
        found = super().expectation(row) if int(row["world_size"]) > 1 else None
        if found is None or int(row["size_bytes"]) >= PLATEAU:
            return found
        return found[0], math.nan, found[2]
