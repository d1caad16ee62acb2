#!/usr/bin/env python3
"""Two runs' agreement within their stated spreads: the share of points of --min-size and more
(default 1MiB) whose spreads over rounds overlap, and the points that do not. Exit 0 when at
least --share (0.9) agree, 1 when fewer do, 2 on unusable input.

  python scripts/agree.py results/<instance>/RUN_A results/<instance>/RUN_B [--suite pipeline]
"""
from __future__ import annotations

import argparse
import sys

from bench.analysis.agreement import AGREE_SHARE, agreement
from bench.results import ResultsError, load
from bench.sizes import parse_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--min-size", default="1MiB")
    parser.add_argument("--suite", default="pipeline")
    parser.add_argument("--share", type=float, default=AGREE_SHARE)
    args = parser.parse_args(argv)
    try:
        found = agreement(load([args.run_a]), load([args.run_b]), parse_size(args.min_size), args.suite or None)
    except (ResultsError, ValueError) as exc:
        print(f"agree: error: {exc}", file=sys.stderr)
        return 2
    if found.points.empty:
        print("agree: error: the two runs share no point of that size", file=sys.stderr)
        return 2
    print("\n".join(found.lines()))
    return 0 if found.share >= args.share else 1


if __name__ == "__main__":
    sys.exit(main())
