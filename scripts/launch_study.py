#!/usr/bin/env python3
"""Eager against held, run against run: does a latency stay put when the host changes?

For the runs given (e.g. three runs of one host and one made while every CPU was busy), each
GPU op variant at sizes up to --max-size: its time per op in each run, launched eager (the launch
path), held behind a latch or replayed from a graph (the device's own time), and how far each run
is from the runs' median. Prints a Markdown table, per held or graph family (launch, suite, op,
mode) how many of its points have every run within --within of that median and the farthest,
and per launch the share of points. Exit 0 when every held and graph point is, 1 when not, 2 on
unusable input.

  python scripts/launch_study.py RUN_1 RUN_2 RUN_3 RUN_BUSY [--max-size 64KiB] [--within 0.05]
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd

from bench.analysis.launch_path import DEVICE_LAUNCHES
from bench.analysis.noise import GPU_BACKENDS
from bench.points import VARIANT_KEYS, variant_label
from bench.results import ResultsError, load
from bench.sizes import format_size, parse_size


def per_op_us(rows: pd.DataFrame, max_size: int) -> pd.DataFrame:
    """Median time per op (µs) of each point of each run: GPU ops launched eager, held or in graphs, whole ops."""
    keep = rows[(rows["part"] == "total") & (rows["status"] == "ok") & (rows["size_bytes"] <= max_size)
                & rows["launch"].isin(("eager",) + DEVICE_LAUNCHES) & rows["backend"].isin(GPU_BACKENDS)]
    keys = [k for k in VARIANT_KEYS if k != "launch"] + ["size_bytes", "launch", "run_id"]
    return (keep.groupby(keys, dropna=False)["time_s"].median() * 1e6).unstack("run_id")


def family(info: dict) -> str:
    """A held or graph point's family in the study's tally: its launch, suite, op and mode."""
    return " ".join(str(info[k]) for k in ("launch", "suite", "op", "mode")
                    if isinstance(info[k], str) and info[k] not in ("", "default"))


def study(rows: pd.DataFrame, max_size: int, within: float) -> tuple[list[str], dict[str, float]]:
    times = per_op_us(rows, max_size)
    runs = list(times.columns)
    lines = [f"| op | size | launch | {' | '.join(runs)} | farthest from median |",
             "|---|---|---|" + "---|" * len(runs) + "---|"]
    within_by_launch: dict[str, list[bool]] = {}
    families: dict[str, list[float]] = {}
    for key, row in times.iterrows():
        values = row.dropna()
        if len(values) < 2:
            continue
        median = values.median()
        far = float((values / median - 1).abs().max())
        info = dict(zip(times.index.names, key))
        within_by_launch.setdefault(info["launch"], []).append(far <= within)
        if info["launch"] in DEVICE_LAUNCHES:
            families.setdefault(family(info), []).append(far)
        cells = " | ".join(f"{row[r]:.2f}" if pd.notna(row[r]) else "" for r in runs)
        lines.append(f"| {variant_label(info)} | {format_size(int(info['size_bytes']))} | {info['launch']} | "
                     f"{cells} | {far:+.1%} |".replace("+", "±"))
    lines.append("")
    lines += [f"{name}: {sum(f <= within for f in fars)} of {len(fars)} within ±{within:.0%}, farthest {max(fars):.1%}"
              for name, fars in sorted(families.items())]
    shares = {launch: sum(ok) / len(ok) for launch, ok in sorted(within_by_launch.items())}
    return lines, shares


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--max-size", default="64KiB")
    parser.add_argument("--within", type=float, default=0.05)
    args = parser.parse_args(argv)
    try:
        rows = load(args.runs)
        lines, shares = study(rows, parse_size(args.max_size), args.within)
    except (ResultsError, ValueError) as exc:
        print(f"launch_study: error: {exc}", file=sys.stderr)
        return 2
    if not set(DEVICE_LAUNCHES) & set(shares):
        print("launch_study: error: no held or graph point is in two or more of these runs", file=sys.stderr)
        return 2
    print("\n".join(lines))
    for launch, share in shares.items():
        print(f"{launch}: {share:.0%} of points within ±{args.within:.0%} of their median over the runs")
    return 0 if all(shares.get(launch, 1.0) == 1.0 for launch in DEVICE_LAUNCHES) else 1


if __name__ == "__main__":
    sys.exit(main())
