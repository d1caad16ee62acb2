"""xferbench-compare (also `python -m bench.cli.compare`): judge runs against baseline runs; exit 1
only on a real regression.

Each side may be one run or several (a folder holding runs of one instance counts as all of
them). Points are judged in families, one op variant (every point key but the size) and one
size class (latency-bound, bandwidth-bound), by the median change over the family's sizes
against the tolerance plus a multiple of the noise between runs: measured when a side has
several runs, a documented per-suite default when each side has one. The multiple keeps the
chance of any false alarm in one comparison under --alpha. A point measured in the baseline
whose data check now fails counts as a regression too. See README, "Plots and comparison".

  xferbench-compare BASELINE CURRENT                    the last path is the current run(s)
  xferbench-compare BASELINE... --current CURRENT...    several paths on either side
  xferbench-compare --baseline-dir STORE CURRENT...     the newest --last runs in STORE are the baseline;
                                                 --add-on-pass copies CURRENT into STORE on a pass
                                                 (--keep N then prunes STORE to its newest N runs)

Every run is read with its status: a current run that did not complete (failed, interrupted,
still running, or empty) is never judged as if whole and never added to the store: the gate
says so and exits 4. Baseline runs that did not complete are left out, with a line. Runs of
different machine classes (GPU, PCIe, NVLink, GPU count: an H200 run against an H100 store)
are refused unless --any-class; a store that holds the current run itself, or a copy of it
(the same run_id and samples: what --add-on-pass leaves when a CI job is retried), leaves it out
of its own baseline, and says so.

Exit status: 0 no regression, 1 a real regression, 4 a current run is not complete (incomplete:
nothing judged, nothing stored), 2 unusable input (missing or corrupt results, another schema
version, several instances or machine classes, a run on both sides, no points in common) or an
output that cannot be written (--markdown, --json, the baseline store).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.analysis.compare import compare_paths, write_outputs
from bench.analysis.store import add_to_store, copies_of, store_runs
from bench.analysis.expected import machine_class
from bench.cli.common import catalog, interruptible
from bench.results import ResultsError, find_runs, read_meta, run_status

INCOMPLETE = 4   # the exit status when a current run did not complete


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xferbench-compare",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: xferbench-compare --baseline-dir baselines/h100-x1 results/h100-x1/$RUN_ID "
               "--add-on-pass --markdown $GITHUB_STEP_SUMMARY --json compare.json")
    parser.add_argument("paths", nargs="*", metavar="PATH", help="run folders, or folders of runs of one instance")
    parser.add_argument("--current", nargs="+", metavar="PATH",
                        help="the runs to judge; then every positional PATH is baseline")
    parser.add_argument("--baseline-dir", metavar="STORE",
                        help="a baseline store: its runs are the baseline, the positional PATHs the current runs")
    parser.add_argument("--last", type=int, default=10, metavar="K",
                        help="use the newest K runs of the store (default: 10)")
    parser.add_argument("--add-on-pass", action="store_true",
                        help="copy the current runs into the store when nothing regressed (an empty store is seeded)")
    parser.add_argument("--keep", type=int, default=0, metavar="N",
                        help="after adding, remove all but the store's newest N runs (default: 0, keep all)")
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="a smaller drop never counts, however certain (default: 0.05 = 5%%)")
    parser.add_argument("--alpha", type=float, default=0.01,
                        help="chance of any false alarm in one comparison (default: 0.01)")
    parser.add_argument("--any-class", action="store_true",
                        help="compare runs of different machine classes (GPU model, PCIe, NVLink, GPU count)")
    parser.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    parser.add_argument("--markdown", metavar="FILE",
                        help="append the markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)")
    return parser


def _sides(args: argparse.Namespace) -> tuple[list[Path] | None, list[str]]:
    """(baseline runs, or None for an empty store; current paths); ResultsError on a wrong mix."""
    if args.baseline_dir:
        if args.current and args.paths:
            raise ResultsError("with --baseline-dir, give the current runs as PATHs or as --current, not both")
        current = args.current or args.paths
        if not current:
            raise ResultsError("no current runs: give them as PATHs after --baseline-dir STORE")
        if args.last < 1 or args.keep < 0:
            raise ResultsError(f"--last {args.last}, --keep {args.keep}: --last must be 1 or more, --keep 0 or more")
        store = Path(args.baseline_dir)
        empty = not store.exists() or not any(store.rglob("meta.json"))
        return (None if empty else store_runs(store, args.last)), current
    for given, option in ((args.add_on_pass, "--add-on-pass"), (args.keep, f"--keep {args.keep}")):
        if given:
            raise ResultsError(f"{option} needs --baseline-dir STORE: it acts on a baseline store")
    if args.current:
        if not args.paths:
            raise ResultsError("no baseline: give the baseline runs as PATHs before --current")
        return [Path(p) for p in args.paths], args.current
    if len(args.paths) < 2:
        raise ResultsError("give BASELINE and CURRENT paths, or --baseline-dir STORE CURRENT")
    return [Path(p) for p in args.paths[:-1]], args.paths[-1:]


def _status(run: Path) -> str:
    """A run's status: complete, failed, interrupted, running, or empty (nothing measured)."""
    status = run_status(read_meta(run)) or "complete"   # imports record none: whole
    has_rows = any((run / name).exists() for name in ("samples.parquet", "samples.csv"))
    return status if has_rows else "empty"


def _own(baseline: list[Path], now: list[Path], store: bool) -> tuple[list[Path], list[str]]:
    """The baseline without the current runs themselves, and lines to say. A store may hold a
    current run, as its folder or as a copy (same run_id, same samples: what --add-on-pass leaves
    when a CI job is retried): left out of its own baseline, with a line. Sides named that share
    a run are unusable input (ResultsError), as is a store that holds nothing else."""
    copies = copies_of(baseline, now)
    if not copies:
        return baseline, []
    if not store:
        if any(run.resolve() == twin.resolve() for run, twin in copies.items()):
            return baseline, []   # compare_paths refuses sides that overlap, in one line
        run, twin = next(iter(copies.items()))
        raise ResultsError(f"baseline run {run} is a copy of the current run {twin} (same run_id, same samples): "
                           "judge runs against other runs")
    kept = [run for run in baseline if run not in copies]
    if not kept:
        raise ResultsError("the baseline holds only the current run(s) themselves or copies of them: "
                           "judge runs against other runs")
    said = []
    itself = sum(run.resolve() == twin.resolve() for run, twin in copies.items())
    if itself:
        said.append(f"compare: the baseline holds {itself} of the current run(s) itself: left out of its own baseline")
    said += [f"compare: baseline run {run} is a copy of the current run {twin} (same run_id, same samples): "
             "left out of its own baseline" for run, twin in copies.items() if run.resolve() != twin.resolve()]
    return kept, said


def _checked(baseline: list[Path], current: list[str], any_class: bool, store: bool) -> tuple[list[Path], list[Path],
                                                                                           list[str]]:
    """(the baseline runs to use, the current runs, lines to say); ResultsError where the classes
    differ. The current runs never serve as their own baseline (_own)."""
    now = list(dict.fromkeys(find_runs(current)))
    kept, said = _own(list(dict.fromkeys(find_runs(baseline))), now, store)
    if not store and any(run.resolve() in {r.resolve() for r in now} for run in kept):
        return kept, now, said   # compare_paths refuses sides that overlap, in one line
    whole = [run for run in kept if _status(run) == "complete"]
    for run in kept:
        if run not in whole:
            said.append(f"compare: baseline run {run} is {_status(run)}: left out")
    if not whole:
        raise ResultsError("no complete baseline run left to compare with")
    classes = {side: {machine_class(read_meta(r)).key for r in runs} for side, runs in (("baseline", whole),
                                                                                         ("current", now))}
    if classes["baseline"] != classes["current"] and not any_class:
        raise ResultsError(f"the baseline is {', '.join(sorted(classes['baseline']))} and the current run "
                           f"{', '.join(sorted(classes['current']))}: different machine classes (--any-class to "
                           "compare them anyway)")
    return whole, now, said


def _error(line: str) -> int:
    print(f"compare: {line}", file=sys.stderr)
    return 2


def _add(store: str, current: list[str], keep: int) -> list[Path] | None:
    """add_to_store(), or None after saying in one line why the runs could not be added."""
    try:
        return add_to_store(store, current, keep)
    except ResultsError as exc:
        _error(str(exc))
    except OSError as exc:
        _error(f"cannot add to the baseline store {store}: {exc.strerror or exc}")
    return None


@interruptible
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    skipped: list[str] = []   # unreadable runs load() left out: shown only if the comparison goes on
    try:
        baseline, current = _sides(args)
        if baseline is None and not args.add_on_pass:
            raise ResultsError(f"{args.baseline_dir}: no runs in the baseline store (seed it with --add-on-pass)")
        unfinished = [(run, _status(run)) for run in find_runs(current) if _status(run) != "complete"]
        if unfinished:
            for run, status in unfinished:
                print(f"compare: {run} is {status}: not judged as a whole run, and not added to any store",
                      file=sys.stderr)
            return INCOMPLETE
        said: list[str] = []
        if baseline is not None:
            baseline, current, said = _checked(baseline, current, args.any_class, bool(args.baseline_dir))
        result = None if baseline is None else compare_paths(baseline, current, catalog(), args.tolerance, args.alpha,
                                                            warn=skipped.append)
    except ResultsError as exc:
        return _error(str(exc))
    for line in said:
        print(line, file=sys.stderr)
    if result is None:   # an empty store: the current runs seed it
        added = _add(args.baseline_dir, current, args.keep)
        if added is None:
            return 2
        print(f"compare: baseline store {args.baseline_dir} was empty; it now holds {len(added)} run(s), "
              "the baseline from now on")
        return 0
    for line in skipped:
        print(line, file=sys.stderr)
    print(result.to_markdown())
    try:
        write_outputs(result, markdown=args.markdown, json_path=args.json)
    except OSError as exc:
        option = "--markdown" if str(exc.filename) == str(args.markdown) else "--json"
        return _error(f"cannot write {option} {exc.filename}: {exc.strerror or exc}")
    if result.regressed:
        return 1
    if args.add_on_pass:
        added = _add(args.baseline_dir, current, args.keep)
        if added is None:
            return 2
        print(f"compare: passed; added {len(added)} run(s) to the baseline store {args.baseline_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
