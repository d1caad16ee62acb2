"""Data no command can trust: a committed run copied and corrupted (a torn samples.parquet, a
dropped column, a hand-edited CSV row, a NaN time, a bandwidth a whole factor off, a NaN
bandwidth) and given to every analysis command, each of which refuses it in one line naming the
file and, where there is one, the row, exit 2: in-process main() for every case, the real
commands for one. And every committed run still loads: the checks refuse no real row."""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.cli import compare, doctor, plot, report, summary
from bench.results import ResultsError, read_samples, samples_file
from conftest import ROOT, env

CPU = ROOT / "results" / "noise" / "cpu" / "identical"
SMALL, OTHER = CPU / "identical-01", CPU / "identical-02"   # 415 rows each: gloo collectives and host copies
ROW = 7   # a measured copy row of SMALL: the Parquet file's row 8, a CSV's line 9
COMMANDS = {"summary": summary, "compare": compare, "report": report, "plot": plot, "doctor": doctor}


def _parquet(change):
    def corrupt(run: Path) -> None:
        frame = pd.read_parquet(run / "samples.parquet")
        assert frame.loc[ROW, "status"] == "ok" and frame.loc[ROW, "part"] == "total"
        change(frame).to_parquet(run / "samples.parquet", index=False)
    return corrupt


def _torn(run: Path) -> None:
    data = (run / "samples.parquet").read_bytes()
    (run / "samples.parquet").write_bytes(data[:len(data) // 2])


def _edited_csv(run: Path) -> None:
    frame = pd.read_parquet(run / "samples.parquet")
    frame.loc[ROW, "time_s"] = -frame.loc[ROW, "time_s"]
    frame.to_csv(run / "samples.csv", index=False)
    (run / "samples.parquet").unlink()


def _set(column: str, value):
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[ROW, column] = value(frame.loc[ROW, column])
        return frame
    return change


CORRUPT = {
    "torn parquet": (_torn, r"samples\.parquet: unreadable results file"),
    "dropped column": (_parquet(lambda f: f.drop(columns=["time_s"])),
                       r"samples\.parquet: not an xferbench samples file \(missing columns: time_s\)"),
    "edited csv row": (_edited_csv, r"samples\.csv, line 9: time_s=-\S+ is not a time"),
    "nan time": (_parquet(_set("time_s", lambda _: np.nan)), r"samples\.parquet, row 8: time_s=nan is not a time"),
    "bandwidth doubled": (_parquet(_set("algbw_gbps", lambda gbps: 2 * gbps)),
                          r"samples\.parquet, row 8: algbw_gbps=\S+ is 2 x size_bytes / time_s \(\S+\) where the other "
                          r"rows of its variant are 1 x"),
    "nan bandwidth": (_parquet(_set("algbw_gbps", lambda _: np.nan)),
                      r"samples\.parquet, row 8: algbw_gbps=nan where the other rows of its variant record one"),
}


def _corrupted(tmp_path: Path, case: str) -> tuple[Path, str]:
    run = tmp_path / "run"
    shutil.copytree(SMALL, run)
    corrupt, said = CORRUPT[case]
    corrupt(run)
    return run, said


def _argv(command: str, run: Path, tmp_path: Path) -> list[str]:
    out = {"report": ["--out", str(tmp_path / "report.html")], "plot": ["--out", str(tmp_path / "plots")]}
    return [str(OTHER)] * (command == "compare") + [str(run)] + out.get(command, [])


@pytest.mark.parametrize("case", CORRUPT)
def test_every_command_refuses_untrusted_data_in_one_line_naming_file_and_row(tmp_path, capsys, case):
    run, said = _corrupted(tmp_path, case)
    for name, command in COMMANDS.items():
        code = command.main(_argv(name, run, tmp_path))
        out = capsys.readouterr()
        lines = out.err.splitlines()
        assert code == 2 and len(lines) == 1 and out.out == "", (name, out)
        assert f"{run}: no usable run (" in lines[0] and re.search(said, lines[0]), (name, lines[0])
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "plots").exists()


def test_the_real_commands_refuse_a_nan_time_in_one_line(tmp_path):
    """The doctor (which said 'nothing measured' here) and the summary as a user runs them; the
    others' main() are the in-process cases above."""
    run, said = _corrupted(tmp_path, "nan time")
    procs = {name: subprocess.Popen([sys.executable, "-m", f"bench.cli.{name}", *_argv(name, run, tmp_path)],
                                    env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("doctor", "summary")}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and out == "" and len(err.splitlines()) == 1 and re.search(said, err), (name, err)


def test_every_committed_run_loads():
    """The checks refuse no real row: every committed run's samples pass them."""
    runs = sorted(meta.parent for meta in (ROOT / "results").rglob("meta.json"))
    assert len(runs) > 100
    for run in runs:
        read_samples(samples_file(run))


H200X1 = ROOT / "results" / "reference" / "h200-x1" / "20261126-075737-default-1"


@pytest.mark.parametrize("run, rows, column, value, said", [
    # a bidirectional copy moves 2 bytes per byte asked: 1 is as wrong as 4
    (H200X1, lambda f: (f.op == "bidir") & (f.part == "total"), "algbw_gbps", lambda r: r.size_bytes / r.time_s / 1e9,
     r"algbw_gbps=\S+ is 1 x size_bytes / time_s \(\S+\) where the other rows of its variant are 2 x"),
    (SMALL, lambda f: (f.op == "all_reduce"), "busbw_gbps", lambda r: 2 * r.busbw_gbps,
     r"busbw_gbps=\S+ is not algbw_gbps x its op's bus factor"),
    (SMALL, lambda f: (f.op == "all_reduce"), "busbw_gbps", lambda r: np.nan,
     r"busbw_gbps=nan is not algbw_gbps x its op's bus factor"),
    (SMALL, lambda f: (f.op == "h2h"), "algbw_gbps", lambda r: -r.algbw_gbps, r"algbw_gbps=-\S+ is not a bandwidth"),
])
def test_a_bandwidth_its_variant_does_not_move_is_refused(tmp_path, run, rows, column, value, said):
    frame = pd.read_parquet(run / "samples.parquet")
    row = frame.index[rows(frame) & (frame.status == "ok")][3]
    frame.loc[row, column] = value(frame.loc[row])
    frame.to_parquet(tmp_path / "samples.parquet", index=False)
    with pytest.raises(ResultsError, match=rf"samples\.parquet, row {row + 1}: {said}"):
        read_samples(tmp_path / "samples.parquet")


def test_the_summary_says_a_killed_run_was_killed(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(SMALL, run)
    meta = json.loads((run / "meta.json").read_text())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()   # reaped: its pid names no process now
    meta.update(status="running", pid=dead.pid)
    meta["system"]["hostname"] = socket.gethostname()
    (run / "meta.json").write_text(json.dumps(meta))
    assert summary.main([str(run)]) == 0
    assert capsys.readouterr().err == (f"xferbench-summary: {run}: killed (no final status): only the points "
                                       "measured before it stopped are here\n")
