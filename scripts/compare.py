#!/usr/bin/env python3
"""Compare two xferbench result sets and flag real regressions.

A point regresses when its median bandwidth (time, where it has no bandwidth) got worse by more
than the tolerance AND its trials say so: a one-sided Mann-Whitney U test (with scipy), a
bootstrap interval of the median difference (without), or, with fewer than 3 trials a side,
trial ranges that do not overlap. A point measured in the baseline whose data check now fails
counts as a regression too. Only measured trials (status ok) of whole operations are compared.

Exit status: 0 no regression, 1 a real regression, 2 unusable input (missing or corrupt
results, another schema version, several instances on one side, no points in common).
"""
from __future__ import annotations

import argparse
import sys

from bench.compare import compare_paths, write_outputs
from bench.results import ResultsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: python scripts/compare.py results/base results/new --markdown $GITHUB_STEP_SUMMARY")
    parser.add_argument("baseline", metavar="BASELINE", help="a run folder, or a folder of runs of one instance")
    parser.add_argument("current", metavar="CURRENT", help="the same, for the results to judge")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="relative change below which nothing is flagged (default: 0.05 = 5%%)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the test (default: 0.05)")
    parser.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    parser.add_argument("--markdown", metavar="FILE",
                        help="append the markdown table to FILE (e.g. $GITHUB_STEP_SUMMARY)")
    args = parser.parse_args(argv)
    try:
        result = compare_paths(args.baseline, args.current, args.tolerance, args.alpha)
    except ResultsError as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    print(result.to_markdown())
    write_outputs(result, markdown=args.markdown, json_path=args.json)
    return 1 if result.regressed else 0


if __name__ == "__main__":
    sys.exit(main())
