"""bench.importers on sample nccl-tests and nvbandwidth outputs (tests/data, in the tools' formats)."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from bench.importers import import_nccl_tests, parse_nccl_tests, parse_nvbandwidth
from bench.results import ResultsError, load, read_meta

DATA = Path(__file__).resolve().parent / "data"
REPO = DATA.parent.parent
NCCL_LOG = DATA / "nccl_tests_h200x8.log"            # all_reduce_perf then sendrecv_perf, 8 ranks
NCCL_OLD = DATA / "nccl_tests_all_gather_old.txt"    # older table: no root column, no rank lines, -c 0
NVB_JSON = DATA / "nvbandwidth_h200x4.json"          # nvbandwidth -j on 4 GPUs
MiB = 1 << 20


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(samples, **match):
    found = [s for s in samples if all(getattr(s, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, len(found))
    return found[0]


def test_nccl_tests_log_with_two_tests():
    got = parse_nccl_tests(NCCL_LOG.read_text())
    assert len(got.samples) == 2 * 13 * 2                    # 2 tests x 13 sizes x (out-of-place, in-place)
    assert {s.op for s in got.samples} == {"all_reduce", "sendrecv"}
    assert {(s.world_size, s.nnodes, s.dtype, s.iters, s.launch, s.backend, s.suite) for s in got.samples} == {
        (8, 1, "float32", 20, "eager", "nccl", "collectives")}
    big = _row(got.samples, op="all_reduce", size_bytes=134217728, trial=0)
    assert big.time_s == pytest.approx(683.83e-6)            # the log's time is in microseconds
    assert (big.algbw_gbps, big.busbw_gbps) == (196.27, 343.48)
    assert big.verified and big.status == "ok" and big.note == "out-of-place"
    inplace = _row(got.samples, op="sendrecv", size_bytes=8388608, trial=1)
    assert not inplace.verified and inplace.status == "ok" and inplace.note == "in-place; not checked"
    assert got.tool_version == "2.17.1"
    assert got.system["nccl"] == "2.26.3" and got.system["cuda"] == "12.8"
    assert [g["name"] for g in got.system["gpus"]] == ["NVIDIA H200"] * 8


def test_old_table_needs_the_op_and_infers_ranks_from_bus_factor():
    text = NCCL_OLD.read_text()
    with pytest.raises(ResultsError, match="--op"):
        parse_nccl_tests(text)
    got = parse_nccl_tests(text, op="all_gather")
    assert len(got.samples) == 9 * 2
    assert {s.world_size for s in got.samples} == {8}            # busbw/algbw = 7/8 for all_gather
    assert all(not s.verified and s.note.endswith("not checked") for s in got.samples)
    row = _row(got.samples, size_bytes=268435456, trial=1)
    assert row.time_s == pytest.approx(1837.77e-6) and row.busbw_gbps == 127.81
    assert {s.world_size for s in parse_nccl_tests(text, op="all_gather", world_size=16).samples} == {16}


def test_wrong_elements_make_a_failed_row_without_bandwidth():
    text = """# Collective test starting: broadcast_perf
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
     1048576        262144     float    none       0    20.11   52.14   52.14      0    19.87   52.77   52.77      3
"""
    got = parse_nccl_tests(text, world_size=2)
    ok, bad = sorted(got.samples, key=lambda s: s.trial)
    assert ok.status == "ok" and ok.verified and ok.op == "broadcast"
    assert bad.status == "failed" and not bad.verified and math.isnan(bad.busbw_gbps)
    assert "3 wrong elements" in bad.note


def test_text_without_a_table_is_refused():
    with pytest.raises(ResultsError, match="no nccl-tests result table"):
        parse_nccl_tests("mpirun: command not found\n", source="x.log")


def test_nccl_import_script_writes_a_loadable_run(tmp_path):
    out = tmp_path / "run"
    script = _script("import_nccl_tests")
    assert script.main([str(NCCL_LOG), "--op", "broadcast", "--out", str(out), "--instance", "h200-x8"]) == 0
    frame = load(out)
    assert set(frame["op"]) == {"all_reduce", "sendrecv"}      # --op only fills in logs that name no binary
    meta = read_meta(out)
    assert meta["tool"] == {"name": "nccl-tests", "version": "2.17.1"}
    assert meta["source"] == [str(NCCL_LOG)]
    assert set(frame["instance"]) == {"h200-x8"}
    assert set(frame["nvlink_gbps_per_gpu"]) == {450} and set(frame["pcie_gen"]) == {5}   # from the catalogue
    old = tmp_path / "old"
    assert script.main([str(NCCL_OLD), "--out", str(old)]) == 2                  # no op: one clear error
    assert script.main([str(NCCL_OLD), "--op", "all_gather_perf", "--out", str(old)]) == 0
    assert set(load(old)["op"]) == {"all_gather"}


def test_repeated_tests_become_further_trials(tmp_path):
    out = import_nccl_tests([NCCL_LOG, NCCL_LOG], tmp_path / "twice", instance="h200-x8")
    frame = load(out)
    point = frame[(frame["op"] == "all_reduce") & (frame["size_bytes"] == 8)]
    assert sorted(point["trial"]) == [0, 1, 2, 3]
    with pytest.raises(ResultsError, match="already holds a run"):
        import_nccl_tests([NCCL_LOG], out)


def test_nvbandwidth_copies_and_peer_matrices():
    got = parse_nvbandwidth(NVB_JSON.read_text(), 512 * MiB)
    h2d = _row(got.samples, suite="copy", op="h2d", dst="cuda:1")
    assert (h2d.src, h2d.memory, h2d.mode, h2d.algbw_gbps) == ("host", "pinned", "ce", 55.7011)
    assert h2d.time_s == pytest.approx(512 * MiB / 55.7011e9)
    d2h = _row(got.samples, suite="copy", op="d2h", src="cuda:3")
    assert (d2h.dst, d2h.algbw_gbps) == ("host", 55.2706)
    local = _row(got.samples, suite="copy", op="d2d", dst="cuda:2")
    assert (local.src, local.memory, local.algbw_gbps) == ("cuda:2", "device", 2049.83)
    # write: row copies to column; the slow 1 -> 3 cell stays where the matrix put it
    slow = _row(got.samples, suite="p2p", op="uni", mode="ce-write", src="cuda:1", dst="cuda:3")
    assert slow.algbw_gbps == 245.117
    # read: the row GPU reads from the column GPU, so data flows column -> row
    matrix = json.loads(NVB_JSON.read_text())["nvbandwidth"]["testcases"][4]["bandwidth_matrix"]
    read = _row(got.samples, suite="p2p", op="uni", mode="ce-read", src="cuda:1", dst="cuda:0")
    assert read.algbw_gbps == float(matrix[0][1])
    assert not any(s.src == s.dst for s in got.samples if s.suite == "p2p")


def test_nvbandwidth_bidirectional_parts_and_totals():
    got = parse_nvbandwidth(NVB_JSON.read_text(), 512 * MiB)
    pair = {s.part: s for s in got.samples if s.suite == "p2p" and s.op == "bidir" and s.mode == "ce-read"
            and s.src == "cuda:2" and s.dst == "cuda:0"}
    assert set(pair) == {"fwd", "rev", "total"}
    assert pair["total"].algbw_gbps == pytest.approx(pair["fwd"].algbw_gbps + pair["rev"].algbw_gbps, rel=1e-5)
    assert pair["total"].time_s == pytest.approx(2 * 512 * MiB / (pair["total"].algbw_gbps * 1e9))
    sm = [s for s in got.samples if s.mode == "sm-read"]
    assert len(sm) == 12 and {s.part for s in sm} == {"total"}
    host = {s.part: s.algbw_gbps for s in got.samples if s.suite == "copy" and s.op == "bidir" and s.dst == "cuda:0"}
    assert host == pytest.approx({"h2d": 47.1935, "d2h": 46.8120, "total": 47.1935 + 46.8120})


def test_nvbandwidth_reports_what_it_did_not_import():
    got = parse_nvbandwidth(NVB_JSON.read_text(), 512 * MiB)
    skipped = {line.split(":")[0] for line in got.not_imported}
    assert skipped == {"all_to_host_memcpy_ce", "host_device_latency_sm", "device_to_device_memcpy_write_sm"}
    assert any("unspecified launch failure" in line for line in got.not_imported)
    assert got.tool_version == "v0.8"
    assert got.system["cuda"] == "12.8" and got.system["driver"] == "570.133.20"
    assert got.system["hostname"] == "gpu-node-17" and len(got.system["gpus"]) == 4


def test_nvbandwidth_import_script(tmp_path, capsys):
    out = tmp_path / "nvb"
    assert _script("import_nvbandwidth").main([str(NVB_JSON), "--out", str(out), "--buffer-size", "64MiB"]) == 0
    frame = load(out)
    assert set(frame["size_bytes"]) == {64 * MiB}
    assert set(frame["suite"]) == {"copy", "p2p"} and set(frame["status"]) == {"ok"}
    assert set(frame["instance"]) == {"gpu-node-17"}            # no --instance: the host's name
    assert read_meta(out)["tool"]["name"] == "nvbandwidth"
    assert "not imported" in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [("{not json", "not JSON"), ('{"other": 1}', "not nvbandwidth")])
def test_nvbandwidth_refuses_other_input(text, message):
    with pytest.raises(ResultsError, match=message):
        parse_nvbandwidth(text, 512 * MiB)
