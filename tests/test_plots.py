"""bench.plots on synthetic copy, p2p and collectives runs: figures render, absent data is skipped."""
from __future__ import annotations

import math

import matplotlib.image
import numpy as np
import pytest

from bench import plots
from bench.results import load
from synthetic import KiB, MiB, collective_samples, copy_samples, p2p_samples, write_run

SIZES = [4 * KiB, 64 * KiB, MiB, 16 * MiB]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
    return out, plots.render(frame, out)


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


def test_latency_needs_small_sizes(frame, tmp_path):
    assert plots.latency_figures(frame[frame["size_bytes"] > MiB], tmp_path) == []


def test_absent_data_is_skipped_not_drawn(frame, tmp_path):
    copies = frame[frame["instance"] == "h200-x4"]
    copies = copies[copies["suite"] == "copy"]
    assert plots.p2p_heatmaps(copies, tmp_path) == []
    assert plots.per_dollar_figure(copies, tmp_path) == []          # no price for this instance
    failed = frame.assign(status="failed")
    assert plots.render(failed, tmp_path / "none") == []
    unknown_links = frame.assign(pcie_gen=None, pcie_width=None, nvlink_gbps_per_gpu=None)
    assert plots.peak_fraction_figure(unknown_links, tmp_path) == []


def test_svg_as_well_as_png(frame, tmp_path):
    paths = plots.peak_fraction_figure(frame, tmp_path, hue="run_id", formats=["png", "svg"])
    assert [p.name for p in paths] == ["peak_vs_link.png", "peak_vs_link.svg"]
    assert paths[1].read_text().lstrip().startswith("<?xml")


def test_bad_hue_and_format_are_refused(frame, tmp_path):
    with pytest.raises(ValueError, match="hue"):
        plots.render(frame, tmp_path, hue="gpu_name")
    with pytest.raises(ValueError, match="format"):
        plots.render(frame, tmp_path, formats=["jpg"])


@pytest.mark.parametrize("gen, width, expected", [(3, 16, 15.75), (4, 16, 31.5), (5, 16, 63.0), (4, 8, 15.75)])
def test_pcie_peak_per_direction(gen, width, expected):
    assert plots.pcie_gbps(gen, width) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("gen, width", [(None, 16), (5, None), (float("nan"), 16), (0, 16)])
def test_pcie_peak_unknown(gen, width):
    assert math.isnan(plots.pcie_gbps(gen, width))


def test_peak_table_bounds_each_suite_by_its_link(frame):
    peaks = plots.peak_table(frame[frame["instance"] == "h200-x4"]).set_index("label")
    h2d = peaks.loc["copy h2d pinned"]
    assert h2d["link"] == "PCIe" and h2d["link_gbps"] == pytest.approx(63.0, rel=1e-3)
    assert h2d["percent"] == pytest.approx(100 * h2d["peak_gbps"] / h2d["link_gbps"])
    assert 40 < h2d["peak_gbps"] < 55           # the synthetic curve's plateau, ~50 GB/s
    assert peaks.loc["p2p uni peer", "link_gbps"] == 450
    assert peaks.loc["p2p uni staged", "link"] == "PCIe"
    assert peaks.loc["collectives all_reduce float32 4 ranks", "link"] == "NVLink"
    assert math.isnan(peaks.loc["copy d2d device", "link_gbps"])   # device memory: no link


def test_p2p_peaks_show_the_slow_pair(frame):
    peaks = plots.p2p_peaks(frame)
    peer = peaks[peaks["mode"] == "peer"].set_index(["src", "dst"])["bandwidth_gbps"]
    assert peer[("cuda:0", "cuda:2")] < 0.7 * peer[("cuda:1", "cuda:2")]
    assert len(peer) == 6         # 3 GPUs: every ordered pair
