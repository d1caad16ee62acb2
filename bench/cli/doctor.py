"""xferbench-doctor (also `python -m bench.cli.doctor`): is this normal? Judge saved or imported
runs against what a healthy machine of their class delivers, and name the causes of low figures.

Each run's families (op variant of one GPU or pair, size class) are judged against healthy
reference runs of the same machine class (shipped with the package), else link theory and
what the other classes reach, and against their siblings in the run (bench/analysis/judge.py;
docs/judging.md). Each family is normal, low, high, inconsistent (a recorded fact contradicts
its figure), failed (a data check failed), too noisy to judge or not judged (why); the run
adds its status, and the families its config asked for that its machine should have but it
did not measure (missing: planned here from its stored config and recorded machine).

  xferbench-doctor RUN...                    runs, or folders holding runs
  xferbench-doctor --baseline DIR RUN...     DIR's healthy runs make the expectation for their
                                             machine class, ahead of the shipped table
  xferbench-doctor --fleet PATH...           many nodes of one kind judged against each other
                                             (a node is a host: its runs together) and the
                                             class's table; the node and the GPU or link that
                                             is not like the others

Exit status, the worst over the runs: 0 checked and normal (nothing low, failed, inconsistent or
missing, the run complete, and at least --min-judged of its measured families judged; high is
reported, not failed); 1 something is wrong; 3 nothing wrong found, but too little was judged
to say normal (the output says what was not judged and why); 2 unusable input (one line).
An acceptance test for a new node, a Slurm prolog, a CI step.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from bench import ConfigError
from bench.analysis.expected import Expected, from_runs, shipped, unhealthy
from bench.analysis.judge import ALPHA, TOLERANCE, judge
from bench.analysis.verdicts import MIN_JUDGED, Judgement
from bench.cli import doctor_fleet
from bench.cli.common import cannot_write, catalog, interruptible
from bench.results import COLUMNS, ResultsError, find_runs, load, read_meta, samples_file


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
    parser.add_argument("--min-judged", type=float, default=MIN_JUDGED, metavar="SHARE",
                        help=f"exit 0 needs at least this share of the measured families judged, else 3 "
                             f"(default: {MIN_JUDGED})")
    parser.add_argument("--json", metavar="FILE", help="also write every run's verdicts as JSON")
    parser.add_argument("--fleet", action="store_true",
                        help="judge the runs as one fleet: each node (host) against the others; exit 1 where any "
                             "node is wrong, 3 where some node was not judged enough")
    parser.add_argument("--any-class", action="store_true", help="with --fleet: runs of several machine classes")
    parser.add_argument("--markdown", metavar="FILE", help="with --fleet: also write the verdict as Markdown")
    return parser


def _table(baseline: str | None, suites) -> Expected:
    table = shipped()
    if baseline is None:
        return table
    healthy = [run for run in find_runs([baseline]) if not unhealthy(read_meta(run))]
    if not healthy:
        raise ResultsError(f"{baseline}: no healthy run (complete, no NCCL variable holding NCCL back)")
    return from_runs(healthy, suites, origin=f"baseline {Path(baseline).name}").over(table)


def planned_ops(meta: dict) -> tuple[set[tuple[str, str]] | None, str]:
    """The (suite, op)s a run's stored config asks for that its recorded machine can measure,
    planned as a run would (nothing probed here); None and why where that cannot be done."""
    if not isinstance(meta.get("config"), dict):
        return None, "the run stored no config (an import)"
    # The schema imports every suite and the plan the driver: only this question needs them.
    from bench.driver.schema import renamed, to_config
    from bench.driver.machine import recorded_machine
    from bench.driver.sweep import plan_suites, suite_ops

    try:
        planned, _ = plan_suites(to_config(renamed(meta["config"])), recorded_machine(meta))
        return suite_ops(planned), ""
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        return None, f"its config does not plan with this version ({str(exc).splitlines()[0]})"


def _rows(run: Path) -> pd.DataFrame:
    """A run's rows; none for a run that wrote its meta.json but no samples file (it is judged:
    'nothing measured'). ResultsError, naming file and line, for rows it cannot trust."""
    if samples_file(run) is None:
        read_meta(run)   # unreadable too: unusable input
        return pd.DataFrame(columns=COLUMNS)
    return load(run)


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    suites = catalog()
    try:
        if not 0 <= args.tolerance < 1 or not 0 < args.alpha < 1 or not 0 <= args.min_judged <= 1:
            raise ResultsError(f"--tolerance {args.tolerance}, --alpha {args.alpha}, --min-judged {args.min_judged}: "
                               "the tolerance is a fraction in [0, 1), alpha a probability in (0, 1), the share "
                               "judged a fraction in [0, 1]")
        if (args.any_class or args.markdown) and not args.fleet:
            raise ResultsError("--any-class and --markdown judge a fleet: add --fleet")
        table = _table(args.baseline, suites)
        if args.fleet:
            return doctor_fleet.main(args, suites, table)
        runs = list(dict.fromkeys(find_runs(args.runs)))
        loaded = [(run, _rows(run), read_meta(run)) for run in runs]
    except ResultsError as exc:
        print(f"xferbench: error: {exc}", file=sys.stderr)
        return 2
    judged: list[Judgement] = []
    for run, rows, meta in loaded:
        planned, why = planned_ops(meta)
        judgement = judge(rows, meta, suites, table, run, args.tolerance, args.alpha, planned, args.min_judged, why)
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
    codes = {j.exit_code() for j in judged}
    return 1 if 1 in codes else 3 if 3 in codes else 0


if __name__ == "__main__":
    sys.exit(main())
