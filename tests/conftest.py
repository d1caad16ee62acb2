"""Shared helpers: run the real `xferbench` command in a temporary folder; and the benchmarks'
rounds written as an xferbench run, so a baseline store judges them like any run:
`pytest tests/benchmarks --benchmark-enable --xferbench-run DIR`.

One conftest for the whole tree: tests import helpers with `from conftest import ...`, which a
second conftest.py (in a subfolder) would shadow.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bench
from bench.journal import RunWriter, write_json
from bench.results import SCHEMA_VERSION, Sample

ROOT = Path(__file__).resolve().parent.parent
# The main sweeps before held launches (2026-11-27): tests of how graph-era figures read name them,
# since the newest main sweep of each class is now a held one.
PRE_HELD_SWEEPS = ["h200-x1/20261126-075737-default-2", "h200-x2/20261123-044635", "h200-x4/20261126-083243-default-6"]


@pytest.fixture(autouse=True, scope="session")
def _levels_cache(tmp_path_factory):
    """xferbench-doctor --fleet's cache of run levels (bench/analysis/fleet_levels.py) in the
    session's own folder, not the user's."""
    os.environ["XFERBENCH_CACHE"] = str(tmp_path_factory.mktemp("levels-cache"))


@pytest.fixture(scope="session")
def reference_rows():
    """load() of every committed reference run, read once a test process: test_report, test_plots
    and test_mislead each read them whole (seconds a time). Shared: filter it, never change it."""
    from bench.results import load

    return load(ROOT / "results" / "reference")


def xferbench_cmd(out_dir: Path, *args: str) -> list[str]:
    flags = [a for a in args if a.startswith("-")]  # Hydra takes its flags before the overrides
    return [sys.executable, "-m", "bench", *flags, f"out_dir={out_dir}", "progress=false",
            *(a for a in args if not a.startswith("-"))]


def env() -> dict:
    e = dict(os.environ, PYTHONUNBUFFERED="1")
    e["PYTHONPATH"] = f"{ROOT}{os.pathsep}{e['PYTHONPATH']}" if e.get("PYTHONPATH") else str(ROOT)
    return e


@pytest.fixture
def xferbench(tmp_path):
    """Run xferbench with its results under tmp_path; returns (CompletedProcess, run folders)."""

    def run(*args: str, timeout: float = 300):
        proc = subprocess.run(xferbench_cmd(tmp_path / "results", *args), capture_output=True, text=True,
                              timeout=timeout, cwd=tmp_path, env=env())
        runs = sorted(p.parent for p in (tmp_path / "results").rglob("meta.json"))
        return proc, runs

    return run

def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--xferbench-run", metavar="DIR", default=None,
                     help="write the benchmarks' rounds (one trial each) as an xferbench run folder DIR")


def _meta(run_id: str) -> dict:
    from bench.driver.machine import cuda_gpus, detected_label
    from bench.driver.inventory import describe

    label = detected_label(cuda_gpus())
    return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "complete",
            "start_time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "instance": {"name": label, "label": label}, "system": describe(),
            "tool": {"name": "xferbench", "version": bench.__version__, "harness": "pytest-benchmark"}}


@pytest.fixture(scope="session")
def xferbench_samples(request: pytest.FixtureRequest):
    """A list the benchmarks append their Samples to; written as one run when the session ends."""
    samples: list[Sample] = []
    yield samples
    out = request.config.getoption("--xferbench-run")
    if out and samples:
        run = Path(out)
        writer = RunWriter(run, run.name)
        writer.add_point(samples)
        writer.close()
        write_json(run / "meta.json", _meta(run.name))


@pytest.fixture
def xferbench_in_process(tmp_path, monkeypatch, capsys):
    """The real `main()` in this process (no interpreter start-up: bad-input cases are many and
    each would pay seconds of imports); returns (exit code, stderr, run folders)."""
    import gc
    import signal

    import bench.cli.run as entry
    from bench import interrupts
    from bench.cli import command

    def run(*args: str) -> tuple[int, str, list[Path]]:
        out = tmp_path / "results"
        monkeypatch.setattr(sys, "argv", ["xferbench", f"out_dir={out}", "progress=false", *args])
        monkeypatch.setattr(command, "_started", False)
        monkeypatch.chdir(tmp_path)
        handlers = {s: signal.getsignal(s) for s in interrupts.SIGNALS}   # the command installs its own
        try:
            with pytest.raises(SystemExit) as exit_info:
                entry.main()
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
            gc.unfreeze()   # the command freezes what it leaves to the interpreter's exit: this process goes on
        runs = sorted(p.parent for p in out.rglob("meta.json"))
        return exit_info.value.code, capsys.readouterr().err, runs

    return run


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(size)`: a tmpfs of that size at tmp_path/disk, to fill (root only: skipped
    elsewhere); called again, it remounts it at the new size. Unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = False

    def mount(size: str) -> Path:
        nonlocal mounted
        if mounted:
            subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)
            return disk
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                              capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted = True
        return disk

    try:
        yield mount
    finally:
        if mounted:
            subprocess.run(["umount", "--lazy", str(disk)], check=False)


def fill(folder: Path) -> None:
    """Takes every block left on folder's file system (a file named filler)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped: it names no process now."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
