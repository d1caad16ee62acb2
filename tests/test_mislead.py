"""Nothing the tool shows can mislead (issue 25): cache-resident on-GPU copies kept out of peaks,
headline cells that name each variant, and figures that compare like with like. Read off the
committed reference runs and small frames made from them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from bench.analysis import cache, report, tables
from bench.analysis.figures import COMMON, bars, curves, peaks, style
from bench.analysis.figures.style import Canvas
from bench.analysis.runs import SERIES, palette, run_index, with_series
from bench.cli.common import catalog
from bench.results import Sample, load, samples_frame
from bench.suites.copy import reading as copy_reading
from conftest import PRE_HELD_SWEEPS

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
def reference(reference_rows):
    frame = reference_rows
    runs = run_index(frame, PRE_HELD_SWEEPS)
    return with_series(frame[frame["run_dir"].isin(runs.loc[runs["chosen"], "run_dir"])])


def _d2d(sizes: list[int], l2: float | None, note: str = "") -> pd.DataFrame:
    return pd.DataFrame({"suite": "copy", "op": "d2d", "src": "cuda:0", "dst": "cuda:0", "size_bytes": sizes, "note": note,
                         "l2_bytes": l2})


# ---------------------------------------------------------------- cache-resident copies


def test_resident_note_names_the_working_set_and_the_l2():
    assert cache.resident_note(16 * MIB, 50 * MIB) == "cache-resident: 2 x 16MiB fits in the 50MiB L2"
    assert cache.resident_note(25 * MIB, 50 * MIB).startswith("cache-resident")   # 2 x 25 = 50: fits
    assert cache.resident_note(32 * MIB, 50 * MIB) == ""
    assert cache.resident_note(4096, 0) == ""                                     # L2 unknown: no claim


CATALOG = catalog()


def test_known_l2_decides_resident_and_the_hbm_floor():
    rows = _d2d([16 * MIB, 32 * MIB, 128 * MIB, 256 * MIB, 1024 * MIB], 50 * MIB)
    assert cache.cache_resident(rows, CATALOG).tolist() == [True, False, False, False, False]
    # HBM figures from 4 x L2 = 200 MiB on: 32 and 128 MiB are past L2 but not well past it
    assert cache.short_of_hbm(rows, CATALOG).tolist() == [True, True, True, False, False]


def test_unknown_l2_keeps_d2d_below_256mib_out_and_other_ops_in():
    rows = _d2d([16 * MIB, 128 * MIB, 256 * MIB], None)
    assert cache.cache_resident(rows, CATALOG).tolist() == [False, False, False]      # no L2: no claim of residency
    assert cache.short_of_hbm(rows, CATALOG).tolist() == [True, True, False]
    h2d = rows.assign(op="h2d", src="host")
    assert not cache.short_of_hbm(h2d, CATALOG).any()
    peer = rows.assign(dst="cuda:1")                                          # across GPUs: the link bounds it
    assert not cache.short_of_hbm(peer, CATALOG).any()
    noted = rows.assign(op="whatever", note="cache-resident: 2 x 16MiB fits in the 50MiB L2")
    assert cache.short_of_hbm(noted, CATALOG).all()                                    # a suite's note is taken as said


def test_summary_peaks_skip_l2_and_say_graph_d2d_has_none(x2, cat):
    table = tables.summarize(x2, cat)
    d2d = table[(table["op"] == "d2d")].set_index("launch")
    assert d2d.loc["eager", "at_size"] in ("256MiB", "1GiB")                # not the 16 MiB cache figure
    assert d2d.loc["eager", "peak_gbps"] < 2200
    assert math.isnan(d2d.loc["graph", "peak_gbps"]) and "no HBM peak" in d2d.loc["graph", "peak_note"]
    assert d2d.loc["graph", "gbps@max"] > 2500                              # the 16 MiB figure, as the largest size's
    assert table.loc[table["op"] == "h2d", "peak_note"].isna().all()


def _copies(times: dict[int, float], pace: dict[int, float], op: str = "h2d") -> list[Sample]:
    """Five trials of each size, taken at the host's pace given (seconds) per size."""
    return [Sample("copy", op, size, time_s=t, trial=trial, memory="pinned", backend="cuda", src="host",
                   dst="cuda:0", algbw_gbps=size / t / 1e9, host_pace_s=pace.get(size, 1e-4), verified=True,
                   run_id="r")
            for size, t in times.items() for trial in range(5)]


def test_summary_marks_a_slow_host_by_every_trial_not_by_the_trials_kept(cat):
    """A spell slowed three trials of five of every d2h point; its other two read the host at its
    usual pace (one quicker than usual). No point ran slow throughout, so no row is marked, as the
    gate and the doctor judge them (test_compare). (Read again on the trials kept, the usual pace is the quick
    reading's, and h2d, read at the usual pace in every trial, was marked host slow.)"""
    sizes = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
    healthy = {s: 5e-6 + s / 50e9 for s in sizes}
    spell = {0: 4e-4, 1: 4e-4, 2: 4e-4, 3: 0.7e-4, 4: 1e-4}
    d2h = [replace(row, host_pace_s=spell[row.trial]) for row in _copies(healthy, {}, op="d2h")]
    table = tables.summarize(samples_frame(_copies(healthy, {}) + d2h), cat)
    assert set(table["op"]) == {"h2d", "d2h"} and "caveat" not in table.columns


def test_summary_marks_rows_a_slow_host_or_a_flat_time_set(x2, cat):
    """On a busy host copies took a flat 7.6 ms from 64 KiB to 16 MiB: the table quoted 2.2 GB/s
    at 16 MiB with no mark. Rows are marked, and the mark is explained under the table."""
    sizes = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
    healthy = {s: 5e-6 + s / 50e9 for s in sizes}
    flat = _copies({**healthy, **{s: 7.6e-3 for s in sizes[2:]}}, {})
    slow = _copies(healthy, {4 << 10: 4e-4}, op="d2h")   # 4x the usual pace in every trial at 4 KiB
    frame = samples_frame(flat + slow + _copies(healthy, {4 << 10: 4e-4, 16 << 20: 4e-4}, op="h2h")
                          + _copies(healthy, {16 << 20: 4e-4}, op="bidir"))
    table = tables.summarize(frame, cat).set_index("op")
    assert table.loc["h2d", "gbps@max"] == pytest.approx(2.21, abs=0.01)
    assert table.loc["h2d", "caveat"] == "time flat 64KiB-16MiB (7.6 ms)"
    assert table.loc["d2h", "caveat"] == "host slow at 4KiB"
    # The host's own op reads its pace slow after its own threads; a bandwidth-bound size's time is not the host's.
    assert table.loc["h2h", "caveat"] == "" and table.loc["bidir", "caveat"] == ""
    text = tables.format_summary(frame, cat).splitlines()
    assert text[len(table) + 1:len(table) + 4] == [
        "caveat: a figure the row quotes that is not the link's",
        f"  host slow: {tables.CAVEATS['host slow']}", f"  time flat: {tables.CAVEATS['time flat']}"]
    assert "caveat" not in tables.summarize(x2, cat).columns   # a healthy run: no column of nothing


def test_peak_table_has_no_cache_figure(reference, cat):
    table = peaks.peak_table(reference, cat)
    d2d = table[table["label"].str.contains("d2d")]
    assert len(d2d) == 5 and (d2d["peak_gbps"] < 2200).all()   # one a machine, none an L2 figure


# ---------------------------------------------------------------- headline cells


@pytest.fixture(scope="module")
def headline(reference, cat):
    return report.headline(reference, cat)


def test_latency_cell_shows_each_api_eager_and_graph_at_its_size(headline):
    cell = headline["all_reduce latency: eager / on the device"]["h200-x2"]
    # what a PyTorch job pays (torch.distributed) beside NCCL called directly, never the faster alone
    assert cell.value == "torch.distributed 36.9 / 4.6 · nccl 8.8 / 4.6 µs"
    assert cell.notes[0] == "at 8B, eager / graph"
    h2d = headline["Host → device latency, pinned: eager / on the device"]["h200-x1"]
    assert h2d.value == "3.7 / 2.6 µs" and h2d.notes[0] == "at 4KiB, eager / graph, ce"


def test_latency_cell_prefers_the_held_figure_where_a_run_has_one(cat):
    held = load(REFERENCE / "h200-x2" / "x2a-default-2")
    cell = report.headline(with_series(held), cat)["all_reduce latency: eager / on the device"]["h200-x2"]
    assert cell.notes[0] == "at 8B, eager / held"
    words = cell.value.split(" · ")[0].split()    # torch.distributed EAGER / HELD
    eager, device = float(words[-3]), float(words[-1])
    assert device < eager / 3        # the device's own time, not the launch path


def test_bandwidth_cell_names_api_launch_and_size_side_by_side(headline):
    cell = headline["all_reduce, bus bandwidth"]["h200-x2"]
    # nccl's sweep stopped at 16 MiB: each figure names its size, and a note compares them at one
    assert cell.value == "torch.distributed 343.0 GB/s (4GiB) · nccl 219.5 GB/s (16MiB)"
    assert "torch.distributed: eager at 4GiB, 76% of NVLink (450 GB/s)" in cell.notes
    assert any(n.startswith("each at 16MiB: torch.distributed 21") and n.endswith("nccl 219.5 GB/s") for n in cell.notes)
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


# ---------------------------------------------------------------- figures


@dataclass
class Kept(Canvas):
    """A canvas that keeps each figure, open, instead of writing it."""

    kept: dict = field(default_factory=dict)

    def save(self, fig, stem: str, caption: str = "") -> list[Path]:
        self.kept[stem] = fig
        return [self.out_dir / f"{stem}.png"]


def _draw(frame: pd.DataFrame, cat, *figures) -> dict:
    frame = frame if SERIES in frame.columns else with_series(frame)
    canvas = Kept(Path("unused"), ["png"], palette(frame), cat)
    for figure in figures:
        figure(frame, canvas)
    return canvas.kept


def _texts(fig) -> list[str]:
    """Every text a figure shows: its titles, the panels' titles and tick labels, its legends."""
    out = [t.get_text() for t in fig.texts] + ([fig._suptitle.get_text()] if fig._suptitle else [])
    for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        out += [t.get_text() for t in legend.get_texts()]
    for ax in fig.axes:
        out += [ax.get_title()] + [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    return out


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_link_limits_count_each_gpu_of_a_total(x2, cat):
    data = curves._curves(x2, Kept(Path("unused"), ["png"], {}, cat))
    limits = pd.Series(curves.link_limits(data, x2, cat), index=data.index)
    h2d = data["op"] == "h2d"
    one = limits[h2d & (data["dst"] == "cuda:0")].round(1).unique().tolist()
    every = limits[h2d & (data["dst"] == "all")].round(1).unique().tolist()
    assert one == [63.0] and every == [126.0]                        # PCIe Gen5 x16 per GPU; 2 GPUs' sum
    assert set(data.loc[(data["dst"] == "all") & (data["suite"] == "copy"), curves.GPUS]) == {"total of 2 GPUs at once"}
    assert set(data.loc[data["op"] == "all_to_one", curves.GPUS]) == {"total of 1 peer with one GPU at once"}
    assert math.isnan(limits[data["op"] == "d2d"].iloc[0])


def test_totals_have_panels_of_their_own_and_marks_say_what_they_mean(x2, cat):
    rows = x2[(x2["suite"] == "copy") & x2["op"].isin(["h2d", "d2d"])].copy()
    # a value above the link: one size of h2d pinned ce, one GPU, at 2x (126 GB/s > 63)
    above = (rows["op"] == "h2d") & (rows["dst"] == "cuda:0") & (rows["size_bytes"] == 64 * MIB) \
        & (rows["engine"] == "ce") & (rows["memory"] == "pinned") & (rows["launch"] == "eager")
    rows.loc[above, "time_s"] /= 2
    rows.loc[above, ["algbw_gbps", "busbw_gbps"]] *= 2
    fig = _draw(rows, cat, curves.bandwidth_figures)["bandwidth_copy"]
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    totals = [t for t in titles if "total of 2 GPUs at once" in t]
    assert len(totals) == 2 and all(t.startswith("h2d · pinned · eager") for t in totals)   # ce and sm
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "above the link's limit" in legend and "in or near L2: not an HBM figure" in legend
    rings = [c for ax in fig.axes for c in ax.collections
             if len(c.get_edgecolors()) and tuple(c.get_edgecolors()[0][:3]) == (1.0, 0.0, 0.0)]
    assert len(rings) == 1 and len(rings[0].get_offsets()) == 1      # the one value above, nothing else
    d2d = next(ax for ax in fig.axes if ax.get_title() == "d2d · device · eager · ce")
    hollow = [line for line in d2d.get_lines() if line.get_markerfacecolor() == "white"]
    assert len(hollow) == 1 and max(hollow[0].get_xdata()) < 256 * MIB   # below 256 MiB: L2 not recorded here


def test_one_size_panels_are_bars(reference, cat):
    fig = _draw(reference, cat, curves.latency_figures)["latency_copy"]
    sm = next(ax for ax in fig.axes if ax.get_title() == "h2d · pinned · sm\nat 1MiB only")
    assert len(sm.patches) == 9      # 4 machines x eager, graph; the 2x H100 sweeps came after copies' graphs went
    assert [t.get_text() for t in sm.get_xticklabels()] == ["launch: eager", "launch: graph"]
    # every GPU at once is no launch cost: not in the latency figure
    assert not any("total of" in ax.get_title() for ax in fig.axes)


def test_concurrent_totals_compare_the_same_gpus(x2):
    table = copy_reading.concurrent_table(with_series(x2), [SERIES])
    sm = table[(table["op"] == "h2d") & (table["engine"] == "sm")]
    assert not ((sm["when"] == "alone") & (sm["gpu"] == "total")).any()     # cuda:1 never measured alone
    keys = ("h200-x2", "copy", "h2d", "pinned", "", "sm", "local")
    title = bars._concurrent_title(keys, sm, one_series=True)
    assert "cuda:0 (measured alone): 51.2 GB/s at once, 49.6 GB/s alone" in title
    assert "all 2 GPUs at once: 102.4 GB/s" in title
    ce = table[(table["op"] == "h2d") & (table["engine"] == "ce")]
    assert "total 110.5 GB/s at once; 110.4 GB/s alone (sum)" in bars._concurrent_title(keys, ce, True)


def test_legends_list_eight_series_and_never_hide_a_failed_run():
    names = [f"run-{i:02d}" for i in range(20)] + ["zz (failed)"]
    shown, left = style.capped(names)
    assert shown == names[:8] + ["zz (failed)"] and left == 12
    assert [h.get_label() for h in style.more(left)] == ["and 12 more"]


def test_a_failed_run_is_marked_in_every_figure_and_the_report(x2, cat):
    some = x2["op"].isin(["h2d", "bidir", "d2d", "uni", "all_to_one", "all_reduce"])   # each kind of figure, quickly
    failed = x2[some].assign(run_status="failed")
    kept = _draw(failed, cat, *COMMON, *(lambda f, c, s=s: cat[s].figures(f, c) for s in ("copy", "p2p", "collectives")))
    assert len(kept) >= 9
    for stem, fig in kept.items():
        assert any("h200-x2 (failed)" in t for t in _texts(fig)), stem
    assert list(report.headline(failed, cat)["Host → device, pinned"]) == ["h200-x2 (failed)"]
