"""xferbench-doctor (also `python -m bench.cli.doctor`): is this normal? Judge saved or imported
runs against what a healthy machine of their class delivers, and name the causes of low figures.

Each run's families (op variant of one GPU or pair, size class) are judged against healthy
reference runs of the same machine class (shipped with the package), else link theory, and
against their siblings in the run (bench/analysis/judge.py; docs/judging.md). It prints, per
run, a line per family that is low or suspiciously high, with its ratio to the expectation and
its causes, then how many families were judged.

  xferbench-doctor RUN...                    runs, or folders holding runs
  xferbench-doctor --baseline DIR RUN...     DIR's healthy runs make the expectation for their
                                             machine class, ahead of the shipped table

Exit status: 0 when every judged family of every run is ok (or suspiciously high: a measurement
to look at, not a slow machine), 1 when any is low, 2 on unusable input (one line). An
acceptance test for a new node, a Slurm prolog, a CI step.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.analysis.expected import Expected, from_runs, shipped, unhealthy
from bench.analysis.judge import ALPHA, TOLERANCE, Judgement, judge
from bench.cli.common import catalog, cannot_write
from bench.results import ResultsError, find_runs, load, read_meta


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: xferbench-doctor results/h100-x8/$RUN_ID || echo 'this node is not normal'")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folders, or folders holding runs")
    parser.add_argument("--baseline", metavar="DIR",
                        help="your own healthy runs: they make the expectation for their machine class")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help=f"a smaller drop never counts, however certain (default: {TOLERANCE})")
    parser.add_argument("--alpha", type=float, default=ALPHA,
                        help=f"chance of any false alarm in one run's verdicts (default: {ALPHA})")
    parser.add_argument("--json", metavar="FILE", help="also write every run's verdicts as JSON")
    return parser


def _table(baseline: str | None, suites) -> Expected:
    table = shipped()
    if baseline is None:
        return table
    healthy = [run for run in find_runs([baseline]) if not unhealthy(read_meta(run))]
    if not healthy:
        raise ResultsError(f"{baseline}: no healthy run (complete, no NCCL variable holding NCCL back)")
    return from_runs(healthy, suites, origin=f"baseline {Path(baseline).name}").over(table)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    suites = catalog()
    try:
        if not 0 <= args.tolerance < 1 or not 0 < args.alpha < 1:
            raise ResultsError(f"--tolerance {args.tolerance}, --alpha {args.alpha}: the tolerance is a fraction "
                               "in [0, 1), alpha a probability in (0, 1)")
        table = _table(args.baseline, suites)
        runs = list(dict.fromkeys(find_runs(args.runs)))
        loaded = [(run, load(run, warn=lambda line: None), read_meta(run)) for run in runs]
    except ResultsError as exc:
        print(f"xferbench: error: {exc}", file=sys.stderr)
        return 2
    judged: list[Judgement] = []
    for run, rows, meta in loaded:
        judgement = judge(rows, meta, suites, table, run, args.tolerance, args.alpha)
        judged.append(judgement)
        print(f"{run} ({judgement.machine}):")
        for line in judgement.lines():
            print(f"  {line}")
    if args.json:
        try:
            Path(args.json).write_text(json.dumps([j.to_json() for j in judged], indent=2, default=str) + "\n")
        except OSError as exc:
            print(f"xferbench: error: {cannot_write(args.json, exc)}", file=sys.stderr)
            return 2
    return 1 if any(j.low for j in judged) else 0


if __name__ == "__main__":
    sys.exit(main())
