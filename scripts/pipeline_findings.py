#!/usr/bin/env python3
"""The pipeline's findings in two or more runs, side by side: per batch size and producer the best
loop, its GB/s and spread, its bottleneck and the fraction of its bound, and the findings' lines
(step, threads, sharing, epochs, cause, erratic); then, for the sizes the first run shares with
each other, whether they agree: the same best loop (or the first's best within the other's spread
of its own best), the same bottleneck, and which kinds of line each says (two runs of one sweep
on one host differ there too, where a twin sits at the edge of a spread). Exit 0 when every
shared size has the same best loop and bottleneck, 1 when one does not, 2 on unusable input.

  python scripts/pipeline_findings.py results/<instance>/QUICK results/<instance>/FULL
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

from bench.results import ResultsError, load
from bench.suites.pipeline.advice import advice, advice_lines
from bench.suites.pipeline.tables import table

KINDS = ("step", "threads", "sharing", "epochs", "cause", "erratic")


def _wall(run: str) -> str:
    meta = json.loads((Path(run) / "meta.json").read_text())
    took = datetime.fromisoformat(meta["end_time"]) - datetime.fromisoformat(meta["start_time"])
    return f"{meta['status']}, {took.total_seconds():.0f} s from start to end (pipeline {meta['suite_wall_s']['pipeline']} s)"


def _kinds(row: dict) -> set[str]:
    """The findings' kinds a row says: a cause line named or left unexplained, apart."""
    said = {k for k in KINDS if isinstance(row.get(k), str)}
    if "cause" in said and ": unexplained:" in row["cause"]:
        said = (said - {"cause"}) | {"unexplained"}
    return said


def _same(a: dict, b: dict, loops_b: dict) -> tuple[list[str], list[str]]:
    """How two runs' findings at one size differ: in the best loop or its bottleneck, and in the
    kinds of line they say ([] where they agree)."""
    out = []
    if a["best"] != b["best"]:
        theirs = loops_b.get(a["best"])   # the first run's best, as the second measured it
        if theirs is None or theirs["hi_gbps"] < b["lo_gbps"]:
            out.append(f"best {a['best']} against {b['best']}")
    if a["bottleneck"] != b["bottleneck"] and a["best"] == b["best"]:
        out.append(f"bottleneck {a['bottleneck']} against {b['bottleneck']}")
    lines = [f"lines {sorted(_kinds(a))} against {sorted(_kinds(b))}"] if _kinds(a) != _kinds(b) else []
    return out, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args(argv)
    try:
        found = {run: advice(load([run])) for run in args.runs}
    except (ResultsError, ValueError, OSError) as exc:
        print(f"pipeline_findings: error: {exc}", file=sys.stderr)
        return 2
    for run, adv in found.items():
        print(f"=== {run}: {_wall(run)}")
        print("\n".join(advice_lines(adv)) if not adv.empty else "no loop measured")
    first, rc = found[args.runs[0]], 0
    for run in args.runs[1:]:
        loops = table(load([run]))
        for row in first.to_dict("records"):
            theirs = found[run]
            match = theirs[(theirs["size_bytes"] == row["size_bytes"]) & (theirs["producer"] == row["producer"])]
            if match.empty:
                continue
            at = loops[(loops["size_bytes"] == row["size_bytes"]) & (loops["producer"] == row["producer"])]
            differ, lines = _same(row, match.iloc[0].to_dict(), {f"{r['memory']} {r['mode']}": r for r in at.to_dict("records")})
            rc |= bool(differ)
            print(f"{row['size']} {row['producer']}: " + ("; ".join(differ) if differ else "the same best loop and bottleneck")
                  + "".join(f"; {x}" for x in lines) + f" ({Path(args.runs[0]).name} against {Path(run).name})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
