"""What the command lines share: the catalog of suites they hand the analysis, the choice of
runs (RESULTS, --runs, --all-runs), and an output that cannot be written: found before the work,
said in one line."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench import ConfigError, suites
from bench.suite_view import Catalog
from bench.results import COMPLETE, read_meta, status_said


def catalog() -> Catalog:
    """Every registered suite, as the analysis side reads it; a suite file that breaks the
    contract ends the command in one line (exit 2)."""
    try:
        return {suite.name: suite for suite in suites.all()}
    except ConfigError as exc:
        print(f"xferbench: error: {exc}", file=sys.stderr)
        sys.exit(2)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """RESULTS, --runs and --all-runs: the run choice shared by xferbench-plot and xferbench-report."""
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="run folders (each is used), or folders holding runs (one run per instance "
                             "is chosen: the newest complete main sweep; the project's committed runs in "
                             "results/reference and results/noise only when such a folder is named)")
    parser.add_argument("--runs", nargs="+", default=[], metavar="RUN",
                        help="use these runs (run id, instance/run_id, or folder) for their instances")
    parser.add_argument("--all-runs", action="store_true", help="use every run found, one colour each")


def interruptible(main):
    """A command's main(): Ctrl-C (or SIGTERM's KeyboardInterrupt) is one line and exit 130, not a traceback."""
    import functools

    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            print(f"{Path(sys.argv[0]).name}: interrupted", file=sys.stderr)
            return 130

    return wrapped


def check_writable(path: Path, folder: bool = False) -> None:
    """OSError now, before any work, where `path` (a file; with `folder`, a folder to write files
    into) could not be written at the end: its folder made, a file made there and dropped, a file
    already there opened to write."""
    where = path if folder else path.parent
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=where):
        pass
    if not folder and path.exists():
        with open(path, "r+b"):
            pass


def cannot_write(path: str | Path, exc: OSError) -> str:
    """The one line for an output that could not be written: which, and why."""
    return f"cannot write {path}: {exc.strerror or exc}"


def status_lines(frame) -> list[str]:
    """A line for each run in a load() frame that did not complete: its tables and figures hold
    only the points measured before it stopped (or, still running, so far)."""
    if "run_status" not in frame.columns:
        return []
    runs = frame.groupby("run_dir", sort=True)["run_status"].first()
    lines = []
    for run, status in runs.items():
        if str(status) in (*COMPLETE, "nan"):
            continue
        said = status_said(read_meta(run))
        lines.append(f"{run}: {said}: only the points measured so far are here" if status == "running" else
                     f"{run}: {said}: only the points measured before it stopped are here")
    return lines
