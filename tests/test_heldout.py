"""Hosts held out of every table (issue 41): results/heldout/<instance>/<host>/<run>, two default
sweeps a host on lent machines that landed on hosts no table stands on. The doctor says normal
to each run, judging nearly all of it, and to each host as one node of a fleet of its kind; the
gate between a host's two runs leaves no point out and passes."""
from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

from bench.analysis.compare import compare
from bench.cli import doctor
from bench.cli.common import catalog
from bench.results import load
from conftest import ROOT

HELD_OUT = ROOT / "results" / "heldout"
REFERENCE = ROOT / "results" / "reference"
CATALOG = catalog()


def _host_id(run: Path) -> str | None:
    return json.loads((run / "meta.json").read_text())["system"].get("host_id")


def _hosts() -> list[Path]:
    return sorted(HELD_OUT.glob("*/*"))


def test_each_kind_has_three_held_out_hosts_of_two_recorded_runs_in_no_table():
    hosts = _hosts()
    # 2x H100 came late (2026-11-28): one host held out beside the three of its table
    assert {kind: sum(h.parent.name == kind for h in hosts) for kind in ("h200-x1", "h200-x2", "h200-x4", "h100-x2")} == \
        {"h200-x1": 5, "h200-x2": 16, "h200-x4": 15, "h100-x2": 1}
    table_hosts = {_host_id(m.parent) for m in REFERENCE.glob("*/*/meta.json")}
    for host in hosts:
        runs = sorted(p for p in host.iterdir() if p.is_dir())
        assert len(runs) == 2 and host.name not in table_hosts
        for run in runs:
            assert _host_id(run) == host.name
            assert (run / "command.txt").read_text().startswith("python3 -m bench ")
            assert "NVIDIA-SMI" in (run / "machine.txt").read_text()


def test_nine_in_ten_held_out_runs_are_normal_with_95_percent_judged_and_the_rest_blame_their_host(tmp_path):
    # Issue 41: at least 90% exit 0 (72 of 74). A launch path with sizes read while the host was
    # slow is judged with its noise doubled, as the gate judges it: x2f-1, x2ag-1 and x2ah-2 pass
    # so. What still fails on launch paths names the host's pace, as a launch path's must
    # (x2o-2 at 1.33x the slowest of the table's hosts, x2af-1, x4ai-2).
    # Since the 2x H200 table gained a seventh host (x2v), x2o-2's staged bidirectional copies
    # are low too, at 0.80x against a limit of 0.81, with no cause found: its own first run, nine
    # seconds before, read them at 0.98x, and its host memory copies read 0.89-0.94x that run's
    # (a neighbour's spell the doctor cannot name: hosts of one kind differ too much in their own
    # memory for that to be a cause). The one bandwidth-bound miss of the 62 runs. Of held-4's
    # (held collectives in graphs) three hosts, one run each (x2af-1, x2ag-1, x2ah-2) read eager
    # peer copies' launch paths at 0.47-0.53x, most sizes while the host was slow: the host named.
    # 4x H200 f822432dca49 (x4aj), the slowest host seen (pace 1.8x its usual through both runs,
    # its one-thread memory copy 3.9 GB/s where every other host read 4.0-6.1), reads its SM
    # copies from host memory at 0.85-0.88x and one GPU's bidirectional copies at 0.89x of its
    # siblings, with no cause found: a host the doctor rightly fails and cannot yet explain.
    staged_spell = ("x2o-default-2", "p2p bidir device staged eager ce cuda:0->cuda:1 (bandwidth-bound)")
    slow_memory = {("x4aj-default-1", "copy bidir pinned eager sm numa=local host->cuda:0 (bandwidth-bound)"),
                   ("x4aj-default-2", "copy bidir pinned eager sm numa=local host->cuda:0 (bandwidth-bound)"),
                   ("x4aj-default-2", "copy h2d pinned eager sm numa=local host->cuda:0 (bandwidth-bound)"),
                   ("x4aj-default-2", "copy bidir pinned eager ce numa=local host->cuda:1 (bandwidth-bound)")}
    runs = sorted(HELD_OUT.glob("*/*/*"))
    doctor.main([*map(str, runs), "--json", str(tmp_path / "doctor.json")])
    verdicts = json.loads((tmp_path / "doctor.json").read_text())
    assert len(verdicts) == len(runs) == 74
    assert all(v["judged_share"] >= 0.95 for v in verdicts), [(v["run"], v["judged_share"]) for v in verdicts]
    failing = [v for v in verdicts if v["exit_code"] != 0]
    assert len(failing) <= 0.1 * len(verdicts), [v["run"] for v in failing]
    for v in failing:
        low = [f for f in v["families"] if f["verdict"] in ("low", "inconsistent", "failed")]
        assert v["exit_code"] == 1 and low and not v["missing"], v["run"]
        low = [f for f in low if (Path(v["run"]).name, f["family"]) not in {staged_spell, *slow_memory}]
        assert all(f["family"].endswith("(launch path)") and f["verdict"] == "low" and
                   f["causes"][0].startswith("the launch path is the host's: its pace") for f in low), \
            [(f["family"], f["causes"]) for f in low]
    assert sum(Path(v["run"]).name == staged_spell[0] for v in failing) == 1
    # Since the tables gained 852822f630ac (2x H200) and 6e5853ea78ef (4x H200), the spread of
    # launch paths between hosts holds x2af-1's and x4ai-2's too: 65 of 68 exit 0. With 0f6835569056
    # (x4aq) the 4x H200 table's eleventh host (2026-11-28), x4aj-1's SM copies from host memory are
    # within their limit; with three more hosts held out that day (x1h, x1i, x2ar), 72 of 74.
    assert {Path(v["run"]).name for v in failing} == {"x2o-default-2", "x4aj-default-2"}


def test_the_gate_between_a_hosts_two_runs_passes():
    # 37 hosts, both orders. x4aj's (f822432dca49) pass by p2p's launch path sigma between runs:
    # in its second run, nine seconds after the first, three 4 KiB launch paths took 2.8-3.0x as
    # long (2.6x at the spread between hosts), at its usual pace: the host, not the link (their
    # 256 MiB figures within 7%). Host 7c4433eed1b8's first run read two launch paths at 0.29x and
    # 0.37x of its second, and the all-threads host memory copy at 0.50x (one trial of five at
    # the host's usual pace), in a slow spell of its host: judged with their noise doubled, as
    # every point measured while the host was slow, they pass.
    failing = []
    for host in _hosts():
        runs = [load(run) for run in sorted(p for p in host.iterdir() if p.is_dir())]
        for base, cur in itertools.permutations(runs, 2):
            result = compare(base, cur, CATALOG)
            assert "not gated" not in result.to_markdown()
            failing += [(host.name, [f.label for f in result.regressions])] if result.regressed else []
    assert failing == []


@pytest.mark.parametrize("kind", ["h200-x1", "h200-x2", "h200-x4"])
def test_the_held_out_hosts_of_a_kind_as_a_fleet_are_normal_but_the_slow_memory_host(kind, capsys):
    # Five to sixteen hosts no table stands on, judged against each other and the class's table
    # (held collectives of held-3 and held-4 hosts against the fleet alone: one table cannot hold
    # both generations). Of the 4x H200 fleet, x4aj's host (above) is the one node wrong, on its
    # host side.
    code = doctor.main(["--fleet", str(HELD_OUT / kind)])
    out = capsys.readouterr().out
    hosts = len(list((HELD_OUT / kind).iterdir()))
    if kind != "h200-x4":
        assert code == 0 and "result: normal (xferbench-doctor exits 0): every node normal" in out, out
        assert out.count("NORMAL ") == hosts
        return
    wrong = [line for line in out.splitlines() if line.startswith("WRONG")]
    assert code == 1 and len(wrong) == 1 and wrong[0].startswith("WRONG      f822432dca49"), out
    assert "on the host side: traffic between host memory and every GPU" in wrong[0]
    assert out.count("NORMAL ") == hosts - 1


def test_a_host_slower_than_any_healthy_one_stands_out_of_the_fleet_it_was_judged_in(tmp_path, capsys):
    # The twelve 2x H200 hosts held out before held-4: 5970917f1808 (x2o), whose host runs 1.30x
    # slower than the slowest healthy one, stands out on one launch path (1 MiB eager SM peer
    # copies, 109 us in both runs against the fleet's 58), and the fleet names the pace. The three
    # held-4 hosts widen the fleet's spread of that launch path past it: a run of each read
    # eager peer copies while its host was slow.
    for host in _hosts():
        if host.parent.name == "h200-x2" and all(json.loads((run / "meta.json").read_text())["tool"].get("method")
                                                 != "held-4" for run in host.iterdir()):
            shutil.copytree(host, tmp_path / host.name)
    assert len(list(tmp_path.iterdir())) == 12
    code = doctor.main(["--fleet", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "1 node wrong: 5970917f1808" in out, out
    wrong = [line for line in out.splitlines() if line.startswith("WRONG")]
    assert len(wrong) == 1 and "on the host's launch path" in wrong[0], out
    assert "the launch path is the host's: its pace (host_pace_s, its usual reading) 207 µs, 1.30x the slowest" in wrong[0]
    assert out.count("NORMAL ") == 11


def test_a_launch_path_read_in_a_spell_of_its_host_is_judged_with_its_noise_doubled():
    # x2ag-1 (2x H200, held-4) read its eager peer copies at 0.61x of the class's while its host
    # was slow (0.53x before x2ao and x2ap, whose launch paths are slower, joined the table): judged with twice the spread between hosts, as the gate judges such points, their
    # limit no longer catches a halved figure, and the held copies of the same op judge the link.
    from bench.analysis.judge import judge
    from bench.results import read_meta
    run = next(HELD_OUT.glob("h200-x2/*/x2ag-default-1"))
    got = {v.family: v for v in judge(load(run), read_meta(run), CATALOG, run_dir=run, planned=set()).verdicts}
    spell = got["p2p uni device peer eager ce cuda:1->cuda:0 (launch path)"]
    assert spell.verdict == "normal" and spell.ratio < 0.65 and spell.limit < 0.55
    assert "x 2: sizes ran while the host was slow" in spell.noise
    assert "p2p uni device peer held ce cuda:1->cuda:0 (latency-bound)" in spell.noise
    assert got["p2p uni device peer held ce cuda:1->cuda:0 (latency-bound)"].verdict == "normal"
    device_side = [v for v in got.values() if v.family.endswith("(latency-bound)") and " held " in v.family]
    assert device_side and not any("while the host was slow" in v.noise for v in device_side)
