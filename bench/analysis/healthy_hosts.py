"""What healthy runs of each machine class showed of their hosts, for the tables causes.py holds
a low run against: the GPUs' clock-event reasons (clocks.csv) and each host's usual pace (paces.csv)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import pandas as pd

from bench.analysis.expected import machine_class, unhealthy
from bench.hosts import host_id
from bench.results import USUAL_PACE_QUANTILE, load, read_meta


def clock_baselines(runs: Iterable[str | Path]) -> pd.DataFrame:
    """Per class and clock-event reason, the largest share of samples any GPU of a healthy run
    showed it in (reason '-', share 0: the class's runs showed none): bench/analysis/clocks.csv,
    which causes.py holds a low run's reasons against. Runs without telemetry say nothing."""
    shares: dict[tuple[str, str], float] = {}
    for run in runs:
        meta = read_meta(Path(run))
        telemetry = meta.get("telemetry") or {}
        if unhealthy(meta) or not telemetry.get("available"):
            continue
        machine = machine_class(meta).key
        shares.setdefault((machine, "-"), 0.0)
        for gpu in telemetry.get("gpus") or []:
            for reason, share in ((gpu.get("clock_reasons") or {}).get("fraction") or {}).items():
                shares[machine, reason] = max(shares.get((machine, reason), 0.0), float(share))
    rows = [{"machine": m, "reason": r, "share": round(v, 3)} for (m, r), v in sorted(shares.items())]
    return pd.DataFrame(rows, columns=["machine", "reason", "share"])


def usual_pace(rows: pd.DataFrame) -> float:
    """A run's usual pace (results.host_slow's reading): the low quantile of its single-process
    trials' host_pace_s (a collective's reads its slowest rank), else of all; NaN: none read."""
    pace = rows["host_pace_s"].dropna() if "host_pace_s" in rows else pd.Series(dtype=float)
    alone = pace[rows.loc[pace.index, "world_size"] == 1] if len(pace) else pace
    pace = alone if len(alone) else pace
    return float(pace.quantile(USUAL_PACE_QUANTILE)) if len(pace) else math.nan


def host_paces(runs: Iterable[str | Path]) -> pd.DataFrame:
    """Per class and healthy host, the median of its runs' usual paces: bench/analysis/paces.csv,
    which a launch path found low is held against (causes.py). Runs that read no pace say nothing."""
    found = []
    for run in runs:
        meta = read_meta(Path(run))
        if unhealthy(meta):
            continue
        pace = usual_pace(load(Path(run), warn=lambda line: None))
        if math.isfinite(pace):
            host = host_id(meta.get("system") or {})
            found.append({"machine": machine_class(meta).key, "host": host, "pace_s": pace})
    frame = pd.DataFrame(found, columns=["machine", "host", "pace_s"])
    return (frame.groupby(["machine", "host"]).agg(runs=("pace_s", "size"), pace_s=("pace_s", "median"))
            .reset_index().sort_values(["machine", "host"]))
