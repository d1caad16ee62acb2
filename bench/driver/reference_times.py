"""The committed reference runs as the plan reads them: each run's median time per operation by
series and size, its start, status, timing settings, suites' wall times and host's usual pace.

Read from the run folders (pandas, the readers' rules for usable trials), they are also kept as
one table shipped in the package (reference_times.json, made by scripts/make_expected.py and
checked against the runs by the tests): a run's estimate reads that table without importing
pandas or opening a run, so `plan=true` and a run's start-up do not pay for the reading, and an
installed wheel, which carries no results/, still plans from measured times.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import lazy
from bench.links import Speeds
from bench.points import POINT_KEYS
from bench.results import ResultsError, read_meta, read_samples, samples_file, usable_rows

pd = lazy.module("pandas")

REFERENCE_ROOT = Path(__file__).resolve().parents[2] / "results" / "reference"
TABLE = Path(__file__).with_name("reference_times.json")
# What a median is taken over (params apart: a suite's variants of one op share a series), then
# the link class and the median itself.
KEYS = tuple(k for k in POINT_KEYS if k != "params")
COLUMNS = (*KEYS, "link", "time_s")


@dataclass
class RunTimes:
    """One reference run: `rows` are tuples of COLUMNS."""
    name: str
    start_time: str
    status: str | None
    suite_wall_s: dict
    timing: dict
    rows: list[tuple]
    host: str = ""          # system.host_id: where recorded, the host it ran on
    host_pace_s: float | None = None   # its usual reading of the host's pace (None: it read none)


def read_run(path: Path) -> RunTimes | None:
    """The run in `path` (None where it holds no usable rows)."""
    samples = samples_file(path)
    try:
        meta = read_meta(path)
        frame = usable_rows(read_samples(samples)) if samples else None
    except ResultsError:
        return None
    if frame is None or frame.empty:
        return None
    medians = frame.groupby(list(KEYS), sort=False)["time_s"].median().reset_index()
    speeds = Speeds(classes=meta.get("system", {}).get("links") or {})
    medians["link"] = [speeds.pair(src, dst) for src, dst in medians[["src", "dst"]].itertuples(index=False)]
    rows = [tuple(v.item() if hasattr(v, "item") else v for v in row)
            for row in medians[list(COLUMNS)].itertuples(index=False)]
    from bench.analysis.healthy_hosts import usual_pace   # pandas' and numpy's reader: plan=true reads the table alone
    pace = usual_pace(frame)
    return RunTimes(path.name, str(meta.get("start_time", "")), meta.get("status"),
                    meta.get("suite_wall_s") or {}, (meta.get("config") or {}).get("timing") or {}, rows,
                    str(meta.get("system", {}).get("host_id") or ""), None if math.isnan(pace) else round(pace, 9))


def runs_under(folder: Path) -> list[RunTimes]:
    """Every usable run in `folder` (a machine kind's reference folder), in name order."""
    return [r for r in (read_run(m.parent) for m in sorted(folder.glob("*/meta.json"))) if r]


def folder_runs(root: Path = REFERENCE_ROOT) -> dict[str, list[RunTimes]]:
    """Each machine kind's runs under root, by its folder's name."""
    return {folder.name: runs for folder in sorted(p for p in root.iterdir() if p.is_dir())
            if (runs := runs_under(folder))} if root.is_dir() else {}


def table_text(kinds: dict[str, list[RunTimes]]) -> str:
    """The shipped table's text: one line per run, so that a new run is a readable diff."""
    lines = [f'{{"columns": {json.dumps(COLUMNS)}, "kinds": {{']
    for k, (label, runs) in enumerate(kinds.items()):
        lines.append(f"  {json.dumps(label)}: [")
        lines += [f"    {json.dumps(asdict(run))}" + ("," if i < len(runs) - 1 else "") for i, run in enumerate(runs)]
        lines.append("  ]" + ("," if k < len(kinds) - 1 else ""))
    lines.append("}}")
    return "\n".join(lines) + "\n"


def shipped(path: Path = TABLE) -> dict[str, list[RunTimes]]:
    """The table in the package, as folder_runs gives it; empty where it is missing or of other columns."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if tuple(data.get("columns", ())) != COLUMNS:
        return {}
    return {label: [RunTimes(**{**run, "rows": [tuple(r) for r in run["rows"]]}) for run in runs]
            for label, runs in data["kinds"].items()}
