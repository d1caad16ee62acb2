#!/usr/bin/env python3
"""How long xferbench takes before it measures anything, beside what torch alone takes.

Side by side, in the same environment and interleaved (so drift hits all of them alike), each
repeated --reps times after one untimed run of each, medians printed as a table:
- torch: `python -c "import torch; torch.cuda.init()"` (cuda.init only where CUDA is), the floor
  every run pays, timed to the line it prints then;
- plan: `python -m bench plan=true` (the default sweep's plan), which measures nothing;
- run: a real run (`python -m bench` with the overrides given after `--`, by default
  `suite=copy sizes=quick`), timed to its first progress bar (printed as the first point
  starts: everything before it is start-up), from its last bar to its exit (the summary and
  verdicts), and whole.
"own start-up" is the run's start-up less torch's: the tool's own cost.

  python scripts/bench_startup.py --reps 5
  python scripts/bench_startup.py --reps 5 -- suite=copy copy.ops=[h2d] sizes=quick

The checkout this script sits in is the one measured (PYTHONPATH), whatever is installed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Timed to its line, as the run to its first bar: an interpreter's exit after torch takes half a
# second more, which a run pays only at its end.
TORCH = "import sys, torch\nif torch.cuda.is_available(): torch.cuda.init()\nprint('ready', file=sys.stderr)"
READY = b"ready"
BAR = b"%|"   # tqdm's bar: '  0%|' as a suite's first point starts, '100%|' as its last ends


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _wall(cmd: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - started
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')}")
    return wall


def _marked(cmd: list[str], cwd: Path, marker: bytes) -> tuple[float, float, float]:
    """(seconds to the marker's first sight on stderr, from its last to the exit, whole)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = last = None
    err = b""
    while chunk := os.read(proc.stderr.fileno(), 65536):
        now = time.perf_counter() - started
        err += chunk
        if marker in chunk:
            first = now if first is None else first
            last = now
    code = proc.wait()
    wall = time.perf_counter() - started
    if code or first is None:
        sys.exit(f"{' '.join(cmd)} failed ({code}) or printed no {marker.decode()!r}:\n{err.decode(errors='replace')}")
    return first, wall - last, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("overrides", nargs="*", help="the run's overrides (after --); default: suite=copy sizes=quick")
    args = parser.parse_args(argv)
    overrides = args.overrides or ["suite=copy", "sizes=quick"]
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="xferbench-startup-") as tmp:
        cwd = Path(tmp)
        # Once untimed: compiled bytecode and the page cache warm, as on a machine in use (where
        # PYTHONDONTWRITEBYTECODE is set nothing is cached and every start compiles its sources).
        _wall([sys.executable, "-c", TORCH], cwd)
        _marked([sys.executable, "-m", "bench", "progress=true", f"out_dir={cwd / 'warm'}", *overrides], cwd, BAR)
        for rep in range(args.reps):
            torch = _marked([sys.executable, "-c", TORCH], cwd, READY)[0]
            samples.setdefault("torch: import torch; torch.cuda.init()", []).append(torch)
            samples.setdefault("plan: xferbench plan=true", []).append(
                _wall([sys.executable, "-m", "bench", "plan=true"], cwd))
            first, after, whole = _marked([sys.executable, "-m", "bench", "progress=true",
                                           f"out_dir={cwd / 'runs'}", *overrides], cwd, BAR)
            samples.setdefault("run: start-up, to its first point", []).append(first)
            samples.setdefault("run: own start-up (less torch's)", []).append(
                first - torch)
            samples.setdefault("run: summary and verdicts, to exit", []).append(after)
            samples.setdefault("run: whole", []).append(whole)
    print(f"xferbench start-up, {args.reps} reps, medians (min-max), run: {' '.join(overrides)}")
    if sys.flags.dont_write_bytecode:
        print("  PYTHONDONTWRITEBYTECODE is set: no bytecode is cached, so every start compiles the sources "
              "it imports (torch's too); unset it, or set PYTHONPYCACHEPREFIX, for what an installed tool costs")
    width = max(map(len, samples))
    for name, values in samples.items():
        print(f"  {name:<{width}}  {statistics.median(values):6.2f} s  ({min(values):.2f}-{max(values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
