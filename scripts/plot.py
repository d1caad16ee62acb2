#!/usr/bin/env python3
"""Plot xferbench results: one PNG (and optionally SVG) per figure.

Figures: bandwidth vs message size per suite, latency at small sizes, P2P source x destination
heatmaps, peak bandwidth as % of the link's theoretical peak (PCIe, NVLink), and bandwidth per
dollar where the instance catalogue has a price. Figures without data are skipped.
"""
from __future__ import annotations

import argparse
import sys

from bench import plots
from bench.results import ResultsError, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: python scripts/plot.py results/ --out plots --hue instance --format png svg")
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="run folders, or folders holding runs (searched for meta.json)")
    parser.add_argument("--out", default="plots", metavar="DIR", help="where figures go (default: plots)")
    parser.add_argument("--hue", choices=plots.HUES, default="instance",
                        help="what colours the lines: the machine (instance) or each run (run_id)")
    parser.add_argument("--format", nargs="+", choices=("png", "svg"), default=["png"], dest="formats",
                        help="file formats to write (default: png)")
    args = parser.parse_args(argv)
    try:
        frame = load(args.results)
    except ResultsError as exc:
        print(f"plot: {exc}", file=sys.stderr)
        return 2
    paths = plots.render(frame, args.out, hue=args.hue, formats=args.formats)
    if not paths:
        print("plot: no measured rows to plot (every point failed or was skipped)", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
