"""A fleet's runs read for scale: each run's point levels (compare.point_levels of the run alone),
computed once and kept in a cache, in a pool of processes where many runs are read.

A run's rows are thousands of trials; what the fleet compares is one level per point (a few
hundred). Reading and reducing a run costs tens of milliseconds, mostly pandas' work per row, so
a thousand runs read one by one in one process take most of a minute; kept, a run's levels read
back in a millisecond or two. The cache holds one small Parquet file per run under
$XFERBENCH_CACHE (default ~/.cache/xferbench; "off": none), named by the run folder's path and
stamped with its samples files' sizes and times and a digest of this xferbench's code (and of
the suites named in XFERBENCH_SUITES): a run written again, or a changed reading of its rows,
is read afresh. The run folders themselves are only read.
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
from typing import Iterable

import numpy as np

from bench import lazy
from bench.analysis.compare import point_levels
from bench.points import POINT_KEYS, VARIANT_KEYS, variant_label
from bench.results import run_samples
from bench.suite_view import Catalog

pa = lazy.module("pyarrow")
arrow_parquet = lazy.module("pyarrow.parquet")

CACHE_ENV = "XFERBENCH_CACHE"
SUITES_ENV = "XFERBENCH_SUITES"
SAMPLES = ("samples.parquet", "samples.csv", "samples.commit")
FLAGS = ("host_slow", "paced", "cache_resident", "short_of_hbm")
POOL_FROM = 24     # fewer runs are read in this process: a pool's start costs more than it saves
CHUNK = 8          # runs per task handed to a worker


@dataclass
class RunLevels:
    """One run's levels: per point its key (JSON of its POINT_KEYS), level y (-log median time),
    value shown (GB/s, or time), metric and flags (compare.point_levels); and the variants whose
    data check failed."""

    keys: list[str]
    y: np.ndarray
    value: np.ndarray
    metric: list[str]
    flags: dict[str, np.ndarray]
    failed: list[str] = field(default_factory=list)
    cached: bool = False


def point_key(row: dict) -> str:
    """A point's key as the fleet holds it: its POINT_KEYS as JSON (point_fields reads it back)."""
    return json.dumps([row[k] for k in POINT_KEYS])


def point_fields(key: str) -> dict:
    return dict(zip(POINT_KEYS, json.loads(key)))


def cache_dir() -> Path | None:
    """Where levels are kept, None where the cache is off."""
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
    """The state of a run's samples files and of the code that reads them."""
    parts = []
    for name in SAMPLES:
        try:
            st = (run / name).stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
        except FileNotFoundError:
            pass
    return ";".join(parts) + f";code:{code_digest()}"


def _cache_file(run: Path, where: Path) -> Path:
    return where / "levels" / f"{hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:32]}.parquet"


def _from_rows(run: Path, catalog: Catalog) -> RunLevels:
    rows = run_samples(run).assign(run_dir=str(run))
    levels = point_levels(rows, catalog)
    records = levels[POINT_KEYS].to_dict("records")
    failed = rows[rows["status"] == "failed"].drop_duplicates(VARIANT_KEYS)
    return RunLevels([point_key(r) for r in records], levels["y"].to_numpy(float), levels["value"].to_numpy(float),
                     [str(m) for m in levels["metric"]], {f: levels[f].to_numpy(bool) for f in FLAGS},
                     sorted({variant_label(r) for r in failed[VARIANT_KEYS].to_dict("records")}))


def _read_cached(path: Path, stamp: str) -> RunLevels | None:
    try:
        table = arrow_parquet.read_table(path)
    except Exception:  # noqa: BLE001 - absent, torn or foreign: computed afresh
        return None
    meta = table.schema.metadata or {}
    if meta.get(b"stamp", b"").decode() != stamp:
        return None
    columns = {name: table.column(name) for name in table.column_names}
    return RunLevels(columns["key"].to_pylist(), columns["y"].to_numpy(), columns["value"].to_numpy(),
                     columns["metric"].to_pylist(), {f: columns[f].to_numpy(zero_copy_only=False) for f in FLAGS},
                     json.loads(meta.get(b"failed", b"[]")), cached=True)


def _write_cached(path: Path, stamp: str, levels: RunLevels) -> None:
    """Kept whole or not at all (written beside, then renamed); a cache that cannot be written is
    no error: the levels are computed again next time."""
    table = pa.table({"key": levels.keys, "y": levels.y, "value": levels.value, "metric": levels.metric,
                      **levels.flags}).replace_schema_metadata({"stamp": stamp, "failed": json.dumps(levels.failed)})
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        arrow_parquet.write_table(table, partial)
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)


def run_levels(run: Path, catalog: Catalog) -> RunLevels:
    """One run's levels, from the cache where it holds them for this state of the run and code.
    ResultsError where its rows cannot be read."""
    where = cache_dir()
    if where is None:
        return _from_rows(run, catalog)
    path, stamp = _cache_file(run, where), _stamp(run)
    found = _read_cached(path, stamp)
    if found is None:
        found = _from_rows(run, catalog)
        _write_cached(path, stamp, found)
    return found


_CATALOG: Catalog = {}


def _worker_start(catalog: Catalog) -> None:
    global _CATALOG
    _CATALOG = catalog


def _chunk(runs: list[Path]) -> list[RunLevels | str]:
    """A worker's share: each run's levels, or why it could not be read (one line)."""
    from bench.results import ResultsError

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


def many_levels(runs: Iterable[Path], catalog: Catalog) -> list[RunLevels | str]:
    """Each run's levels (or why it could not be read), in order; in a pool of one process per
    core where there are many. Forked, so the workers start with the catalog and modules loaded."""
    runs = list(runs)
    chunks = [runs[i:i + CHUNK] for i in range(0, len(runs), CHUNK)]
    if len(runs) < POOL_FROM or workers() < 2 or "fork" not in multiprocessing.get_all_start_methods():
        _worker_start(catalog)
        return [levels for chunk in chunks for levels in _chunk(chunk)]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(workers(), mp_context=context, initializer=_worker_start, initargs=(catalog,)) as pool:
        return [levels for done in pool.map(_chunk, chunks) for levels in done]
