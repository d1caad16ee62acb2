#!/usr/bin/env python3
"""Make the expectation table xferbench-doctor judges runs against (bench/analysis/expected.csv).

Which runs count: each instance's sweeps at the defaults, suite by suite, of the suite's
newest version, and for a role that version does not measure, of the newest version that does. A run counts when it completed, no NCCL variable held NCCL back
(bench.analysis.causes.NCCL_LIMITS), and its command line set nothing that changes what is
measured (only out_dir, run_id, progress, resume, instance, device, suite); of those, per
instance and suite, the runs of the version of its newest one (the method it measured that suite
with, bench.methods.method_of: a method that changed only some suites, as each suite declares
(SuiteView.methods), leaves the others at the method before, so their runs pool, and one that
changed some launches of a suite only (SuiteView.changed_launches: held collectives) leaves its
other launches so; the run's method listed in results/reference/methods.json or recorded; else
its commit). Where a method split a
launch's figures (SuiteView.splits), the newest version's rows of it are a generation of their own
and an older version's fill the generation before (the `generation` column): the doctor judges a
run by its own generation's.
Every other run is listed with the reason it was left out. Each class's table stands on the
hosts its runs came from (bench.hosts.host_id; several runs of one host count as one host for the
spread between hosts): it prints, per class and role, the runs and hosts behind it. Run from the
repository root:

  python scripts/make_expected.py                      # results/reference -> bench/analysis/expected.csv
  python scripts/make_expected.py DIR... --out FILE    # other runs, another file
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

from bench.analysis.causes import CLOCKS, PACES
from bench.analysis.expected import NOISE, SHIPPED, Expected, from_runs, machine_class, unhealthy
from bench.analysis.healthy_hosts import clock_baselines, host_paces
from bench.analysis.point_expectations import OLDEST_JUDGED
from bench.cli.common import catalog
from bench.config.settings import Launch
from bench.methods import launch_groups, method_of
from bench.results import ResultsError, find_runs, read_meta
from bench.suite_view import view

# Command-line keys that leave what a run measures as the defaults have it (suite= picks whole
# suites at their defaults: training runs judge training runs).
NOT_MEASURING = {"out_dir", "run_id", "progress", "resume", "instance", "device", "suite"}


def _changes_the_sweep(argv: list[str]) -> list[str]:
    keys = [arg.split("=", 1)[0].lstrip("+~") for arg in argv if not arg.startswith("-")]
    return [k for k in keys if k not in NOT_MEASURING]


class Part(NamedTuple):
    """One suite's figures of one run (suite None: the whole run), of some launches only where a
    method changed the suite's figures of those alone (bench.methods.launch_groups)."""
    run: Path
    meta: dict
    suite: str | None
    launches: tuple[str, ...] | None = None

    @property
    def figures(self) -> str:
        """Which of the run's figures: its suite, and its launches where only some."""
        return f"{self.suite}{' ' + '+'.join(self.launches) if self.launches else ''}"

    def __str__(self) -> str:
        return f"{self.run} ({self.figures})" if self.suite else str(self.run)


CATALOG = catalog()
EVERY_LAUNCH = tuple(launch.value for launch in Launch)


def _method(part: Part) -> str | None:
    """The method a part's run measured with: listed in results/reference/methods.json, or recorded."""
    return METHODS.get("/".join(part.run.parts[-2:])) or (part.meta.get("tool") or {}).get("method")


def _label(part: Part) -> str:
    instance = part.meta.get("instance") or {}
    return f"{instance.get('label') or instance.get('name', '')} ({part.figures if part.suite else 'suites not recorded'})"


# The method of runs made before meta.json recorded it (tool.method), by folder under results/reference/.
_LISTED = Path(__file__).resolve().parent.parent / "results" / "reference" / "methods.json"
METHODS: dict[str, str] = json.loads(_LISTED.read_text())["runs"] if _LISTED.exists() else {}


def _version(part: Part) -> str:
    """The version a part's figures belong to: the method it measured its suite with (method_of
    the run's method, listed in results/reference/methods.json, which corrects a run whose code
    measured otherwise than it recorded, or recorded); else its tool's commit."""
    method, suite = _method(part), view(CATALOG, part.suite or "")
    return method_of(method, suite.methods, suite.changed_launches, part.launches) if method \
        else str((part.meta.get("tool") or {}).get("git_commit", ""))


def versions(candidates: list[Part], label=_label) -> list[list[Part]]:
    """Per label (default: instance and suite), the parts of the version (_version: the method,
    else the commit) of its newest run, then of the one before, and so on: the parts of each rank."""
    order: dict[str, list[str]] = {}   # label -> its versions, the newest first
    for part in sorted(candidates, key=lambda c: str(c.meta.get("start_time", "")), reverse=True):
        seen, version = order.setdefault(label(part), []), _version(part)
        if version not in seen:
            seen.append(version)
    ranks: list[list[Part]] = [[] for _ in range(max((len(c) for c in order.values()), default=0))]
    for part in candidates:
        ranks[order[label(part)].index(_version(part))].append(part)
    return ranks


def _newest(candidates: list[Part], label=_label) -> tuple[list[Part], list[str]]:
    """Per label, the parts of the version of the newest one; a line per part left out."""
    ranks = versions(candidates, label)
    return (ranks[0] if ranks else []), [f"{part}: an older version of its kind" for rank in ranks[1:] for part in rank]


def _figures(parts: list[Part]) -> Expected:
    return from_runs([(part.run, part.suite, part.launches) for part in parts], CATALOG)


def table_of(ranks: list[list[Part]]) -> tuple[Expected, list[str]]:
    """The table of each label's newest version, and each role it lacks (e.g. a launch that version
    no longer runs by default) from the newest older version that has it; a line per part: used,
    used for the roles the newer versions lack, or left out."""
    table = _figures(ranks[0])
    lines = [f"used {part}" for part in ranks[0]]
    for rank in ranks[1:]:
        by_class: dict[str, list[Part]] = {}
        for part in rank:
            by_class.setdefault(machine_class(part.meta).key, []).append(part)
        for parts in by_class.values():
            older = _figures(parts)
            table, added = table.with_roles_of(older)
            # the parts pool their runs for the roles added; each says how many of those it holds
            held = [len(older.roles_of(part.run, part.suite, part.launches) & added) for part in parts]
            lines += [f"used {part} for the {n} roles newer versions lack" if n else
                      f"left out {part}: an older version, every role of it measured by a newer one"
                      for part, n in zip(parts, held)]
    return table, lines


def choose(runs: list[Path]) -> tuple[list[list[Part]], list[str]]:
    """(the parts of runs that count by version, the newest first: versions(); a line per run left out saying why)."""
    left, candidates = [], []
    for run in runs:
        meta = read_meta(run)
        why = unhealthy(meta) or (f"made by schema {meta.get('schema_version')}, whose methods have changed since"
                                  if meta.get("schema_version", OLDEST_JUDGED) < OLDEST_JUDGED else "")
        changed = _changes_the_sweep([str(a) for a in meta.get("argv") or []])
        if why or changed or "argv" not in meta:
            reason = why or (f"not a default sweep ({', '.join(changed)})" if changed else "imported")
            left.append(f"{run}: {reason}")
            continue
        suites = (meta.get("config") or {}).get("suites") or [None]
        candidates += [Part(run, meta, None, None)] if suites == [None] else \
            [Part(run, meta, str(suite), launches) for suite in suites
             for launches in launch_groups(view(CATALOG, str(suite)).changed_launches, EVERY_LAUNCH)]
    return versions(candidates), left


def noise_runs(folders: list[str]) -> tuple[list[Path], list[str]]:
    """The healthy runs under an 'identical' folder of the noise studies, of each machine class's
    newest version: a version that reads the host's pace measures its own noise."""
    found = [Part(run, read_meta(run), None) for run in find_runs(folders) if "identical" in run.parts]
    newest, left = _newest([part for part in found if not unhealthy(part.meta)], lambda part: machine_class(part.meta).key)
    return [part.run for part in newest], left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="*", default=["results/reference"], metavar="DIR",
                        help="folders of runs (default: results/reference)")
    parser.add_argument("--out", default=str(SHIPPED), metavar="FILE", help=f"where the table goes (default: {SHIPPED})")
    parser.add_argument("--noise", nargs="*", default=["results/noise"], metavar="DIR",
                        help="folders of noise studies: their healthy runs under an 'identical' folder make "
                             f"the classes' between-run noise ({NOISE}); none: no noise table")
    parser.add_argument("--clocks", default=str(CLOCKS), metavar="FILE",
                        help="the clock-event reasons healthy runs of each class showed (every complete run found "
                             f"with telemetry, not only default sweeps; default: {CLOCKS})")
    parser.add_argument("--paces", default=str(PACES), metavar="FILE",
                        help="each class's healthy hosts' usual pace (host_pace_s; every complete run found that "
                             f"read it, not only default sweeps; default: {PACES})")
    args = parser.parse_args(argv)
    try:
        found = find_runs(args.results)
        ranks, left = choose(found)
        if not ranks:
            raise ResultsError(f"{', '.join(args.results)}: no healthy default sweep")
        table, used = table_of(ranks)
    except ResultsError as exc:
        print(f"xferbench: error: {exc}", file=sys.stderr)
        return 2
    table.write(args.out)
    clock_baselines(found).to_csv(args.clocks, index=False)
    host_paces(found).to_csv(args.paces, index=False, float_format="%.6g")
    identical, older = noise_runs(args.noise)
    left += older
    if identical and args.out == str(SHIPPED):
        noise = from_runs(identical, CATALOG, origin="noise runs")
        noise.frame = noise.frame[noise.frame["runs"] > 1]
        noise.write(NOISE)
        print(f"wrote {NOISE} from {len(identical)} identical runs: "
              f"{', '.join(sorted(noise.frame['machine'].unique()))}")
    for line in used:
        print(line)
    for line in left:
        print(f"left out {line}")
    print(f"wrote {args.out}: {len(table.frame)} rows, classes {', '.join(sorted(table.origins))}")
    print(table.classes().to_string(index=False))
    print(table.roles().to_string(index=False))
    print(f"wrote {args.clocks}, {args.paces}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
