#!/usr/bin/env python3
"""Any GPU, out of sample: each machine class's committed runs judged by the table of the other
classes alone (their link theory times the shares the others reach, their latencies), as a GPU
no reference describes would be; then the same runs with every figure halved.

Per run: how many families were judged, their states, and for bandwidth-bound families how far
the plateau landed from its expectation (within 10% is the target). Writes a CSV of every
family and a markdown table (results/noise/any-gpu/ by default). Run from the repository root:

  python scripts/class_study.py                     # every class of the shipped table
  python scripts/class_study.py --out /tmp/study
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.analysis.expected import machine_class, shipped, shipped_noise  # noqa: E402
from bench.analysis.judge import judge  # noqa: E402
from bench.analysis.verdicts import LOW, NORMAL  # noqa: E402
from bench.cli.common import catalog  # noqa: E402
from bench.results import find_runs, load, read_meta  # noqa: E402

# The runs judged: each class's reference runs of the default sweep and the held-out ones.
RUNS = ["results/reference/h100-x1/20261123-040857", "results/reference/h200-x1/20261124-190905-beside-nvbandwidth",
        "results/reference/h200-x2/20261123-044635", "results/reference/h200-x2/20261123-043511-beside-nccl-tests",
        "results/reference/h200-x4/20261126-052446-default-1", "results/reference/h200-x4/20261126-055113-default-4",
        "results/noise/h200-x4/held-out"]


def _halved(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.copy()
    rows["time_s"] *= 2
    rows[["algbw_gbps", "busbw_gbps"]] /= 2
    return rows


def study(runs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    table, suites, noise = shipped(), catalog(), shipped_noise()
    families, summary = [], []
    for run in runs:
        meta, rows = read_meta(run), load(run, warn=lambda line: None)
        own = machine_class(meta).key
        others, others_noise = table.without([own]), noise.without([own])
        for case, frame in (("as measured", rows), ("every figure halved", _halved(rows))):
            got = judge(frame, meta, suites, others, run, planned=set(), noise=others_noise)
            states = Counter(v.verdict for v in got.verdicts)
            plateau = [v.ratio for v in got.judged if v.size_class == "bandwidth" and v.ratio]
            within = sum(abs(r - 1) <= 0.10 for r in plateau)
            summary.append({"run": str(run.relative_to(ROOT)), "class": own, "case": case,
                            "families": len(got.verdicts), "judged": len(got.judged),
                            "judged_share": round(got.judged_share, 2), **{s: states.get(s, 0) for s in
                                                                            (NORMAL, LOW, "high", "inconsistent",
                                                                             "too noisy", "not judged")},
                            "plateaus_within_10pct": f"{within} of {len(plateau)}",
                            "exit": got.exit_code()})
            families += [{"run": str(run.relative_to(ROOT)), "case": case, "family": v.family, "state": v.verdict,
                          "ratio": None if v.ratio is None else round(v.ratio, 3),
                          "limit": None if v.limit is None else round(v.limit, 3), "source": v.source,
                          "noise": v.noise, "reason": v.reason} for v in got.verdicts]
    return pd.DataFrame(summary), pd.DataFrame(families)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "noise" / "any-gpu")
    args = parser.parse_args(argv)
    runs = [run for path in RUNS for run in find_runs([ROOT / path])]
    summary, families = study(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    families.to_csv(args.out / "families.csv", index=False)
    lines = ["| " + " | ".join(summary.columns) + " |", "|" + "---|" * len(summary.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in summary.itertuples(index=False)]
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print(summary.to_string(index=False))
    bad = summary[(summary.case == "as measured") & (summary[LOW] > 0)]
    missed = summary[(summary.case == "every figure halved") & (summary[NORMAL] > 0)]
    print(f"\nas measured, runs with a low family: {len(bad)}; halved, runs with a family still normal: {len(missed)}")
    return 0 if bad.empty and missed.empty and not math.isnan(summary.judged_share.mean()) else 1


if __name__ == "__main__":
    sys.exit(main())
