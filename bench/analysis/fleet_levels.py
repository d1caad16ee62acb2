"""A fleet's runs read for scale: each run's point levels (compare.point_levels of the run alone),
kept beside the run by the run itself, else computed once and kept in a cache, in a pool of
processes where many runs are read.

A run's rows are thousands of trials; what the fleet compares is one level per point (a few
hundred). Reducing a run's rows costs tens of milliseconds, mostly pandas' work per row, so a
thousand runs read one by one take most of a minute, while their levels read back in a millisecond
or two each. So a run keeps its levels in its folder as it ends (levels.parquet, beside
verdicts.json: the driver calls `keep`), and levels computed here for any other run (an older
version's, an import) are kept under $XFERBENCH_CACHE (default ~/.cache/xferbench; "off": none),
one small Parquet file per run folder. Either is used only where its seal matches: a digest of
the run's samples files' contents, of this xferbench's code (and of the suites named in
XFERBENCH_SUITES) and of the levels themselves, so a run changed since, another version's reading
of its rows, or levels edited by hand are read afresh from the rows (and their checks). The run
folders are only read here.
"""
from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from bench import lazy
from bench.analysis.compare import point_levels
from bench.points import INT_KEYS, POINT_KEYS, VARIANT_KEYS, variant_label
from bench.results import ResultsError, load
from bench.suite_view import Catalog

pa = lazy.module("pyarrow")
arrow_parquet = lazy.module("pyarrow.parquet")
pd = lazy.module("pandas")

LEVELS_FILE = "levels.parquet"
CACHE_ENV = "XFERBENCH_CACHE"
SUITES_ENV = "XFERBENCH_SUITES"
SAMPLES = ("samples.parquet", "samples.csv", "samples.commit")
FLAGS = ("host_slow", "cache_resident", "short_of_hbm")
SEP = "\x1f"      # between a key's fields: no field holds it
LINE = "\n"       # between keys (or metrics): none holds it
POOL_FROM = 24     # fewer runs are read in this process: a pool's start costs more than it saves
CHUNK = 8          # runs per task handed to a worker


@dataclass
class RunLevels:
    """One run's levels: per point its key (its POINT_KEYS joined), level y (-log median time),
    value shown (GB/s, or time), metric and flags (compare.point_levels); and the variants whose
    data check failed."""

    keys: list[str]
    y: np.ndarray
    value: np.ndarray
    metric: list[str]
    flags: dict[str, np.ndarray]
    failed: list[str] = field(default_factory=list)

    # A pool's workers hand their runs' levels back pickled: a run's hundreds of key strings pickle
    # one by one at about what reading the run costs; joined into one string, at next to nothing.
    def __getstate__(self) -> dict:
        return {**vars(self), "keys": _joined(self.keys), "metric": _joined(self.metric)}

    def __setstate__(self, state: dict) -> None:
        vars(self).update(state, keys=_split(state["keys"]), metric=_split(state["metric"]))


def _joined(strings: list[str]) -> tuple[int, str]:
    return len(strings), LINE.join(strings)


def _split(joined: tuple[int, str]) -> list[str]:
    count, text = joined
    return text.split(LINE) if count else []


def point_fields(key: str) -> dict:
    """A point's POINT_KEYS from its key."""
    fields = dict(zip(POINT_KEYS, key.split(SEP)))
    return {k: int(v) if k in INT_KEYS else v for k, v in fields.items()}


def cache_dir() -> Path | None:
    """Where levels computed here are kept, None where the cache is off."""
    where = os.environ.get(CACHE_ENV, "")
    if where.lower() == "off":
        return None
    return Path(where) if where else Path.home() / ".cache" / "xferbench"


@functools.cache
def code_digest() -> str:
    """What a run's levels depend on besides its rows: this package's code and the suites of one's own."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    extra = [Path(p) for p in os.environ.get(SUITES_ENV, "").split(os.pathsep) if p]
    for path in sorted(package.rglob("*.py")) + extra:
        digest.update(str(path.relative_to(package) if path.is_relative_to(package) else path).encode())
        try:
            digest.update(path.read_bytes() if path.is_file() else b"")
        except OSError:
            digest.update(b"unreadable")
    return digest.hexdigest()[:16]


def _stamp(run: Path) -> str:
    """The contents of a run's samples files and the code that reads them, as one digest."""
    digest = hashlib.sha256(code_digest().encode())
    for name in SAMPLES:
        try:
            digest.update(name.encode() + (run / name).read_bytes())
        except FileNotFoundError:
            pass
    return digest.hexdigest()[:32]


def _cache_file(run: Path, where: Path) -> Path:
    return where / "levels" / f"{hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:32]}.parquet"


def from_rows(rows: pd.DataFrame, catalog: Catalog) -> RunLevels:
    """One run's levels from its rows (a results.load frame of that run alone)."""
    levels = point_levels(rows, catalog)
    columns = [levels[k].astype(str).tolist() for k in POINT_KEYS]
    failed = rows[rows["status"] == "failed"].drop_duplicates(VARIANT_KEYS)
    return RunLevels([SEP.join(k) for k in zip(*columns)], levels["y"].to_numpy(float),
                     levels["value"].to_numpy(float), [str(m) for m in levels["metric"]],
                     {f: levels[f].to_numpy(bool) for f in FLAGS},
                     sorted({variant_label(r) for r in failed[VARIANT_KEYS].to_dict("records")}))


def _sealed(stamp: str, levels: RunLevels) -> str:
    """The stamp and the levels themselves, as one digest: a kept file edited by hand reads as stale."""
    digest = hashlib.sha256(stamp.encode() + "\n".join(levels.keys + levels.metric + levels.failed).encode())
    for array in (levels.y, levels.value, *(levels.flags[f] for f in FLAGS)):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:32]


def _read(path: Path, stamp: str) -> RunLevels | None:
    try:
        with arrow_parquet.ParquetFile(path) as kept:   # read_table's datasets cost as much again
            table = kept.read(use_threads=False)
        meta = table.schema.metadata or {}
        columns = {name: table.column(name) for name in table.column_names}
        found = RunLevels(columns["key"].to_pylist(), columns["y"].to_numpy(), columns["value"].to_numpy(),
                          columns["metric"].to_pylist(),
                          {f: columns[f].to_numpy(zero_copy_only=False) for f in FLAGS},
                          json.loads(meta.get(b"failed", b"[]")))
    except Exception:  # noqa: BLE001 - absent, torn or foreign: computed afresh
        return None
    return found if meta.get(b"seal", b"").decode() == _sealed(stamp, found) else None


def _write(path: Path, stamp: str, levels: RunLevels) -> None:
    """Kept whole or not at all (written beside, then renamed); a file that cannot be written is
    no error: the levels are computed again next time."""
    table = pa.table({"key": levels.keys, "y": levels.y, "value": levels.value, "metric": levels.metric,
                      **levels.flags}).replace_schema_metadata({"seal": _sealed(stamp, levels),
                                                                "failed": json.dumps(levels.failed)})
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        arrow_parquet.write_table(table, partial)
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)


def keep(run: Path, rows: pd.DataFrame, catalog: Catalog) -> None:
    """A finished run's levels kept in its folder (LEVELS_FILE), from the rows it was judged by."""
    _write(Path(run) / LEVELS_FILE, _stamp(Path(run)), from_rows(rows, catalog))


def run_levels(run: Path, catalog: Catalog) -> RunLevels:
    """One run's levels: those it kept, else those the cache holds, for this state of its samples
    and this code; else computed from its rows and cached. ResultsError where its rows cannot be read."""
    stamp, where = _stamp(run), cache_dir()
    cached = _cache_file(run, where) if where is not None else None
    for path in (run / LEVELS_FILE, cached):
        found = _read(path, stamp) if path is not None else None
        if found is not None:
            return found
    found = from_rows(load(run, warn=lambda line: None), catalog)
    if cached is not None:
        _write(cached, stamp, found)
    return found


_CATALOG: Catalog = {}


def _worker_start(catalog: Catalog) -> None:
    global _CATALOG
    _CATALOG = catalog


def _chunk(runs: list[Path]) -> list[RunLevels | str]:
    """A worker's share: each run's levels, or why it could not be read (one line)."""
    out: list[RunLevels | str] = []
    for run in runs:
        try:
            out.append(run_levels(run, _CATALOG))
        except ResultsError as exc:
            out.append(" ".join(str(exc).split()))
    return out


def workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def many_levels(runs: Iterable[Path], catalog: Catalog) -> Iterator[RunLevels | str]:
    """Each run's levels (or why it could not be read), in order, as they come; in a pool of one
    process per core where there are many. Forked, so the workers start with the catalog and
    modules loaded."""
    runs = list(runs)
    chunks = [runs[i:i + CHUNK] for i in range(0, len(runs), CHUNK)]
    if len(runs) < POOL_FROM or workers() < 2 or "fork" not in multiprocessing.get_all_start_methods():
        _worker_start(catalog)
        for chunk in chunks:
            yield from _chunk(chunk)
        return
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers(), mp_context=context, initializer=_worker_start, initargs=(catalog,)) as pool:
        for done in pool.map(_chunk, chunks):
            yield from done
