"""xferbench-doctor on the committed runs: nothing wrong in the healthy ones (held out of the
table too), the handicapped and faulted ones fail for the right families naming what held them
back, bad input exits 2, and a CPU run is judged without a crash (not enough judged, exit 3,
saying why). In-process main() calls: no interpreter start-up per case."""
from __future__ import annotations

import json
import re

import pytest

from bench.analysis.judge import judge
from bench.cli import doctor
from bench.cli.common import catalog
from bench.analysis.verdicts import HOST_OWN
from bench.results import load, read_meta
from conftest import ROOT

REF = ROOT / "results" / "reference"
NOISE = ROOT / "results" / "noise" / "h200-x2"
X4_HELD_OUT = ROOT / "results" / "noise" / "h200-x4" / "held-out"   # in no table
# Every committed reference default sweep (named so, and the undecorated ones that ran the
# defaults with schema 2 or later), and healthy runs held out of the table: checked and normal
# (the held-out hosts of results/heldout: test_heldout.py).
DEFAULT_SWEEPS = [*sorted(REF.glob("*/*default*")), REF / "h100-x1" / "20261123-040857", REF / "h200-x1" / "20261123-044246",
                  REF / "h200-x2" / "20261123-024421", REF / "h200-x2" / "20261123-044635"]
HEALTHY = [*DEFAULT_SWEEPS, *sorted(X4_HELD_OUT.glob("2026*"))]
# Schema 1's graph timings have changed since (its graph collectives read 0.20-0.27x today's), and
# its copies name no engine: not judged, said so. Noise runs of sizes no reference has: said so.
OLDER = [REF / "h100-x1" / "20261122-213018", REF / "h200-x1" / "20261122-212837", REF / "h200-x2" / "20261122-212206",
         *(NOISE / "identical" / f"identical-0{i}" for i in (1, 2, 3))]
FAULTS = ROOT / "results" / "faults" / "h200-x4"
WRONG = ("LOW ", "INCONSISTENT ", "FAILED ", "MISSING ", "INCOMPLETE ")


def _doctor(capsys, *args) -> tuple[int, list[str], str]:
    code = doctor.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def _low(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.strip().startswith("LOW ")]


def test_the_committed_healthy_runs_are_checked_and_normal(capsys):
    assert len(DEFAULT_SWEEPS) == 81 and len(HEALTHY) == 85
    code, lines, err = _doctor(capsys, *HEALTHY)
    assert code == 0 and err == "", "\n".join(lines)
    text = "\n".join(lines)
    shares = [float(x) for x in re.findall(r"judged \d+ of \d+ measured.*?\((\d[\d.]*)%\)", text)]
    assert len(shares) == len(HEALTHY) and min(shares) >= 90, text
    assert text.count("result: normal (xferbench-doctor exits 0): checked and normal") == len(HEALTHY)


def test_older_healthy_runs_have_nothing_wrong_and_say_what_they_cannot_show(capsys):
    code, lines, err = _doctor(capsys, *OLDER)
    assert not [line for line in lines if line.strip().startswith(WRONG)], "\n".join(lines)
    results = [line.strip() for line in lines if line.strip().startswith("result:")]
    assert len(results) == len(OLDER) and err == "" and code == 3
    assert all(line.startswith("result: not enough judged") for line in results)
    summaries = [line for line in lines if "verdict:" in line]
    assert all("made by an older xferbench (schema 1)" in line for line in summaries[:3])
    assert all("no reference at these sizes" in line for line in summaries[3:])


@pytest.mark.parametrize("run, cause", [
    ("20261126-051936-p2p-off", "NCCL went through SHM between GPU 0 and 1"),
    ("20261126-051936-p2p-shm-off", "NCCL went through NET/Socket between GPU 0 and 1"),
])
def test_transport_faults_on_four_gpus_fail_naming_the_transport(capsys, run, cause):
    code, lines, _ = _doctor(capsys, FAULTS / run)
    low = _low(lines)
    assert code == 1 and len(low) >= 20
    assert all(line.startswith("LOW  collectives ") and cause in line for line in low)


def test_a_slow_host_fails_for_every_gpu_at_once(capsys):
    code, lines, _ = _doctor(capsys, FAULTS / "20261126-053304-slow-host")
    low = _low(lines)
    assert code == 1 and any("copy h2d pinned eager ce numa=local host->all n=4 (bandwidth-bound)" in line for line in low)


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
    code, _, err = _doctor(capsys, OLDER[0], "--tolerance", "1.5")
    assert code == 2 and "--tolerance 1.5" in err


@pytest.mark.parametrize("run", [REF / "h200-x1" / "20261123-044318-pipeline", REF / "h200-x2" / "20261123-025244-pipeline"])
def test_an_older_pipeline_run_says_what_it_lacks_to_be_judged(capsys, run):
    """285 and 295 measured rows, of schema 2: their loops recorded no settings (params), which
    the pipeline's judged figure (a loop's fraction of its own bound) needs. Not 'nothing measured'."""
    code, lines, err = _doctor(capsys, run)
    text = "\n".join(lines)
    assert code == 3 and err == "" and "nothing measured" not in text, text
    assert ("7 not judged (none of its rows is what pipeline is judged by: loop trials that record the loop's "
            "settings (params, from schema 3 on)") in text


def test_the_readmes_doctor_example_is_checked_and_normal(capsys):
    """The README's acceptance example must pass: a newcomer runs it first."""
    (example,) = re.findall(r"^xferbench-doctor (results/\S+)$", (ROOT / "README.md").read_text(), re.M)
    code, lines, err = _doctor(capsys, ROOT / example)
    assert code == 0 and err == "", "\n".join(lines)


def test_a_baseline_of_ones_own_runs_and_json(capsys, tmp_path):
    out = tmp_path / "verdicts.json"
    code, lines, _ = _doctor(capsys, "--baseline", NOISE / "identical", NOISE / "nch1" / "nch1-01", "--json", out)
    assert code == 1
    assert all("baseline identical h200-x2, 3 healthy runs" in line for line in _low(lines))
    (judged,) = json.loads(out.read_text())
    assert judged["verdict"] == "not normal" and judged["machine"] == "h200 pcie5x16 nvlink18 x2"
    assert judged["exit_code"] == 1 and judged["wrong"][0].endswith(" low")
    assert {f["verdict"] for f in judged["families"]} <= {"normal", "low", "too noisy", "not judged"}


def test_a_cpu_run_is_not_judged_and_says_why(xferbench, capsys):
    proc, (run,) = xferbench("suite=copy", "sizes.max=16KiB", "timing.trials=2")
    assert proc.returncode == 0, proc.stderr
    code, lines, _ = _doctor(capsys, run)
    assert code == 3   # nothing wrong, nothing judged: no class of CPUs has reference runs
    assert lines[-1].strip().startswith("result: not enough judged (xferbench-doctor exits 3): nothing wrong found, "
                                        "but 0% of the measured families judged")
    verdicts = judge(load(run), read_meta(run), catalog(), run_dir=run).to_json()
    assert verdicts["verdict"] == "not enough judged" and list(verdicts["counts"]) == ["not judged"]
    assert all(f["reason"].startswith("no reference for machine class cpu") or f["reason"] == HOST_OWN
               for f in verdicts["families"])


def test_a_copy_the_l2_holds_is_never_judged(capsys, tmp_path):
    # Two identical one-GPU noise runs read d2d at 16 MiB (cache-resident in the 60 MiB L2) at 2009 and
    # 1669 GB/s, against 2469 expected: the cache's state, which the gate does not gate either.
    report = tmp_path / "verdicts.json"
    for run in ("identical-02", "identical-04"):
        code, lines, _ = _doctor(capsys, ROOT / "results" / "noise" / "h200-x1" / "identical" / run, "--json", report)
        assert code == 3 and not _low(lines), "\n".join(lines)
        assert "1 more the L2's, reported, not judged" in "\n".join(lines)
        families = {f["family"]: f for f in json.loads(report.read_text())[0]["families"]}
        eager, graph = (families[f"copy d2d device {launch} ce cuda:0->cuda:0 (bandwidth-bound)"]
                        for launch in ("eager", "graph"))
        assert eager["verdict"] == "normal" and eager["at_size"] == 64 << 20   # past the L2
        assert graph["verdict"] == "not judged" and graph["reason"].startswith("cache-resident")
