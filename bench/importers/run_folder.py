"""What every import shares: a parser's findings (Imported) and the run folder written from them."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

import yaml

from bench.config.files import INSTANCES
from bench.journal import RunWriter, write_json
from bench.results import SCHEMA_VERSION, ResultsError, Sample, point_key


@dataclass
class Imported:
    """What a parser found: rows plus what meta.json should say about the machine and tool."""

    samples: list[Sample]
    tool_version: str = ""
    system: dict = field(default_factory=dict)
    not_imported: list[str] = field(default_factory=list)   # 'name: reason', for the user
    incomplete: list[str] = field(default_factory=list)     # tests whose sweep stops short: 'what: why'


def number_trials(samples: list[Sample]) -> list[Sample]:
    """Renumber trials per point and part in order of appearance, so repeated tests add trials."""
    seen: dict[tuple, int] = defaultdict(int)
    numbered = []
    for s in samples:
        key = (point_key(s), s.part)
        numbered.append(replace(s, trial=seen[key]))
        seen[key] += 1
    return numbered


def instance_meta(name: str | None, label: str | None = None) -> dict:
    """meta.json's instance: the instance entry conf/instance/<name>.yaml when there is one."""
    entry: dict = {}
    if name and (INSTANCES / f"{name}.yaml").is_file():
        entry = yaml.safe_load((INSTANCES / f"{name}.yaml").read_text()) or {}
    name = name or "imported"
    return {**entry, "name": name, "label": label or name}


def write_import(out_dir: str | Path, imported: Imported, tool: str, sources: Iterable[str | Path],
                 instance: str | None = None, run_id: str | None = None) -> Path:
    """An xferbench run folder holding the imported rows; ResultsError if it already has rows.
    An import whose sweep stops short (imported.incomplete) gets status 'interrupted', which
    plots, reports and the choice of runs treat as they treat a measured run cut short, and the
    reasons as 'incomplete'; a whole import records no status (taken as complete)."""
    out_dir = Path(out_dir)
    if (out_dir / "samples.parquet").exists() or (out_dir / "meta.json").exists():
        raise ResultsError(f"{out_dir}: already holds a run; import into a new folder")
    if not imported.samples:
        raise ResultsError(f"nothing to import from {', '.join(map(str, sources))}")
    run_id = run_id or out_dir.name
    writer = RunWriter(out_dir, run_id)
    writer.add_point(number_trials(imported.samples))
    writer.close()
    write_json(out_dir / "meta.json", {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "start_time": "",
        "instance": instance_meta(instance, instance or imported.system.get("hostname")),
        "system": imported.system,
        "tool": {"name": tool, "version": imported.tool_version},
        "source": [str(s) for s in sources],
        "not_imported": imported.not_imported,
        **({"status": "interrupted", "incomplete": imported.incomplete} if imported.incomplete else {}),
    })
    return out_dir


def read_text(path: Path) -> str:
    """The file's text (undecodable bytes replaced); ResultsError where it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror})") from None
