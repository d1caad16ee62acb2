"""The tidy result schema, the host's usual pace, and reading runs for plots and comparison.

A run is a folder: samples.parquet + samples.csv (one row per measured trial, plus one row
per skipped or failed point) and meta.json (the machine, versions, the resolved config).
samples.csv is the journal (bench/journal.py writes it): readers take it up to its last commit
in samples.commit, and samples.parquet only while it holds as many rows as the journal.
Loading reads Parquet/CSV/JSON only: no pickle, and skips (with a warning) a run folder it
cannot read rather than losing every other run with it.
"""
from __future__ import annotations

import functools
import io
import json
import math
import os
import socket
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Iterable, get_type_hints

from bench import lazy
from bench.commits import edited_at, last_commit
from bench.hosts import host_id
from bench.points import POINT_KEYS, PointKey
from bench.row_checks import first_refused

# Loaded when rows are first read or written: the registry, the schema and a plan need none of them.
pd = lazy.module("pandas")
pa = lazy.module("pyarrow")
arrow_parquet = lazy.module("pyarrow.parquet")


SCHEMA_VERSION = 4
# Versions load() still reads: schema 3 lacks host_pace_s and round, schema 2 also params, schema 1
# also api, engine, numa and time_fastest_rank_s, which are filled in (schema 1's collectives all
# went through torch.distributed; before schema 4 no pace was read and every point was measured in
# one round). Schema 4 was written for a while with only one of host_pace_s and round (the two were
# added side by side); the missing one is filled in the same way.
READABLE_SCHEMAS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Sample(PointKey):
    """One measured trial (status 'ok'), or one point that could not be measured: its point's
    fields (`points.PointKey`), then what was measured."""

    params: str = ""             # the suite's own description of the point, as JSON (results.params reads it)
    time_s: float = math.nan
    iters: int = 0
    trial: int = -1
    round: int = 0               # the round of interleaved measurement the trial belongs to (pipeline); else 0
    part: str = "total"          # bidirectional rows: one per direction plus 'total' (their sum)
    time_fastest_rank_s: float = math.nan   # collectives: the fastest rank's time per op (stragglers show)
    algbw_gbps: float = math.nan
    busbw_gbps: float = math.nan
    host_pace_s: float = math.nan   # the host's pace just before the trial (timing.host_pace), where it sets the op's
    page_faults: float = math.nan   # pipeline: minor page faults per op of the thread(s) that ran it
    cpu_s: float = math.nan         # pipeline: CPU seconds per op of the thread that ran it, where timed
    verified: bool = False
    status: str = "ok"           # ok | failed | skipped
    note: str = ""
    run_id: str = ""


COLUMNS = [f.name for f in fields(Sample)]
_INT_COLUMNS = {name for name, kind in get_type_hints(Sample).items() if kind is int}
_FLOAT_COLUMNS = {name for name, kind in get_type_hints(Sample).items() if kind is float}
# Older files lack these columns: the values they had implicitly.
_SCHEMA1_DEFAULTS = {"api": "", "engine": "", "numa": "", "time_fastest_rank_s": math.nan}
_SCHEMA2_DEFAULTS = {"params": ""}
_SCHEMA3_DEFAULTS = {"host_pace_s": math.nan, "round": 0}
_LATER_DEFAULTS = {"page_faults": math.nan, "cpu_s": math.nan}   # schema-4 files written before it was counted


def params(rows: pd.DataFrame) -> list[dict]:
    """The rows' `params` (a suite's own description of each point), one dict per row; {} for a
    row without (older runs)."""
    return [json.loads(text) if text else {} for text in rows["params"]]


# A trial whose reading of the host's pace took this much longer than the run's usual reading
# ran while the host was slow (timing.host_pace; docs/method.md, "The host's pace").
PACE_SLACK = 1.25
USUAL_PACE_QUANTILE = 0.1   # the run's usual pace: a low quantile of its readings, not the luckiest one
# A point keeps only its rounds (a point measured in one round: its trials) at the host's usual
# pace where there are at least this many: one such round alone is one moment, not a figure (on
# a host slow most of the time, 2 of 5 runs' points had one, and it read up to 3x off the others;
# a copy with one trial of five at pace read 0.50x its host's other run: docs/method.md).
MIN_ROUNDS_AT_PACE = 2


def host_slow(rows: pd.DataFrame) -> pd.Series:
    """Per row: its trial read the host's pace above PACE_SLACK x its run's usual reading (False
    where no pace was read). Runs and world sizes are apart: a collective reads its slowest rank."""
    pace = rows["host_pace_s"]
    if pace.isna().all():
        return pd.Series(False, index=rows.index)
    usual = pace.groupby([rows["run_id"], rows["world_size"]]).transform(lambda s: s.quantile(USUAL_PACE_QUANTILE))
    return pace > PACE_SLACK * usual


def slow_throughout(rows: pd.DataFrame, slow: pd.Series | None = None) -> pd.Series:
    """Per row: its point (in its run) ran at the host's usual pace in fewer than MIN_ROUNDS_AT_PACE
    of its rounds (a point measured in one round: of its trials), so all its readings are kept.
    `slow`: the rows' host_slow, where the caller has it already."""
    slow = host_slow(rows) if slow is None else slow
    if not slow.any():
        return slow
    point = rows.groupby(POINT_KEYS + ["run_id"], sort=False).ngroup()
    rounds = rows["round"] if "round" in rows.columns else pd.Series(0, index=rows.index)
    in_rounds = rounds.groupby(point).transform("nunique") > 1
    units = rounds.where(in_rounds, rows["trial"])
    at_pace = units.where(~slow).groupby(point).transform("nunique")
    return at_pace < units.groupby(point).transform("nunique").clip(upper=MIN_ROUNDS_AT_PACE)


def usable_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured trials of whole operations: status ok, part total (directions are parts of it),
    taken at the host's usual pace where the point has any such trial."""
    return usable_and_slow(frame)[0]


def usable_and_slow(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """usable_rows, and per row kept whether its point ran while the host was slow throughout
    (slow_throughout, read on every trial of the point: read on the kept trials alone, the run's
    usual pace would be re-read from them and mark trials at it slow)."""
    rows = frame[(frame["status"] == "ok") & (frame["part"] == "total")]
    slow = host_slow(rows)
    if not slow.any():
        return rows, slow
    throughout = slow_throughout(rows, slow)
    keep = ~slow | throughout
    return rows[keep], throughout[keep]


class ResultsError(ValueError):
    """A results folder or file that cannot be used, named in the message."""


# A params field declared with this metadata is stored only where it differs from its default: a
# suite adds a switch (its default what every point measured before) without changing the
# identity of the points that do not set it (resume, the gate, the shipped expectations).
UNLESS_DEFAULT = {"stored": "unless default"}


def params_text(params) -> str:
    """A point's params (a dataclass, or already JSON text) as stored: JSON of its fields (those
    declared UNLESS_DEFAULT only where set), keys sorted; '' for none."""
    if params is None or isinstance(params, str):
        return params or ""
    quiet = {f.name for f in fields(params) if f.metadata == UNLESS_DEFAULT and getattr(params, f.name) == f.default}
    return json.dumps({k: v for k, v in asdict(params).items() if k not in quiet}, sort_keys=True)


def point_key(row) -> tuple:
    """What identifies a point: a row's POINT_KEYS (a dict, a Sample, or a suite's Point)."""
    get = row.get if isinstance(row, dict) else (lambda k: getattr(row, k))
    return tuple(params_text(get(k)) if k == "params" else str(get(k)) for k in POINT_KEYS)


def samples_frame(samples: Iterable[Sample]) -> pd.DataFrame:
    """The samples as rows of the schema's columns."""
    return pd.DataFrame([asdict(s) for s in samples], columns=COLUMNS)


def _journal(path: Path) -> bytes:
    """samples.csv up to its last commit (samples.commit beside it), or its whole lines without one.
    ResultsError, naming the line, where committed rows were changed since."""
    data = path.read_bytes()
    commits = path.with_suffix(".commit")
    commit = last_commit(data, commits)
    if commit is None and (line := edited_at(data, commits)) is not None:
        raise ResultsError(f"{path}, line {line}: changed after it was written (its rows no longer match "
                           f"{commits.name}); restore it, or remove {commits.name} to read it as it is now")
    return data[:commit.end] if commit else _whole_lines(data)


@functools.cache
def arrow_schema() -> pa.Schema:
    """The columns in Arrow's types, as samples files hold them."""
    return pa.schema([(c, pa.int64() if c in _INT_COLUMNS else pa.float64() if c in _FLOAT_COLUMNS
                       else pa.bool_() if c == "verified" else pa.string()) for c in COLUMNS])


def _in_type(column: pd.Series, name: str) -> pd.Series:
    if name in _INT_COLUMNS:
        return column.astype("int64")
    if name in _FLOAT_COLUMNS:
        return column.astype("float64")
    return column.astype(bool) if name == "verified" else column.astype(str)


def typed(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` with each of the schema's columns in its type."""
    missing = next((col for col in COLUMNS if col not in frame.columns), None)
    if missing is not None:
        raise KeyError(missing)
    schema = set(COLUMNS)
    # One frame built from its columns: replacing them one by one rebuilds its blocks each time.
    return pd.DataFrame({col: _in_type(frame[col], col) if col in schema else frame[col] for col in frame.columns},
                        index=frame.index)


def samples_file(run_dir: str | Path) -> Path | None:
    """The run's complete samples file: Parquet while it holds every committed row of the journal
    (the CSV), else the CSV (a run still going, or stopped before its writer closed); None if neither."""
    parquet, csv = Path(run_dir) / "samples.parquet", Path(run_dir) / "samples.csv"
    if not csv.exists():
        return parquet if parquet.exists() else None
    if parquet.exists():
        try:
            if arrow_parquet.ParquetFile(parquet).metadata.num_rows == _journal(csv).count(b"\n") - 1:
                return parquet
        except Exception:  # noqa: BLE001 - a torn or foreign Parquet file: the CSV still holds every row
            pass
    return csv


def _whole_lines(data: bytes) -> bytes:
    return data[:data.rfind(b"\n") + 1]


def read_samples(path: str | Path) -> pd.DataFrame:
    """One samples file (.parquet, or .csv up to its last commit), checked against the schema;
    ResultsError names it."""
    path = Path(path)
    try:
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(
            io.BytesIO(_journal(path)), keep_default_na=False,
            na_values={c: ["", "nan", "NaN"] for c in _FLOAT_COLUMNS})
    except ResultsError:
        raise   # it says what is wrong, and where
    except Exception as exc:  # pyarrow and pandas raise many types for a corrupt file
        raise ResultsError(f"{path}: unreadable results file ({type(exc).__name__}: {exc})") from None
    if "api" not in frame.columns and "suite" in frame.columns:  # schema 1
        frame = frame.assign(**_SCHEMA1_DEFAULTS)
        frame.loc[frame["backend"].isin(("nccl", "gloo")), "api"] = "torch"   # schema 1's ranks ran torch.distributed only
    if "params" not in frame.columns and "suite" in frame.columns:  # schemas 1 and 2
        frame = frame.assign(**_SCHEMA2_DEFAULTS)
    if "suite" in frame.columns:  # schemas 1 to 3, and early schema-4 files lacking one of the two
        absent = {c: v for c, v in {**_SCHEMA3_DEFAULTS, **_LATER_DEFAULTS}.items() if c not in frame.columns}
        if absent:
            frame = frame.assign(**absent)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ResultsError(f"{path}: not an xferbench samples file (missing columns: {', '.join(missing)})")
    try:
        frame = typed(frame[COLUMNS])
    except (ValueError, TypeError) as exc:
        raise ResultsError(f"{path}: a column has values of the wrong type ({exc})") from None
    _check_values(frame, path)
    return frame


def _where(path: Path, index: int) -> str:
    """A row's place in its file: a CSV's line (its header is line 1), a Parquet file's row."""
    return f"{path}, line {index + 2}" if path.suffix == ".csv" else f"{path}, row {index + 1}"


def _check_values(frame: pd.DataFrame, path: Path) -> None:
    """ResultsError naming file and line of the first row no measurement can give (row_checks)."""
    found = first_refused(frame)
    if found:
        raise ResultsError(f"{_where(path, found[0])}: {found[1]}")


def run_samples(run_dir: str | Path) -> pd.DataFrame:
    """A run's rows as readers see them, writing nothing (a folder without samples: no rows)."""
    found = samples_file(run_dir)
    return read_samples(found) if found else typed(samples_frame([]))


def read_meta(run_dir: str | Path) -> dict:
    path = Path(run_dir) / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing (not an xferbench run folder)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: corrupt JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ResultsError(f"{path}: corrupt (expected a JSON object)")
    version = meta.get("schema_version")
    if version not in READABLE_SCHEMAS:
        raise ResultsError(f"{path}: schema_version {version!r}, this xferbench reads "
                           f"{', '.join(map(str, READABLE_SCHEMAS))}")
    return meta


# The project's committed data beside the runs in a checkout's results/: reference runs, noise
# studies and runs under a known fault (the doctor's evidence). A path above them (results/, the
# checkout) passes them over; a path at or in them uses them.
SET_ASIDE = ("results/reference", "results/noise", "results/faults")


def _set_aside(run: Path, root: Path) -> bool:
    """Whether `run` lies in a SET_ASIDE folder strictly below `root` (resolved, once for all its
    runs: a fleet has thousands): a folder below it, down to the run, named by one of them."""
    parts, below = run.resolve().parts, len(root.parts)
    return parts[:below] == root.parts and any("/".join(parts[i - 2:i]) in SET_ASIDE
                                               for i in range(below + 1, len(parts) + 1))


def set_aside_note(runs: list[Path]) -> str:
    """One line saying how many runs find_runs() passed over, and how to use them."""
    return (f"left out {len(runs)} run(s) of the project's committed data ({', '.join(SET_ASIDE)}); "
            "name such a folder to use its runs")


def find_runs(paths: Iterable[str | Path], left_out: list[Path] | None = None) -> list[Path]:
    """Run folders at or below each path (a folder holding meta.json is a run). Runs in a
    SET_ASIDE folder below a path are passed over (added to `left_out`) unless the path is that
    folder or one inside it."""
    runs: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ResultsError(f"{p}: no such file or folder")
        if p.is_file():
            p = p.parent
        found = [p] if (p / "meta.json").exists() else sorted(m.parent for m in p.rglob("meta.json"))
        root = p.resolve()
        aside = [run for run in found if _set_aside(run, root)]
        if aside:
            found = [run for run in found if run not in aside]
            if left_out is not None:
                left_out.extend(aside)
            if not found:
                raise ResultsError(f"{p}: holds no run but the project's committed data ({', '.join(SET_ASIDE)}); "
                                   "name such a folder to use its runs")
        if not found:
            raise ResultsError(f"{p}: holds no xferbench run (no meta.json below it)")
        runs.extend(found)
    return runs


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":  # Windows' os.kill terminates the process whatever the signal
        return True
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        pass
    return True


COMPLETE = ("complete", "")   # a whole run's statuses; "": none recorded (imports, hand-made folders)


def _checkable(meta: dict) -> bool:
    """Whether this machine can tell if the run's process lives: a run of this machine, its pid recorded."""
    pid = meta.get("pid")
    return meta.get("system", {}).get("hostname") == socket.gethostname() and isinstance(pid, int) and pid > 0


def run_status(meta: dict) -> str:
    """The run's status, with a 'running' run whose process is gone read as 'interrupted'.

    A killed run (SIGKILL, out of memory, a lost machine) never gets to write its final status.
    Only a run of this machine can be checked; a live pid is trusted even if it was reused.
    """
    status = str(meta.get("status", ""))
    if status == "running" and _checkable(meta) and not _pid_alive(meta["pid"]):
        return "interrupted"
    return status


def status_said(meta: dict) -> str:
    """A run's status as the lines about runs that did not complete say it: 'still running (pid
    N)', 'killed (no final status)' (recorded running, its process gone), 'interrupted',
    'failed'; a running run this machine cannot check says so."""
    status = run_status(meta)
    if status == "running" and _checkable(meta):
        return f"still running (pid {meta['pid']})"
    if status == "running":
        pid, host = meta.get("pid") or "not recorded", meta.get("system", {}).get("hostname") or "not recorded"
        return f"recorded as running (pid {pid}, host {host}; this machine cannot check it)"
    return "killed (no final status)" if meta.get("status") == "running" else status


def suites_asked(meta: dict) -> int:
    """How many suites the run's config asked for (those skipped on this machine included)."""
    return len((meta.get("config") or {}).get("suites") or [])


def meta_columns(meta: dict) -> dict:
    """The flat machine description joined onto every row of a run."""
    system = meta.get("system", {})
    gpus = system.get("gpus") or [{}]
    instance = meta.get("instance", {})
    return {
        "instance": instance.get("label") or instance.get("name", ""),
        "host": system.get("hostname", ""),
        "host_id": host_id(system),
        "gpu_name": gpus[0].get("name", "") if system.get("gpus") else "cpu",
        "gpu_count": len(system.get("gpus") or []),
        "driver": system.get("driver", ""),
        "cuda": system.get("cuda", ""),
        "torch": system.get("torch", ""),
        "nccl": system.get("nccl", ""),
        "pcie_gen": instance.get("pcie_gen") or gpus[0].get("pcie_gen_max"),
        "pcie_width": instance.get("pcie_width") or gpus[0].get("pcie_width_max"),
        "nvlink_links": gpus[0].get("nvlink_links"),
        "l2_bytes": gpus[0].get("l2_bytes"),     # the first GPU's L2 (None: not recorded)
        "nvlink_gbps_per_gpu": instance.get("nvlink_gbps_per_gpu"),
        "usd_per_hour": instance.get("usd_per_hour"),
        "price_date": instance.get("price_date"),
        "provider": instance.get("provider"),
        "start_time": meta.get("start_time", ""),
        "tool_version": meta.get("tool", {}).get("version", ""),
        "git_commit": meta.get("tool", {}).get("git_commit", ""),
        "run_status": run_status(meta),
        "run_suites": suites_asked(meta),
    }


def _warn_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _below(run: Path, reason: str) -> str:
    """A reason about a run's files, named from inside the run folder."""
    return reason.removeprefix(f"{run}{os.sep}").removeprefix(f"{run}: ")


def _read_run(run: Path) -> pd.DataFrame:
    """One run's rows joined with its meta columns; ResultsError says why it cannot be read."""
    meta = read_meta(run)
    samples = samples_file(run)
    if samples is None:
        raise ResultsError(f"{run}: no samples file")
    frame = read_samples(samples)
    # Added as one block of columns: inserted one at a time, each rebuilds the frame's column index.
    joined = pd.DataFrame({**meta_columns(meta), "run_dir": str(run)}, index=frame.index)
    return pd.concat([frame, joined], axis=1)


def load(paths: str | Path | Iterable[str | Path],
         warn: Callable[[str], None] = _warn_stderr) -> pd.DataFrame:
    """Every run at or below `paths`, rows joined with their run's meta columns (hue='instance').

    A run folder that cannot be read (no or corrupt samples, corrupt meta.json, an unknown
    schema) is skipped with one `warn` line naming it and why, and the project's committed runs
    below a path (find_runs) with one line saying how many; ResultsError only when no run is
    left, or when a path does not exist or holds no run.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    frames, skipped, aside = [], {}, []
    for run in find_runs(paths, aside):
        try:
            frames.append(_read_run(run))
        except ResultsError as exc:
            skipped[run] = _one_line(str(exc))
    if frames or len(skipped) > 1:   # a lone run refused: the error alone says why, in one line
        for run, reason in skipped.items():
            warn(f"xferbench: skipping {run}: {_below(run, reason)}")
    if aside:
        warn(f"xferbench: {set_aside_note(aside)}")
    if not frames:
        (run, reason), named = next(iter(skipped.items())), {Path(p) for p in paths}
        why = (_below(run, reason) if run in named else reason) if len(skipped) == 1 else \
            f"all {len(skipped)} run folders were skipped"
        raise ResultsError(f"{', '.join(map(str, paths))}: no usable run ({why})")
    return pd.concat(frames, ignore_index=True)
