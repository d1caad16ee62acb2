"""bench.analysis.report and xferbench-report from the committed reference runs: the headline figures, every figure kind
embedded, nothing loaded from elsewhere, and (with Chromium installed) a page that really draws."""
from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from bench.analysis import report
from bench.analysis.runs import palette, run_index
from bench.cli import report as report_cli
from bench.cli.common import catalog
from bench.importers.nvbandwidth import import_nvbandwidth
from bench.journal import RunWriter, write_json
from bench.results import SCHEMA_VERSION, Sample, load
from conftest import PRE_HELD_SWEEPS

TESTS = Path(__file__).resolve().parent
REFERENCE = TESTS.parent / "results" / "reference"
PRICE = 2.0     # $/h given to h100-x1 here: the reference machines have no public price
FIRST_H100 = "20261122-213018"
FIGURE_KINDS = ["peak_vs_link", "bandwidth_copy", "bandwidth_p2p", "bandwidth_collectives", "latency_copy",
                "latency_p2p", "latency_collectives", "p2p_heatmap_h200-x2", "bandwidth_per_dollar"]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def chosen(reference_rows):
    frame = reference_rows
    runs = run_index(frame, [f"h100-x1/{FIRST_H100}", *PRE_HELD_SWEEPS])   # its 1 GiB figure is below its peak
    frame = frame[frame["run_dir"].isin(runs.loc[runs["chosen"], "run_dir"])]
    return frame.assign(usd_per_hour=frame["usd_per_hour"].where(frame["instance"] != "h100-x1", PRICE)), runs


@pytest.fixture(scope="module")
def page(chosen, tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(report.build_report(*chosen, catalog()), encoding="utf-8")
    return path


def test_headline_gives_each_instances_figures(chosen):
    table = report.headline(chosen[0], catalog())
    h2d = table["Host → device, pinned"]
    assert h2d["h100-x1"].value == "46.4 GB/s"           # the first slice's H100 run
    # the H100's 1 GiB figure is below its peak, so the peak is named, and the share is of 1 GiB's
    assert h2d["h100-x1"].notes[:3] == ["eager at 1GiB", "74% of PCIe (63 GB/s)", "peak 55.0 GB/s at 256MiB"]
    # two engines: each named with its launch, size and share, and both at one size, never the best alone
    assert h2d["h200-x1"].value == "ce 55.4 GB/s (1GiB) · sm 50.5 GB/s (256MiB)"   # 2026-11-26
    assert h2d["h200-x1"].notes == ["ce: eager at 1GiB, 88% of PCIe (63 GB/s)", "sm: eager at 256MiB, 80% of PCIe (63 GB/s)",
                                    "each at 256MiB: ce 55.3 GB/s · sm 50.5 GB/s"]
    assert "23.22 GB/s per $/h" in h2d["h100-x1"].notes      # 46.44 GB/s at $2/h
    assert not any("per $/h" in n for n in h2d["h200-x1"].notes)
    all_reduce = table["all_reduce, bus bandwidth"]["h200-x2"]
    assert all_reduce.value == "torch.distributed 343.0 GB/s (4GiB) · nccl 219.5 GB/s (16MiB)"   # 2026-11-23
    assert all_reduce.notes[:3] == ["torch.distributed: eager at 4GiB, 76% of NVLink (450 GB/s)",
                                    "nccl: eager at 16MiB, 49% of NVLink (450 GB/s)",
                                    "each at 16MiB: torch.distributed 219.6 GB/s · nccl 219.5 GB/s"]
    latency = table["all_reduce latency: eager / on the device"]["h200-x2"]
    assert latency.value == "torch.distributed 36.9 / 4.6 · nccl 8.8 / 4.6 µs" and latency.notes[0] == "at 8B, eager / graph"
    # past L2 only: not the 16 MiB graph-mode copy the cache holds
    d2d = table["Device → device, one GPU (bytes copied)"]["h200-x1"]
    assert (d2d.value, d2d.notes) == ("2,101 GB/s", ["ce, eager at 1GiB"])
    assert table["P2P one way, peer"]["h100-x1"] is None      # one GPU: not measured


def test_headline_reads_one_gpu_and_names_uneven_pairs(tmp_path):
    # nvbandwidth on 4 PCIe H100s, two NVLink-bridged pairs: it also times every GPU at once
    run = import_nvbandwidth([TESTS / "data" / "nvbandwidth_v08_h100pcie_x4.json"], tmp_path / "nvbw",
                             buffer_bytes=64 << 20, instance="h100pcie-x4")
    table = report.headline(load(run), catalog())
    h2d = table["Host → device, pinned"]["h100pcie-x4"]
    assert h2d.value == "ce 55.4 GB/s · sm 52.9 GB/s"     # not the 108 GB/s of all four at once
    uni = table["P2P one way, peer"]["h100pcie-x4"]
    assert "write ce: eager at 64MiB, median of 12 pairs: 40.2 to 284.9" in uni.notes, uni.notes
    assert table["Host → device latency, pinned: eager / on the device"]["h100pcie-x4"] is None   # 64 MiB is no latency


def test_every_figure_kind_is_embedded_as_png(page):
    text = page.read_text()
    for kind in FIGURE_KINDS:
        found = re.search(rf'<figure id="fig-{re.escape(kind)}"><img alt="[^"]*" src="data:image/png;base64,([^"]+)"',
                          text)
        assert found, kind
        assert base64.b64decode(found.group(1))[:8] == b"\x89PNG\r\n\x1a\n"


def test_page_loads_nothing_from_elsewhere(page):
    text = page.read_text()
    assert not re.search(r"https?://|<script|<link|@import|url\(", text)
    assert set(re.findall(r'src="([a-z]+):', text)) == {"data"}


def test_page_describes_machines_and_caveats(page):
    text = page.read_text()
    for fact in ("580.159.04", "2.28.9", "2.11.0+cu130", "NV18", "2× NVIDIA H200", "xferbench out_dir=/tmp/r run_id=default"):
        assert fact in text, fact
    assert "\x1b" not in text                             # nvidia-smi's colour codes are stripped
    assert "Each column is a single run" in text and "shared or virtualised" in text
    # the other sweeps and special-purpose runs: h200-x2 44, h200-x4 32, h200-x1 15, h100-x2 5, h100-x1 1
    assert text.count(">left out</td>") == 100


def test_caveats_name_a_run_that_did_not_finish():
    runs = pd.DataFrame({"instance": ["box"], "run_id": ["r1"], "status": ["interrupted"], "chosen": [True]})
    frame = pd.DataFrame({"instance": ["box"], "usd_per_hour": [1.0]})
    notes = report.caveats(frame, runs)
    assert "box/r1 is interrupted: some points were never measured." in notes
    assert not any("No public price" in n for n in notes)


def test_cli_writes_the_page_for_a_named_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "_figures_html", lambda frame, catalog: "<p>figures</p>")   # drawn above already
    out = tmp_path / "sub" / "r.html"
    run = REFERENCE / "h200-x2" / "20261122-214411"
    assert report_cli.main([str(run), "--out", str(out), "--title", "graph runs"]) == 0
    text = out.read_text()
    assert "<title>graph runs</title>" in text and "20261122-214411, complete" in text
    assert "all_reduce, bus bandwidth" in text and "left out" not in text
    assert report_cli.main([str(REFERENCE), "--runs", "nope", "--out", str(out)]) == 2
    assert "'nope' is not among the runs" in capsys.readouterr().err


@pytest.fixture
def browser():
    found = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if found is None:
        pytest.skip("no Chromium or Chrome installed")
    return found


def test_page_renders_in_a_real_browser(browser, page, tmp_path):   # browser first: skip before drawing
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    # a blank or unstyled page is near-uniform: the table, figures and text make it vary
    assert pixels.std() > 0.1
    assert (pixels.mean(axis=2) < 0.9).mean() > 0.03


def test_without_out_one_run_gets_its_own_page_and_several_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "_figures_html", lambda frame, catalog: "<p>figures</p>")
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "results" / "h200-x2" / "20261122-214411"
    shutil.copytree(REFERENCE / "h200-x2" / run.name, run)
    shutil.copytree(REFERENCE / "h100-x1" / FIRST_H100, tmp_path / "results" / "h100-x1" / FIRST_H100)
    assert report_cli.main([str(run)]) == 0
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    capsys.readouterr()
    assert report_cli.main([str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 runs chosen" in err[0] and "--out FILE" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]      # nothing in the current folder
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(report_cli, "build_report", lambda *a: pytest.fail("built before its output was checked"))
    assert report_cli.main([str(run), "--out", str(tmp_path / "file" / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"xferbench-report: cannot write {tmp_path / 'file' / 'r.html'}: ")


def test_a_run_that_did_not_finish_says_so_in_its_column_header():
    frame = load(REFERENCE / "h200-x2" / "20261122-214411").assign(run_status="interrupted")
    html = report._headline_html(report.headline(frame, catalog()), frame, palette(frame), report.verdict_cells(frame, catalog()))
    assert "</span>h200-x2 (interrupted)<small>" in html


def test_the_report_says_whether_each_run_is_normal_and_names_the_cause():
    noise = TESTS.parent / "results" / "noise" / "h200-x2"
    frame = load([REFERENCE / "h200-x2" / "20261123-044635", noise / "nch1" / "nch1-01"])
    cells = report.verdict_cells(frame, catalog())
    healthy, = (c for c in cells.values() if c.value in ("normal", "not enough judged"))
    slowed, = (c for c in cells.values() if c is not healthy)
    assert re.fullmatch(r"\d+ low", slowed.value) and int(slowed.value.split()[0]) >= 1
    assert any("NCCL_MAX_NCHANNELS=1" in note for note in slowed.notes)
    assert re.fullmatch(r"\d+ of \d+ families judged", healthy.notes[-1]) and len(healthy.notes) == 1


def test_a_run_of_host_copies_alone_is_measured_not_nothing(tmp_path):
    """h2h copies measure the host itself, which no machine kind sets: reported, not judged, and
    said so, not 'nothing measured' (a CPU run of the copy suite measures only them)."""
    run = tmp_path / "cpu" / "20261127-000000"
    writer = RunWriter(run, run.name)
    for memory in ("pageable", "pinned"):
        for size in (4096, 65536, 1 << 20):
            writer.add_point([Sample(suite="copy", op="h2h", size_bytes=size, memory=memory, backend="cpu", src="host",
                                     dst="host", trial=t, iters=10, time_s=size / 10e9, verified=True)
                              for t in range(3)])
    writer.close()
    write_json(run / "meta.json", {"schema_version": SCHEMA_VERSION, "run_id": run.name, "status": "complete",
                                   "device": "cpu", "instance": {"name": "local", "label": "cpu"}, "system": {}})
    (cell,) = report.verdict_cells(load(run), catalog()).values()
    assert cell.value == "not enough judged" and cell.notes[-1] == "2 families the host's own (reported, not judged)"
