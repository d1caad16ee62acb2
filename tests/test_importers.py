"""bench.importers on sample nccl-tests and nvbandwidth outputs (tests/data, in the tools' formats)."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from bench.importers.nccl_tests import import_nccl_tests, parse_nccl_tests
from bench.importers.nvbandwidth import parse_nvbandwidth
from bench.importers.run_folder import number_trials
from bench.results import ResultsError, load, read_meta

DATA = Path(__file__).resolve().parent / "data"
REPO = DATA.parent.parent
NCCL_LOG = DATA / "nccl_tests_h200x8.log"            # all_reduce_perf then sendrecv_perf, 8 ranks
NCCL_OLD = DATA / "nccl_tests_all_gather_old.txt"    # older table: no root column, no rank lines, -c 0
NVB_JSON = DATA / "nvbandwidth_h200x4.json"          # nvbandwidth -j on 4 GPUs (SM bidirectional as before v0.6)
NVB_V08 = DATA / "nvbandwidth_v08_h100pcie_x4.json"  # every single-node testcase of v0.8, 4 GPUs
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


def _cut(text: str, after: str) -> str:
    """The log up to and including the first line that holds `after`: a job killed there."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:next(i for i, line in enumerate(lines) if after in line) + 1])


def test_whole_logs_are_complete_and_a_cut_one_names_where_it_stops():
    assert parse_nccl_tests(NCCL_LOG.read_text()).incomplete == []
    assert parse_nccl_tests(NCCL_OLD.read_text(), op="all_gather").incomplete == []
    text = NCCL_LOG.read_text()
    mid_table = parse_nccl_tests(_cut(text, " 524288 "))            # all_reduce stopped at 512 KiB
    assert mid_table.incomplete == ["all_reduce: stops at 512KiB of the header's 128MiB, no '# Avg bus bandwidth' line"]
    assert max(s.size_bytes for s in mid_table.samples) == 524288   # what it holds is still imported
    before_next = parse_nccl_tests(_cut(text, "sendrecv_perf -b"))   # the next test had not begun
    assert before_next.incomplete == [] and {s.op for s in before_next.samples} == {"all_reduce"}
    first, second_test = text.split("\n$ mpirun -np 8 --bind-to numa ./build/sendrecv_perf", 1)
    started = parse_nccl_tests(first + "\n$ mpirun ./build/sendrecv_perf" + _cut(second_test, "# nThread"))
    assert started.incomplete == ["sendrecv: started, no rows"]
    # a log without its '#' lines says nothing of how far it got: not judged
    bare = "".join(line for line in _cut(text, " 524288 ").splitlines(keepends=True) if not line.startswith("#"))
    assert parse_nccl_tests(bare, op="all_reduce", world_size=8).incomplete == []


def test_a_cut_log_imports_with_one_warning_and_an_interrupted_run(tmp_path, capsys):
    log = tmp_path / "all_reduce.log"
    log.write_text(_cut(NCCL_LOG.read_text(), " 2097152 "))
    assert _script("import_nccl_tests").main([str(log), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["import_nccl_tests: warning: the sweep looks incomplete, so the run is marked interrupted: "
                   "all_reduce.log: all_reduce: stops at 2MiB of the header's 128MiB, no '# Avg bus bandwidth' line"]
    meta = read_meta(tmp_path / "run")
    assert meta["status"] == "interrupted" and meta["incomplete"] == [err[0].split("interrupted: ")[1]]
    assert set(load(tmp_path / "run")["run_status"]) == {"interrupted"}
    assert "status" not in read_meta(import_nccl_tests([NCCL_LOG], tmp_path / "whole"))


def test_nvbandwidth_copies_and_peer_matrices():
    got = parse_nvbandwidth(NVB_JSON.read_text(), 512 * MiB)
    h2d = _row(got.samples, suite="copy", op="h2d", dst="cuda:1")
    assert (h2d.src, h2d.memory, h2d.mode, h2d.engine, h2d.numa, h2d.algbw_gbps) == (
        "host", "pinned", "", "ce", "local", 55.7011)
    assert h2d.time_s == pytest.approx(512 * MiB / 55.7011e9)
    d2h = _row(got.samples, suite="copy", op="d2h", src="cuda:3")
    assert (d2h.dst, d2h.algbw_gbps) == ("host", 55.2706)
    local = _row(got.samples, suite="copy", op="d2d", dst="cuda:2")
    assert (local.src, local.memory, local.engine, local.numa, local.algbw_gbps) == (
        "cuda:2", "device", "ce", "", 2049.83)
    # write: row copies to column; the slow 1 -> 3 cell stays where the matrix put it
    slow = _row(got.samples, suite="p2p", op="uni", mode="write", engine="ce", src="cuda:1", dst="cuda:3")
    assert slow.algbw_gbps == 245.117 and slow.numa == ""
    # read: the row GPU reads from the column GPU, so data flows column -> row
    matrix = json.loads(NVB_JSON.read_text())["nvbandwidth"]["testcases"][4]["bandwidth_matrix"]
    read = _row(got.samples, suite="p2p", op="uni", mode="read", engine="ce", src="cuda:1", dst="cuda:0")
    assert read.algbw_gbps == float(matrix[0][1])
    assert not any(s.src == s.dst for s in got.samples if s.suite == "p2p")
    assert {(s.verified, s.note.split(";")[0]) for s in got.samples} == {(False, "not checked (imported)")}


def test_nvbandwidth_bidirectional_parts_and_totals():
    got = parse_nvbandwidth(NVB_JSON.read_text(), 512 * MiB)
    pair = {s.part: s for s in got.samples if s.suite == "p2p" and s.op == "bidir" and s.mode == "read"
            and s.engine == "ce" and s.src == "cuda:2" and s.dst == "cuda:0"}
    assert set(pair) == {"fwd", "rev", "total"}
    assert pair["total"].algbw_gbps == pytest.approx(pair["fwd"].algbw_gbps + pair["rev"].algbw_gbps, rel=1e-5)
    assert pair["total"].time_s == pytest.approx(2 * 512 * MiB / (pair["total"].algbw_gbps * 1e9))
    sm = [s for s in got.samples if s.mode == "read" and s.engine == "sm"]   # before v0.6: the sum only
    assert len(sm) == 12 and {s.part for s in sm} == {"total"}
    host = {s.part: s.algbw_gbps for s in got.samples if s.suite == "copy" and s.op == "bidir" and s.dst == "cuda:0"}
    assert host == pytest.approx({"h2d": 47.1935, "d2h": 46.8120, "total": 47.1935 + 46.8120})


def test_nvbandwidth_whole_machine_and_latency_tests_of_the_older_file():
    got = parse_nvbandwidth(NVB_JSON.read_text(), 512 * MiB)
    d2h = {s.part: s for s in got.samples if s.op == "d2h" and s.src == "all"}
    assert set(d2h) == {"cuda:0", "cuda:1", "cuda:2", "cuda:3", "total"}
    assert d2h["total"].algbw_gbps == pytest.approx(109.7148) and d2h["total"].world_size == 4
    latency = _row(got.samples, op="latency", dst="cuda:2")
    assert (latency.suite, latency.src, latency.time_s) == ("copy", "host", pytest.approx(815.002e-9))


def test_nvbandwidth_reports_what_it_did_not_import():
    got = parse_nvbandwidth(NVB_JSON.read_text(), 512 * MiB)
    assert got.not_imported == [
        "device_to_device_memcpy_write_sm: status Error: cudaErrorLaunchFailure: unspecified launch failure"]
    assert got.tool_version == "v0.8"
    assert got.system["cuda"] == "12.8" and got.system["driver"] == "570.133.20"
    assert got.system["hostname"] == "gpu-node-17" and len(got.system["gpus"]) == 4


def _nvb_v08(drop: tuple[str, ...] = (), extra: tuple[dict, ...] = ()) -> dict:
    data = json.loads(NVB_V08.read_text())
    tests = data["nvbandwidth"]["testcases"]
    data["nvbandwidth"]["testcases"] = [t for t in tests if t["name"] not in drop] + list(extra)
    return data


def _v08_matrix(name: str) -> list[list[float | None]]:
    test = next(t for t in json.loads(NVB_V08.read_text())["nvbandwidth"]["testcases"] if t["name"] == name)
    return [[None if v == "N/A" else float(v) for v in row] for row in test["bandwidth_matrix"]]


def test_nvbandwidth_v08_every_testcase_is_imported():
    got = parse_nvbandwidth(_nvb_v08(), 512 * MiB)
    assert got.not_imported == []
    assert {s.note.split("; ")[1].removeprefix("nvbandwidth ") for s in got.samples} >= {
        t["name"] for t in _nvb_v08()["nvbandwidth"]["testcases"]}
    assert {(s.suite, s.op, s.mode, s.engine) for s in got.samples} == {
        *(("copy", op, "", e) for op in ("h2d", "d2h", "bidir") for e in ("ce", "sm")),
        ("copy", "d2d", "", "ce"), ("copy", "latency", "", "sm"), ("p2p", "latency", "read", "sm"),
        *(("p2p", op, m, e) for op in ("uni", "bidir", "all_to_one", "one_to_all")
          for m in ("read", "write") for e in ("ce", "sm"))}
    assert all(not s.verified and s.note.startswith("not checked (imported); nvbandwidth ") for s in got.samples)
    assert {s.numa for s in got.samples if s.suite == "copy" and s.memory == "pinned"} == {"local"}
    assert {s.numa for s in got.samples if s.memory == "device"} == {""}
    assert max(s.trial for s in number_trials(got.samples)) == 0      # no two testcases share a point


def test_nvbandwidth_v08_sm_bidirectional_reports_both_directions():
    got = parse_nvbandwidth(_nvb_v08(), 512 * MiB)
    pair = {s.part: s.algbw_gbps for s in got.samples
            if s.op == "bidir" and s.mode == "write" and s.engine == "sm" and (s.src, s.dst) == ("cuda:0", "cuda:1")}
    matrix = _v08_matrix("device_to_device_bidirectional_memcpy_write_sm")     # 3 blocks of 4 rows
    assert pair == {"rev": matrix[0][1], "fwd": matrix[4][1], "total": matrix[8][1]}


def test_nvbandwidth_v08_latency():
    got = parse_nvbandwidth(_nvb_v08(), 512 * MiB)
    lat = [s for s in got.samples if s.op == "latency"]
    assert len(lat) == 4 + 12 and all(s.size_bytes == 2 * MiB for s in lat)     # fixed buffer, -b ignored
    assert all(math.isnan(s.algbw_gbps) and math.isnan(s.busbw_gbps) for s in lat)
    host = _row(lat, suite="copy", dst="cuda:3")
    assert (host.src, host.memory, host.engine, host.numa) == ("host", "pinned", "sm", "local")
    assert host.time_s == pytest.approx(_v08_matrix("host_device_latency_sm")[0][3] * 1e-9)
    # row GPU 1 reads the memory of column GPU 2: data cuda:2 -> cuda:1
    peer = _row(lat, suite="p2p", src="cuda:2", dst="cuda:1")
    assert peer.time_s == pytest.approx(_v08_matrix("device_to_device_latency_sm")[1][2] * 1e-9)
    assert "pointer chase" in peer.note


def test_nvbandwidth_v08_host_to_all_is_one_point_per_gpu_and_total():
    got = parse_nvbandwidth(_nvb_v08(), 512 * MiB)
    row = _v08_matrix("host_to_all_memcpy_ce")[0]
    parts = {s.part: s for s in got.samples if s.op == "h2d" and s.dst == "all" and s.engine == "ce"}
    assert {p: s.algbw_gbps for p, s in parts.items()} == pytest.approx(
        {**{f"cuda:{j}": bw for j, bw in enumerate(row)}, "total": sum(row)})
    assert {(s.suite, s.src, s.memory, s.world_size) for s in parts.values()} == {("copy", "host", "pinned", 4)}
    assert parts["total"].time_s == pytest.approx(4 * 512 * MiB / (sum(row) * 1e9))
    up = {s.part: s.algbw_gbps for s in got.samples if s.op == "d2h" and s.src == "all" and s.engine == "sm"}
    assert up["total"] == pytest.approx(sum(_v08_matrix("all_to_host_memcpy_sm")[0]))


def test_nvbandwidth_v08_host_to_all_bidirectional_pairs_into_one_point():
    got = parse_nvbandwidth(_nvb_v08(), 512 * MiB)
    h2d = _v08_matrix("host_to_all_bidirectional_memcpy_ce")[0]
    d2h = _v08_matrix("all_to_host_bidirectional_memcpy_ce")[0]
    parts = {s.part: s.algbw_gbps for s in got.samples if s.op == "bidir" and s.dst == "all" and s.engine == "ce"}
    assert parts == pytest.approx({"h2d": sum(h2d), "d2h": sum(d2h), "total": sum(h2d) + sum(d2h),
                                   **{f"cuda:{j}": a + b for j, (a, b) in enumerate(zip(h2d, d2h))}})
    alone = parse_nvbandwidth(_nvb_v08(drop=("all_to_host_bidirectional_memcpy_ce",)), 512 * MiB)
    assert {s.part for s in alone.samples if s.op == "bidir" and s.dst == "all" and s.engine == "ce"} == {"h2d"}


@pytest.mark.parametrize("name, op, mode", [
    ("all_to_one_write_ce", "all_to_one", "write"),   # peers write into the one GPU
    ("one_to_all_read_ce", "all_to_one", "read"),     # the one GPU reads from every peer
    ("one_to_all_write_sm", "one_to_all", "write"),
    ("all_to_one_read_sm", "one_to_all", "read"),     # every peer reads from the one GPU
])
def test_nvbandwidth_v08_all_to_one_is_named_by_where_data_goes(name, op, mode):
    got = parse_nvbandwidth(_nvb_v08(), 512 * MiB)
    row = _v08_matrix(name)[0]
    parts = {s.part: s for s in got.samples if s.op == op and s.mode == mode and s.engine == name[-2:]}
    assert {p: s.algbw_gbps for p, s in parts.items()} == pytest.approx(
        {**{f"cuda:{j}": bw for j, bw in enumerate(row)}, "total": sum(row)})
    assert all(name in s.note for s in parts.values())
    assert {(s.suite, s.src, s.dst, s.memory, s.world_size) for s in parts.values()} == {
        ("p2p", "all", "all", "device", 4)}
    assert parts["cuda:0"].time_s == pytest.approx(3 * 512 * MiB / (row[0] * 1e9))   # 3 peers' buffers


def test_nvbandwidth_not_imported_reasons():
    extra = ({"name": "multinode_device_to_device_memcpy_read_ce", "status": "Passed",
              "bandwidth_matrix": [["N/A", "1"], ["1", "N/A"]], "sum": 2},
             {"name": "device_to_device_memcpy_read_ce", "status": "Waived"},
             {"name": "host_to_device_memcpy_ce", "status": "Passed"},
             {"name": "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_matrix": [["fast"]]},
             {"name": "device_to_device_bidirectional_memcpy_read_ce", "status": "Passed",
              "bandwidth_matrix": [["N/A", "1"], ["1", "N/A"], ["N/A", "1"], ["1", "N/A"]]},
             {"name": "future_test_ce", "status": "Passed", "bandwidth_matrix": [["1"]]})
    got = parse_nvbandwidth(_nvb_v08(extra=extra), 512 * MiB)
    assert got.not_imported == [
        "multinode_device_to_device_memcpy_read_ce: multi-node test (nvbandwidth's MPI build): its GPUs are ranks "
        "on hosts the JSON does not name",
        "device_to_device_memcpy_read_ce: status Waived",
        "host_to_device_memcpy_ce: no bandwidth_matrix",
        "host_to_device_memcpy_ce: unreadable bandwidth_matrix",
        "device_to_device_bidirectional_memcpy_read_ce: 2 matrices where 3 (directions and total) were expected",
        "future_test_ce: not a testcase of nvbandwidth v0.8"]


def test_nvbandwidth_import_script(tmp_path, capsys):
    out = tmp_path / "nvb"
    assert _script("import_nvbandwidth").main([str(NVB_JSON), "--out", str(out), "--buffer-size", "64MiB"]) == 0
    frame = load(out)
    assert set(frame[frame["op"] != "latency"]["size_bytes"]) == {64 * MiB}
    assert set(frame[frame["op"] == "latency"]["size_bytes"]) == {2 * MiB}
    assert set(frame["suite"]) == {"copy", "p2p"} and set(frame["status"]) == {"ok"}
    assert set(frame["instance"]) == {"gpu-node-17"}            # no --instance: the host's name
    assert read_meta(out)["tool"]["name"] == "nvbandwidth"
    assert "not imported" in capsys.readouterr().err


def test_nvbandwidth_import_script_without_numa_binding(tmp_path, capsys):
    out = tmp_path / "nvb"
    assert _script("import_nvbandwidth").main([str(NVB_V08), "--out", str(out), "--numa", "none"]) == 0
    frame = load(out)
    assert set(frame[frame["memory"] == "pinned"]["numa"]) == {"none"}
    assert set(frame[frame["memory"] == "device"]["numa"]) == {""}
    assert read_meta(out)["not_imported"] == [] and "not imported" not in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [("{not json", "not JSON"), ('{"other": 1}', "not nvbandwidth")])
def test_nvbandwidth_refuses_other_input(text, message):
    with pytest.raises(ResultsError, match=message):
        parse_nvbandwidth(text, 512 * MiB)
