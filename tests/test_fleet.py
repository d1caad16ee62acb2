"""xferbench-doctor --fleet: the committed 4x H200 hosts judged as one fleet name host B on its
host side and no healthy host; a synthetic fleet made by scripts/make_fleet.py from committed
runs names each bad node at its GPU, link, NCCL or host side with the cause its record holds, a
node that moved between its runs, and no healthy node; a run that did not complete is listed,
never judged; bad input is one line and exit 2; runs of a sweep land one folder per node, and a
node's second run beside its first, whose levels the fleet reads."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import re
import shutil
import socket
import subprocess
import sys

import matplotlib.image
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.analysis import report
from bench.analysis.expected import shipped
from bench.analysis.fleet import fleets
from bench.analysis.fleet_levels import LEVELS_FILE, from_rows, keep, run_levels
from bench.analysis.judge import ALPHA, TOLERANCE
from bench.analysis.verdicts import MIN_JUDGED
from bench.cli import doctor
from bench.cli.common import catalog
from bench.results import load, read_meta
from conftest import ROOT, env

X4 = [ROOT / "results/reference/h200-x4", ROOT / "results/noise/h200-x4",
      ROOT / "results/faults/h200-x4/20261126-053304-slow-host"]
HOST_A, HOST_B = "7a6573d02ad5", "688d60858788"
ODD_RUN_HOST = "54b57081e805"
# Sixteen nodes, a quarter of them bad (one fault of each kind), a tenth with a second run, and one
# more whose second run has a halved h2d link.
FLEET = ["--nodes", "16", "--bad", "0.25", "--second", "0.1", "--moved", "1", "--seed", "3"]
PLACE = {"h2d": "gpu", "p2p": "link", "transport": "nccl", "slow host": "host side", "moved": "gpu"}


def _doctor(capsys, *args) -> tuple[int, list[str], str]:
    code = doctor.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet") / "fleet"
    subprocess.run([sys.executable, str(ROOT / "scripts/make_fleet.py"), str(out), *FLEET], check=True, env=env(),
                   capture_output=True)
    return out, json.loads((out / "truth.json").read_text())


def test_the_committed_4x_h200_hosts_name_host_b_on_its_host_side_and_no_healthy_host(capsys, tmp_path):
    code, lines, err = _doctor(capsys, "--fleet", *X4, "--json", tmp_path / "fleet.json")
    verdict = json.loads((tmp_path / "fleet.json").read_text())
    nodes = {n["host_id"]: n for n in verdict["nodes"]}
    assert code == 1 and err == "" and lines[0].startswith(f"WRONG      {HOST_B}"), "\n".join(lines)
    # and x4al's host (results/noise/h200-x4/odd-run): its second run's bidirectional pinned copies
    # were low, as the single-run doctor found them; its first run, in the table, was not
    assert [h for h, n in nodes.items() if n["state"] == "wrong"] == [HOST_B, ODD_RUN_HOST]
    assert nodes[HOST_B]["where"][0]["kind"] == nodes[ODD_RUN_HOST]["where"][0]["kind"] == "host side"
    assert {low["key"]["op"] for low in nodes[ODD_RUN_HOST]["low"]} == {"bidir"}
    worst = nodes[HOST_B]["low"][0]
    assert worst["key"]["dst"] == "all" and worst["ratio"] < 0.6   # every GPU at once, about half the others'
    # A node is a host, not a folder: host A's runs lie in results/reference and results/noise.
    assert len(nodes[HOST_A]["runs"]) == 3 and len({str(r).split("/results/")[1].split("/")[0]
                                                    for r in nodes[HOST_A]["runs"]}) == 2
    assert len(nodes) == 21 and lines[-1].startswith("result: not normal (xferbench-doctor exits 1): 2 nodes wrong")


def _interrupted_copy(fleet, tmp_path):
    """A healthy node's run copied as another host's, that did not complete."""
    run = next(p.parent for p in sorted(fleet.rglob("meta.json")))
    partial = tmp_path / "partial" / "h200-x4" / run.name
    shutil.copytree(run, partial)
    meta = read_meta(partial)
    meta["status"], meta["system"]["host_id"] = "interrupted", "0123456789ab"
    (partial / "meta.json").write_text(json.dumps(meta))
    return partial


def test_a_synthetic_fleet_names_each_bad_node_where_it_sits_and_no_healthy_one(capsys, tmp_path, fleet):
    out, truth = fleet
    partial = _interrupted_copy(out, tmp_path)
    code, lines, err = _doctor(capsys, "--fleet", out, partial.parent.parent, "--json", tmp_path / "fleet.json",
                               "--markdown", tmp_path / "fleet.md")
    verdict = json.loads((tmp_path / "fleet.json").read_text())
    nodes = {n["hostname"]: n for n in verdict["nodes"]}
    assert code == 1 and err == "" and len(nodes) == 17, "\n".join(lines)
    assert {name for name, n in nodes.items() if n["state"] == "wrong"} == set(truth), "\n".join(lines)
    for name, fault in truth.items():
        first = nodes[name]["where"][0]
        assert first["kind"] == PLACE[fault["fault"]] and (not fault["gpus"] or first["gpus"] == fault["gpus"]), name
    causes = {truth[name]["fault"]: " ".join(nodes[name]["causes"]) for name in truth}
    assert "PCIe link ran at Gen5 x8 while busy" in causes["h2d"] and "PCIe link ran" in causes["moved"]
    assert "NCCL_P2P_DISABLE=1" in causes["transport"]
    moved = next(name for name, fault in truth.items() if fault["fault"] == "moved")
    assert nodes[moved]["moved"] and len(nodes[moved]["runs"]) == 2
    # Wrong nodes first; the run that did not complete listed, never judged.
    states = [line[:10].strip() for line in lines if line.startswith(("WRONG ", "NORMAL ", "NOT JUDGED "))]
    assert states == sorted(states, key=["WRONG", "NOT JUDGED", "NORMAL"].index) and states[0] == "WRONG"
    assert f"NOT COMPLETE {partial} (interrupted): listed, never judged" in lines
    assert all(str(partial) not in n["runs"] for n in verdict["nodes"])
    markdown = (tmp_path / "fleet.md").read_text()
    assert markdown.startswith("## xferbench fleet: not normal") and all(name in markdown for name in truth)


def test_a_run_s_kept_levels_are_read_only_while_its_samples_are_those_they_came_from(fleet, tmp_path):
    out, _ = fleet
    run = tmp_path / "run"
    shutil.copytree(next(p.parent for p in sorted(out.rglob(LEVELS_FILE))), run)
    rows = load(run)
    true = from_rows(rows, catalog())
    keep(run, rows.assign(time_s=rows["time_s"] * 2), catalog())   # kept levels its rows do not give
    assert np.allclose(run_levels(run, catalog()).y, true.y - math.log(2))
    table = pq.read_table(run / "samples.parquet")
    pq.write_table(table, run / "samples.parquet", compression="gzip")   # the same rows, other bytes
    again = run_levels(run, catalog())
    assert again.keys == true.keys and np.allclose(again.y, true.y)


def test_the_reports_fleet_section_names_the_wrong_nodes_beside_its_heat_map(fleet):
    out, truth = fleet
    found = fleets([out], catalog(), shipped(), TOLERANCE, ALPHA, MIN_JUDGED)
    page = report._fleet_html(found, catalog())
    assert len(found) == 1 and all(name in page for name in truth)
    image = re.search(r'id="fig-fleet-0"><img alt="fleet-0" src="data:image/png;base64,([^"]+)"', page)
    assert image and matplotlib.image.imread(io.BytesIO(base64.b64decode(image.group(1)))).shape[0] > 400


def test_bad_fleet_input_is_one_line_and_exit_2(capsys, tmp_path, fleet):
    x1 = ROOT / "results/reference/h200-x1"
    code, lines, err = _doctor(capsys, "--fleet", X4[2], x1)
    assert code == 2 and lines == [] and err.count("\n") == 1 and "machine classes" in err and "--any-class" in err
    code, lines, err = _doctor(capsys, "--fleet", "--any-class", X4[2], x1)   # judged together, as asked
    assert code in (1, 3) and err == "" and "h200 pcie5x16 nvlink0 x1, h200 pcie5x16 nvlink18 x4:" in lines[-2]
    edited = _interrupted_copy(fleet[0], tmp_path)   # a complete run of another host, one figure edited
    meta = read_meta(edited)
    meta["status"] = "complete"
    (edited / "meta.json").write_text(json.dumps(meta))
    table = pq.read_table(edited / "samples.parquet").to_pandas()
    table.loc[table.index[table["algbw_gbps"] > 0][0], "algbw_gbps"] *= 2
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), edited / "samples.parquet")
    code, lines, err = _doctor(capsys, "--fleet", fleet[0], edited.parent.parent)   # its kept levels no longer seal
    assert code == 2 and lines == [] and err.count("\n") == 1 and f"{edited}" in err and "edited?" in err, err
    (tmp_path / "empty").mkdir()
    for args, said in ((["--fleet", tmp_path / "empty"], "holds no xferbench run"),
                       (["--fleet", str(tmp_path / "node*")], "matches nothing"),
                       (["--markdown", tmp_path / "x.md", X4[2]], "add --fleet")):
        code, lines, err = _doctor(capsys, *args)
        assert code == 2 and lines == [] and err.count("\n") == 1 and said in err, err


def test_a_sweeps_runs_land_one_folder_per_node_and_a_second_run_beside_the_first(tmp_path, capsys):
    """scripts/slurm/fleet.sbatch as two tasks of a job array on one node at once: each run in its
    own folder below FLEET/$(hostname), neither touching the other's files; the fleet reads them
    as one node of two runs, from the levels each kept."""
    fleet = tmp_path / "fleet"
    script = ROOT / "scripts/slurm/fleet.sbatch"
    procs = [subprocess.Popen(["bash", str(script), str(fleet), "suite=copy", "sizes.max=16KiB", "timing.trials=2"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**env(), "SLURM_JOB_ID": str(8 + task), "SLURM_ARRAY_JOB_ID": "7",
                                   "SLURM_ARRAY_TASK_ID": str(task), "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
             for task in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    runs = sorted(p.parent for p in fleet.rglob("meta.json"))
    assert len(runs) == 2 and runs[0].parent == runs[1].parent   # FLEET/<hostname>/<instance>/<run_id>, two ids
    assert runs[0].parent.parent == fleet / socket.gethostname()
    assert all((run / LEVELS_FILE).is_file() and read_meta(run)["status"] == "complete" for run in runs)
    digests = {run: hashlib.sha256((run / "samples.parquet").read_bytes()).hexdigest() for run in runs}
    code, lines, _ = _doctor(capsys, "--fleet", fleet)
    assert code == 3 and "(2 runs)" in lines[0], "\n".join(lines)   # a CPU: nothing judged, said
    assert digests == {run: hashlib.sha256((run / "samples.parquet").read_bytes()).hexdigest() for run in runs}
