import math
import os
import socket
import stat
import zlib

import pandas as pd
import pytest

from bench.commits import commit_line
from bench.journal import ResultsWriteError, RunWriter, write_json, write_meta
from bench.results import (COLUMNS, SCHEMA_VERSION, ResultsError, Sample, load, read_meta, read_samples, run_status,
                           samples_file, slow_throughout, usable_rows)
from conftest import dead_pid, fill
from bench.contract import Point, trial_rows
from bench.measure.timing import Trial


def _meta(run_dir, **extra):
    meta = {"schema_version": SCHEMA_VERSION, "run_id": "r1", "instance": {"name": "local", "label": "test-box"},
            "system": {"hostname": "h", "gpus": [{"name": "NVIDIA H100", "pcie_gen_max": 5, "pcie_width_max": 16}],
                       "torch": "2.x"}}
    meta.update(extra)
    write_json(run_dir / "meta.json", meta)


def test_round_trip_keeps_types_and_joins_meta(tmp_path):
    run = tmp_path / "run"
    w = RunWriter(run, "r1")
    w.add_point([Sample("copy", "h2d", 4096, time_s=1e-6, iters=10, trial=i, algbw_gbps=4.1, verified=True)
                 for i in range(3)])
    w.close()
    _meta(run)
    df = load(tmp_path)
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    assert len(df) == 3 and df.size_bytes.dtype == "int64" and df.verified.all()
    assert set(df.instance) == {"test-box"} and set(df.gpu_name) == {"NVIDIA H100"}
    assert df.pcie_gen.iloc[0] == 5 and df.run_id.iloc[0] == "r1"
    csv = read_samples(run / "samples.csv")
    pd.testing.assert_frame_equal(csv, read_samples(run / "samples.parquet"))


def test_reopened_writer_keeps_rows_and_knows_finished_points(tmp_path):
    RunWriter(tmp_path, "r").add_point([Sample("copy", "d2d", 8, time_s=1e-6, trial=0)])
    w = RunWriter(tmp_path, "r")
    assert len(w.frame) == 1
    assert ("copy", "d2d", "", "", "", "", "", "1", "1", "uint8", "eager", "", "", "", "", "8") in w.done
    w.add_point([Sample("copy", "d2d", 16, time_s=1e-6, trial=0)])
    assert len(read_samples(tmp_path / "samples.csv")) == 2   # the journal has it at once
    w.close()
    assert len(read_samples(tmp_path / "samples.parquet")) == 2


def test_the_journal_keeps_every_point_of_a_writer_that_never_closed(tmp_path):
    """A killed run: its Parquet lags, the CSV holds every point, and a torn last line is dropped."""
    w = RunWriter(tmp_path, "r")
    for size in (8, 16, 32):
        w.add_point([Sample("copy", "d2d", size, time_s=1e-6, trial=t, verified=True) for t in range(2)])
    with open(tmp_path / "samples.csv", "ab") as f:
        f.write(b"copy,d2d,64,1e-06")   # a writer killed in the middle of an append
    assert samples_file(tmp_path).name == "samples.csv"
    assert sorted(read_samples(samples_file(tmp_path)).size_bytes) == [8, 8, 16, 16, 32, 32]
    reopened = RunWriter(tmp_path, "r")   # resume: the torn line gone, in place
    assert len(reopened.done) == 3 and not (tmp_path / "samples.csv").read_bytes().endswith(b"1e-06")
    reopened.close()
    assert samples_file(tmp_path).name == "samples.parquet"


def _cut_inside_last_point(journal, rows_kept):
    """The journal cut at a line boundary inside its last point, as a full disk leaves it."""
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:len(lines) - rows_kept]))


def test_a_point_cut_short_is_not_read_and_is_measured_again(tmp_path):
    w = RunWriter(tmp_path, "r")
    for size in (8, 16):
        w.add_point([Sample("copy", "d2d", size, time_s=1e-6, trial=t, verified=True) for t in range(3)])
    w.close()
    _cut_inside_last_point(tmp_path / "samples.csv", 1)   # 2 of the 16 B point's 3 rows left, each whole
    assert samples_file(tmp_path).name == "samples.csv"   # the Parquet holds rows the journal lost
    assert sorted(read_samples(tmp_path / "samples.csv").size_bytes) == [8] * 3
    reopened = RunWriter(tmp_path, "r")
    assert len(reopened.done) == 1
    reopened.add_point([Sample("copy", "d2d", 16, time_s=1e-6, trial=t, verified=True) for t in range(3)])
    assert read_samples(tmp_path / "samples.csv").groupby("size_bytes").trial.count().to_dict() == {8: 3, 16: 3}
    # Plain CSV for any reader: the header and the rows, nothing else.
    assert len(pd.read_csv(tmp_path / "samples.csv")) == 6


def test_a_journal_begun_in_another_column_order_is_resumed_whole(tmp_path):
    # a run begun by a version that wrote its columns in another order, resumed by this one
    RunWriter(tmp_path, "r").add_point([Sample("copy", "d2d", 8, time_s=1e-6, trial=0, note="first")])
    journal = tmp_path / "samples.csv"
    older = pd.read_csv(journal, keep_default_na=False)
    older = older[[*reversed(COLUMNS)]].to_csv(index=False).encode()
    journal.write_bytes(older)
    (tmp_path / "samples.commit").write_bytes(commit_line(len(older), zlib.crc32(older)))
    (tmp_path / "samples.parquet").unlink(missing_ok=True)
    w = RunWriter(tmp_path, "r")
    w.add_point([Sample("copy", "d2d", 16, time_s=2e-6, trial=0, note="second")])
    rows = read_samples(journal)
    assert rows[["size_bytes", "time_s", "note"]].values.tolist() == [[8, 1e-6, "first"], [16, 2e-6, "second"]]


def test_a_journal_without_commits_reads_by_whole_lines(tmp_path):
    """An older run, or a CSV another tool wrote: every whole line is a row, as before commits."""
    w = RunWriter(tmp_path, "r")
    for size in (8, 16):
        w.add_point([Sample("copy", "d2d", size, time_s=1e-6, trial=t) for t in range(2)])
    (tmp_path / "samples.commit").unlink()
    _cut_inside_last_point(tmp_path / "samples.csv", 1)
    assert sorted(read_samples(tmp_path / "samples.csv").size_bytes) == [8, 8, 16]
    assert len(RunWriter(tmp_path, "r").done) == 2   # rewritten from its lines, with a commit for them
    assert sorted(read_samples(tmp_path / "samples.csv").size_bytes) == [8, 8, 16]


def test_a_csv_rewritten_after_its_commits_is_named_and_read_as_it_is_once_they_go(tmp_path):
    w = RunWriter(tmp_path, "r")
    for size in (8, 16):
        w.add_point([Sample("copy", "d2d", size, time_s=1e-6, trial=t) for t in range(2)])
    rows = pd.read_csv(tmp_path / "samples.csv")
    rows[rows.size_bytes == 16].to_csv(tmp_path / "samples.csv", index=False)   # same header, other bytes
    with pytest.raises(ResultsError, match=r"samples.csv, line 2: changed after it was written .* remove "
                                           r"samples.commit to read it as it is now"):
        read_samples(tmp_path / "samples.csv")
    (tmp_path / "samples.commit").unlink()   # the user's say: this file is the run now
    assert sorted(read_samples(tmp_path / "samples.csv").size_bytes) == [16, 16]


def test_a_full_disk_leaves_every_point_whole_and_the_journal_at_its_last_commit(small_disk):
    disk = small_disk("16k")
    w = RunWriter(disk / "run", "r")
    with pytest.raises(ResultsWriteError) as failed:
        for size in range(1, 1000):   # ~2 KiB a point: the disk is full within a few
            w.add_point([Sample("copy", "h2h", size, time_s=1e-6, trial=t, note="x" * 80) for t in range(10)])
    sizes = sorted(set(read_samples(disk / "run" / "samples.csv").size_bytes))
    assert sizes == list(range(1, len(sizes) + 1)) and len(sizes) == len(w.done) > 0
    assert len(pd.read_csv(disk / "run" / "samples.csv")) == 10 * len(sizes)   # nothing torn left on disk
    assert str(failed.value) == (f"no space left on device writing {disk / 'run'}: the {len(sizes)} points "
                                 f"before it are on disk whole; free space and resume={disk / 'run'}")


@pytest.mark.parametrize("status", ["failed", "interrupted", "complete"])
def test_meta_json_on_a_full_disk_gets_its_final_status_in_place(small_disk, status):
    disk = small_disk("16k")
    meta = {"schema_version": SCHEMA_VERSION, "run_id": "r", "end_time": None, "status": "running", "pid": 1,
            "config": {"status": "running"}}
    write_json(disk / "meta.json", meta)
    size = (disk / "meta.json").stat().st_size
    fill(disk)
    with pytest.raises(OSError):   # a new copy has no room
        write_json(disk / "meta.json", {**meta, "status": status})
    assert write_meta(disk, {**meta, "status": status, "end_time": "now"}) is False
    assert read_meta(disk)["status"] == status and (disk / "meta.json").stat().st_size == size
    assert read_meta(disk)["config"] == {"status": "running"}   # only the run's own status
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "meta.json"]   # no temp file left


def test_a_stale_writer_closing_late_loses_no_other_writers_rows(tmp_path):
    """The parent's writer, left open while rank 0 appended to the same run, then closed."""
    parent = RunWriter(tmp_path, "r")
    parent.add_point([Sample("copy", "d2d", 8, time_s=1e-6, trial=0)])
    rank0 = RunWriter(tmp_path, "r")
    rank0.add_point([Sample("collectives", "all_reduce", 8, time_s=1e-6, trial=0)])
    rank0.close()
    parent.close()   # its Parquet lacks rank 0's row: readers take the journal
    assert sorted(read_samples(samples_file(tmp_path)).suite) == ["collectives", "copy"]


def test_resume_of_a_csv_only_run_keeps_its_rows(tmp_path):
    RunWriter(tmp_path, "r").add_point([Sample("copy", "d2d", 8, time_s=1e-6, trial=0)])
    assert not (tmp_path / "samples.parquet").exists()  # a writer that never closed wrote only the journal
    w = RunWriter(tmp_path, "r")
    assert len(w.done) == 1
    w.add_point([Sample("copy", "d2d", 16, time_s=1e-6, trial=0)])
    w.close()
    assert sorted(read_samples(tmp_path / "samples.parquet").size_bytes) == [8, 16]
    assert sorted(read_samples(tmp_path / "samples.csv").size_bytes) == [8, 16]


def test_failed_check_gives_no_bandwidth():
    p = Point("copy", "h2d", 1000)
    rows = trial_rows(p, [Trial(10, 1e-3)], 1000, 1.0, verified=False)
    assert rows[0].status == "failed" and math.isnan(rows[0].algbw_gbps) and not rows[0].verified
    assert "data check failed" in rows[0].note
    ok = trial_rows(p, [Trial(10, 1e-3)], 1000, 2.0, verified=True)[0]
    assert ok.algbw_gbps == pytest.approx(10 * 1000 / 1e-3 / 1e9) and ok.busbw_gbps == pytest.approx(2 * ok.algbw_gbps)
    assert ok.time_s == pytest.approx(1e-4)


def test_short_trial_keeps_its_rows_with_a_note():
    p = Point("copy", "bidir", 100)
    rows = trial_rows(p, [Trial(1, 0.0031, {"h2d": 0.003, "d2h": 0.0031}, short=True), Trial(1, 0.02)], 200, 1.0,
                      True, note="staged")
    assert [r.note for r in rows] == ["staged; short trial: 3.1 ms < half of min_trial_s"] * 3 + ["staged"]
    assert all(r.status == "ok" and r.algbw_gbps > 0 for r in rows)


def test_bidirectional_parts_each_carry_half():
    rows = trial_rows(Point("copy", "bidir", 100), [Trial(1, 2.0, {"h2d": 1.0, "d2h": 2.0})], 200, 1.0, True)
    by_part = {r.part: r.algbw_gbps for r in rows}
    assert by_part == pytest.approx({"total": 100e-9, "h2d": 100e-9, "d2h": 50e-9})


def _run(path, size=8, **meta):
    RunWriter(path, "r").add_point([Sample("copy", "h2d", size, time_s=1e-6, trial=0, verified=True)])
    _meta(path, **meta)
    return path


def _load(paths):
    warnings = []
    return load(paths, warn=warnings.append), warnings


def test_corrupt_or_foreign_files_are_named(tmp_path):
    run = _run(tmp_path / "run")
    (run / "samples.parquet").write_bytes(b"garbage, not parquet")
    assert len(_load(run)[0]) == 1   # the journal (samples.csv) still holds every row
    (run / "samples.csv").unlink()
    with pytest.raises(ResultsError, match="no usable run .*samples.parquet: unreadable"):
        _load(run)
    (run / "samples.parquet").unlink()
    (run / "samples.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ResultsError, match="missing columns"):
        _load(run)


def test_meta_is_checked(tmp_path):
    RunWriter(tmp_path, "r").add_point([Sample("copy", "h2d", 8, time_s=1e-6)])
    with pytest.raises(ResultsError, match="no meta.json"):
        load(tmp_path)
    (tmp_path / "meta.json").write_text("{truncated")
    with pytest.raises(ResultsError, match="meta.json: corrupt JSON"):
        _load(tmp_path)
    _meta(tmp_path, schema_version=99)
    with pytest.raises(ResultsError, match="schema_version 99"):
        _load(tmp_path)
    with pytest.raises(ResultsError, match="no such file"):
        load(tmp_path / "nope")


def test_one_bad_run_folder_is_skipped_with_one_warning_each(tmp_path):
    good = _run(tmp_path / "box" / "good", size=4096)
    (tmp_path / "box" / "only-meta").mkdir()
    _meta(tmp_path / "box" / "only-meta")  # a run that measured nothing: no samples file
    bad_json = _run(tmp_path / "box" / "bad-json")
    (bad_json / "meta.json").write_text("{truncated")
    bad_parquet = _run(tmp_path / "box" / "bad-parquet")
    (bad_parquet / "samples.parquet").write_bytes(b"PAR1 then\nnothing")
    (bad_parquet / "samples.csv").unlink()   # with the journal there, its rows would still load
    _run(tmp_path / "box" / "future", schema_version=99)
    frame, warnings = _load(tmp_path)
    assert set(frame.run_dir) == {str(good)} and list(frame.size_bytes) == [4096]
    assert len(warnings) == 4 and all("\n" not in w and w.startswith("xferbench: skipping ") for w in warnings)
    by_run = {w.split()[2].rstrip(":"): w for w in warnings}
    assert by_run[str(tmp_path / "box" / "only-meta")].endswith(": no samples file")
    assert "meta.json: corrupt JSON" in by_run[str(bad_json)]
    assert "samples.parquet: unreadable" in by_run[str(bad_parquet)]
    assert "schema_version 99" in by_run[str(tmp_path / "box" / "future")]


def test_skipped_runs_warn_on_stderr_by_default(tmp_path, capsys):
    _run(tmp_path / "good")
    (tmp_path / "empty").mkdir()
    _meta(tmp_path / "empty")
    assert len(load(tmp_path)) == 1
    assert capsys.readouterr().err == f"xferbench: skipping {tmp_path / 'empty'}: no samples file\n"


@pytest.mark.parametrize("status, pid, host, expected", [
    ("running", "dead", "here", "interrupted"),     # killed before it could write its status
    ("running", "self", "here", "running"),         # still measuring
    ("running", "dead", "elsewhere", "running"),    # another machine's pid says nothing here
    ("running", None, "here", "running"),           # no pid recorded: cannot tell
    ("complete", "dead", "here", "complete"),
    ("failed", "dead", "here", "failed"),
])
def test_run_status_reads_a_dead_running_run_as_interrupted(status, pid, host, expected):
    pids = {"dead": dead_pid(), "self": os.getpid(), None: None}
    hostname = socket.gethostname() if host == "here" else "some-other-host.invalid"
    meta = {"status": status, "pid": pids[pid], "system": {"hostname": hostname}}
    assert run_status(meta) == expected


def test_load_adds_run_status(tmp_path):
    _run(tmp_path / "killed", status="running", pid=dead_pid(),
         system={"hostname": socket.gethostname(), "gpus": []})
    _run(tmp_path / "done", status="complete")
    frame, _ = _load(tmp_path)
    assert dict(zip(frame.run_dir.map(lambda d: os.path.basename(d)), frame.run_status)) == {
        "killed": "interrupted", "done": "complete"}


def test_writes_are_atomic(tmp_path):
    w = RunWriter(tmp_path, "r")
    w.add_point([Sample("copy", "h2d", 8, time_s=1e-6)])
    w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.commit", "samples.csv", "samples.parquet"]  # no temp files left


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_files_get_the_users_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        w = RunWriter(tmp_path, "r")
        w.add_point([Sample("copy", "h2d", 8, time_s=1e-6)])
        w.close()
        write_json(tmp_path / "meta.json", {"a": 1})
        (tmp_path / "plain").write_text("")  # what a normal open() gives
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(["samples.csv", "samples.commit", "samples.parquet", "meta.json", "plain"],
                                  0o666 & ~umask)


def test_schema_1_runs_still_load_with_their_implicit_values(tmp_path):
    """A committed schema-1 run: no api/engine/numa (nor params) columns; its ranks (the collectives,
    on nccl or gloo: schema 1 had no other suite of ranks) went through torch."""
    run = tmp_path / "old"
    run.mkdir()
    frame = pd.DataFrame([Sample("collectives", "all_reduce", 8, trial=0, time_s=1e-5, verified=True,
                                 backend="nccl").__dict__,
                          Sample("copy", "h2d", 8, trial=0, time_s=1e-5, verified=True).__dict__])
    old = frame.drop(columns=["api", "engine", "numa", "params", "time_fastest_rank_s"])
    old.to_csv(run / "samples.csv", index=False)
    _meta(run, schema_version=1)
    df = load(run)
    assert list(df.api) == ["torch", ""] and df.time_fastest_rank_s.isna().all()


def _paced_rows(paces: dict[int, list[float]], run_id: str = "r1") -> pd.DataFrame:
    """Trials of points of sizes `paces` keys, each trial with its reading of the host's pace."""
    return pd.DataFrame([Sample("copy", "h2d", size, trial=i, time_s=pace * 1e-5, verified=True, host_pace_s=pace,
                                run_id=run_id).__dict__
                         for size, readings in paces.items() for i, pace in enumerate(readings)])


def test_readers_keep_the_trials_taken_at_the_hosts_usual_pace():
    rows = _paced_rows({8: [1.0, 1.1, 1.9, 2.0], 16: [1.0, 1.0, 1.0, 1.0], 32: [1.9, 2.0, 2.1, 1.8]})
    kept = usable_rows(rows)
    # 8 B: its two slow trials go; 32 B: no trial at the usual pace, so all stay, marked slow throughout
    assert list(kept.groupby("size_bytes").size()) == [2, 4, 4]
    assert list(slow_throughout(rows).groupby(rows.size_bytes).all()) == [False, False, True]
    other_run = _paced_rows({8: [3.0, 3.0, 3.1]}, run_id="r2")   # a slower host throughout is its own usual
    assert len(usable_rows(pd.concat([rows, other_run]))) == 10 + 3


def test_a_point_in_rounds_keeps_its_rounds_at_pace_only_where_two_or_more_are():
    # Five rounds of one trial each; 8 B met the usual pace in one round only (a moment, not a
    # figure: all five stay), 16 B in two (those two stay).
    rows = _paced_rows({8: [1.0, 2.0, 2.0, 2.0, 2.0], 16: [2.0, 1.0, 2.0, 1.0, 2.0]})
    rows["round"] = rows["trial"]
    kept = usable_rows(rows)
    assert list(kept.groupby("size_bytes").size()) == [5, 2] and set(kept[kept.size_bytes == 16]["round"]) == {1, 3}


def test_runs_without_pace_readings_keep_every_trial():
    rows = _paced_rows({8: [1.0, 5.0]}).assign(host_pace_s=math.nan)
    assert len(usable_rows(rows)) == 2 and not slow_throughout(rows).any()


def test_schema_3_runs_load_without_pace_readings(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    pd.DataFrame([Sample("copy", "h2d", 8, trial=0, time_s=1e-5, verified=True).__dict__]).drop(
        columns=["host_pace_s"]).to_csv(run / "samples.csv", index=False)
    _meta(run, schema_version=3)
    assert load(run).host_pace_s.isna().all()
