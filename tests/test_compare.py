"""bench.compare and scripts/compare.py on synthetic result sets written as real run folders."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.compare import compare, compare_paths, judge
from bench.results import ResultsError, load
from synthetic import SIZES, MiB, collective_samples, copy_samples, write_run

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "compare.py"


def _regressed(sample) -> bool:
    return sample.suite == "copy" and sample.op == "h2d" and sample.memory == "pinned" and sample.size_bytes >= MiB


def _load_script():
    spec = importlib.util.spec_from_file_location("compare_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A baseline, a rerun with fresh noise, and a rerun where pinned h2d >= 1 MiB lost 20%."""
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(7)

    def samples():
        return copy_samples(rng, noise=0.015) + collective_samples(rng, noise=0.015)

    regressed = samples()
    for s in regressed:
        if _regressed(s):
            s.algbw_gbps *= 0.8
            s.busbw_gbps *= 0.8
            s.time_s /= 0.8
    return {"base": write_run(root / "base", samples()), "noise": write_run(root / "noise", samples()),
            "regressed": write_run(root / "regressed", regressed)}


def test_real_regression_exits_1_and_names_exactly_the_regressed_points(runs, tmp_path):
    report = tmp_path / "report.json"
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step's summary\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(runs["base"]), str(runs["regressed"]),
                           "--json", str(report), "--markdown", str(summary)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(report.read_text())
    expected = {("h2d", launch, size) for launch in ("eager", "graph") for size in SIZES if size >= MiB}
    found = {(r["key"]["op"], r["key"]["launch"], r["key"]["size_bytes"]) for r in data["regressions"]}
    assert found == expected
    assert all(r["key"]["memory"] == "pinned" and -0.25 < r["change"] < -0.15 for r in data["regressions"])
    assert data["improvements"] == []
    # the markdown names the points, and is appended to the job summary, not written over it
    assert "copy h2d pinned eager 64MiB" in proc.stdout
    text = summary.read_text()
    assert text.startswith("earlier step's summary\n") and "copy h2d pinned graph 1MiB" in text


def test_pure_noise_is_not_a_regression(runs):
    result = compare_paths(runs["base"], runs["noise"])
    assert result.regressions == [] and result.improvements == []
    assert result.unchanged == len(result.changes) > 100
    assert _load_script().main([str(runs["base"]), str(runs["noise"])]) == 0


def test_a_gain_is_an_improvement_not_a_regression(runs):
    result = compare_paths(runs["regressed"], runs["base"])   # reversed: the 20% loss is now a gain
    assert result.regressions == [] and len(result.improvements) == 8
    md = result.to_markdown()
    assert "### Improvements" in md and "### Regressions" not in md
    assert "8 improvement(s)" in md


def test_markdown_lists_regressions_first_then_improvements_then_unchanged_count(runs, tmp_path):
    rng = np.random.default_rng(3)
    mixed = copy_samples(rng, noise=0.015) + collective_samples(rng, noise=0.015)
    for s in mixed:
        if _regressed(s):
            s.algbw_gbps *= 0.8
        elif s.suite == "collectives" and s.op == "broadcast" and s.launch == "eager":
            s.busbw_gbps *= 1.3
    result = compare(load(runs["base"]), load(write_run(tmp_path / "mixed", mixed)))
    md = result.to_markdown()
    assert md.index("### Regressions") < md.index("### Improvements")
    assert f"{result.unchanged} unchanged" in md
    assert {c.key["op"] for c in result.improvements} == {"broadcast"}
    assert all(c.metric == "busbw_gbps" for c in result.improvements)   # collectives judged by busbw
    # worst regression first
    assert [c.change for c in result.regressions] == sorted(c.change for c in result.regressions)


def test_bootstrap_fallback_agrees_with_the_rank_test(runs):
    base, regressed, noise = load(runs["base"]), load(runs["regressed"]), load(runs["noise"])
    with_scipy = {c.label for c in compare(base, regressed, use_scipy=True).regressions}
    without = compare(base, regressed, use_scipy=False)
    assert {c.label for c in without.regressions} == with_scipy
    assert all(c.test == "bootstrap median" for c in without.regressions)
    assert compare(base, noise, use_scipy=False).regressions == []


def test_small_drop_needs_a_smaller_tolerance():
    rng = np.random.default_rng(1)
    base = 50 + 0.2 * rng.standard_normal(5)
    cur = base * 0.97
    assert judge(base, cur, True, 0.05, 0.05, True, rng)[1] == "unchanged"
    assert judge(base, cur, True, 0.02, 0.05, True, rng)[1] == "regression"


def test_time_is_compared_lower_is_better():
    rng = np.random.default_rng(0)
    base = np.array([10.0, 10.1, 9.9, 10.05, 9.95]) * 1e-6
    change, verdict, _, _ = judge(base, base * 1.25, False, 0.05, 0.05, True, rng)
    assert verdict == "regression" and change == pytest.approx(1 / 1.25 - 1)


@pytest.mark.parametrize("cur, verdict", [
    ([39.0, 40.0], "regression"),     # 20% lower, ranges disjoint
    ([39.0, 50.5], "unchanged"),      # median 10% lower, but one trial as fast as the baseline
])
def test_two_trials_rely_on_tolerance_and_disjoint_ranges(cur, verdict):
    change, got, test, p = judge(np.array([49.5, 50.5]), np.array(cur), True, 0.05, 0.05, True,
                                 np.random.default_rng(0))
    assert got == verdict and p is None and "range" in test


def test_few_trials_end_to_end(tmp_path):
    rng = np.random.default_rng(5)
    base = copy_samples(rng, trials=2, noise=0.005)
    cur = copy_samples(rng, trials=2, noise=0.005)
    for s in cur:
        if s.op == "d2h" and s.memory == "pinned":
            s.algbw_gbps *= 0.7
    result = compare(load(write_run(tmp_path / "b", base)), load(write_run(tmp_path / "c", cur)))
    assert {c.key["op"] for c in result.regressions} == {"d2h"}
    assert all(c.test == "trial ranges disjoint" and c.n_baseline == 2 for c in result.regressions)


def _run_with_meta(path: Path, **changes) -> Path:
    run = write_run(path, copy_samples(np.random.default_rng(0), trials=3))
    meta = json.loads((run / "meta.json").read_text())
    meta.update(changes)
    (run / "meta.json").write_text(json.dumps(meta))
    return run


@pytest.mark.parametrize("case", ["missing", "empty", "schema", "disjoint", "two_instances"])
def test_unusable_input_exits_2_with_one_line(case, runs, tmp_path, capsys):
    base = runs["base"]
    if case == "missing":
        cur = tmp_path / "nope"
    elif case == "empty":
        cur = tmp_path / "empty"
        cur.mkdir()
    elif case == "schema":
        cur = _run_with_meta(tmp_path / "v2", schema_version=99)
    elif case == "disjoint":   # only collectives against only copies
        base = write_run(tmp_path / "coll", collective_samples(np.random.default_rng(0), trials=3))
        cur = write_run(tmp_path / "copy", copy_samples(np.random.default_rng(0), trials=3))
    else:
        cur = tmp_path / "both"
        write_run(cur / "a", copy_samples(np.random.default_rng(0), trials=3), instance="a")
        write_run(cur / "b", copy_samples(np.random.default_rng(1), trials=3), instance="b")
    assert _load_script().main([str(base), str(cur)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("compare: ") and len(err.splitlines()) == 1


def test_compare_refuses_a_bad_tolerance(runs):
    with pytest.raises(ResultsError, match="tolerance"):
        compare_paths(runs["base"], runs["noise"], tolerance=5)


def test_a_point_whose_data_check_now_fails_is_a_regression(runs, tmp_path):
    rng = np.random.default_rng(9)
    broken = copy_samples(rng, noise=0.015) + collective_samples(rng, noise=0.015)
    for s in broken:
        if s.suite == "copy" and s.op == "d2d" and s.size_bytes == 4 * MiB:
            s.status, s.verified, s.algbw_gbps = "failed", False, float("nan")
    result = compare(load(runs["base"]), load(write_run(tmp_path / "broken", broken)))
    assert result.regressions == [] and result.failed_now == ["copy d2d device eager 4MiB"]
    assert result.regressed and "### Failing now" in result.to_markdown()
