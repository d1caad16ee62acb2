"""A baseline store: a folder of one machine's earlier runs that the gate (compare.py) judges
new runs against, grown by the runs that pass; and a run's copies, which must never serve as
its own baseline."""
from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Iterable

from bench.results import ResultsError, find_runs, read_meta, run_samples


def _oldest_first(store: str | Path) -> list[Path]:
    def started(run: Path) -> str:
        try:
            return str(read_meta(run).get("start_time", ""))
        except ResultsError:
            return ""   # load() skips it, with a warning

    return sorted(find_runs([store]), key=lambda run: (started(run), run.name))


def store_runs(store: str | Path, last: int) -> list[Path]:
    """The newest `last` runs in a baseline store, oldest first (by their meta's start time)."""
    return _oldest_first(store)[-last:]


def add_to_store(store: str | Path, runs: Iterable[str | Path], keep: int = 0) -> list[Path]:
    """Copy run folders into the store (a run already there by name is left as it is), then
    remove all but its newest `keep` runs (0: keep them all); the new folders. Each copy is whole
    or absent: made beside its place, meta.json last, then renamed; a run removed loses its
    meta.json first, so no half run is ever taken as a baseline. OSError when the store cannot
    be written."""
    store = Path(store)
    store.mkdir(parents=True, exist_ok=True)
    added = []
    for run in find_runs(runs):
        dest = store / run.name
        if dest.exists():
            continue
        partial = store / f".{run.name}.partial-{uuid.uuid4().hex[:8]}"
        try:
            shutil.copytree(run, partial, ignore=lambda folder, names: ["meta.json"] if Path(folder) == run else [])
            shutil.copy2(run / "meta.json", partial / "meta.json")
            partial.rename(dest)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        added.append(dest)
    for old in _oldest_first(store)[:-keep] if keep else []:
        (old / "meta.json").unlink()
        shutil.rmtree(old)
    return added


def _run_id(run: Path) -> str:
    try:
        return str(read_meta(run).get("run_id") or "")
    except ResultsError:
        return ""   # load() skips it, with a warning


def copies_of(runs: Iterable[Path], current: Iterable[Path]) -> dict[Path, Path]:
    """{run: the current run it is}: each of `runs` that is one of the current runs, as its own
    folder or as a copy of it (what --add-on-pass leaves in a store when a CI job is retried):
    the same run_id and the same samples, row for row."""
    mine = {run.resolve(): run for run in current}
    by_id: dict[str, list[Path]] = {}
    for run in mine.values():
        by_id.setdefault(_run_id(run), []).append(run)
    found = {}
    for run in runs:
        if run.resolve() in mine:
            found[run] = mine[run.resolve()]
            continue
        for twin in by_id.get(_run_id(run) or "\0", []):
            try:
                if run_samples(run).equals(run_samples(twin)):
                    found[run] = twin
                    break
            except ResultsError:
                continue   # unreadable: load() reports it
    return found
