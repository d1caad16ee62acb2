"""Faults on the real CPU path: a killed or hung rank, Ctrl-C, resume, out-of-memory points."""
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from bench.journal import RunWriter
from bench.results import load, read_meta, read_samples, samples_file
from bench.driver.runner import run_suite
from bench.driver.sweep import Planned
from bench.measure.timing import TimingConfig
from bench.contract import Context, Point
from conftest import env, xferbench_cmd


def _ranks(pid: int) -> list[int]:
    """The rank processes `pid` spawned (`python -c "...bench.driver.rank_start..." ROOT RANK PARENT_PID`), in
    rank order: found by their command line, so also after the parent died (as orphans)."""
    ranks = {}
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 5 and cmd[1] == b"-c" and b"bench.driver.rank_start" in cmd[2] and cmd[5] == str(pid).encode():
            ranks[int(cmd[4])] = int(proc.name)
    return [ranks[r] for r in sorted(ranks)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _default_sigint() -> None:
    # A shell's background job (`cmd &` without job control) inherits SIGINT ignored, and so
    # would the run, which then could not be interrupted: the run under test gets the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp_path, *args):
    return subprocess.Popen(xferbench_cmd(tmp_path / "results", *args), cwd=tmp_path, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)


def _wait_for_points(tmp_path, proc, at_least=1, timeout=120) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()
        for f in (tmp_path / "results").rglob("samples.csv"):   # the journal: every finished point
            try:
                if len(read_samples(samples_file(f.parent))) >= at_least:
                    return f.parent
            except Exception:
                pass
        time.sleep(0.2)
    raise AssertionError("no points were written")


LONG_COLLECTIVES = ("suite=collectives", "collectives.nproc=2", "collectives.ops=[all_reduce]",
                    "sizes.min=8B", "sizes.max=64KiB", "timing.trials=20", "timing.min_trial_s=0.01",
                    "collectives.timeout_s=6")   # long enough to be stopped mid-sweep, whatever the defaults


def test_killed_rank_ends_run_naming_it_and_keeps_points(tmp_path):
    proc = _start(tmp_path, *LONG_COLLECTIVES)
    run = _wait_for_points(tmp_path, proc)
    ranks = _ranks(proc.pid)
    assert len(ranks) == 2
    os.kill(ranks[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "rank 1 of 2 failed (killed by SIGKILL)" in err
    assert f"; see {run}/ranks/rank-1.log" in err and "Traceback" not in err  # the ranks' output is in their logs
    assert not any(_alive(r) for r in ranks)  # no orphans
    assert read_meta(run)["status"] == "failed"
    df = load(run)
    assert len(df) >= 20 and df.verified.all()


def test_failed_rank_is_one_line_and_its_traceback_is_in_its_log(tmp_path):
    proc = _start(tmp_path, *LONG_COLLECTIVES, "progress=true")
    run = _wait_for_points(tmp_path, proc)
    ranks = _ranks(proc.pid)
    for rank, pid in enumerate(ranks):
        environ = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
        assert (environ["RANK"], environ["WORLD_SIZE"], environ["OMP_NUM_THREADS"]) == (str(rank), "2", "1")
        assert environ["NCCL_NVLS_ENABLE"] == os.environ.get("NCCL_NVLS_ENABLE", "0")   # SAFE_ENV
    os.kill(ranks[1], signal.SIGINT)  # a KeyboardInterrupt: a traceback, as from any error in a rank
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    failed = [line for line in err.splitlines() if "rank 1" in line]
    # Inside a gloo call the KeyboardInterrupt can reach C++ code, which aborts: SIGINT or SIGABRT.
    assert len(failed) == 1 and re.fullmatch(
        rf"xferbench: error: rank 1 of 2 failed \(killed by SIG(INT|ABRT)\); all ranks stopped; see "
        rf"{re.escape(str(run))}/ranks/rank-1.log", failed[0]), err
    assert "Traceback" not in err and "collectives:   0%|" in err  # rank 0's progress bar is still here
    log = (run / "ranks" / "rank-1.log").read_text()
    assert log.startswith("--- xferbench collectives: rank 1 of 2, started ")
    assert "KeyboardInterrupt" in log or "terminate" in log or "Abort" in log
    assert "%|" not in (run / "ranks" / "rank-0.log").read_text()


def test_hung_rank_ends_run_within_timeout(tmp_path):
    proc = _start(tmp_path, *LONG_COLLECTIVES)
    _wait_for_points(tmp_path, proc)
    ranks = _ranks(proc.pid)
    os.kill(ranks[1], signal.SIGSTOP)
    start = time.time()
    try:
        _, err = proc.communicate(timeout=90)
    finally:
        for r in ranks:
            if _alive(r):
                os.kill(r, signal.SIGKILL)
    assert proc.returncode == 1
    assert time.time() - start < 6 + 30  # the collective timeout, plus teardown
    assert "rank 0 of 2 failed" in err and "still running then: rank 1" in err
    assert not any(_alive(r) for r in ranks)


def test_ctrl_c_keeps_points_and_resume_finishes_the_run(tmp_path):
    # 7 points of about half a second, signalled once the first is on disk: the sweep is still
    # going when the signal comes, however slowly this process gets to look (2 busy CPUs)
    args = ("suite=copy", "sizes.max=16MiB", "sizes.factor=4", "sizes.copy.ladder=[]", "timing.trials=20",
            "timing.min_trial_s=0.02")
    proc = _start(tmp_path, *args)
    run = _wait_for_points(tmp_path, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"resume={run}" in err
    assert read_meta(run)["status"] == "interrupted"
    before = load(run)
    sizes = sorted(before.size_bytes.unique())
    assert 1 <= len(sizes) < 7 and before.verified.all()

    proc = _start(tmp_path, f"resume={run}")  # the run's own settings: nothing else is given
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    after = load(run)
    assert read_meta(run)["status"] == "complete" and len(read_meta(run)["resumed"]) == 1
    assert sorted(after.size_bytes.unique()) == [4096 << 2 * i for i in range(7)]
    assert after.groupby("size_bytes").trial.count().isin([20, 60]).all()  # finished points were not redone
    kept = after[after.size_bytes.isin(sizes[:-1])].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept[before.columns[:5]], before[before.size_bytes.isin(sizes[:-1])]
                                  .reset_index(drop=True)[before.columns[:5]])


def test_out_of_memory_point_is_skipped_and_sweep_goes_on(tmp_path):
    def measure(point, settings, ctx, state):
        if point.size_bytes == 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 bytes")
        return [point.sample(trial=0, time_s=1.0, verified=True)]

    suite = SimpleNamespace(name="copy", measure=measure, together=lambda point: None, distribution=lambda settings, ctx, max_ranks=0: None,
                            points=lambda settings, ctx: [Point("copy", "h2d", s) for s in (1, 2, 3)])
    planned = Planned(suite, None, Context("cpu", TimingConfig(), [1, 2, 3]))
    writer = RunWriter(tmp_path, "r")
    assert run_suite(planned, None, writer, progress=False) == 3
    rows = writer.frame.set_index("size_bytes")
    assert rows.status.to_dict() == {1: "ok", 2: "skipped", 3: "ok"}
    assert rows.note[2].startswith("out of memory (GPU): CUDA out of memory")


def test_host_out_of_memory_point_is_skipped_and_other_errors_are_not(tmp_path):
    def measure(point, settings, ctx, state):
        if point.size_bytes == 2:  # what torch's CPU allocator raises, for real
            torch.empty(1 << 60, dtype=torch.uint8)
        if point.size_bytes == 3:
            raise RuntimeError("a real bug")
        return [point.sample(trial=0, time_s=1.0, verified=True)]

    suite = SimpleNamespace(name="copy", measure=measure, together=lambda point: None, distribution=lambda settings, ctx, max_ranks=0: None,
                            points=lambda settings, ctx: [Point("copy", "h2d", s) for s in (1, 2, 3)])
    planned = Planned(suite, None, Context("cpu", TimingConfig(), [1, 2, 3]))
    writer = RunWriter(tmp_path, "r")
    with pytest.raises(RuntimeError, match="a real bug"):
        run_suite(planned, None, writer, progress=False)
    rows = writer.frame.set_index("size_bytes")
    assert rows.status.to_dict() == {1: "ok", 2: "skipped"}
    assert rows.note[2].startswith("out of memory (host): ")
