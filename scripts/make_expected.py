#!/usr/bin/env python3
"""Make the expectation table xferbench-doctor judges runs against (bench/analysis/expected.csv).

Which runs count: each instance's default sweeps of its newest version. A run counts when it
completed, no NCCL variable held NCCL back (bench.analysis.causes.NCCL_LIMITS), and its command
line set nothing that changes what is measured (only out_dir, run_id, progress, resume,
instance, device); of those, each instance's runs made by the tool commit of its newest one.
Every other run is listed with the reason it was left out. Run from the repository root:

  python scripts/make_expected.py                      # results/reference -> bench/analysis/expected.csv
  python scripts/make_expected.py DIR... --out FILE    # other runs, another file
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.analysis.expected import SHIPPED, from_runs, unhealthy
from bench.cli.common import catalog
from bench.results import ResultsError, find_runs, read_meta

# Command-line keys that leave what a run measures as the defaults have it.
NOT_MEASURING = {"out_dir", "run_id", "progress", "resume", "instance", "device"}


def _changes_the_sweep(argv: list[str]) -> list[str]:
    keys = [arg.split("=", 1)[0].lstrip("+~") for arg in argv if not arg.startswith("-")]
    return [k for k in keys if k not in NOT_MEASURING]


def choose(runs: list[Path]) -> tuple[list[Path], list[str]]:
    """(the runs that count, a line per run left out saying why)."""
    left, candidates = [], []
    for run in runs:
        meta = read_meta(run)
        why = unhealthy(meta)
        changed = _changes_the_sweep([str(a) for a in meta.get("argv") or []])
        if why or changed or "argv" not in meta:
            reason = why or (f"not a default sweep ({', '.join(changed)})" if changed else "imported")
            left.append(f"{run}: {reason}")
            continue
        instance = meta.get("instance") or {}
        candidates.append((str(instance.get("label") or instance.get("name", "")), str(meta.get("start_time", "")),
                           str((meta.get("tool") or {}).get("git_commit", "")), run))
    newest: dict[str, str] = {}
    for instance, _, commit, _ in sorted(candidates, key=lambda c: c[1]):
        newest[instance] = commit
    chosen = []
    for instance, _, commit, run in candidates:
        if commit == newest[instance]:
            chosen.append(run)
        else:
            left.append(f"{run}: an older version ({commit or 'no commit recorded'}; {instance}'s newest is "
                        f"{newest[instance]})")
    return chosen, left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="*", default=["results/reference"], metavar="DIR",
                        help="folders of runs (default: results/reference)")
    parser.add_argument("--out", default=str(SHIPPED), metavar="FILE", help=f"where the table goes (default: {SHIPPED})")
    args = parser.parse_args(argv)
    try:
        chosen, left = choose(find_runs(args.results))
        if not chosen:
            raise ResultsError(f"{', '.join(args.results)}: no healthy default sweep")
        table = from_runs(chosen, catalog())
    except ResultsError as exc:
        print(f"xferbench: error: {exc}", file=sys.stderr)
        return 2
    table.write(args.out)
    for run in chosen:
        print(f"used {run}")
    for line in left:
        print(f"left out {line}")
    print(f"wrote {args.out}: {len(table.frame)} rows, classes {', '.join(sorted(table.origins))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
