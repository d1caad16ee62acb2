"""xferbench-report: one self-contained HTML page comparing instances (also `python -m
bench.cli.report`).

    xferbench-report results/ --out /tmp/report.html
    xferbench-report results/h200-x2/20261123-101500      # one run: its folder's report.html
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.analysis.expected import shipped
from bench.analysis.fleet import fleets
from bench.analysis.judge import ALPHA, TOLERANCE
from bench.analysis.report import build_report
from bench.analysis.verdicts import MIN_JUDGED
from bench.analysis.runs import default_out, describe_choice, load_runs
from bench.cli.common import add_run_arguments, cannot_write, catalog, check_writable, interruptible, status_lines
from bench.results import ResultsError, usable_rows


@interruptible
def main(argv: list[str] | None = None) -> int:
    """xferbench-report RESULTS... [--out FILE]. Exit 0: the page written; 1: no measured rows;
    2: unusable input, or the page could not be written."""
    parser = argparse.ArgumentParser(
        prog="xferbench-report",
        description="Write one self-contained HTML page comparing instances: headline table, figures, "
                    "machines and versions, caveats.",
        epilog="example: xferbench-report results/ --out /tmp/report.html")
    add_run_arguments(parser)
    parser.add_argument("--out", metavar="FILE",
                        help="the page to write (default: RUN/report.html when one run is shown; with several, "
                             "--out is needed)")
    parser.add_argument("--title", default="xferbench report", help="the page's title")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"xferbench-report: {line}", file=sys.stderr)

    try:
        frame, runs = load_runs(args, say)
        out = Path(args.out) if args.out else default_out(runs, "report.html", "--out FILE")
    except ResultsError as exc:
        say(str(exc))
        return 2
    if usable_rows(frame).empty:
        say("no measured rows (every point failed or was skipped)")
        return 1
    try:
        check_writable(out)   # before the page is built: that takes seconds a figure
    except OSError as exc:
        say(cannot_write(out, exc))
        return 2
    for line in describe_choice(runs) + status_lines(frame):
        say(line)
    suites = catalog()
    try:   # the runs found, every run of them, as fleets of one kind where three hosts or more ran it
        found = fleets(list(runs["run_dir"]), suites, shipped(), TOLERANCE, ALPHA, MIN_JUDGED)
    except ResultsError as exc:
        say(f"no fleet section: {exc}")
        found = []
    try:
        out.write_text(build_report(frame, runs, suites, args.title, found), encoding="utf-8")
    except OSError as exc:
        say(cannot_write(out, exc))
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
