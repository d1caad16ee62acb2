"""Exit 0 means checked and normal: copies of committed healthy runs changed as a user or a
fault would change them, each given to xferbench-doctor (in-process), with the state and exit
status each must give (bench.analysis.verdicts' states; docs/judging.md)."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import doctor
from conftest import ROOT, dead_pid

REF = ROOT / "results" / "reference"
H200X1 = REF / "h200-x1" / "20261126-075737-default-1"
H200X2 = REF / "h200-x2" / "20261123-044635"
H200X4 = ROOT / "results" / "noise" / "h200-x4" / "identical" / "20261126-080826-identical-1"
H200X4_REF = REF / "h200-x4" / "20261126-083243-default-5"


def _copy(run: Path, to: Path, rows=None, meta=None) -> Path:
    """A copy of a committed run with its rows and meta.json changed (each a function of the original)."""
    shutil.copytree(run, to, ignore=shutil.ignore_patterns("verdicts.json", "samples.commit", "samples.csv"))
    frame = pd.read_parquet(to / "samples.parquet")
    if rows is not None:
        rows(frame).to_parquet(to / "samples.parquet", index=False)
    if meta is not None:
        data = json.loads((to / "meta.json").read_text())
        meta(data)
        (to / "meta.json").write_text(json.dumps(data))
    return to


def _doctor(capsys, *args) -> tuple[int, list[str]]:
    code = doctor.main([str(a) for a in args])
    return code, [line.strip() for line in capsys.readouterr().out.splitlines()]


def _starting(lines: list[str], word: str) -> list[str]:
    return [line for line in lines if line.startswith(word)]


def _failed_h2d(frame: pd.DataFrame) -> pd.DataFrame:
    hit = (frame.op == "h2d") & (frame.memory == "pinned")
    frame.loc[hit, ["status", "verified", "note"]] = ["failed", False, "data check failed: destination differs"]
    return frame


def _halved(frame: pd.DataFrame) -> pd.DataFrame:
    frame["time_s"] *= 2
    frame[["algbw_gbps", "busbw_gbps"]] /= 2
    return frame


def test_a_failed_data_check_is_failed_not_vanished(tmp_path, capsys):
    code, lines = _doctor(capsys, _copy(H200X1, tmp_path / "run", rows=_failed_h2d))
    failed = _starting(lines, "FAILED ")
    assert code == 1 and len(failed) == 4   # pinned h2d: ce eager and graph, sm eager and graph
    assert all("h2d pinned" in line and "data check failed" in line for line in failed)
    assert lines[-1].startswith("result: not normal (xferbench-doctor exits 1): 4 failed")


def test_suites_asked_for_and_not_measured_are_missing(tmp_path, capsys):
    run = _copy(H200X4, tmp_path / "run", rows=lambda f: f[~f.suite.isin(["p2p", "collectives"])])
    code, lines = _doctor(capsys, run)
    missing = _starting(lines, "MISSING ")
    assert code == 1 and "MISSING p2p uni: asked for and measurable here, not measured" in missing
    assert "MISSING collectives all_reduce: asked for and measurable here, not measured" in missing
    assert not any(line.startswith("MISSING copy ") for line in missing)


def test_every_figure_halved_is_low_wherever_it_is_judged(tmp_path, capsys):
    for run in (H200X1, H200X2, H200X4_REF):
        code, lines = _doctor(capsys, _copy(run, tmp_path / run.parent.name, rows=_halved))
        summary = next(line for line in lines if line.startswith("verdict:"))
        assert code == 1 and " normal" not in summary.split(";")[0], summary   # none judged normal
        assert _starting(lines, "LOW ")
    # a launch path its host's spread cannot judge is not called normal while its op's link is low
    assert "its link is low: " in summary


@pytest.mark.parametrize("status, pid, said", [
    ("failed", None, "failed: the points after it stopped were never measured"),
    ("interrupted", None, "interrupted: the points after it stopped were never measured"),
    ("running", "dead", "killed (no final status): the points after it stopped were never measured"),
    ("running", "live", "still running (pid {pid}): judged on the points written so far"),
], ids=["failed", "interrupted", "killed", "live"])
def test_a_run_that_did_not_complete_is_not_normal_and_its_line_names_it_truly(tmp_path, capsys, status, pid, said):
    def this_host(meta: dict) -> None:
        meta.update(status=status, pid={"dead": dead_pid(), "live": os.getpid(), None: meta.get("pid")}[pid])
        meta["system"]["hostname"] = socket.gethostname()

    run = _copy(H200X1, tmp_path / "run", meta=this_host)
    code, lines = _doctor(capsys, run)
    assert code == 1 and f"INCOMPLETE {run}: {said.format(pid=os.getpid())}" in lines, lines
    empty = _copy(H200X1, tmp_path / "empty")
    (empty / "samples.parquet").unlink()
    code, lines = _doctor(capsys, empty)
    assert code == 1 and lines[-1].endswith("nothing measured")


def test_a_gpu_no_table_knows_is_judged_by_its_links_and_the_other_classes(tmp_path, capsys):
    def a100(meta: dict) -> None:
        for gpu in meta["system"]["gpus"]:
            gpu["name"] = "NVIDIA A100-SXM4-80GB"

    code, lines = _doctor(capsys, _copy(H200X1, tmp_path / "run", meta=a100))
    assert code in (0, 3) and not _starting(lines, "LOW ")
    assert "(a100-sxm4-80gb pcie5x16 nvlink0 x1)" in lines[0]
    halved = _copy(H200X1, tmp_path / "halved", meta=a100, rows=_halved)
    code, lines = _doctor(capsys, halved)
    assert code == 1 and _starting(lines, "LOW ")


def _slot_gen4(meta: dict) -> None:
    for gpu in meta["system"]["gpus"]:
        gpu["pcie_gen_max"] = 4
    for gpu in meta["telemetry"]["gpus"]:
        gpu["pcie"].update(gen_max=4, gen_min_busy=4)


def _peer_off(meta: dict) -> None:
    n = len(meta["system"]["gpus"])
    meta["system"]["p2p_access"] = [[i == j for j in range(n)] for i in range(n)]


def _called_h100(meta: dict) -> None:
    for gpu in meta["system"]["gpus"]:
        gpu.update(name="NVIDIA H100 80GB HBM3")
    meta["instance"].update(name="h100-x4", label="h100-x4", gpu="NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize("run, change, said", [
    (H200X1, _slot_gen4, "is more than PCIe Gen4 x16 as recorded for GPU 0 while busy carries (31.5 GB/s)"),
    (H200X2, _peer_off, "is more than PCIe Gen5 x16 through the host, as peer access is recorded off carries"),
    (H200X1, _called_h100, "what healthy machines of its class reach: is this the GPU and link its record says?"),
    # a class with no reference: a GPU's copy to itself against the other classes of its GPU model
    (H200X4, _called_h100, "1.40x what healthy machines of its GPU model reach (h100 pcie5x16 nvlink0 x1, h100 pcie5x16 nvlink18 x2)"),
    # every GPU to or from one GPU, staged through the host: that GPU's PCIe link carries it all
    (H200X4, _peer_off, "402 GB/s is more than PCIe Gen5 x16 through the host, as peer access is recorded off"),
])
def test_a_record_the_figures_contradict_is_inconsistent(tmp_path, capsys, run, change, said):
    code, lines = _doctor(capsys, _copy(run, tmp_path / "run", meta=change))
    odd = _starting(lines, "INCONSISTENT ")
    assert code == 1 and odd and any(said in line for line in odd), "\n".join(odd)


def _scaled(frame: pd.DataFrame, hit: pd.Series, factor: float) -> pd.DataFrame:
    """Rows where `hit` at `factor` of their speed."""
    frame.loc[hit, "time_s"] /= factor
    frame.loc[hit, ["algbw_gbps", "busbw_gbps"]] *= factor
    return frame


def test_staging_that_cannot_carry_a_figure_is_not_its_cause(tmp_path, capsys):
    at_200 = _copy(H200X4, tmp_path / "run", meta=_peer_off,
                   rows=lambda f: _scaled(f, f.op.isin(["all_to_one", "one_to_all"]), 200 / 389))
    code, lines = _doctor(capsys, at_200)
    odd = _starting(lines, "INCONSISTENT p2p all_to_one")
    assert code == 1 and len(odd) == 8
    assert all("through the host, as peer access is recorded off carries" in line for line in odd)
    assert not any("staged through host memory" in line for line in lines)


def test_a_gen4_slot_under_a_gen5_gpu_is_low_against_the_gpus_own_link(tmp_path, capsys):
    def gen4_slot(meta: dict) -> None:
        for gpu in meta["system"]["gpus"]:
            gpu.update(pcie_gen_max=4, pcie_gen_current=4, pcie_gen_gpu_max=5)
        for gpu in meta["telemetry"]["gpus"]:
            gpu["pcie"].update(gen_max=4, gen_min_busy=4, gen_gpu_max=5)

    at_gen4 = lambda f: _scaled(f, (f.src == "host") | (f.dst == "host"), 0.5)   # noqa: E731
    run = _copy(H200X1, tmp_path / "run", meta=gen4_slot, rows=at_gen4)
    code, lines = _doctor(capsys, run)
    h2d = _starting(lines, "LOW  copy h2d pinned eager ce numa=local host->cuda:0 (bandwidth-bound)")
    assert code == 1 and h2d and "(h200 pcie5x16 nvlink0 x1)" in lines[0]   # its class: the GPU's own Gen5
    assert "GPU 0's PCIe link runs at Gen4, below the Gen5 the GPU supports" in h2d[0]


def test_a_gpu_out_of_line_with_its_siblings_is_found_by_them(tmp_path, capsys):
    """GPU 2 of four at 0.80x of its siblings in its copies to and from the host and every other
    GPU: its siblings find it, each read against the others' spread without it (with it, the
    slow GPU's own deviation set the limit at 0.49x)."""
    def gpu2(f: pd.DataFrame) -> pd.DataFrame:
        ends = ["host", "cuda:2", "all"]
        return _scaled(f, ((f.src == "cuda:2") & f.dst.isin(ends)) | ((f.dst == "cuda:2") & f.src.isin(ends)), 0.8)

    code, lines = _doctor(capsys, _copy(H200X4, tmp_path / "run", rows=gpu2))
    low = _starting(lines, "LOW  ")
    assert code == 1 and len(low) == 7 and all("cuda:2" in line and "(bandwidth-bound): 0.80x" in line for line in low)
    assert all("; siblings: median of 3 GPUs); cause:" in line for line in low)


def test_a_launch_path_is_judged_by_the_spread_between_hosts_and_names_its_host(tmp_path, capsys):
    def launch_paths(f: pd.DataFrame) -> pd.Series:
        return (f.launch == "eager") & (f.size_bytes <= 64 << 10) & (f.op != "latency")

    # every launch path 1.4x slower than this host's own (the new host D: 0.63x of the table
    # then; this host's were already 1.1x the table's one host, x4b, now): normal
    code, lines = _doctor(capsys, _copy(H200X4, tmp_path / "slow", rows=lambda f: _scaled(f, launch_paths(f), 0.7)))
    assert code == 0, "\n".join(lines)

    def with_load(meta: dict) -> None:
        meta["telemetry"]["host"] = {"cpus": 64, "duration_s": 50.0, "others_share": 0.19,
                                     "cpu_s": {"all": 900.0, "own": 300.0, "others": 600.0, "steal": 0.0},
                                     "load_avg_1m": {"before": 3.0, "max": 40.0, "after": 35.0}}

    # One pair's launch path (up to 8 MiB) a tenth as fast: beyond what launch paths move between
    # hosts (a launch path's limit lies between 0.25 and 0.55 of its class's: launch_path.py).
    def one_slow(f: pd.DataFrame) -> pd.DataFrame:
        pair = (f.suite == "p2p") & (f.op == "bidir") & (f["mode"] == "peer") & (f.engine == "ce") & (f.src == "cuda:0")
        return _scaled(f, pair & (f.dst == "cuda:1") & (f.size_bytes <= 8 << 20), 0.1)

    code, lines = _doctor(capsys, _copy(H200X4, tmp_path / "low", meta=with_load, rows=one_slow))
    (low,) = _starting(lines, "LOW ")
    assert code == 1 and low.startswith("LOW  p2p bidir device peer eager ce cuda:0->cuda:1 (launch path): 0.1")
    assert "reference h200-x4, 19 healthy runs" in low and "cause: the launch path is the host's: its pace (host_pace_s" in low
    assert re.search(r"within the class's \d+ healthy hosts? \(", low) and "other processes took 600.0 CPU-s" in low
    assert "load average up to 40.0 on 64 CPUs" in low and "not the link: p2p bidir device peer eager ce" in low


def test_a_low_line_shows_the_gap_it_reports(tmp_path, capsys):
    def slow_h2d(frame: pd.DataFrame) -> pd.DataFrame:
        hit = (frame.op == "h2d") & (frame.memory == "pinned") & (frame.size_bytes >= 1 << 20)
        frame.loc[hit, "time_s"] /= 0.7
        frame.loc[hit, ["algbw_gbps", "busbw_gbps"]] *= 0.7
        return frame

    code, lines = _doctor(capsys, _copy(H200X1, tmp_path / "run", rows=slow_h2d))
    low = _starting(lines, "LOW  copy h2d pinned eager ce numa=local")
    assert code == 1 and low
    ratio, measured, expected = (float(x) for x in pd.Series(low[0]).str.extract(
        r": ([\d.]+)x expected \(([\d.]+) GB/s against ([\d.]+) GB/s").iloc[0])
    assert abs(measured / expected - ratio) < 0.05 or "at that size" in low[0]


def test_held_out_four_gpu_runs_with_a_slow_link_name_only_the_link_that_explains_it(tmp_path, capsys):
    def gen3_x8(meta: dict) -> None:
        for gpu in meta["telemetry"]["gpus"]:
            gpu["pcie"].update(gen_min_busy=3, width_min_busy=8)

    code, lines = _doctor(capsys, _copy(H200X4, tmp_path / "run", meta=gen3_x8))
    # 55 GB/s through a link recorded at Gen3 x8 (7.9 GB/s): the record is contradicted, no cause named
    odd = _starting(lines, "INCONSISTENT copy h2d pinned eager ce")
    assert code == 1 and odd and "PCIe Gen3 x8 as recorded" in odd[0]
    assert not any("ran at Gen3 x8" in line for line in _starting(lines, "LOW ") if "GB/s against" in line)


def test_a_launch_path_measured_while_the_host_was_slow_is_judged_and_says_so(tmp_path, capsys):
    def slow_small_h2d(frame: pd.DataFrame) -> pd.DataFrame:
        frame["host_pace_s"] = 1e-4
        hit = (frame.op == "h2d") & (frame.memory == "pinned") & (frame.engine == "ce") & (frame.launch == "eager")
        hit &= frame.size_bytes <= 64 << 10
        frame.loc[hit, "host_pace_s"] = 2e-4
        return _scaled(frame, hit, 0.1)   # what the slow mood did to them: the host's, not the link's

    run = _copy(H200X1, tmp_path / "run", rows=slow_small_h2d)
    code, _ = _doctor(capsys, run, "--json", tmp_path / "v.json")
    verdicts = {v["family"]: v for v in json.loads((tmp_path / "v.json").read_text())[0]["families"]}
    (low,) = [v for v in verdicts.values() if v["verdict"] == "low"]
    assert code == 1 and low["family"] == "copy h2d pinned eager ce numa=local host->cuda:0 (launch path)"
    assert any(cause.startswith("3 of its") and "ran while the host was slow" in cause
               for cause in low["causes"])
    assert any(cause.startswith("not the link: copy h2d pinned") for cause in low["causes"])


H100_PIPELINE = ROOT / "results" / "noise" / "pipeline-h100-x1" / "pairs" / "20261126-120128-pipe-1"
H100_JPEG = ROOT / "results" / "noise" / "pipeline-h100-x1" / "20261126-120128-jpeg"


def _loops_halved(frame: pd.DataFrame) -> pd.DataFrame:
    """Each loop delivering half of what it did, its stages as they were: half of its own bound."""
    hit = (frame.op == "loader_to_gpu") & (frame.part == "total")
    frame.loc[hit, "time_s"] *= 2
    frame.loc[hit, ["algbw_gbps", "busbw_gbps"]] /= 2
    return frame


def test_pipeline_loops_are_judged_on_a_class_without_pipeline_references(tmp_path, capsys):
    """The H100 class has no pipeline reference: its loops are judged by the fraction of their own
    bound the other classes reach (or the suite's declared share), normal as measured, low halved."""
    code, lines = _doctor(capsys, H100_PIPELINE)
    assert code == 0 and "18 normal; judged 18 of 18" in " ".join(lines)
    code, lines = _doctor(capsys, _copy(H100_PIPELINE, tmp_path / "run", rows=_loops_halved))
    low = _starting(lines, "LOW ")
    assert code == 1 and len(low) == 18 and all("the loop's own bound" in line for line in low)


def test_a_users_dataset_is_not_judged_by_what_other_loops_reach(capsys):
    code, lines = _doctor(capsys, H100_JPEG)
    assert code == 3 and "judged 0 of 9" in " ".join(lines)
