"""scripts/launch_study.py on the committed launch studies: each held and graph family's tally, and
the exit status that says whether every such point agreed."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, env

LAUNCH = ROOT / "results" / "noise" / "launch"


def _study(instance: str, tag: str, sweep: str = "small") -> subprocess.CompletedProcess:
    runs = [str(LAUNCH / instance / f"{tag}-{sweep}-{k}") for k in ("1", "2", "3", "busy")]
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "launch_study.py"), *runs],
                          capture_output=True, text=True, env=env(), timeout=120)


def test_every_held_copy_of_one_gpu_host_agrees_and_the_study_exits_0():
    proc = _study("h200-x1", "x1g")
    assert proc.returncode == 0, proc.stderr
    tally = [line for line in proc.stdout.splitlines() if line.startswith("held ")]
    assert tally == [f"held copy {op}: 3 of 3 within ±5%, farthest {far}"
                     for op, far in (("bidir", "1.4%"), ("d2d", "3.9%"), ("d2h", "1.9%"), ("h2d", "1.3%"))]


def test_staged_copies_two_paces_fail_the_study_and_are_named():
    proc = _study("h200-x2", "x2h")
    assert proc.returncode == 1, proc.stderr
    assert "held p2p uni staged: 0 of 3 within ±5%, farthest 43.8%" in proc.stdout
    assert "held p2p uni peer: 5 of 5 within ±5%" in proc.stdout


def test_graphs_held_on_the_start_word_agree_busy_or_not_where_unheld_replays_did_not():
    held, unheld = _study("h200-x4", "x4ac", "hgraph"), _study("h200-x4", "x4ab", "graph")
    assert held.returncode == 1 and unheld.returncode == 1, (held.stderr, unheld.stderr)
    assert "graph collectives broadcast: 6 of 6 within ±5%, farthest 1.5%" in held.stdout
    assert "graph collectives sendrecv: 2 of 6 within ±5%, farthest 10.8%" in held.stdout
    assert "graph collectives broadcast: 2 of 6 within ±5%, farthest 3435.6%" in unheld.stdout
