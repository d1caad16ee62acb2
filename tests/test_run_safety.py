"""Runs never share, mix or lose results: exclusive folders, guarded resume, signals, dead parents."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from bench import ConfigError
from bench.driver.folders import make_run_dir
from bench.journal import RunWriter
from bench.results import (COLUMNS, POINT_KEYS, ResultsError, Sample, load, read_meta, read_samples, run_status,
                           samples_file)
from bench.driver.schema import normalize_overrides
from conftest import env, xferbench_cmd
from test_faults import LONG_COLLECTIVES, _alive, _ranks, _start, _wait_for_points
from test_interrupts import TAG, tagged

QUICK = ("suite=copy", "sizes.max=16KiB", "timing.trials=2")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """One QUICK run with run_id=mine, made once under umask 027 (test_results_follow_the_umask
    reads its files' modes): tests that only read it share it; those that change it take a copy
    (quick_copy). A run is seconds of start-up; each question of its files needs none of its own."""
    folder = tmp_path_factory.mktemp("quick")
    old = os.umask(0o027)
    try:
        proc = subprocess.run(xferbench_cmd(folder / "results", *QUICK, "run_id=mine"), cwd=folder, env=env(),
                              capture_output=True, text=True, timeout=300)
    finally:
        os.umask(old)
    assert proc.returncode == 0, proc.stderr
    (run,) = (m.parent for m in (folder / "results").rglob("meta.json"))
    return run


@pytest.fixture
def quick_copy(quick_run, tmp_path) -> Path:
    """A copy of quick_run where the test's own runs go (tmp_path/results/<instance>/mine), to change."""
    run = tmp_path / "results" / quick_run.parent.name / quick_run.name
    shutil.copytree(quick_run, run)
    return run


def test_default_run_ids_never_share_a_folder(tmp_path):
    made = [make_run_dir(str(tmp_path), "cpu", None) for _ in range(3)]  # same second, surely
    assert len(set(made)) == 3 and all(p.is_dir() for p in made)
    assert made[1].name == f"{made[0].name}-2"


def test_two_runs_started_together_keep_their_own_rows(tmp_path):
    procs = [_start(tmp_path, *QUICK) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.communicate()
    runs = sorted(m.parent for m in (tmp_path / "results").rglob("meta.json"))
    assert len(runs) == 2
    for run in runs:
        df = load(run)
        assert set(df.run_id) == {run.name} and df.groupby("size_bytes").trial.count().isin([2, 6]).all()


def test_reused_run_id_is_refused_and_nothing_is_touched(quick_run):
    run = quick_run   # made with run_id=mine
    assert run.name == "mine"
    before = (run / "samples.csv").read_bytes(), (run / "meta.json").read_bytes()
    proc = subprocess.run(xferbench_cmd(run.parent.parent, *QUICK, "run_id=mine"), cwd=run.parent.parent.parent,
                          env=env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"xferbench: error: run_id=mine: {run} already exists; choose another run_id, or resume={run} to finish it"]
    assert ((run / "samples.csv").read_bytes(), (run / "meta.json").read_bytes()) == before


def test_bad_config_makes_no_folder(xferbench_in_process, tmp_path):
    code, _, runs = xferbench_in_process("copy.memory=[pinnd]")
    assert code == 2 and not runs and not (tmp_path / "results").exists()


def test_bare_value_is_a_one_element_list():
    assert normalize_overrides(["copy.memory=pinned", "collectives.nproc=auto", "sizes.max=1MiB"], False) == \
        ["copy.memory=[pinned]", "collectives.nproc=[]", "sizes.max=1MiB"]
    assert normalize_overrides(["copy.memory=pinned,pageable"], False) == ["copy.memory=[pinned,pageable]"]
    assert normalize_overrides(["copy.memory=pinned,pageable"], True) == ["copy.memory=[pinned],[pageable]"]
    assert normalize_overrides(["+timing.trails=3"], False) == ["timing.trails=3"]  # the schema refuses it
    assert normalize_overrides(["instance.gpu='a,b'", "copy.gpus='0'"], True) == ["instance.gpu='a,b'", "copy.gpus=['0']"]


def test_bare_value_runs(xferbench):
    proc, runs = xferbench("suite=collectives", "collectives.ops=all_reduce", "sizes.max=64B", "timing.trials=1")
    assert proc.returncode == 0, proc.stderr
    assert set(load(runs).op) == {"all_reduce"}


@pytest.mark.parametrize("args, message", [
    (("timing.trials=1.5",), "timing.trials=1.5: must be a whole number"),
    (("+timing.trails=3",), "timing.trails is not a setting; timing has: warmup, trials,"),
    (("collectives.ops=[]",), "collectives.ops is empty"),
    (("suite=copy", "sizes.max=1TiB"), "needs 2.0 TiB of host memory but only"),
    (("out_dir=/proc/nope",), "out_dir=/proc/nope: cannot create"),
])
def test_more_bad_input_is_one_line(xferbench_in_process, args, message):
    code, stderr, runs = xferbench_in_process(*args)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], stderr
    assert not runs


NAME_RULE = "a folder name: use letters, digits, '.', '_' and '-', not starting with '-', without '..' or '/'"


@pytest.mark.parametrize("arg, message", [
    ("instance.name=../../x", f"instance.name='../../x': {NAME_RULE}"),
    ("instance.name=a/b", f"instance.name='a/b': {NAME_RULE}"),
    ("instance.name=", f"instance.name='': {NAME_RULE}"),
    ("instance.name=.", f"instance.name='.': {NAME_RULE}"),
    ("instance.name=-rf", f"instance.name='-rf': {NAME_RULE}"),
    ("instance.name='=SUM(A1)'", f"instance.name='=SUM(A1)': {NAME_RULE}"),
    ("instance.name='@x'", f"instance.name='@x': {NAME_RULE}"),
    ("instance.name=reference", "instance.name=reference: is kept for the project's reference runs"),
    ("run_id=..", f"run_id='..': {NAME_RULE}"),
    ("run_id='+1'", f"run_id='+1': {NAME_RULE}"),
    ("out_dir=", "out_dir is empty; name the folder runs go under (default: results)"),
])
def test_names_that_become_folders_are_checked_first(xferbench_in_process, tmp_path, arg, message):
    code, stderr, runs = xferbench_in_process(*QUICK, arg)
    assert code == 2 and stderr.strip().splitlines() == [f"xferbench: error: {message}"], stderr
    # no folder: not out_dir, not cpu/ in the working folder (tmp_path), not ../../x above out_dir
    assert not any(tmp_path.iterdir()) and not (tmp_path.parent / "x").exists()


def test_run_folder_must_lie_in_out_dir(tmp_path):
    for label, run_id in (("../x", "r"), ("a/b", "r"), ("cpu", "."), ("cpu", "../r")):
        with pytest.raises(ConfigError, match=r"would not be <out_dir>/<instance>/<run_id>"):
            make_run_dir(str(tmp_path / "results"), label, run_id)
    assert not any(tmp_path.iterdir())


@pytest.fixture
def catalogue(tmp_path, monkeypatch):
    """A copy of conf/ that the command uses, to add catalogue entries (conf/instance/*.yaml) to."""
    import shutil

    from bench.cli import command
    from bench.config import files

    conf = tmp_path / "conf"
    shutil.copytree(files.CONF_DIR, conf)
    monkeypatch.setattr(files, "CONF_DIR", conf)   # the config groups' options
    monkeypatch.setattr(command, "CONF_DIR", conf)     # what the command composes
    return conf / "instance"


@pytest.mark.parametrize("entry, message", [
    ("name: reference/h200-x2\n", f"instance.name='reference/h200-x2': {NAME_RULE}"),
    ("name: bad\ngpu_count: eight\n", "instance=bad (instance/bad.yaml): instance.gpu_count=eight: must be a whole number"),
    ("name: bad\ngpus: 8\n", "instance=bad (instance/bad.yaml): instance.gpus is not a setting; instance has: name,"),
    ("name: bad\nnvlink_gbps_per_gpu: .inf\n", "instance.nvlink_gbps_per_gpu=inf: must be a finite number >= 0"),
    ("name: [unclosed\n", "instance/bad.yaml, line 2: not valid YAML (expected ',' or ']'"),
])
def test_a_bad_catalogue_entry_is_one_line_naming_the_key(xferbench_in_process, catalogue, entry, message):
    (catalogue / "bad.yaml").write_text(entry)
    code, stderr, runs = xferbench_in_process(*QUICK, "instance=bad")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("xferbench: error: ") and message in lines[0], stderr
    assert not runs


def test_stored_values_are_taken_as_they_are():
    from bench.driver.schema import to_config

    for text in ("${oc.env:HOME}", "a\\${x}", "C:\\dir\\", "}${${}}"):
        assert to_config({"instance": {"gpu": text}}).instance.gpu == text


def test_interpolations_are_resolved_once_and_resume_evaluates_nothing(xferbench, monkeypatch):
    monkeypatch.setenv("XFB_TRIALS", "2")
    proc, runs = xferbench("suite=copy", "sizes.max=16KiB", "timing.trials=${oc.env:XFB_TRIALS}",
                           "instance.gpu='\\${oc.env:XFB_TRIALS}'")   # escaped: the text itself
    assert proc.returncode == 0, proc.stderr
    run = runs[0]
    config = read_meta(run)["config"]
    assert config["timing"]["trials"] == 2 and config["instance"]["gpu"] == "${oc.env:XFB_TRIALS}"
    rows = pd.read_csv(run / "samples.csv")
    rows[rows.size_bytes < 16384].to_csv(run / "samples.csv", index=False)
    (run / "samples.parquet").unlink()
    (run / "samples.commit").unlink()   # a journal of a version without commit records
    meta = read_meta(run)
    meta["status"] = "interrupted"
    (run / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setenv("XFB_TRIALS", "7")
    proc, _ = xferbench(f"resume={run}")
    assert proc.returncode == 0, proc.stderr
    after = load(run)
    assert after.groupby("size_bytes").trial.nunique().isin([2, 6]).all()   # the stored 2, not 7
    meta = read_meta(run)
    assert meta["status"] == "complete" and meta["config"]["instance"]["gpu"] == "${oc.env:XFB_TRIALS}"


def _interrupted(run: Path) -> Path:
    meta = read_meta(run)
    meta["status"] = "interrupted"
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_resume_refuses_a_complete_run_or_other_settings(xferbench, quick_copy):
    run = quick_copy
    rows = len(load(run))
    proc, _ = xferbench(f"resume={run}", timeout=60)
    assert proc.returncode == 2 and "that run is complete; nothing to resume" in proc.stderr
    meta = read_meta(run)
    meta["status"] = "interrupted"
    (run / "meta.json").write_text(json.dumps(meta))
    proc, _ = xferbench(f"resume={run}", "sizes.max=1MiB", timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("drop: sizes.max=1MiB")
    meta["system"]["hostname"] = "elsewhere"
    (run / "meta.json").write_text(json.dumps(meta))
    proc, _ = xferbench(f"resume={run}", timeout=60)
    assert proc.returncode == 2 and "made on another machine (hostname 'elsewhere' there" in proc.stderr
    assert read_meta(run)["status"] == "interrupted" and len(load(run)) == rows  # nothing written


def test_resume_of_a_csv_only_run_keeps_its_rows(xferbench, quick_copy):
    run = _interrupted(quick_copy)
    rows = pd.read_csv(run / "samples.csv")
    kept = rows[rows.size_bytes < 16384]
    kept.to_csv(run / "samples.csv", index=False)
    (run / "samples.parquet").unlink()
    (run / "samples.commit").unlink()   # a journal of a version without commit records
    proc, _ = xferbench(f"resume={run}")
    assert proc.returncode == 0, proc.stderr
    after = load(run)
    assert len(after) == len(rows) and after.groupby("size_bytes").trial.count().isin([2, 6]).all()
    assert read_meta(run)["status"] == "complete"


def test_a_point_torn_on_disk_is_not_loaded_and_resume_measures_it_again(xferbench, quick_copy):
    run = _interrupted(quick_copy)   # 2 points of 2 (or 6) trials
    whole = load(run)
    last = whole.size_bytes.max()
    journal = (run / "samples.csv").read_bytes().splitlines(keepends=True)
    (run / "samples.csv").write_bytes(b"".join(journal[:-1]))   # cut at a line, inside the last point
    assert sorted(load(run).size_bytes.unique()) == sorted(set(whole.size_bytes) - {last})
    proc, _ = xferbench(f"resume={run}")
    assert proc.returncode == 0, proc.stderr
    after = load(run)
    assert read_meta(run)["status"] == "complete" and set(after.size_bytes) == set(whole.size_bytes)
    assert after.groupby("size_bytes").trial.count().isin([2, 6]).all()


def _one_error_line(err: str, run) -> str:
    """The run's error, the last line on stderr, the only one saying error; no traceback."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == [err.splitlines()[-1]] and str(run) in errors[0], err
    return errors[0]


def test_a_full_disk_ends_the_run_in_one_line_and_resume_finishes_it(small_disk):
    disk = small_disk("24k")   # meta.json and a few points: the sweep fills it midway
    args = ("suite=copy", "sizes.min=1B", "sizes.max=16KiB", "timing.trials=5", "timing.min_trial_s=0.001")
    proc = subprocess.run(xferbench_cmd(disk, *args), capture_output=True, text=True, env=env(), timeout=120)
    run = next(disk.rglob("meta.json")).parent
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc.stderr, run)
    assert line.startswith(f"xferbench: error: no space left on device writing {run}: the ") and \
        "before it are on disk whole" in line and line.endswith(f"; free space and resume={run}")
    assert run_status(read_meta(run)) in ("failed", "interrupted")
    points = int(re.search(r"(\d+) points", proc.stderr).group(1))
    before = load(run)
    per_point = before.groupby("size_bytes").trial.count()
    assert 0 < len(per_point) < points and per_point.isin([5, 15]).all()   # stopped midway, every point whole
    assert len(pd.read_csv(run / "samples.csv")) == len(before)   # no torn rows left in the plain CSV

    small_disk("1m")
    proc = subprocess.run(xferbench_cmd(disk, f"resume={run}"), capture_output=True, text=True, env=env(),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    after = load(run)
    per_point = after.groupby("size_bytes").trial.count()
    assert read_meta(run)["status"] == "complete" and len(per_point) == points and per_point.isin([5, 15]).all()
    assert samples_file(run).name == "samples.parquet"


def test_a_full_disk_under_rank_0_reaches_the_user_in_one_line(small_disk):
    """Rank 0 writes a distributed suite's rows: its write failure is one line, not its traceback."""
    disk = small_disk("16k")
    args = ("suite=collectives", "collectives.nproc=2", "collectives.ops=[all_reduce]", "sizes.max=64KiB",
            "timing.trials=5", "timing.min_trial_s=0.001")
    proc = subprocess.run(xferbench_cmd(disk, *args), capture_output=True, text=True, env=env(), timeout=120)
    run = next(disk.rglob("meta.json")).parent
    assert proc.returncode == 1, proc.stderr
    causes = [line for line in proc.stderr.splitlines() if "no space left on device" in line]
    assert causes == [f"xferbench: error: {causes[0].partition('error: ')[2]}"] and str(run) in causes[0], proc.stderr
    # The parent may see rank 1 fail first, of rank 0's leaving: it names whichever it saw.
    assert re.search(r"rank [01] of 2 failed", proc.stderr) and "ResultsWriteError" not in proc.stderr
    assert run_status(read_meta(run)) in ("failed", "interrupted")
    assert load(run).groupby("size_bytes").trial.count().isin([5, 15]).all()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_term_and_hup_end_the_run_like_ctrl_c(tmp_path, sig):
    proc = _start(tmp_path, "suite=copy", "sizes.max=16MiB", "timing.trials=30", "timing.min_trial_s=0.01")
    run = _wait_for_points(tmp_path, proc, at_least=30)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert f"interrupted ({sig.name})" in err and f"resume={run}" in err
    assert read_meta(run)["status"] == "interrupted" and load(run).verified.all()


def test_killed_parent_takes_its_ranks_and_reads_as_interrupted(tmp_path):
    proc = _start(tmp_path, *LONG_COLLECTIVES)
    run = _wait_for_points(tmp_path, proc)
    ranks = _ranks(proc.pid)
    assert len(ranks) == 2
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.time() + 2
    while any(_alive(r) for r in ranks) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(_alive(r) for r in ranks), "ranks outlived their parent by 2 s"
    meta = read_meta(run)
    assert meta["status"] == "running" and run_status(meta) == "interrupted"
    assert set(load(run).run_status) == {"interrupted"}


def test_parent_killed_while_its_ranks_start_takes_them_all(tmp_path):
    proc = _start(tmp_path, *LONG_COLLECTIVES)
    deadline = time.time() + 60
    while not _ranks(proc.pid) and time.time() < deadline:
        time.sleep(0.005)
    assert _ranks(proc.pid), proc.communicate()
    proc.kill()  # the ranks are still importing torch: long before any point
    proc.wait(timeout=10)
    written = [len(read_samples(samples_file(f.parent))) for f in (tmp_path / "results").rglob("samples.csv")]
    assert written in ([], [0])
    deadline = time.time() + 2
    while _ranks(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    ranks = [r for r in _ranks(proc.pid) if _alive(r)]   # every rank started, found even as an orphan
    for r in ranks:
        os.kill(r, signal.SIGKILL)
    assert not ranks, "ranks outlived their parent by 2 s"


def test_config_error_inside_settings_is_a_config_error():
    from bench.config.settings import TimingSettings

    with pytest.raises(ConfigError, match=r"timing.min_iters=9: is above timing.max_iters=3"):
        TimingSettings(min_iters=9, max_iters=3)


def test_results_follow_the_umask(quick_run):
    run = quick_run   # made under umask 027
    for name in ("meta.json", "samples.csv", "samples.parquet"):
        assert (run / name).stat().st_mode & 0o777 == 0o640, name


def _half_measured(xferbench):
    """A run of two suites' points whose last half is gone, read as interrupted."""
    proc, runs = xferbench("suite=collectives", "collectives.ops=[all_reduce,broadcast]", "sizes.max=64KiB",
                           "timing.trials=2")
    assert proc.returncode == 0, proc.stderr
    run = runs[0]
    frame = load(run)
    keep = frame[frame["op"] == "all_reduce"].drop(columns=[c for c in frame.columns if c not in COLUMNS])
    for name in ("samples.csv", "samples.commit", "samples.parquet"):
        (run / name).unlink()
    writer = RunWriter(run, run.name)
    writer.add_point([Sample(**row) for row in keep.to_dict("records")])
    writer.close()
    meta = read_meta(run)
    meta["status"] = "interrupted"
    (run / "meta.json").write_text(json.dumps(meta))
    return run, len(frame)


def test_resumes_started_together_measure_each_point_once(xferbench, tmp_path):
    run, whole = _half_measured(xferbench)
    procs = [subprocess.Popen(xferbench_cmd(tmp_path / "results", f"resume={run}"), cwd=tmp_path, env=env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outcomes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in outcomes)
    refused = [err for code, err in outcomes if code == 2]
    assert codes[0] == 0 and all(code in (0, 2) for code in codes), outcomes
    # the others waited on the lock: refused in one line, or found the run already finished
    assert all("another xferbench is writing this run" in err or "that run is complete" in err for err in refused)
    frame = load(run)
    assert len(frame) == whole and not frame.duplicated(POINT_KEYS + ["trial", "part"]).any()
    assert read_meta(run)["status"] == "complete"


def test_a_run_held_by_another_process_is_refused(tmp_path):
    from bench.driver.folders import hold_run

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from bench.driver.folders import hold_run; hold_run(Path(sys.argv[1])); "
                               "print('held', flush=True); time.sleep(30)", str(tmp_path)],
                              env=env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=r"another xferbench is writing this run; wait for it to end"):
            hold_run(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    hold_run(tmp_path)   # gone with its holder, however it ended


def _edited_csv(run: Path, column: str, value) -> None:
    """A committed samples.csv with one measured row's value changed by hand, Parquet gone."""
    frame = pd.read_csv(run / "samples.csv")
    row = frame.index[(frame["status"] == "ok") & (frame["part"] == "total")][3]
    frame.loc[row, column] = value
    frame.to_csv(run / "samples.csv", index=False)
    (run / "samples.parquet").unlink()


@pytest.mark.parametrize("column, value, said", [
    ("time_s", 0.0, "time_s=0.0 is not a time"),
    ("time_s", float("inf"), "time_s=inf is not a time"),
    ("size_bytes", -4096, "size_bytes=-4096 is not a size"),
    ("algbw_gbps", 999.0, "algbw_gbps=999 is not size_bytes / time_s"),
])
def test_an_impossible_row_is_one_error_naming_file_and_line(quick_copy, column, value, said):
    run = quick_copy
    (run / "samples.commit").unlink()   # no commit record: the values themselves are checked
    _edited_csv(run, column, value)
    with pytest.raises(ResultsError, match=rf"samples.csv, line \d+: {re.escape(said)}"):
        read_samples(run / "samples.csv")


def test_a_committed_row_edited_by_hand_names_its_line(quick_copy):
    run = quick_copy
    data = (run / "samples.csv").read_bytes().splitlines(keepends=True)
    data[5] = data[5].replace(b"ok", b"ok ", 1)   # one character, in a committed row
    (run / "samples.csv").write_bytes(b"".join(data))
    (run / "samples.parquet").unlink()
    with pytest.raises(ResultsError, match=r"samples.csv, line \d+: changed after it was written"):
        read_samples(run / "samples.csv")


def test_a_trial_recorded_twice_is_refused(quick_copy):
    run = quick_copy
    frame = read_samples(run / "samples.parquet")
    pd.concat([frame, frame.iloc[[2]]]).to_parquet(run / "samples.parquet", index=False)
    with pytest.raises(ResultsError, match=r"samples.parquet, row \d+: trial \d+ of this point is recorded twice"):
        read_samples(run / "samples.parquet")


def test_ctrl_c_in_a_pipeline_batch_sizes_rounds_keeps_them_and_resume_measures_the_rest(tmp_path, capsys):
    """A terminal's Ctrl-C reaches the whole process group, the DataLoader's workers too: a worker
    that exits first must not turn the user's interrupt into a failed run, nor outlive it. Each
    round's rows are committed as they end: the cut keeps them, the summary and the doctor say what
    was measured, and resume= measures only the rounds each point lacks."""
    from bench.cli import doctor

    run_tag = uuid.uuid4().hex
    def own_group() -> None:
        os.setpgrp()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    args = ("suite=pipeline", "pipeline.workers=[2]", "pipeline.threads=[1]", "pipeline.rounds=2",
            "pipeline.min_size=1MiB", "pipeline.max_size=1MiB", "pipeline.min_trial_s=0.01", "timing.trials=2")
    proc = subprocess.Popen(xferbench_cmd(tmp_path / "results", *args), cwd=tmp_path, env={**env(), TAG: run_tag},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=own_group)
    run = _wait_for_points(tmp_path, proc, at_least=12)   # round 0 of the first points: workers at work
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "interrupted (SIGINT" in err and f"resume={run}" in err
    assert not tagged(run_tag, wait_s=3), "DataLoader workers outlived the run"
    cut = load(run)
    assert read_meta(run)["status"] == "interrupted" and cut.verified.all()
    rounds = cut[cut.op != "host_pace"].groupby(["op", "mode"])["round"].nunique()
    assert rounds.min() < 2 and len(rounds) >= 2   # some points hold some rounds only
    assert "pipeline stages alone" in out   # what the cut run measured, printed
    assert doctor.main([str(run)]) != 0 and "interrupted" in capsys.readouterr().out
    resumed = subprocess.run(xferbench_cmd(tmp_path / "results", f"resume={run}"), cwd=tmp_path, env=env(),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    whole = load(run)   # the rounds measured before the cut, kept as they were; each trial once
    kept = whole.merge(cut, on=POINT_KEYS + ["round", "trial", "part", "time_s"])
    assert len(kept) == len(cut) and not whole.duplicated(POINT_KEYS + ["trial", "part"]).any()
    measured = whole[whole.op != "host_pace"].groupby(POINT_KEYS)["round"].apply(lambda r: sorted(set(r)))
    assert (measured.map(len) == 2).all() and read_meta(run)["status"] == "complete"


def test_a_signal_swallowed_where_it_landed_still_ends_the_run_at_the_next_piece(xferbench_in_process, monkeypatch):
    """A signal can land in code that ignores every exception (a DataLoader iterator's __del__):
    the run still ends as interrupted at its next safe point (bench/interrupts.py: check), at the
    latest once the runner has written what it finished, not at its end."""
    from bench.suites.pipeline import rounds

    real, swallowed = rounds.read_pace, []

    def pace_then_a_swallowed_ctrl_c():
        if not swallowed:
            swallowed.append(True)
            try:
                os.kill(os.getpid(), signal.SIGINT)   # raised here: the measurement may be cut at once
                time.sleep(1)
            except KeyboardInterrupt:
                pass   # as __del__ does
        return real()

    monkeypatch.setattr(rounds, "read_pace", pace_then_a_swallowed_ctrl_c)
    code, err, (run,) = xferbench_in_process("suite=pipeline", "pipeline.workers=[0]", "pipeline.threads=[1]",
                                             "pipeline.min_size=64KiB", "pipeline.max_size=64KiB", "pipeline.rounds=2")
    assert code == 128 + signal.SIGINT and "interrupted (SIGINT)" in err, err
    # At the next safe point: a lazy import's end, or the piece being measured written (the pace read before it).
    assert read_meta(run)["status"] == "interrupted" and len(load(run)) <= 1
