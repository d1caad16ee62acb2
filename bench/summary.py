"""The short table printed at the end of a run: peak bandwidth and small-message latency."""
from __future__ import annotations

import math

import pandas as pd

from bench.results import bandwidth_column, usable_rows
from bench.sizes import format_size

_LATENCY_SIZES = {"collectives": (8, 65536)}
_DEFAULT_LATENCY_SIZES = (4096,)
_GROUP = ["suite", "op", "memory", "mode", "backend", "dtype", "launch", "api", "engine", "numa", "world_size"]
OVERHEAD_SIZES = (8, 1 << 20)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per op/memory/mode/launch: peak of the per-size medians, latency at small sizes."""
    ok = usable_rows(frame)
    if ok.empty:
        return pd.DataFrame()
    rows = []
    for keys, group in ok.groupby(_GROUP, sort=False):
        suite = keys[0]
        bw = bandwidth_column(suite)
        medians = group.groupby("size_bytes").agg(bw=(bw, "median"), t=("time_s", "median"))
        row = dict(zip(_GROUP, keys))
        row["peak_gbps"] = round(float(medians.bw.max()), 2)
        row["at_size"] = format_size(int(medians.bw.idxmax()))
        # The largest size's figure too: a peak at a cache-sized message can flatter (d2d in L2).
        row["gbps@max"] = round(float(medians.bw.iloc[-1]), 2)
        row["max_size"] = format_size(int(medians.index[-1]))
        for size in _LATENCY_SIZES.get(suite, _DEFAULT_LATENCY_SIZES):
            # Split collectives round sizes to whole elements per rank: take the nearest size.
            nearest = min(medians.index, key=lambda s: abs(math.log2(s / size)))
            if abs(math.log2(nearest / size)) < 0.5:
                row[f"lat_us@{format_size(size)}"] = round(float(medians.t[nearest]) * 1e6, 2)
        rows.append(row)
    table = pd.DataFrame(rows)
    # Columns that say the same thing on every row are noise in a terminal table.
    keep = [c for c in table.columns if c in ("suite", "op") or c.startswith(("peak", "at_", "lat", "gbps", "max_"))
            or table[c].nunique() > 1]
    return table[keep]


def p2p_peak_table(frame: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Per (by..., op, mode, src, dst): the peak over sizes of the per-size median GB/s."""
    ok = usable_rows(frame)
    ok = ok[(ok.suite == "p2p") & ok.algbw_gbps.notna()]
    keys = [*(by or []), "op", "mode", "src", "dst"]
    medians = ok.groupby(keys + ["size_bytes"], sort=False).algbw_gbps.median()
    return medians.groupby(level=keys, sort=False).max().reset_index()


def p2p_matrices(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """'op mode' -> src x dst table of peak GB/s (max over sizes of the per-size median)."""
    peaks = p2p_peak_table(frame)
    return {f"{op} {mode}": group.pivot(index="src", columns="dst", values="algbw_gbps").round(1)
            for (op, mode), group in peaks.groupby(["op", "mode"], sort=False)}


def api_overhead(frame: pd.DataFrame) -> pd.DataFrame:
    """Per op and launch: torch.distributed's time per op over NCCL's own, at 8 B and 1 MiB.

    What a PyTorch job pays over the library's floor; 1.0 means nothing. Empty without both apis.
    """
    ok = usable_rows(frame)
    ok = ok[(ok.suite == "collectives") & ok.api.isin(["torch", "nccl"])]
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


def format_summary(frame: pd.DataFrame) -> str:
    table = summarize(frame)
    if table.empty:
        return "no measured points"
    text = [table.fillna("").to_string(index=False)]
    overhead = api_overhead(frame)
    if not overhead.empty:
        text.append("\ncollectives: time per op through torch.distributed and through NCCL directly "
                    "(torch/nccl = what the framework adds)\n" + overhead.fillna("").to_string(index=False))
    for name, matrix in p2p_matrices(frame).items():
        text.append(f"\np2p {name}: peak GB/s, rows src, columns dst\n{matrix.fillna('-').to_string()}")
    return "\n".join(text)
