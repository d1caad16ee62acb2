"""Writing a run's files whole or not at all: meta.json and samples.parquet atomically, and the
journal a point at a time.

samples.csv is the journal: each finished point's rows (of a point measured in rounds, each
round's) are appended to it, then a line to
samples.commit (bench/commits.py), so a crash, a kill, Ctrl-C or a full disk keeps every point
measured before it, whole, at a cost that does not grow with the run; readers take the journal up
to its last commit (bench/results.py). samples.parquet is rewritten (atomically) when a writer
closes.
"""
from __future__ import annotations

import errno
import json
import os
import re
import uuid
import zlib
from dataclasses import asdict
from pathlib import Path

from bench import interrupts, lazy
from bench.commits import commit_line, last_commit
from bench.results import Sample, arrow_schema, point_key, read_samples, samples_file, samples_frame, typed

# Loaded when rows are first written: a plan writes none.
pd = lazy.module("pandas")
pa = lazy.module("pyarrow")
arrow_csv = lazy.module("pyarrow.csv")
arrow_parquet = lazy.module("pyarrow.parquet")


def _atomic_write(path: Path, write) -> None:
    tmp = str(path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp")
    # Created as open() would (mode 0o666 less the umask; mkstemp's 0o600 would make results
    # unreadable to the group), and exclusively, so no other writer's file is taken over.
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json(path: Path, data: dict) -> None:
    def dump(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")

    _atomic_write(path, dump)


# A running run's status as write_json lays it out (a top-level key), and what follows it.
_RUNNING_STATUS = re.compile(rb'\n  "status": "running"(,\s*)?')


def write_meta(run_dir: str | Path, meta: dict) -> bool:
    """meta.json written anew (atomically): True. When that fails (a new copy needs disk blocks a
    full disk does not have), a running meta.json gets only its status, in the bytes it already
    holds: False. OSError when neither can be done."""
    path = Path(run_dir) / "meta.json"
    try:
        write_json(path, meta)
        return True
    except OSError as exc:
        try:
            _patch_status(path, str(meta.get("status")))
        except OSError:
            raise exc from None
        return False


def _patch_status(path: Path, status: str) -> None:
    """Overwrites `"status": "running"` in place; JSON's whitespace takes up the difference in length."""
    with open(path, "r+b") as f:
        found = _RUNNING_STATUS.search(f.read())
        if found is None:
            raise OSError(f"{path}: holds no running status")
        width, tail = len(found.group()), found.group(1) or b""
        pretty = f'\n  "status": "{status}"'.encode()
        if len(pretty) + len(tail) <= width:   # "failed" fits: `"status": "failed" ,`
            new = pretty.ljust(width - len(tail)) + tail
        else:                                   # "interrupted" takes the newline and spaces after it
            new = (f'"status":"{status}"'.encode() + tail.strip()).ljust(width)
        if len(new) > width:
            raise OSError(f"{path}: no room for status {status!r}")
        f.seek(found.start())
        f.write(new)


class ResultsWriteError(OSError):
    """Results could not be written (a full disk, a read-only or vanished folder): one line says
    where, what is on disk whole, and how to go on."""

    def __init__(self, run_dir: Path, cause: OSError, points: int) -> None:
        self.run_dir, self.points = run_dir, points
        code = cause.errno
        if code is None:  # pyarrow's OSError has the errno only in its text
            found = re.search(r"\[errno (\d+)\]", str(cause), re.IGNORECASE)
            code = int(found.group(1)) if found else None
        self.reason = (os.strerror(code) if code else str(cause)).lower()
        self.disk_full = code in (errno.ENOSPC, errno.EDQUOT)
        super().__init__(self.sentence())

    def sentence(self, meta_note: str = "", fresh: bool = False) -> str:
        """The line; `meta_note` says what became of meta.json's final status; `fresh`: a new run
        whose meta.json could not be written (no run to resume)."""
        n = self.points
        safe = f"the {n} point{'s' if n != 1 else ''} before it {'are' if n != 1 else 'is'} on disk whole"
        note = f" ({meta_note})" if meta_note else ""
        remedy = "free space" if self.disk_full else "fix that"
        if fresh:
            return f"{self.reason} writing {self.run_dir}: nothing measured; {remedy} and run again"
        return f"{self.reason} writing {self.run_dir}: {safe}{note}; {remedy} and resume={self.run_dir}"


def _append(path: Path, data: bytes) -> int:
    """Appends `data` whole or not at all; returns the file's length before it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:  # a full disk first takes part of a write, then refuses the rest
                view = view[os.write(fd, view):]
        except BaseException:  # ENOSPC, or a signal midway
            os.ftruncate(fd, start)  # a truncation frees blocks; it never needs one
            raise
        return start
    finally:
        os.close(fd)


def _csv_bytes(table: pa.Table, header: bool) -> bytes:
    sink = pa.BufferOutputStream()
    arrow_csv.write_csv(table, sink, arrow_csv.WriteOptions(include_header=header))
    return sink.getvalue().to_pybytes()


class RunWriter:
    """Holds one run's rows: appends each finished point to the journal (samples.csv), commits it
    in samples.commit, and writes samples.parquet on close.

    Opening a run folder (new, resumed, or a rank appending to its parent's run) reads the
    committed rows and cuts the journal back to its last commit, in place: a point torn by a kill
    or a full disk is gone, and is measured again. A journal without commits (an older run, a CSV
    from another tool) is rewritten from its whole lines, with them, and one of other columns or
    another order (begun by an older version) from its committed rows. Only one writer may append
    at a time; `done` holds the points with rows, `rounds` the rounds each holds (a suite that
    measures in rounds commits each as it finishes: a cut point keeps them, and its suite says
    whether they are all, `Suite.complete`). Any failure to write is a ResultsWriteError.
    An append costs the same at the 10th point and the 5,000th: rewriting the whole table after
    every point cost ~10 ms a point by the end of a 2-GPU sweep, while the other ranks waited.
    """

    def __init__(self, run_dir: str | Path, run_id: str) -> None:
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.done: set = set()
        self.rounds: dict[tuple, set[int]] = {}
        self._journal, self._commits = self.run_dir / "samples.csv", self.run_dir / "samples.commit"
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with interrupts.deferred():   # the journal cut back to its last commit whole
                self._open()
        except OSError as exc:
            raise ResultsWriteError(self.run_dir, exc, len(self.done)) from exc

    def _open(self) -> None:
        """Takes the rows already committed; then makes the journal end at its last commit."""
        data = self._journal.read_bytes() if self._journal.exists() else b""
        commit = last_commit(data, self._commits)
        # rows are appended in this version's column order: a journal begun in another is rewritten
        if commit is not None and data.startswith(_csv_bytes(arrow_schema().empty_table(), header=True)):
            self._hold(read_samples(self._journal))
            if len(data) > commit.end:
                os.truncate(self._journal, commit.end)
            if self._commits.stat().st_size > commit.line_end:
                os.truncate(self._commits, commit.line_end)
            self._crc = commit.crc
            return
        existing = samples_file(self.run_dir)
        self._hold(read_samples(existing) if existing else samples_frame([]))
        self._commits.unlink(missing_ok=True)  # it did not describe this journal
        csv = _csv_bytes(self._table, header=True)
        _atomic_write(self._journal, lambda tmp: Path(tmp).write_bytes(csv))
        self._crc = zlib.crc32(csv)
        # Torn by a kill, this line is no commit, and the journal reads by its whole lines: all committed.
        self._commits.write_bytes(commit_line(len(csv), self._crc))

    def _hold(self, rows: pd.DataFrame) -> None:
        self._table = _arrow(rows)
        self.done, self.rounds = set(), {}
        self._count(rows.to_dict("records"))

    def _count(self, rows) -> None:
        for row in rows:
            key = point_key(row)
            self.done.add(key)
            self.rounds.setdefault(key, set()).add(int(row["round"] if isinstance(row, dict) else row.round))

    @property
    def frame(self) -> pd.DataFrame:
        return typed(self._table.to_pandas())

    def add_point(self, samples: list[Sample]) -> None:
        with interrupts.deferred():   # a point is on disk whole, and this writer knows it, or it is not
            # Straight to Arrow: through pandas this cost ~4 ms a point, 2 s of a 2-GPU sweep.
            rows = pa.Table.from_pylist([{**asdict(s), "run_id": self.run_id} for s in samples], schema=arrow_schema())
            data = _csv_bytes(rows, header=False)
            crc = zlib.crc32(data, self._crc)
            try:
                start = _append(self._journal, data)
                try:
                    _append(self._commits, commit_line(start + len(data), crc))
                except BaseException:
                    os.truncate(self._journal, start)  # rows without their commit: not part of the run
                    raise
            except OSError as exc:
                raise ResultsWriteError(self.run_dir, exc, len(self.done)) from exc
            self._crc = crc
            self._table = pa.concat_tables([self._table, rows])
            self._count(samples)

    def close(self) -> None:
        """samples.parquet from the rows held. The journal is never rewritten here: a writer left
        behind by another that appended since would otherwise drop that writer's rows."""
        table = self._table = self._table.combine_chunks()  # one row group, not one per point
        try:
            _atomic_write(self.run_dir / "samples.parquet", lambda tmp: arrow_parquet.write_table(table, tmp))
        except OSError as exc:
            raise ResultsWriteError(self.run_dir, exc, len(self.done)) from exc


def _arrow(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(typed(frame), schema=arrow_schema(), preserve_index=False)
