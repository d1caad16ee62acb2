"""xferbench-plot: figures for the chosen runs, one file per figure kind (also `python -m
bench.cli.plot`)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.analysis.figures import MANIFEST, write_figures
from bench.analysis.runs import default_out, describe_choice, load_runs
from bench.cli.common import add_run_arguments, cannot_write, catalog, check_writable, interruptible, status_lines
from bench.results import ResultsError, usable_rows


@interruptible
def main(argv: list[str] | None = None) -> int:
    """xferbench-plot: figures for the chosen runs, one file per figure kind. Exit 0: figures
    written; 1: no measured rows to draw; 2: unusable input, or the figures could not be written."""
    parser = argparse.ArgumentParser(
        prog="xferbench-plot",
        description="Plot xferbench results: bandwidth and latency against size, P2P heatmaps, peaks against "
                    "the link, bandwidth per dollar. Figures without data are skipped. The output folder "
                    f"keeps a list of the figures written ({MANIFEST}); the next call removes those, and only "
                    "those, before it writes.",
        epilog="example: xferbench-plot results/ --out /tmp/plots --format png svg")
    add_run_arguments(parser)
    parser.add_argument("--out", metavar="DIR",
                        help="where figures go (default: RUN/plots/ when one run is drawn; with several, "
                             "--out is needed)")
    parser.add_argument("--format", nargs="+", choices=("png", "svg"), default=["png"], dest="formats",
                        help="file formats to write (default: png)")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"xferbench-plot: {line}", file=sys.stderr)

    try:
        frame, runs = load_runs(args, say)
        out = Path(args.out) if args.out else default_out(runs, "plots", "--out DIR")
    except ResultsError as exc:
        say(str(exc))
        return 2
    for line in describe_choice(runs) + status_lines(frame):
        say(line)
    if usable_rows(frame).empty:
        say("no measured rows to plot (every point failed or was skipped)")
        return 1
    try:
        check_writable(out, folder=True)   # before the figures are drawn: that takes seconds each
    except OSError as exc:
        say(cannot_write(out, exc))
        return 2
    try:
        paths = write_figures(frame, out, catalog(), formats=args.formats)
    except OSError as exc:
        say(cannot_write(out, exc))
        return 2
    if not paths:
        say("no figure to draw from these rows")
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
