"""xferbench-doctor on the committed runs: the healthy ones pass, the handicapped ones fail for
the right families naming the variable that held NCCL back, bad input exits 2, and a CPU run is
judged without a crash (not judged, with the reason). In-process main() calls: no interpreter
start-up per case."""
from __future__ import annotations

import json
import re

import pytest

from bench.analysis.judge import judge
from bench.cli import doctor
from bench.cli.common import catalog
from bench.results import load, read_meta
from conftest import ROOT

REF = ROOT / "results" / "reference"
NOISE = ROOT / "results" / "noise" / "h200-x2"
HEALTHY = [REF / "h100-x1" / "20261123-040857", REF / "h200-x1" / "20261123-044246", REF / "h200-x2" / "20261123-044635",
           *(NOISE / "identical" / f"identical-0{i}" for i in (1, 2, 3))]


def _doctor(capsys, *args) -> tuple[int, list[str], str]:
    code = doctor.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def _low(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.strip().startswith("LOW ")]


def test_the_committed_healthy_runs_pass(capsys):
    code, lines, err = _doctor(capsys, *HEALTHY)
    assert code == 0, "\n".join(lines)
    verdicts = [line for line in lines if line.strip().startswith("verdict:")]
    assert len(verdicts) == len(HEALTHY) and all("all normal" in line for line in verdicts)
    assert not _low(lines) and err == ""


@pytest.mark.parametrize("run, variable, size_class", [
    (NOISE / "nch1" / "nch1-01", "NCCL_MAX_NCHANNELS=1", "bandwidth"),
    (NOISE / "simple" / "simple-01", "NCCL_PROTO=Simple", "latency"),
])
def test_a_handicapped_run_fails_for_its_collectives_naming_the_variable(capsys, run, variable, size_class):
    code, lines, _ = _doctor(capsys, run)
    low = _low(lines)
    assert code == 1 and low
    for line in low:   # every low family is an NCCL collective, and its cause is the variable
        assert line.startswith("LOW  collectives ") and f"({size_class}-bound)" in line, line
        assert f"cause: {variable}" in line, line


def test_unusable_input_is_one_line_and_exit_2(capsys, tmp_path):
    code, lines, err = _doctor(capsys, tmp_path / "absent")
    assert code == 2 and lines == [] and err.strip() == f"xferbench: error: {tmp_path / 'absent'}: no such file or folder"
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "meta.json").write_text("{not json")
    code, _, err = _doctor(capsys, tmp_path / "broken")
    assert code == 2 and len(err.splitlines()) == 1 and "corrupt JSON" in err
    code, _, err = _doctor(capsys, HEALTHY[0], "--tolerance", "1.5")
    assert code == 2 and "--tolerance 1.5" in err


def test_a_baseline_of_ones_own_runs_and_json(capsys, tmp_path):
    out = tmp_path / "verdicts.json"
    code, lines, _ = _doctor(capsys, "--baseline", NOISE / "identical", NOISE / "nch1" / "nch1-01", "--json", out)
    assert code == 1
    assert all("baseline identical h200-x2, 3 healthy runs" in line for line in _low(lines))
    (judged,) = json.loads(out.read_text())
    assert judged["verdict"] == "low" and judged["machine"] == "h200 pcie5x16 nvlink18"
    assert {f["verdict"] for f in judged["families"]} <= {"ok", "low", "not judged"}


def test_a_cpu_run_is_not_judged_and_says_why(xferbench, capsys):
    proc, (run,) = xferbench("suite=copy", "sizes.max=16KiB", "timing.trials=2")
    assert proc.returncode == 0, proc.stderr
    code, lines, _ = _doctor(capsys, run)
    assert code == 0
    # Two sizes: one family, or two where the smaller one's time is the fixed cost's.
    said = re.fullmatch(r"verdict: no family judged; (\d) not judged \(no reference for machine class cpu, nor "
                        r"link theory: \1\)", lines[-1].strip())
    assert said, lines[-1]
    verdicts = judge(load(run), read_meta(run), catalog(), run_dir=run).to_json()
    assert verdicts["verdict"] == "not judged" and list(verdicts["counts"]) == ["not judged"]
    assert {f["reason"] for f in verdicts["families"]} == {"no reference for machine class cpu, nor link theory"}
