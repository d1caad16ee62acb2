"""The short table printed at the end of a run: peak bandwidth and small-message latency."""
from __future__ import annotations

import pandas as pd

from bench.sizes import format_size

# Collectives are judged by bus bandwidth (nccl-tests), everything else by bytes moved per second.
_BW_COLUMN = {"collectives": "busbw_gbps"}
_LATENCY_SIZES = {"collectives": (8, 65536)}
_DEFAULT_LATENCY_SIZES = (4096,)
_GROUP = ["suite", "op", "memory", "mode", "backend", "dtype", "launch", "world_size"]


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per op/memory/mode/launch: peak of the per-size medians, latency at small sizes."""
    ok = frame[(frame.status == "ok") & (frame.part == "total")]
    if ok.empty:
        return pd.DataFrame()
    rows = []
    for keys, group in ok.groupby(_GROUP, sort=False):
        suite = keys[0]
        bw = _BW_COLUMN.get(suite, "algbw_gbps")
        medians = group.groupby("size_bytes").agg(bw=(bw, "median"), t=("time_s", "median"))
        row = dict(zip(_GROUP, keys))
        row["peak_gbps"] = round(float(medians.bw.max()), 2)
        row["at_size"] = format_size(int(medians.bw.idxmax()))
        for size in _LATENCY_SIZES.get(suite, _DEFAULT_LATENCY_SIZES):
            near = medians.index[medians.index >= size]
            if len(near):
                row[f"lat_us@{format_size(size)}"] = round(float(medians.t[near[0]]) * 1e6, 2)
        rows.append(row)
    table = pd.DataFrame(rows)
    # Columns that say the same thing on every row are noise in a terminal table.
    keep = [c for c in table.columns if c in ("suite", "op") or c.startswith(("peak", "at_", "lat"))
            or table[c].nunique() > 1]
    return table[keep]


def format_summary(frame: pd.DataFrame) -> str:
    table = summarize(frame)
    if table.empty:
        return "no measured points"
    return table.fillna("").to_string(index=False)
