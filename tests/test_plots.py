"""bench.analysis (runs, figures) and xferbench-plot: which runs are drawn, and figures from synthetic runs and the committed reference runs.

Drawing is the slow part: synthetic runs are small, and reference figures are drawn for the two
small graph-experiment runs only (tests/test_report.py draws every kind from the reference sweeps).
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from bench.analysis import figures as figs
from bench.analysis.figures import curves, peaks
from bench.analysis.figures.style import Canvas
from bench.analysis.runs import SERIES, palette, run_index, select_runs, with_series
from bench.cli import plot as plot_cli
from bench.cli.common import catalog
from bench.links import pcie_gbps
from bench.results import ResultsError, load
from bench.suites.p2p import reading as p2p_reading
from conftest import PRE_HELD_SWEEPS
from synthetic import KiB, MiB, collective_samples, copy_samples, p2p_samples, write_run

SIZES = [4 * KiB, 64 * KiB, MiB, 16 * MiB]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"
MAIN_SWEEP, GRAPH_RUNS = "x2ap-default-2", ("20261122-214352", "20261122-214411")
CATALOG = catalog()


def _draw(figure, frame, out_dir="unused", formats=("png",)) -> list[Path]:
    """A figure function (frame, canvas) as render() calls it: the frame with its series, a colour each."""
    frame = with_series(frame)
    return figure(frame, Canvas(Path(out_dir), list(formats), palette(frame), CATALOG))


def _small_run(rng, scale=1.0, suites=("copy", "p2p", "collectives")):
    # few ops and sizes: drawing time grows with panels, and the tests must stay quick
    samples = []
    if "copy" in suites:
        samples += [s for s in copy_samples(rng, scale=scale, trials=3, sizes=SIZES) if s.op in ("h2d", "d2d")]
    if "p2p" in suites:
        samples += [s for s in p2p_samples(rng, gpus=3, scale=scale, sizes=SIZES[-2:]) if s.op == "uni"]
    if "collectives" in suites:
        samples += [s for s in collective_samples(rng, scale=scale, trials=3, sizes=SIZES) if s.op == "all_reduce"]
    return samples


def _set_status(run_dir: Path, status: str) -> None:
    meta = json.loads((run_dir / "meta.json").read_text())
    (run_dir / "meta.json").write_text(json.dumps({**meta, "status": status}))


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(11)
    write_run(root / "lent", _small_run(rng), instance="h200-x4", pcie_gen=5, pcie_width=16,
              nvlink_gbps_per_gpu=450, usd_per_hour=None)
    write_run(root / "cloud", _small_run(rng, scale=0.8, suites=("copy",)), instance="p5en.48xlarge",
              pcie_gen=5, pcie_width=16, nvlink_gbps_per_gpu=450, usd_per_hour=63.296)
    return load(root)


@pytest.fixture(scope="module")
def rendered(frame, tmp_path_factory):
    out = tmp_path_factory.mktemp("plots")
    return out, figs.render(frame, out, CATALOG)


@pytest.fixture(scope="module")
def reference(reference_rows):
    return reference_rows


@pytest.fixture
def figures(monkeypatch):
    """Figures the plot functions would save, kept open for inspection instead."""
    drawn = []

    def keep(canvas, fig, stem, caption=""):
        drawn.append((stem, fig))
        return []

    monkeypatch.setattr(Canvas, "save", keep)
    yield drawn
    for _, fig in drawn:
        plt.close(fig)


def _panel(fig, title):
    return next(ax for ax in fig.axes if ax.get_title() == title)


# ---------------------------------------------------------------- which runs


def test_default_run_is_each_instances_main_sweep(reference):
    runs = run_index(reference)
    chosen = runs[runs["chosen"]].set_index("instance")
    assert sorted(chosen.index) == ["h100-x1", "h100-x2", "h200-x1", "h200-x2", "h200-x4"]
    # the graph experiments are newer and complete, but cover one suite and two ops
    assert chosen.loc["h200-x2", "run_id"] == MAIN_SWEEP and chosen.loc["h200-x2", "why"] == "main sweep"
    assert (runs["instance"] == "h200-x2").sum() == 48 and runs["chosen"].sum() == 5


def test_named_runs_replace_the_default_for_their_instance_only(reference):
    folder = str(REFERENCE / "h200-x2" / GRAPH_RUNS[0])
    runs = run_index(reference, [folder, f"h200-x2/{GRAPH_RUNS[1]}"])
    chosen = runs[runs["chosen"]]
    assert sorted(chosen.loc[chosen["instance"] == "h200-x2", "run_id"]) == list(GRAPH_RUNS)
    assert set(chosen.loc[chosen["instance"] == "h200-x2", "why"]) == {"named"}
    assert sorted(chosen["instance"]) == ["h100-x1", "h100-x2", "h200-x1", "h200-x2", "h200-x2", "h200-x4"]
    assert run_index(reference, every=True)["chosen"].all()


def test_unknown_run_name_is_refused_with_the_runs_there(reference):
    with pytest.raises(ResultsError, match=r"'20991231-000000'.*h200-x2/20261122-212425"):
        run_index(reference, ["20991231-000000"])


def test_an_incomplete_run_is_passed_over_unless_nothing_is_complete(tmp_path):
    rng = np.random.default_rng(3)
    for name in ("20260101-000000", "20260102-000000"):
        write_run(tmp_path / name, _small_run(rng, suites=("copy",)), instance="box")
    _set_status(tmp_path / "20260102-000000", "interrupted")     # the newer one
    runs = run_index(load(tmp_path)).set_index("run_id")
    assert runs.loc["20260101-000000", "chosen"] and not runs.loc["20260102-000000", "chosen"]
    # load() will carry the status as a column; when it does, that is what counts
    frame = load(tmp_path).assign(run_status="failed")
    runs = run_index(frame).set_index("run_id")
    assert runs.loc["20260102-000000", "chosen"] and runs.loc["20260102-000000", "why"] == "no complete run"


def test_the_main_sweep_is_the_run_that_asked_for_the_most_suites(reference):
    """On one GPU the default sweep runs copy alone (p2p and collectives skipped), with fewer ops
    than a pipeline run of loops and stages: it is still the main sweep, by what its config asked."""
    runs = run_index(reference)
    h200 = runs[runs["instance"] == "h200-x1"].set_index("run_id")
    pipeline = h200.loc["pipeline-1"]
    chosen = h200[h200["chosen"]].iloc[0]
    assert pipeline.ops > chosen.ops and pipeline.suites == chosen.suites == 1
    assert chosen.name == "x1c-default-2" and chosen.why == "main sweep", h200


def test_series_is_the_instance_unless_it_has_several_runs(reference):
    one = with_series(select_runs(reference))
    assert sorted(one[SERIES].unique()) == ["h100-x1", "h100-x2", "h200-x1", "h200-x2", "h200-x4"]
    h100_once = reference[(reference["instance"] != "h100-x1") | (reference["run_id"] == "20261123-040857")]
    every = with_series(h100_once)
    assert f"h200-x2/{MAIN_SWEEP}" in set(every[SERIES]) and "h100-x1" in set(every[SERIES])


def test_peak_vs_link_reads_the_chosen_run_not_an_average(reference):
    table = peaks.peak_table(with_series(select_runs(reference, PRE_HELD_SWEEPS)), CATALOG)
    all_reduce = table[(table["op"] == "all_reduce") & (table["mode"] == "default") & (table["instance"] == "h200-x2")]
    assert len(all_reduce) == 1      # the graph experiments' all_reduce (about 50%) is not mixed in
    assert all_reduce["percent"].iloc[0] == pytest.approx(76.2, abs=0.5)  # the 2026-11-23 main sweep


# ---------------------------------------------------------------- figures


def test_every_figure_renders_to_a_nonempty_png(rendered):
    out, paths = rendered
    assert sorted(p.name for p in paths) == sorted([
        "bandwidth_copy.png", "bandwidth_p2p.png", "bandwidth_collectives.png",
        "latency_copy.png", "latency_collectives.png", "latency_p2p.png",
        "p2p_heatmap_h200-x4.png", "peak_vs_link.png", "bandwidth_per_dollar.png"])
    for path in paths:
        assert path.parent == out and path.read_bytes()[:8] == PNG_MAGIC
        height, width = matplotlib.image.imread(path).shape[:2]
        assert height > 200 and width > 300, path.name


def test_variants_get_panels_and_runs_get_colours(reference, figures):
    experiments = reference[reference["run_id"].isin(GRAPH_RUNS)]
    _draw(curves.bandwidth_figures, experiments)
    (stem, fig), = figures
    assert stem == "bandwidth_collectives"
    titles = {ax.get_title() for ax in fig.axes}
    assert titles == {f"{op} · {launch}" for op in ("all_reduce", "all_gather") for launch in ("eager", "graph")}
    ax = _panel(fig, "all_reduce · eager")
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    # one band per run, each of its own colour: two runs' trials are never merged into one spread
    assert len(bands) == 2 and len({tuple(b.get_facecolor()[0][:3]) for b in bands}) == 2
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"


def test_latency_puts_eager_and_graph_in_one_panel(reference, figures):
    _draw(curves.latency_figures, reference[reference["run_id"] == GRAPH_RUNS[0]])
    (_, fig), = figures
    ax = _panel(fig, "all_reduce")
    # each curve a line and its markers (drawn apart: hollow where a point is not what it seems)
    assert sorted(line.get_linestyle() for line in ax.lines if line.get_linestyle() != "None") == ["-", "--"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["h200-x2", "launch: eager", "launch: graph"]


def test_a_narrow_range_keeps_a_linear_axis(frame, figures):
    big = frame[(frame["suite"] == "copy") & (frame["size_bytes"] >= MiB)]   # about 40-50 GB/s only
    _draw(curves.bandwidth_figures, big)
    (_, fig), = figures
    assert {ax.get_yscale() for ax in fig.axes if ax.axison} == {"linear"}


def test_a_blank_key_shares_panels_with_the_one_value_set(frame, figures):
    # a schema-1 run (engine blank) beside one that records engine=ce: one panel, not two
    copies = frame[frame["suite"] == "copy"]
    copies = copies.assign(engine=copies["engine"].where(copies["instance"] != "p5en.48xlarge", "ce"))
    _draw(curves.bandwidth_figures, copies)
    (_, fig), = figures
    assert {ax.get_title() for ax in fig.axes if ax.axison} == {
        "h2d · pinned · eager", "h2d · pinned · graph", "h2d · pageable · eager", "d2d · device · eager"}
    curves_drawn = [line for line in _panel(fig, "h2d · pinned · eager").lines if line.get_linestyle() != "None"]
    assert len(curves_drawn) == 2         # both instances


def test_peak_vs_link_is_compact(reference, tmp_path):
    path, = _draw(peaks.peak_fraction_figure, select_runs(reference, PRE_HELD_SWEEPS), tmp_path)
    height, width = matplotlib.image.imread(path).shape[:2]
    # 5 machines, 21 rows (a collective of one world size a run is one row): was 1320 x 3672 with
    # every run averaged in, when there were 4
    assert width <= 1000 and height <= 1850


def test_latency_needs_small_sizes(frame, tmp_path):
    assert _draw(curves.latency_figures, frame[frame["size_bytes"] > MiB], tmp_path) == []


def test_absent_data_is_skipped_not_drawn(frame, tmp_path):
    copies = frame[frame["instance"] == "h200-x4"]
    copies = copies[copies["suite"] == "copy"]
    assert _draw(CATALOG["p2p"].figures, copies, tmp_path) == []    # no heatmap, no concurrent traffic
    assert _draw(peaks.per_dollar_figure, copies, tmp_path) == []   # no price for this instance
    failed = frame.assign(status="failed")
    assert figs.render(failed, tmp_path / "none", CATALOG) == []
    unknown_links = frame.assign(pcie_gen=None, pcie_width=None, nvlink_gbps_per_gpu=None)
    assert _draw(peaks.peak_fraction_figure, unknown_links, tmp_path) == []


def test_svg_as_well_as_png(frame, tmp_path):
    paths = _draw(peaks.peak_fraction_figure, frame, tmp_path, formats=["png", "svg"])
    assert [p.name for p in paths] == ["peak_vs_link.png", "peak_vs_link.svg"]
    assert paths[1].read_text().lstrip().startswith("<?xml")


def test_bad_format_is_refused(frame, tmp_path):
    with pytest.raises(ValueError, match="format"):
        figs.render(frame, tmp_path, CATALOG, formats=["jpg"])


def test_cli_draws_the_named_run_and_refuses_bad_input(tmp_path, capsys):
    run = REFERENCE / "h200-x2" / GRAPH_RUNS[1]
    assert plot_cli.main([str(run), "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        figs.MANIFEST, "bandwidth_collectives.png", "latency_collectives.png", "peak_vs_link.png"]
    assert plot_cli.main([str(tmp_path / "missing")]) == 2
    assert plot_cli.main([str(REFERENCE), "--runs", "nope"]) == 2
    assert "'nope' is not among the runs" in capsys.readouterr().err


@pytest.mark.parametrize("gen, width, expected", [(3, 16, 15.75), (4, 16, 31.5), (5, 16, 63.0), (4, 8, 15.75)])
def test_pcie_peak_per_direction(gen, width, expected):
    assert pcie_gbps(gen, width) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("gen, width", [(None, 16), (5, None), (float("nan"), 16), (0, 16)])
def test_pcie_peak_unknown(gen, width):
    assert math.isnan(pcie_gbps(gen, width))


def test_peak_table_bounds_each_suite_by_its_link(frame):
    table = peaks.peak_table(with_series(frame[frame["instance"] == "h200-x4"]), CATALOG).set_index("label")
    h2d = table.loc["copy h2d pinned eager"]
    assert h2d["link"] == "PCIe" and h2d["link_gbps"] == pytest.approx(63.0, rel=1e-3)
    assert h2d["percent"] == pytest.approx(100 * h2d["peak_gbps"] / h2d["link_gbps"])
    assert 40 < h2d["peak_gbps"] < 55           # the synthetic curve's plateau, ~50 GB/s
    assert table.loc["p2p uni device peer eager", "link_gbps"] == 450
    assert table.loc["p2p uni device staged eager", "link"] == "PCIe"
    assert table.loc["collectives all_reduce device eager float32 n=4", "link"] == "NVLink"
    # the synthetic d2d copies stop short of 256 MiB, where an on-GPU copy without a recorded L2
    # starts to count as HBM: they give no peak (the summary's and the report's rule alike)
    assert not any(label.startswith("copy d2d") for label in table.index)


def test_p2p_peaks_show_the_slow_pair(frame):
    table = p2p_reading.peak_table(frame, ["instance"])
    peer = table[table["mode"] == "peer"].set_index(["src", "dst"])["algbw_gbps"]
    assert peer[("cuda:0", "cuda:2")] < 0.7 * peer[("cuda:1", "cuda:2")]
    assert len(peer) == 6         # 3 GPUs: every ordered pair


def test_api_overhead_is_torch_time_over_nccl_time(tmp_path):
    from bench.results import Sample, samples_frame
    from bench.suites.collectives.reading import api_overhead, api_overhead_figure

    rows = [Sample("collectives", "all_reduce", size, time_s=t, iters=10, trial=i, api=api, launch="eager",
                   backend="nccl", world_size=2, dtype="float32", verified=True, run_id="r")
            for size, times in ((8, {"torch": 30e-6, "nccl": 10e-6}), (1 << 20, {"torch": 40e-6, "nccl": 20e-6}))
            for api, t in times.items() for i in range(3)]
    frame = samples_frame(rows).assign(instance="box", run_dir="r")
    table = api_overhead(frame)
    assert table.loc[0, "torch/nccl@8B"] == 3.0 and table.loc[0, "torch/nccl@1MiB"] == 2.0
    assert api_overhead(frame[frame.api == "torch"]).empty  # one api alone: nothing to compare
    assert [p.name for p in _draw(api_overhead_figure, frame, tmp_path)] == ["api_overhead.png"]


# ---------------------------------------------------------------- where files land, and run status


def _quick_figures(*names):
    """A COMMON stand-in that writes these files at once (the tests below are about files, not drawing)."""
    def figure(frame, canvas):
        paths = [canvas.out_dir / name for name in names]
        for path in paths:
            path.write_bytes(PNG_MAGIC)
        return paths

    return (figure,)


def _two_instances(root: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(5)
    return (write_run(root / "a" / "run1", copy_samples(rng, trials=2, sizes=SIZES[:2]), instance="a"),
            write_run(root / "b" / "run1", copy_samples(rng, trials=2, sizes=SIZES[:2]), instance="b"))


def test_without_out_one_run_draws_into_its_folder_and_several_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(figs, "COMMON", _quick_figures("bandwidth_copy.png"))
    monkeypatch.chdir(tmp_path)
    run, _ = _two_instances(tmp_path / "results")
    assert plot_cli.main([str(run)]) == 0
    assert (run / "plots" / "bandwidth_copy.png").is_file()
    assert plot_cli.main([str(tmp_path / "results")]) == 2          # two instances: two runs, no one folder
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 runs chosen (a/run1, b/run1)" in err[0] and "--out DIR" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]       # nothing in the current folder


def test_a_second_call_removes_the_figures_of_the_first_and_nothing_else(tmp_path, monkeypatch):
    run, _ = _two_instances(tmp_path / "results")
    out = tmp_path / "figs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "mine.png").write_bytes(PNG_MAGIC)
    monkeypatch.setattr(figs, "COMMON", _quick_figures("bandwidth_copy.png", "latency_copy.png"))
    assert plot_cli.main([str(run), "--out", str(out)]) == 0
    monkeypatch.setattr(figs, "COMMON", _quick_figures("bandwidth_copy.png"))
    assert plot_cli.main([str(run), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [figs.MANIFEST, "bandwidth_copy.png", "mine.png", "notes.txt"]
    # a manifest names only plain figure files of its own folder: anything else there is never removed
    (out / figs.MANIFEST).write_text("notes.txt\n../figs/mine.png\nmine.png/\n")
    assert plot_cli.main([str(run), "--out", str(out)]) == 0
    assert (out / "notes.txt").exists() and (out / "mine.png").exists()


@pytest.mark.parametrize("where", ["under_a_file", "a_file"])
def test_an_out_that_cannot_be_written_is_one_line_and_exit_2(where, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(figs, "COMMON", _quick_figures("bandwidth_copy.png"))
    run, _ = _two_instances(tmp_path / "results")
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "plots" if where == "under_a_file" else tmp_path / "file"
    monkeypatch.setattr(plot_cli, "write_figures", lambda *a, **k: pytest.fail("drawn before the output was checked"))
    assert plot_cli.main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"xferbench-plot: cannot write {out}: ")


def test_committed_runs_below_a_parent_folder_are_left_out_unless_named(tmp_path, capsys):
    from bench.results import find_runs

    rng = np.random.default_rng(9)
    results = tmp_path / "results"
    samples = copy_samples(rng, trials=2, sizes=SIZES[:2])
    mine = write_run(results / "box" / "r1", samples, instance="box")
    for folder in ("reference/box/r0", "noise/cpu/identical/r0", "noise/cpu/identical/r1"):
        write_run(results / folder, samples, instance="box")
    aside: list[Path] = []
    assert find_runs([results], aside) == [mine] and len(aside) == 3
    assert find_runs([tmp_path], []) == [mine]                     # the checkout above results/ too
    assert len(find_runs([results / "noise"])) == 2                # named: they are the runs asked for
    assert len(find_runs([results / "reference" / "box"])) == 1
    assert set(load(results)["run_dir"]) == {str(mine)}
    assert "left out 3 run(s) of the project's committed data" in capsys.readouterr().err
    shutil.rmtree(mine)
    with pytest.raises(ResultsError, match="holds no run but the project's committed data"):
        find_runs([results])


def test_a_run_that_did_not_finish_is_marked_in_legends_and_titles(frame, figures):
    status = frame["instance"].map({"h200-x4": "failed", "p5en.48xlarge": "interrupted"})
    _draw(curves.bandwidth_figures, frame.assign(run_status=status))
    stem, fig = figures[0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert stem == "bandwidth_copy" and legend[:2] == ["h200-x4 (failed)", "p5en.48xlarge (interrupted)"]
    assert legend[2:] == ["in or near L2: not an HBM figure"]   # the small d2d copies, drawn apart
    _draw(CATALOG["p2p"].figures, frame.assign(run_status=status))
    stem, fig = figures[-1]
    assert stem == "p2p_heatmap_h200-x4"                          # the file keeps its name
    assert any("P2P peak bandwidth, h200-x4 (failed)" in t.get_text() for t in fig.texts)
    complete = with_series(frame.assign(run_status="complete"))
    assert set(complete[SERIES]) == {"h200-x4", "p5en.48xlarge"}
