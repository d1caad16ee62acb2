"""Nothing the tool shows can mislead (issue 25): cache-resident on-GPU copies kept out of peaks,
headline cells that name each variant, and figures that compare like with like. Read off the
committed reference runs and small frames made from them."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.analysis import cache, report, tables
from bench.analysis.figures import peaks
from bench.analysis.runs import run_index, with_series
from bench.cli.common import catalog
from bench.results import load

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"
H200_X2 = REFERENCE / "h200-x2" / "20261123-044635"    # the main sweep: copy, p2p, collectives (torch and nccl)
MIB = 1 << 20


@pytest.fixture(scope="module")
def cat():
    return catalog()


@pytest.fixture(scope="module")
def x2():
    return load(H200_X2)


@pytest.fixture(scope="module")
def reference():
    frame = load(REFERENCE)
    runs = run_index(frame)
    return with_series(frame[frame["run_dir"].isin(runs.loc[runs["chosen"], "run_dir"])])


def _d2d(sizes: list[int], l2: float | None, note: str = "") -> pd.DataFrame:
    return pd.DataFrame({"op": "d2d", "src": "cuda:0", "dst": "cuda:0", "size_bytes": sizes, "note": note,
                         "l2_bytes": l2})


# ---------------------------------------------------------------- cache-resident copies


def test_resident_note_names_the_working_set_and_the_l2():
    assert cache.resident_note(16 * MIB, 50 * MIB) == "cache-resident: 2 x 16MiB fits in the 50MiB L2"
    assert cache.resident_note(25 * MIB, 50 * MIB).startswith("cache-resident")   # 2 x 25 = 50: fits
    assert cache.resident_note(32 * MIB, 50 * MIB) == ""
    assert cache.resident_note(4096, 0) == ""                                     # L2 unknown: no claim


def test_known_l2_decides_resident_and_the_hbm_floor():
    rows = _d2d([16 * MIB, 32 * MIB, 128 * MIB, 256 * MIB, 1024 * MIB], 50 * MIB)
    assert cache.cache_resident(rows).tolist() == [True, False, False, False, False]
    # HBM figures from 4 x L2 = 200 MiB on: 32 and 128 MiB are past L2 but not well past it
    assert cache.short_of_hbm(rows).tolist() == [True, True, True, False, False]


def test_unknown_l2_keeps_d2d_below_256mib_out_and_other_ops_in():
    rows = _d2d([16 * MIB, 128 * MIB, 256 * MIB], None)
    assert cache.cache_resident(rows).tolist() == [False, False, False]      # no L2: no claim of residency
    assert cache.short_of_hbm(rows).tolist() == [True, True, False]
    h2d = rows.assign(op="h2d", src="host")
    assert not cache.short_of_hbm(h2d).any()
    peer = rows.assign(dst="cuda:1")                                          # across GPUs: the link bounds it
    assert not cache.short_of_hbm(peer).any()
    noted = rows.assign(op="whatever", note="cache-resident: 2 x 16MiB fits in the 50MiB L2")
    assert cache.short_of_hbm(noted).all()                                    # a suite's note is taken as said


def test_summary_peaks_skip_l2_and_say_graph_d2d_has_none(x2, cat):
    table = tables.summarize(x2, cat)
    d2d = table[(table["op"] == "d2d")].set_index("launch")
    assert d2d.loc["eager", "at_size"] in ("256MiB", "1GiB")                # not the 16 MiB cache figure
    assert d2d.loc["eager", "peak_gbps"] < 2200
    assert math.isnan(d2d.loc["graph", "peak_gbps"]) and "no HBM peak" in d2d.loc["graph", "peak_note"]
    assert d2d.loc["graph", "gbps@max"] > 2500                              # the 16 MiB figure, as the largest size's
    assert table.loc[table["op"] == "h2d", "peak_note"].isna().all()


def test_peak_table_has_no_cache_figure(reference, cat):
    table = peaks.peak_table(reference, cat)
    d2d = table[table["label"].str.contains("d2d")]
    assert len(d2d) == 3 and (d2d["peak_gbps"] < 2200).all()


# ---------------------------------------------------------------- headline cells


@pytest.fixture(scope="module")
def headline(reference, cat):
    return report.headline(reference, cat)


def test_latency_cell_shows_each_api_eager_and_graph_at_its_size(headline):
    cell = headline["all_reduce latency: eager / graph"]["h200-x2"]
    # what a PyTorch job pays (torch.distributed) beside NCCL called directly, never the faster alone
    assert cell.value == "torch 36.9 / 4.6 · nccl 8.8 / 4.6 µs"
    assert cell.notes[0] == "at 8B, eager / graph"
    h2d = headline["Host → device latency, pinned: eager / graph"]["h200-x1"]
    assert h2d.value == "7.6 / 2.6 µs" and h2d.notes[0] == "at 4KiB, eager / graph, ce"


def test_bandwidth_cell_names_api_launch_and_size_side_by_side(headline):
    cell = headline["all_reduce, bus bandwidth"]["h200-x2"]
    # nccl's sweep stopped at 16 MiB: each figure names its size, and a note compares them at one
    assert cell.value == "torch 343.0 GB/s (4GiB) · nccl 219.5 GB/s (16MiB)"
    assert "torch: eager at 4GiB, 76% of NVLink (450 GB/s)" in cell.notes
    assert any(n.startswith("each at 16MiB: torch 21") and n.endswith("nccl 219.5 GB/s") for n in cell.notes)
    h2d = headline["Host → device, pinned"]["h200-x2"]
    assert h2d.value.startswith("ce 55.5 GB/s (1GiB) · sm 49.6 GB/s (256MiB)")     # engines apart, not the best


def test_d2d_cell_is_an_hbm_figure(headline):
    for series, cell in headline["Device → device, one GPU (bytes copied)"].items():
        assert cell.notes[0] == "ce, eager at 1GiB", series
        assert not any(n.startswith("peak") for n in cell.notes), cell.notes   # no 16 MiB cache peak


def test_cell_of_cache_sizes_only_says_there_is_no_hbm_figure(x2, cat):
    small = x2[x2["size_bytes"] <= 16 * MIB]
    metric = next(m for m in cat["copy"].headline if m.op == "d2d")
    cell = report.bandwidth_cell(small, metric, cat)
    assert cell.value == "—" and "no HBM figure" in cell.notes[0]


def test_caveats_say_each_variant_not_the_fastest(reference):
    text = " ".join(report.caveats(reference, run_index(reference)))
    assert "fastest" not in text and "never the best of them" in text and "4 x the GPU's L2" in text
