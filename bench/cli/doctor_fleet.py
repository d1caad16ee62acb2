"""xferbench-doctor --fleet PATH...: the runs of many nodes of one kind judged against each other
and the class's table (bench/analysis/fleet.py; docs/judging.md, "A fleet"). PATHs are folders
of node folders, run folders, or glob patterns (quoted, for more nodes than a command line holds).
"""
from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

from bench.analysis.expected import Expected
from bench.analysis.fleet import judge_runs
from bench.analysis.fleet_nodes import survey
from bench.cli.common import cannot_write
from bench.results import ResultsError
from bench.suite_view import Catalog


def expand(paths: list[str]) -> list[str]:
    """Each path, or the paths a glob pattern that names no file itself matches (sorted)."""
    out = []
    for path in paths:
        if Path(path).exists() or not glob.has_magic(path):
            out.append(path)
            continue
        matched = sorted(glob.glob(path))
        if not matched:
            raise ResultsError(f"{path}: matches nothing")
        out += matched
    return out


def main(args: argparse.Namespace, suites: Catalog, table: Expected) -> int:
    """The fleet's verdict printed (and written as JSON or Markdown where asked); its exit status.
    ResultsError (one line, exit 2) before any rows are read where the input cannot be a fleet."""
    found = survey(expand(args.runs), args.any_class)
    verdict = judge_runs(found, suites, table, args.tolerance, args.alpha, args.min_judged)
    print("\n".join(verdict.lines()))
    for path, text in ((args.json, lambda: json.dumps(verdict.to_json(), indent=2, default=str) + "\n"),
                       (args.markdown, verdict.to_markdown)):
        if path:
            try:
                Path(path).write_text(text())
            except OSError as exc:
                raise ResultsError(cannot_write(path, exc)) from None
    return verdict.exit_code()
