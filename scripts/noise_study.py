#!/usr/bin/env python3
"""How noisy are identical runs, and does the comparison tell a real handicap from that noise?

Runs N identical xferbench runs of one sweep, plus one run under each handicap (extra
environment such as NCCL_MAX_NCHANNELS=1, a command in place of `python -m bench`, or a
background process that runs for the length of the run: bg=COMMAND), interleaved with them so
that drift over the study hits both. Then it compares, with bench.analysis.compare and the
suites' declared noise:
- pairs of identical runs (disjoint pairs 1-2, 3-4, ..., or every pair), one run a side;
- the first half of the identical runs as a baseline store against each run of the second half;
- each handicapped run against each identical run, and against all of them as one baseline;
and prints the exit codes and flagged families as markdown; the gate's power (bench.analysis.
power: the smallest drop of each bandwidth-bound family it catches with one baseline run and
with a store of --store runs, from its limit formula and verified by injecting drops into the
identical runs); and the between-run noise of one run per platform, suite and size class (the
form of a suite's `noise`). The report is also written to OUT/study.md, and a figure of every
family's changes against the gate's limit to OUT/gate.png (--figure).

Runs land in OUT/identical/<run_id> and OUT/<handicap label>/<run_id> (a background process's
output in the run's background.log), the command in OUT/command.txt; --compare-only re-reads
them without running anything. The CPU study:

  OMP_NUM_THREADS=1 python scripts/noise_study.py --out results/noise/cpu --runs 20 \\
      --pairs disjoint --handicap 'traced:python -m trace --count --no-report --module bench' \\
      -- suite=all sizes=quick sizes.max=4MiB

A second process loading the host link (scripts/h2d_load.py) during one run, on one GPU:

  python scripts/noise_study.py --out /tmp/noise/h200-x1 --runs 4 \\
      --handicap 'h2d-load:bg=python scripts/h2d_load.py' -- suite=copy sizes=quick ...
"""
from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from bench import SAFE_ENV
from bench.analysis import power
from bench.analysis.compare import JUDGED_CLASSES, Comparison, compare, point_levels, size_classes
from bench.analysis.noise import platform, run_noise
from bench.analysis.figures.gate import gate_figure
from bench.cli.common import catalog
from bench.results import find_runs, load

IDENTICAL = "identical"
BG = "bg="                # a handicap's COMMAND after bg= runs beside the run, not in its place
BG_START_S = 120          # a background command has this long to print its first line (CUDA starts slowly)
BG_SETTLE_S = 1.0         # and must still run this long after it (a line then an exit is a failure)
BG_STOP_S = 30            # and this long to exit once told to stop, before it is killed


class Handicap(NamedTuple):
    label: str
    env: dict[str, str]
    command: list[str]       # in place of `python -m bench`; [] for it
    background: list[str]    # started before the run and stopped after it; [] for none


def _python(words: list[str]) -> list[str]:
    return [sys.executable if w == "python" else w for w in words]


def _handicap(text: str) -> Handicap:
    """LABEL:[VAR=VALUE ...] [COMMAND ... | bg=COMMAND ...], read as a shell would."""
    label, _, spec = text.partition(":")
    words = shlex.split(spec)
    env = {}
    while words and re.match(r"[A-Za-z_]\w*=", words[0]) and not words[0].startswith(BG):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    background = []
    if words and words[0].startswith(BG):
        background, words = [words[0][len(BG):], *words[1:]], []
    if not label or label == IDENTICAL or not (env or words or background) or background == [""]:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL:VAR=VALUE... and/or a command, "
                                         "or bg= and a command to run beside the run")
    return Handicap(label, env, _python(words), _python(background))


def _schedule(runs: int, handicaps: list[Handicap]) -> list[Handicap]:
    """Identical runs with each handicapped run spread evenly among them."""
    order = [Handicap(IDENTICAL, {}, [], [])] * runs
    for i, handicap in enumerate(handicaps):
        order.insert(round((i + 1) * runs / (len(handicaps) + 1)) + i, handicap)
    return order


class Background:
    """A handicap's process beside a run, in a session of its own: started before the run, told
    to stop (SIGTERM to its group) after it, killed if it will not; its output kept."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.command = command
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.spoke = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            self.spoke.set()
        self.spoke.set()

    def started(self, timeout: float = BG_START_S) -> bool:
        """Whether it printed its first line and still runs a second later (working, not failing)."""
        if not self.spoke.wait(timeout):
            return False
        try:
            self.proc.wait(BG_SETTLE_S)
        except subprocess.TimeoutExpired:
            return True
        return False

    def stop(self) -> bool:
        """Stop it; whether it was still running (the handicap lasted the whole run)."""
        alive = self.proc.poll() is None
        if alive:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(BG_STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.reader.join(5)
        return alive

    def log(self, ended: str) -> str:
        return f"$ {shlex.join(self.command)}\n{''.join(self.lines)}[{ended}; exit {self.proc.returncode}]\n"


def _run(out: Path, group: str, run_id: str, handicap: Handicap, overrides: list[str]) -> tuple[int, float]:
    """One xferbench run into OUT/group/run_id, beside the handicap's background process if it
    has one: (exit code, seconds); exit -1 when the background process did not start."""
    scratch = out / ".scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    cmd = [*(handicap.command or [sys.executable, "-m", "bench"]), *overrides,
           f"out_dir={scratch}", f"run_id={run_id}", "progress=false"]
    env = {**SAFE_ENV, **os.environ, **handicap.env}
    background = Background(handicap.background, env) if handicap.background else None
    if background and not background.started():
        background.stop()
        print(f"noise_study: {run_id} not run: its background process did not start\n"
              f"{background.log('did not start')}", file=sys.stderr)
        return -1, 0.0
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    finally:
        alive = background.stop() if background else True
    if proc.returncode:
        print(proc.stderr[-2000:], file=sys.stderr)
    if not alive:
        print(f"noise_study: {run_id}: the background process ended during the run", file=sys.stderr)
    seconds = time.perf_counter() - started
    made = [m.parent for m in scratch.rglob("meta.json")]
    if made:
        (out / group).mkdir(parents=True, exist_ok=True)
        shutil.move(str(made[0]), out / group / run_id)
        if background:
            ended = "stopped after the run" if alive else "ended before the run did: the handicap covered part of it"
            (out / group / run_id / "background.log").write_text(background.log(ended))
    shutil.rmtree(scratch, ignore_errors=True)
    return proc.returncode, seconds


def _command(argv: list[str] | None) -> str:
    """The study's command line, with the environment the runs inherit that matters to them."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items())
                   if k.startswith(("OMP_", "NCCL_", "GLOO_", "CUDA_VISIBLE")))
    words = ["python", "scripts/noise_study.py", *(sys.argv[1:] if argv is None else argv)]
    return " ".join(filter(None, [env, shlex.join(words)]))


def run_all(out: Path, runs: int, handicaps: list[Handicap], overrides: list[str]) -> None:
    counts: dict[str, int] = {}
    for handicap in _schedule(runs, handicaps):
        counts[handicap.label] = counts.get(handicap.label, 0) + 1
        run_id = f"{handicap.label}-{counts[handicap.label]:02d}"
        code, seconds = _run(out, handicap.label, run_id, handicap, overrides)
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
        per_op = {f"{op} {memory}": run_noise(np.concatenate(list(g["pairs"])))
                  for (op, memory), g in group.groupby(["op", "memory"])}
        ops = ", ".join(f"{op} {sigma:.3f}" for op, sigma in sorted(per_op.items(), key=lambda kv: -kv[1]))
        lines.append(f'    {suite}: ("{plat}", "{size_class}"): {max(per_op.values()):.3f},   # {ops}')
    return lines


def declared_line(identical: pd.DataFrame) -> str:
    """The suites' declared noise these runs are judged with (one run a side: the defaults alone),
    so the study records which defaults it tested."""
    plats = set(identical["backend"].map(platform))
    parts = []
    for suite in dict.fromkeys(identical["suite"]):
        noise = catalog()[suite].noise if suite in catalog() else {}
        shown = [f"{' '.join(key[1:])} {v:g}" for key, v in sorted(noise.items()) if key[0] in plats]
        parts.append(f"{suite} {', '.join(shown)}" if shown else f"{suite}: none declared (the platform's largest)")
    return "Judged with the suites' declared noise as they stand (σ of one run): " + "; ".join(parts) + "."


def _caught(c: power.Caught | None) -> str:
    if c is None:
        return "—"
    return f"{c.injected:.1%} (expected {c.expected:.1%}; own change {c.own_change:+.1%})"


def power_lines(names: list[str], runs: dict[str, pd.DataFrame], tolerance: float, alpha: float,
                store: int) -> list[str]:
    """The gate's power on these identical runs (bench.analysis.power), as markdown."""
    ordered = [runs[n] for n in names]
    powers = power.gate_power(ordered, catalog(), tolerance, alpha, store)
    kept = names[-1 - min(store, len(names) - 1):-1]
    lines = ["### The gate's power", "", power.summary(powers, store), "",
             f"One run: the smallest drop flagged with one baseline run against one (the suites' declared σ). "
             f"Store of {store}: a store of {store} runs against one, with the σ measured between these "
             f"{len(names)} identical runs (moderated by the declared σ, as the gate does). Injected: the "
             f"drop that, scaled into the family's rows of {names[1]} against {names[0]}"
             + (f", and of {names[-1]} against the store {kept[0]}..{kept[-1]}," if len(names) >= 3 else ",")
             + " is the smallest flagged; a real pair already differs by the family's own change, so it is "
             "the expected 1 − exp(limit − own change), not the formula's figure.", "",
             f"| family | σ declared | σ measured | one run | injected, one run | store of {store} | "
             f"injected, store of {len(kept)} |", "| --- | ---: | ---: | ---: | --- | ---: | --- |"]
    lines += [f"| {p.label} | {p.declared:.3f} | {p.measured:.3f} | {p.one_run:.1%} | "
              f"{_caught(p.one_run_injected)} | {p.store:.1%} | {_caught(p.store_injected)} |" for p in powers]
    return lines


def _points(kind: str, result: Comparison) -> list[dict]:
    return [{"family": f"{f.label} ({f.size_class}-bound)", "kind": kind, "change": f.change, "limit": f.limit}
            for f in result.families]


def report(out: Path, pairs: str, tolerance: float, alpha: float, store: int = power.STORE,
           figure: Path | None = None) -> list[str]:
    groups = {g.name: load(g) for g in sorted(out.iterdir()) if g.is_dir() and not g.name.startswith(".")
              and any(g.rglob("meta.json"))}
    identical = groups.pop(IDENTICAL)
    runs = _split(identical)
    names = sorted(runs)

    def judge(base: pd.DataFrame, cur: pd.DataFrame) -> Comparison:
        return compare(base, cur, catalog(), tolerance, alpha)

    families = len(judge(runs[names[0]], runs[names[-1]]).families)
    lines = [f"{len(names)} identical runs, {families} families (op × size class); tolerance {tolerance:.0%}, "
             f"alpha {alpha:g}.", "", declared_line(identical), "",
             "| comparison | exit 1 | flagged |", "| --- | ---: | --- |"]
    points = []
    for a, b in _pairs(names, pairs):
        result = judge(runs[a], runs[b])
        lines.append(_row(f"{a} vs {b}", [result]))
        points += _points(IDENTICAL, result)
    half = len(names) // 2
    if half >= 2:
        kept = pd.concat([runs[n] for n in names[:half]])
        lines.append(_row(f"{names[0]}..{names[half - 1]} (a store) vs each of {names[half]}..{names[-1]}",
                          [judge(kept, runs[n]) for n in names[half:]]))
    for label, frame in groups.items():
        for run, cur in _split(frame).items():
            each = [judge(runs[n], cur) for n in names]
            lines.append(_row(f"each identical run vs {run}", each))
            lines.append(_row(f"all {len(names)} identical runs vs {run}", [judge(identical, cur)]))
            points += [p for result in each for p in _points(label, result)]
    if len(names) >= 2:
        lines += [""] + power_lines(names, runs, tolerance, alpha, store)
    if figure is not None and points:
        instance = ", ".join(sorted(set(identical["instance"].astype(str))))
        gate_figure(pd.DataFrame(points), figure,
                    f"The regression gate on {instance}: every family's change, one run a side\n"
                    f"{len(names)} identical runs and {sum(len(_split(f)) for f in groups.values())} handicapped; "
                    f"tolerance {tolerance:.0%}, alpha {alpha:g}")
        lines += ["", f"![the gate against this study]({figure.name})"]
    lines += ["", "Between-run noise of one run (sigma of log per-point median time):", "", "```"]
    return lines + noise_table(identical) + ["```"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="the study's folder")
    parser.add_argument("--runs", type=int, default=3, help="identical runs (default: 3)")
    parser.add_argument("--handicap", type=_handicap, action="append", default=[],
                        metavar="LABEL:SPEC", help="one run under SPEC: VAR=VALUE... and/or a command that "
                        "replaces 'python -m bench' ('python' is this interpreter), or bg= and a command that runs "
                        "beside the run (started before it, stopped after it), as a shell reads them, e.g. "
                        "'nch1:NCCL_MAX_NCHANNELS=1', 'traced:python -m trace --count --no-report --module bench' "
                        "or 'h2d-load:bg=python scripts/h2d_load.py'")
    parser.add_argument("--pairs", choices=["all", "disjoint"], default="all",
                        help="identical runs compared pairwise: every pair, or 1-2, 3-4, ... (default: all)")
    parser.add_argument("--compare-only", action="store_true", help="analyse the runs already in --out")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--store", type=int, default=power.STORE,
                        help=f"the store of runs the gate's power is stated for (default: {power.STORE})")
    parser.add_argument("--figure", type=Path, help="the gate's figure (default: OUT/gate.png)")
    parser.add_argument("overrides", nargs="*", help="xferbench overrides of the sweep, after --")
    args = parser.parse_args(argv)
    if not args.compare_only:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "command.txt").write_text(_command(argv) + "\n")
        run_all(args.out, args.runs, args.handicap, args.overrides)
    find_runs([args.out / IDENTICAL])
    command = args.out / "command.txt"
    lines = ([f"Runs made by: `{command.read_text().strip()}`", ""] if command.exists() else [])
    figure = args.figure or args.out / "gate.png"
    text = "\n".join(lines + report(args.out, args.pairs, args.tolerance, args.alpha, args.store, figure))
    print(text)
    (args.out / "study.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
