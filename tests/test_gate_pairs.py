"""The gate on committed runs of one machine that nothing changed between (issues 41 and 45): no
false alarm, no point left out because the host was slow, and a doubled device-side figure
still fails."""
from __future__ import annotations

import itertools

import pandas as pd
import pytest

from bench.analysis import power
from bench.analysis.compare import compare
from bench.cli.common import catalog
from bench.results import load
from conftest import ROOT

CATALOG = catalog()
NOISE = ROOT / "results" / "noise"
X4 = ROOT / "results" / "reference" / "h200-x4"


def _runs(folder) -> dict[str, pd.DataFrame]:
    return {r.split("/")[-1]: g for r, g in load(folder).groupby("run_dir")}


def test_identical_cpu_runs_whose_baseline_read_a_bimodal_size_in_its_quick_mode_pass():
    # gloo sendrecv at 512 KiB reads 0.2-0.5 ms or 2-4 ms from run to run; these four baselines
    # read it quick, and their plateau was that size alone: against these six runs, which read it
    # slow, 17 of the 24 pairs failed (every false alarm of the 380 ordered pairs).
    identical = _runs(NOISE / "cpu" / "identical")
    quick, slow = ([f"identical-{i:02d}" for i in ids] for ids in ((3, 7, 19, 20), (2, 6, 12, 15, 16, 17)))
    assert not [(a, b) for a in quick for b in slow if compare(identical[a], identical[b], CATALOG).regressed]


def test_back_to_back_cpu_copy_runs_pass():
    # Issue 45: `xferbench suite=copy` back to back on the 2-core machine under load; some of the
    # copies' trials were preempted, some not, so a run's median landed in either mood (0.7 or
    # 1.6 us at 4 KiB): 4 of these three runs' 6 ordered pairs failed (8 of the six runs' 30).
    runs = _runs(NOISE / "cpu" / "copy-back-to-back")
    three = [runs[f"copy-{i}"] for i in (1, 3, 4)]
    assert not [(a, b) for a, b in itertools.permutations(range(3), 2) if compare(three[a], three[b], CATALOG).regressed]


@pytest.fixture(scope="module")
def same_host():
    return [load(X4 / f"20261126-083243-default-{i}") for i in (5, 6)]


def test_two_sweeps_of_one_healthy_host_pass_and_judge_every_point(same_host):
    for base, cur in (same_host, same_host[::-1]):
        result = compare(base, cur, CATALOG)
        assert not result.regressed, [(f.label, f.change, f.limit) for f in result.regressions]
        # on one side 176 points were measured only while the host was slow: judged, not left out
        assert sum(p.host_slow for p in result.points) > 100
        assert {p.size_class for p in result.points if p.host_slow} <= {"latency", "middle", "bandwidth"}
        assert "not gated" not in result.to_markdown()


def test_a_doubled_device_side_latency_fails(same_host):
    # The launch path moves 2x with the host and is judged loosely; a figure the device times
    # (graph replays: the host's launch path cannot move it) is not: doubled, each one fails.
    base, cur = same_host
    plain = compare(base, cur, CATALOG)
    device = [f for f in plain.families if f.size_class == "latency" and f.variant["launch"] == "graph"]
    assert {f.variant["suite"] for f in device} == {"copy", "collectives"} and not any(f.launch_path for f in device)
    assert {f.variant["suite"] for f in plain.families if f.launch_path} == {"copy", "p2p", "collectives"}
    doubled = power.inject(cur, {power.family_key(f): 0.5 for f in device}, device)
    flagged = compare(base, doubled, CATALOG).regressions
    assert sorted(f.label for f in flagged) == sorted(f.label for f in device)
