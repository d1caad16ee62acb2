"""xferbench-summary RESULTS...: the tables a run ends with, for saved or imported runs (every
run found, each suite's own tables beside the common peak table)."""
from __future__ import annotations

import argparse
import sys

from bench.analysis.tables import format_summary
from bench.cli.common import catalog, interruptible, status_lines
from bench.results import ResultsError, load


@interruptible
def main(argv: list[str] | None = None) -> int:
    """Exit 0: tables printed; 1: no measured rows; 2: unusable input."""
    parser = argparse.ArgumentParser(prog="xferbench-summary",
                                     description="Print the summary tables of xferbench runs.",
                                     epilog="example: xferbench-summary results/h200-x1/20261124-101500")
    parser.add_argument("results", nargs="+", metavar="RESULTS", help="run folders, or folders holding runs")
    args = parser.parse_args(argv)
    try:
        frame = load(args.results)
    except ResultsError as exc:
        print(f"xferbench-summary: {exc}", file=sys.stderr)
        return 2
    for line in status_lines(frame):
        print(f"xferbench-summary: {line}", file=sys.stderr)
    text = format_summary(frame, catalog())
    print(text)
    return 1 if text == "no measured points" else 0


if __name__ == "__main__":
    sys.exit(main())
