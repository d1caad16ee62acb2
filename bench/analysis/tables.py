"""The short table printed at the end of a run: peak bandwidth and small-message latency."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.results import bandwidth_column, usable_rows
from bench.sizes import format_size

_LATENCY_SIZES = {"collectives": (8, 65536)}
_DEFAULT_LATENCY_SIZES = (4096,)
_GROUP = ["suite", "op", "memory", "mode", "backend", "dtype", "launch", "api", "engine", "numa", "world_size"]
OVERHEAD_SIZES = (8, 1 << 20)
PAIR_OPS = ("uni", "bidir")
CONCURRENT_P2P = ("all_to_one", "one_to_all")
_VARIANT = ["suite", "op", "memory", "mode", "engine", "numa"]
AT_ONCE, ALONE = "at once", "alone"


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per op/memory/mode/launch: peak of the per-size medians, latency at small sizes."""
    ok = usable_rows(frame)
    ok = ok[ok["op"] != "latency"]   # no bandwidth: latency_table() has them
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
    """Per (by..., op, mode, src, dst): the peak over sizes of the per-size median GB/s.

    Pair ops only (uni, bidir); SM copies get matrices of their own, their mode named 'peer sm'.
    """
    ok = usable_rows(frame)
    ok = ok[(ok.suite == "p2p") & ok.algbw_gbps.notna() & ok.op.isin(PAIR_OPS)]
    ok = ok.assign(mode=ok["mode"].where(ok["engine"] != "sm", ok["mode"] + " sm"))
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


# Positional (numpy) masks and keys below: frames joined from several runs may repeat index labels.
def _gpu_of(rows: pd.DataFrame) -> np.ndarray:
    """The GPU a one-GPU host copy ran on: its end that is not the host."""
    return np.where(rows["src"] == "host", rows["dst"], rows["src"])


def _matching(rows: pd.DataFrame, values: dict) -> pd.DataFrame:
    mask = np.ones(len(rows), dtype=bool)
    for column, value in values.items():
        mask &= (rows[column].astype(str) == str(value)).to_numpy()
    return rows[mask]


def _median_by(rows: pd.DataFrame, key: np.ndarray) -> pd.Series:
    return rows.groupby(np.asarray(key))["algbw_gbps"].median()


def _host_concurrent(ok: pd.DataFrame, by: list[str]) -> list[dict]:
    """Copies with every GPU at once: each GPU's part and the total at the largest size, beside
    the same copy on each GPU alone (eager, same size) and those figures summed."""
    rows = []
    together = ok[(ok.suite == "copy") & ((ok.src == "all") | (ok.dst == "all"))]
    alone = ok[(ok.suite == "copy") & (ok.world_size == 1) & (ok.part == "total") & (ok.launch == "eager")]
    for keys, group in together.groupby(by + _VARIANT, sort=False):
        size = group.size_bytes.max()
        base = {**dict(zip(by + _VARIANT, keys)), "size_bytes": size}
        at = group[group.size_bytes == size]
        per_part = _median_by(at, at.part.to_numpy())
        rows += [{**base, "when": AT_ONCE, "gpu": gpu, "gbps": v} for gpu, v in per_part.items()]
        same = _matching(alone[alone.size_bytes == size], dict(zip(by + _VARIANT, keys)))
        each = _median_by(same, _gpu_of(same))
        if len(each):
            rows += [{**base, "when": ALONE, "gpu": gpu, "gbps": v} for gpu, v in each.items()]
            rows.append({**base, "when": ALONE, "gpu": "total", "gbps": each.sum()})
    return rows


def _peer_concurrent(ok: pd.DataFrame, by: list[str]) -> list[dict]:
    """all_to_one / one_to_all: the traffic into or out of each GPU at the largest size. xferbench
    names the one GPU in dst (all_to_one) or src (one_to_all), part total; nvbandwidth's import
    names it in part, src and dst being 'all'."""
    rows = []
    peer = ok[(ok.suite == "p2p") & ok.op.isin(CONCURRENT_P2P)]
    imported = ((peer.src == "all") & (peer.dst == "all")).to_numpy()
    part_total, part_gpu = (peer.part == "total").to_numpy(), peer.part.str.startswith("cuda:").to_numpy()
    peer = peer[(~imported & part_total) | (imported & part_gpu)]
    for keys, group in peer.groupby(by + _VARIANT, sort=False):
        size = group.size_bytes.max()
        at = group[group.size_bytes == size]
        one = np.where((at.src == "all") & (at.dst == "all"), at.part,
                       np.where(at.op == "all_to_one", at.dst, at.src))
        base = {**dict(zip(by + _VARIANT, keys)), "size_bytes": size, "when": AT_ONCE}
        rows += [{**base, "gpu": gpu, "gbps": v} for gpu, v in _median_by(at, one).items()]
    return rows


def concurrent_table(frame: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Traffic on every GPU at once, long form: per (by..., variant, size, when, gpu) the median
    GB/s over trials at the largest size measured so. Copies: gpu cuda:i and total, when 'at once'
    and 'alone' (that GPU by itself; total: their sum). Peer traffic: gpu = the one GPU."""
    ok = frame[(frame.status == "ok") & frame.algbw_gbps.notna()]
    rows = _host_concurrent(ok, list(by or [])) + _peer_concurrent(ok, list(by or []))
    return pd.DataFrame(rows, columns=[*(by or []), *_VARIANT, "size_bytes", "when", "gpu", "gbps"])


def latency_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Link load latency (op latency): median ns per dependent load, per memory and GPU pair."""
    ok = usable_rows(frame)
    ok = ok[ok.op == "latency"]
    keys = ["suite", "memory", "mode", "numa", "src", "dst"]
    table = (ok.groupby(keys, sort=False).time_s.median() * 1e9).round(1).rename("ns_per_access").reset_index()
    return table[[c for c in table.columns if c in ("src", "dst", "ns_per_access") or table[c].nunique() > 1]]


def _device_order(name: str) -> tuple:
    return (name == "total", int(name.split(":")[1]) if name.startswith("cuda:") else -1, name)


def _format_concurrent(table: pd.DataFrame) -> str:
    wide = table.assign(size=table.size_bytes.map(lambda s: format_size(int(s)))).pivot_table(
        index=[*_VARIANT, "size", "when"], columns="gpu", values="gbps", sort=False).round(1)
    wide = wide[sorted(wide.columns, key=_device_order)].reset_index()
    keep = [c for c in wide.columns if c not in _VARIANT or c in ("suite", "op") or wide[c].nunique() > 1]
    shown = wide[keep].astype(object)
    return shown.where(shown.notna(), "").to_string(index=False)


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
    concurrent = concurrent_table(frame)
    if not concurrent.empty:
        text.append("\nevery GPU at once: GB/s per GPU at the largest size, beside each GPU alone "
                    "(p2p: into or out of the one GPU)\n" + _format_concurrent(concurrent))
    latency = latency_table(frame)
    if not latency.empty:
        text.append("\nlink latency: ns per dependent 8-byte load by dst's SMs of memory on src\n"
                    + latency.to_string(index=False))
    return "\n".join(text)
