"""Peaks against what the link can carry, and against the price: each variant's best eager
figure as a share of its link's theoretical peak (the suite says which link), and GB/s per
on-demand dollar an hour."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.analysis.cache import hbm_rows
from bench.suite_view import Catalog, view
from bench.analysis.figures.bars import dot_bars
from bench.analysis.figures.style import SERIES, VALUE_ORDER, Canvas, rank_in, with_bandwidth
from bench.ops import op_order
from bench.points import SERIES_KEYS, variant_label
from bench.results import usable_rows


def peak_table(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """Peak bandwidth per run and variant (max over sizes, and pairs, of the per-size median;
    sizes past L2 for on-GPU copies),
    with the link's theoretical peak (the suite's link_limit), the achieved share, and the
    instance's price; rows in the catalog's order of suites, then by link, op and values."""
    data = with_bandwidth(usable_rows(frame), catalog).dropna(subset=["bandwidth_gbps"])
    # Graph and held launches stop at their size limits, so their largest figure is no peak: eager only.
    # Collectives through NCCL directly peak where torch.distributed's do (the wire, not the host,
    # bounds large messages): one row, torch's, what a job calls.
    # Every GPU at once is many links' traffic: concurrent_figure shows it, not one link's share.
    # On-GPU copies in or near L2 measure the cache (bench.analysis.cache): no HBM peak.
    data = data[(data["launch"] == "eager") & (data["api"] != "nccl") & (data["src"] != "all") & (data["dst"] != "all")]
    data = hbm_rows(data, catalog)
    if data.empty:
        return pd.DataFrame(columns=["instance", "run_id", SERIES, "label", "peak_gbps", "link", "link_gbps",
                                     "percent", "usd_per_hour"])
    runs = ["instance", "run_id", SERIES]
    med = data.groupby(runs + SERIES_KEYS + ["src", "dst", "size_bytes"])["bandwidth_gbps"].median()
    peaks = med.groupby(level=runs + SERIES_KEYS).max().rename("peak_gbps").reset_index()
    links = data.groupby(runs)[["pcie_gen", "pcie_width", "nvlink_gbps_per_gpu", "usd_per_hour"]].first()
    peaks = peaks.join(links, on=runs)
    bounds = peaks.apply(lambda row: view(catalog, row["suite"]).link_limit(row), axis=1, result_type="expand")
    peaks["link_gbps"], peaks["link"] = pd.to_numeric(bounds[0], errors="coerce"), bounds[1]
    peaks["percent"] = 100 * peaks["peak_gbps"] / peaks["link_gbps"]
    peaks["usd_per_hour"] = pd.to_numeric(peaks["usd_per_hour"], errors="coerce")
    peaks["label"] = peaks.apply(variant_label, axis=1)
    suites, ops = list(catalog), op_order(catalog)
    order = peaks.apply(lambda r: (rank_in(r["suite"], suites), r["link"], rank_in(r["op"], ops),
                                   rank_in(r["memory"], VALUE_ORDER), rank_in(r["mode"], VALUE_ORDER), r["label"]), axis=1)
    return peaks.loc[order.sort_values().index].reset_index(drop=True)


def _short_labels(peaks: pd.DataFrame) -> pd.Series:
    """Labels without the words every row of a suite shares beyond suite and op (float32, n=2)."""
    words = peaks["label"].str.split()
    common = {suite: set.intersection(*(set(w[2:]) for w in words[peaks["suite"] == suite]))
              for suite in peaks["suite"].unique()}
    return pd.Series([" ".join(x for i, x in enumerate(w) if i < 2 or x not in common[suite])
                      for w, suite in zip(words, peaks["suite"])], index=peaks.index)


def peak_fraction_figure(frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
    """Peak bandwidth as % of the link's theoretical peak (PCIe for copies, NVLink for P2P and NCCL)."""
    peaks = peak_table(frame, canvas.catalog).dropna(subset=["percent"])
    if peaks.empty:
        return []
    # Each run's one world size is its series' (h200-x2: 2 ranks): one row per collective across runs.
    ranks = peaks["label"].str.replace(r" n=\d+\b", "", regex=True)
    one_world = peaks.groupby([canvas.SERIES, ranks])["world_size"].transform("nunique") == 1
    peaks = peaks.assign(label=ranks.where(one_world, peaks["label"]))
    peaks = peaks.assign(label=_short_labels(peaks) + " (" + peaks["link"] + ")")
    fig, ax = dot_bars(peaks, "percent", "%.0f%%", canvas.colours,
                        "% of the link's theoretical peak",
                        "Peak bandwidth vs the link's theoretical peak\n"
                        "eager launch, highest per-size median\n"
                        "PCIe: gen × width, per direction; NVLink: the instance catalogue")
    ax.axvline(100, color="black", linewidth=1, linestyle="--")
    ax.set_xlim(0, max(115, peaks["percent"].max() * 1.12))
    return canvas.save(fig, "peak_vs_link", "Each variant's best eager figure as a share of the link it crosses.")


def per_dollar_figure(frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
    """Peak bandwidth per on-demand dollar an hour, for instances with a known price."""
    peaks = peak_table(frame, canvas.catalog)
    peaks = peaks[peaks["usd_per_hour"] > 0]
    if peaks.empty:
        return []
    peaks = peaks.assign(per_dollar=peaks["peak_gbps"] / peaks["usd_per_hour"])
    peaks = peaks.assign(label=_short_labels(peaks))
    fig, ax = dot_bars(peaks, "per_dollar", "%.2f", canvas.colours,
                       "Peak bandwidth per price (GB/s per $/hour, on-demand)", "Bandwidth per dollar")
    ax.set_xlim(0, peaks["per_dollar"].max() * 1.15)
    return canvas.save(fig, "bandwidth_per_dollar", "Peak bandwidth per on-demand dollar an hour.")
