"""Scaling from 1 to 2 to 4 (to N) GPUs: per family of points measured at several GPU counts,
its figure at each count and what each added GPU brought against the ideal.

The figure per GPU is what stays constant when scaling is ideal: a collective's bus bandwidth
(nccl-tests' busbw is normalized so); for copies of every GPU at once, the total over the GPUs
copying (each has its own PCIe link; the one-GPU figure is that GPU alone); for P2P into or out
of one GPU, the total (that GPU's links carry every peer: ideal is that they stay full). A step's efficiency is the figure per GPU at this
count over the one at the count before; `of_first` is the same against the smallest count.
Small-message latency (the smallest size of a collective) is the time per operation at each count.
"""
from __future__ import annotations

import math

from bench import lazy
from bench.ops import PCIE, every
from bench.points import SCALING_KEYS, variant_label
from bench.suite_view import LATENCY_BOUND, Catalog
from bench.results import usable_rows
from bench.sizes import format_size

np = lazy.module("numpy")
pd = lazy.module("pandas")

ALL = "all"
BUS = "busbw_gbps"
FAMILY = SCALING_KEYS
COLUMNS = [*FAMILY, "kind", "size_bytes", "gpus", "lanes", "figure", "per_gpu", "step", "of_first"]


def _traffic(ok: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Rows of several GPUs at once (src or dst 'all') and one-GPU host copies (ops whose
    declarations say PCIe bounds them) as their count 1: per point, its total's GB/s and its
    lanes (the parts other than the total)."""
    at_once = ok[(ok.src == ALL) | (ok.dst == ALL)]
    lanes = (at_once[at_once.part != "total"].groupby(["run_id", *FAMILY, "src", "dst", "world_size", "size_bytes"],
                                                      dropna=False).part.nunique().rename("lanes"))
    total = at_once[at_once.part == "total"].join(lanes, on=lanes.index.names)
    # Into or out of one GPU (P2P's all_to_one, one_to_all), that GPU's links carry every lane:
    # the ideal is that it stays full, so its figure per GPU is the total.
    one_gpu = total.src.str.startswith("cuda:") | total.dst.str.startswith("cuda:")
    total = total.assign(lanes=total.lanes.where(~one_gpu, 1))
    host = {(suite, op.name) for suite, op in every(catalog) if op.link == PCIE}
    copies = {key for key in zip(total.suite, total.op) if key in host}
    alone = ok[np.array([key in copies for key in zip(ok.suite, ok.op)], bool) & (ok.world_size == 1) & (ok.part == "total")
               & (ok.launch == "eager") & (ok.src != ALL) & (ok.dst != ALL)]
    alone = alone.assign(lanes=1)
    both = pd.concat([total, alone], ignore_index=True)
    return both.assign(kind="bandwidth", value=both.algbw_gbps, gpus=both.world_size)


def _bus(ok: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Rows of the suites judged by bus bandwidth (busbw stays constant under ideal scaling): its
    figure at each world size, and the time per op (small messages)."""
    bus = [name for name, suite in catalog.items() if suite.bandwidth == BUS]
    rows = usable_rows(ok[ok.suite.isin(bus)])
    if rows.empty:
        return rows.assign(kind="", value=np.nan, gpus=0, lanes=0)
    big = rows.assign(kind="bandwidth", value=rows[BUS], gpus=rows.world_size, lanes=1)
    big = big[big.value > 0]   # one rank moves nothing between GPUs: no bus bandwidth
    small = rows.assign(kind=LATENCY_BOUND, value=rows.time_s * 1e6, gpus=rows.world_size, lanes=1)
    return pd.concat([big, small], ignore_index=True)


def scaling_table(frame: pd.DataFrame, catalog: Catalog, by: list[str] = ()) -> pd.DataFrame:
    """The long table (COLUMNS, after `by`): each family measured at two or more GPU counts, at
    the largest size measured at every count (latency: the smallest), one row per count."""
    ok = frame[frame.status == "ok"]   # every part: the lanes of traffic at once are its parts
    if usable_rows(ok).empty:
        return pd.DataFrame(columns=[*by, *COLUMNS])
    ok = ok.assign(**{c: ok[c].fillna("") for c in FAMILY})
    points = pd.concat([_traffic(ok, catalog), _bus(ok, catalog)], ignore_index=True)
    out = []
    for keys, group in points.groupby([*by, *FAMILY, "kind"], sort=False, dropna=False):
        counts = sorted(set(group.gpus))
        if len(counts) < 2:
            continue
        common = set.intersection(*(set(group.size_bytes[group.gpus == n]) for n in counts))
        if not common:
            continue
        size = min(common) if keys[-1] == LATENCY_BOUND else max(common)
        at = group[group.size_bytes == size]
        base = dict(zip([*by, *FAMILY, "kind"], keys))
        first = previous = None
        for n in counts:
            here = at[at.gpus == n]
            figure, lanes = float(here.value.median()), int(here.lanes.median())
            per_gpu = figure / lanes if keys[-1] == "bandwidth" else figure
            if keys[-1] == LATENCY_BOUND:   # a time: the ideal is no more of it
                step = previous / per_gpu if previous else math.nan
                of_first = first / per_gpu if first else 1.0
            else:
                step = per_gpu / previous if previous else math.nan
                of_first = per_gpu / first if first else 1.0
            first = per_gpu if first is None else first
            previous = per_gpu
            out.append({**base, "size_bytes": int(size), "gpus": int(n), "lanes": lanes, "figure": figure,
                        "per_gpu": per_gpu, "step": step, "of_first": of_first})
    return pd.DataFrame(out, columns=[*by, *COLUMNS])


def format_scaling(table: pd.DataFrame) -> pd.DataFrame:
    """One row per family: the figure at each count ('2 GPUs') and each step's efficiency ('1->2')."""
    rows = []
    for _, group in table.groupby([*FAMILY, "kind"], sort=False):
        first = group.iloc[0]
        unit = "GB/s" if first.kind == "bandwidth" else "us"
        row = {"family": variant_label(first[FAMILY]), "size": format_size(int(first.size_bytes)), "unit": unit}
        previous = None
        for r in group.itertuples():
            row[f"{r.gpus} GPU{'s' * (r.gpus > 1)}"] = round(r.figure, 1 if unit == "GB/s" else 2)
            if previous is not None:
                row[f"{previous}->{r.gpus}"] = round(r.step, 2)
            previous = r.gpus
        row["of_first"] = round(group.of_first.iloc[-1], 2)
        rows.append(row)
    wide = pd.DataFrame(rows)
    return wide.astype(object).where(wide.notna(), "")


TITLE = ("scaling: the figure at each GPU count (bandwidth: busbw, or the total of every GPU at once; latency: "
         "time per op) and each step's efficiency per GPU against the ideal (1.0: each added GPU brings as much)")
