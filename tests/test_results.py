import math

import pandas as pd
import pytest

from bench.results import COLUMNS, SCHEMA_VERSION, ResultsError, RunWriter, Sample, load, read_samples, write_json
from bench.suites import Point, trial_rows
from bench.timing import Trial


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
    _meta(run)
    df = load(tmp_path)
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    assert len(df) == 3 and df.size_bytes.dtype == "int64" and df.verified.all()
    assert set(df.instance) == {"test-box"} and set(df.gpu_name) == {"NVIDIA H100"}
    assert df.pcie_gen.iloc[0] == 5 and df.run_id.iloc[0] == "r1"
    csv = read_samples(run / "samples.csv")
    pd.testing.assert_frame_equal(csv, read_samples(run / "samples.parquet"))


def test_reopened_writer_keeps_rows_and_knows_finished_points(tmp_path):
    RunWriter(tmp_path, "r").add_point([Sample("copy", "d2d", 8, trial=0)])
    w = RunWriter(tmp_path, "r")
    assert len(w.frame) == 1
    assert ("copy", "d2d", "", "", "", "", "", "1", "1", "uint8", "eager", "", "", "", "8") in w.done
    w.add_point([Sample("copy", "d2d", 16, trial=0)])
    assert len(read_samples(tmp_path / "samples.parquet")) == 2


def test_failed_check_gives_no_bandwidth():
    p = Point("copy", "h2d", 1000)
    rows = trial_rows(p, [Trial(10, 1e-3)], 1000, 1.0, verified=False)
    assert rows[0].status == "failed" and math.isnan(rows[0].algbw_gbps) and not rows[0].verified
    assert "data check failed" in rows[0].note
    ok = trial_rows(p, [Trial(10, 1e-3)], 1000, 2.0, verified=True)[0]
    assert ok.algbw_gbps == pytest.approx(10 * 1000 / 1e-3 / 1e9) and ok.busbw_gbps == pytest.approx(2 * ok.algbw_gbps)
    assert ok.time_s == pytest.approx(1e-4)


def test_bidirectional_parts_each_carry_half():
    rows = trial_rows(Point("copy", "bidir", 100), [Trial(1, 2.0, {"h2d": 1.0, "d2h": 2.0})], 200, 1.0, True)
    by_part = {r.part: r.algbw_gbps for r in rows}
    assert by_part == pytest.approx({"total": 100e-9, "h2d": 100e-9, "d2h": 50e-9})


def test_corrupt_or_foreign_files_are_named(tmp_path):
    run = tmp_path / "run"
    RunWriter(run, "r").add_point([Sample("copy", "h2d", 8)])
    _meta(run)
    (run / "samples.parquet").write_bytes(b"garbage, not parquet")
    with pytest.raises(ResultsError, match="samples.parquet: unreadable"):
        load(run)
    (run / "samples.parquet").unlink()
    (run / "samples.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ResultsError, match="missing columns"):
        load(run)


def test_meta_is_checked(tmp_path):
    RunWriter(tmp_path, "r").add_point([Sample("copy", "h2d", 8)])
    with pytest.raises(ResultsError, match="no meta.json"):
        load(tmp_path)
    (tmp_path / "meta.json").write_text("{truncated")
    with pytest.raises(ResultsError, match="meta.json: corrupt JSON"):
        load(tmp_path)
    _meta(tmp_path, schema_version=99)
    with pytest.raises(ResultsError, match="schema_version 99"):
        load(tmp_path)
    with pytest.raises(ResultsError, match="no such file"):
        load(tmp_path / "nope")


def test_writes_are_atomic(tmp_path):
    w = RunWriter(tmp_path, "r")
    w.add_point([Sample("copy", "h2d", 8)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.csv", "samples.parquet"]  # no temp files left


def test_schema_1_runs_still_load_with_their_implicit_values(tmp_path):
    """A committed schema-1 run: no api/engine/numa columns; its collectives went through torch."""
    run = tmp_path / "old"
    run.mkdir()
    frame = pd.DataFrame([Sample("collectives", "all_reduce", 8, trial=0, time_s=1e-5, verified=True).__dict__,
                          Sample("copy", "h2d", 8, trial=0, time_s=1e-5, verified=True).__dict__])
    frame.drop(columns=["api", "engine", "numa", "time_fastest_rank_s"]).to_csv(run / "samples.csv", index=False)
    _meta(run, schema_version=1)
    df = load(run)
    assert list(df.api) == ["torch", ""] and df.time_fastest_rank_s.isna().all()
