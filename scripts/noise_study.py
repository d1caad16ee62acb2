#!/usr/bin/env python3
"""How noisy are identical runs, and does the comparison tell a real handicap from that noise?

Runs N identical xferbench runs of one sweep, plus one run under each handicap (extra
environment such as NCCL_MAX_NCHANNELS=1, or a command in place of `python -m bench`),
interleaved with them so that drift over the study hits both. Then it compares, with
bench.analysis.compare and the suites' noise:
- pairs of identical runs (disjoint pairs 1-2, 3-4, ..., or every pair), one run a side;
- the first half of the identical runs as a baseline store against each run of the second half;
- each handicapped run against each identical run, and against all of them as one baseline;
and prints the exit codes and flagged families as markdown, with the between-run noise of one
run per platform, suite and size class (the form of a suite's `noise`). The report
is also written to OUT/study.md.

Runs land in OUT/identical/<run_id> and OUT/<handicap label>/<run_id>, the command in
OUT/command.txt; --compare-only re-reads them without running anything. The CPU study:

  OMP_NUM_THREADS=1 python scripts/noise_study.py --out results/noise/cpu --runs 20 \\
      --pairs disjoint --handicap 'traced:python -m trace --count --no-report --module bench' \\
      -- suite=all sizes=quick sizes.max=4MiB
"""
from __future__ import annotations

import argparse
import itertools
from collections import Counter
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis.compare import (JUDGED_CLASSES, Comparison, compare, platform, point_levels, run_noise,
                                    size_classes)
from bench.cli.common import catalog
from bench.results import find_runs, load

IDENTICAL = "identical"


def _handicap(text: str) -> tuple[str, dict[str, str], list[str]]:
    """LABEL:[VAR=VALUE ...] [COMMAND ...] -> (label, environment, command), read as a shell would."""
    label, _, spec = text.partition(":")
    words = shlex.split(spec)
    env = {}
    while words and re.match(r"[A-Za-z_]\w*=", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if not label or label == IDENTICAL or not (env or words):
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL:VAR=VALUE... and/or a command")
    return label, env, [sys.executable if w == "python" else w for w in words]


def _schedule(runs: int, handicaps: list[tuple]) -> list[tuple[str, dict, list[str]]]:
    """Identical runs with each handicapped run spread evenly among them."""
    order: list[tuple] = [(IDENTICAL, {}, [])] * runs
    for i, handicap in enumerate(handicaps):
        order.insert(round((i + 1) * runs / (len(handicaps) + 1)) + i, handicap)
    return order


def _run(out: Path, group: str, run_id: str, env: dict, command: list[str], overrides: list[str]) -> tuple[int, float]:
    """One xferbench run into OUT/group/run_id: (exit code, seconds)."""
    scratch = out / ".scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    cmd = [*(command or [sys.executable, "-m", "bench"]), *overrides,
           f"out_dir={scratch}", f"run_id={run_id}", "progress=false"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
    seconds = time.perf_counter() - started
    made = [m.parent for m in scratch.rglob("meta.json")]
    if made:
        (out / group).mkdir(parents=True, exist_ok=True)
        shutil.move(str(made[0]), out / group / run_id)
    shutil.rmtree(scratch, ignore_errors=True)
    return proc.returncode, seconds


def _command(argv: list[str] | None) -> str:
    """The study's command line, with the environment the runs inherit that matters to them."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items())
                   if k.startswith(("OMP_", "NCCL_", "GLOO_", "CUDA_VISIBLE")))
    words = ["python", "scripts/noise_study.py", *(sys.argv[1:] if argv is None else argv)]
    return " ".join(filter(None, [env, shlex.join(words)]))


def run_all(out: Path, runs: int, handicaps: list[tuple], overrides: list[str]) -> None:
    counts: dict[str, int] = {}
    for group, env, command in _schedule(runs, handicaps):
        counts[group] = counts.get(group, 0) + 1
        run_id = f"{group}-{counts[group]:02d}"
        code, seconds = _run(out, group, run_id, env, command, overrides)
        print(f"noise_study: {run_id} exit {code}, {seconds:.0f} s", file=sys.stderr, flush=True)


def _row(name: str, results: list[Comparison]) -> str:
    """One table row for one or several comparisons: how many exit 1, and how often each family is flagged."""
    flagged = Counter(f"{f.label} ({f.size_class}-bound)" for r in results for f in r.regressions)
    flagged.update(label for r in results for label in r.failed_now)
    times = (lambda n: f" ×{n}") if len(results) > 1 else (lambda n: "")
    names = "; ".join(f"{label}{times(n)}" for label, n in flagged.most_common()) or "none"
    exits = sum(r.regressed for r in results)
    return f"| {name} | {exits if len(results) == 1 else f'{exits} of {len(results)}'} | {names} |"


def _split(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {Path(r).name: g for r, g in frame.groupby("run_dir", sort=True)}


def _pairs(names: list[str], how: str) -> list[tuple[str, str]]:
    if how == "all":
        return list(itertools.combinations(names, 2))
    return list(zip(names[0::2], names[1::2]))


def noise_table(identical: pd.DataFrame) -> list[str]:
    """Between-run sigma of one run per platform, suite and size class, as lines of a suite's
    `noise`: the noisiest op's (one run says nothing about which op is quiet), with every op's
    after it."""
    levels = point_levels(identical, catalog())
    levels["size_class"] = size_classes(levels)
    levels["platform"] = levels["backend"].map(platform)
    judged = levels[levels["size_class"].isin(JUDGED_CLASSES)]
    lines = []
    for (plat, suite, size_class), group in judged.groupby(["platform", "suite", "size_class"]):
        per_op = {op: run_noise(np.concatenate(list(g["pairs"]))) for op, g in group.groupby("op")}
        ops = ", ".join(f"{op} {sigma:.3f}" for op, sigma in sorted(per_op.items(), key=lambda kv: -kv[1]))
        lines.append(f'    {suite}: ("{plat}", "{size_class}"): {max(per_op.values()):.3f},   # {ops}')
    return lines


def report(out: Path, pairs: str, tolerance: float, alpha: float) -> list[str]:
    groups = {g.name: load(g) for g in sorted(out.iterdir()) if g.is_dir() and not g.name.startswith(".")
              and any(g.rglob("meta.json"))}
    identical = groups.pop(IDENTICAL)
    runs = _split(identical)
    names = sorted(runs)

    def judge(base: pd.DataFrame, cur: pd.DataFrame) -> Comparison:
        return compare(base, cur, catalog(), tolerance, alpha)

    families = len(judge(runs[names[0]], runs[names[-1]]).families)
    lines = [f"{len(names)} identical runs, {families} families (op × size class); tolerance {tolerance:.0%}, "
             f"alpha {alpha:g}.", "", "| comparison | exit 1 | flagged |", "| --- | ---: | --- |"]
    lines += [_row(f"{a} vs {b}", [judge(runs[a], runs[b])]) for a, b in _pairs(names, pairs)]
    half = len(names) // 2
    if half >= 2:
        store = pd.concat([runs[n] for n in names[:half]])
        lines.append(_row(f"{names[0]}..{names[half - 1]} (a store) vs each of {names[half]}..{names[-1]}",
                          [judge(store, runs[n]) for n in names[half:]]))
    for frame in groups.values():
        for run, cur in _split(frame).items():
            lines.append(_row(f"each identical run vs {run}", [judge(runs[n], cur) for n in names]))
            lines.append(_row(f"all {len(names)} identical runs vs {run}", [judge(identical, cur)]))
    lines += ["", "Between-run noise of one run (sigma of log per-point median time):", "", "```"]
    return lines + noise_table(identical) + ["```"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="the study's folder")
    parser.add_argument("--runs", type=int, default=3, help="identical runs (default: 3)")
    parser.add_argument("--handicap", type=_handicap, action="append", default=[],
                        metavar="LABEL:SPEC", help="one run under SPEC: VAR=VALUE... and/or a command that "
                        "replaces 'python -m bench' ('python' is this interpreter), as a shell reads them, e.g. "
                        "'nch1:NCCL_MAX_NCHANNELS=1' or 'traced:python -m trace --count --no-report --module bench'")
    parser.add_argument("--pairs", choices=["all", "disjoint"], default="all",
                        help="identical runs compared pairwise: every pair, or 1-2, 3-4, ... (default: all)")
    parser.add_argument("--compare-only", action="store_true", help="analyse the runs already in --out")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("overrides", nargs="*", help="xferbench overrides of the sweep, after --")
    args = parser.parse_args(argv)
    if not args.compare_only:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "command.txt").write_text(_command(argv) + "\n")
        run_all(args.out, args.runs, args.handicap, args.overrides)
    find_runs([args.out / IDENTICAL])
    command = args.out / "command.txt"
    lines = ([f"Runs made by: `{command.read_text().strip()}`", ""] if command.exists() else [])
    text = "\n".join(lines + report(args.out, args.pairs, args.tolerance, args.alpha))
    print(text)
    (args.out / "study.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
