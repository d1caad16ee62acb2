"""bench.analysis.compare and xferbench-compare: families, noise measured between runs, the false-alarm
bound and the power on synthetic runs of known noise, the committed runs, the CLI and its store."""
from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.analysis import compare as cmp
from bench.analysis import store as store_module
from bench.analysis.compare import compare, compare_paths, size_classes
from bench.analysis.noise import default_noise, launch_path_noise
from bench.cli import compare as cli_compare
from bench.cli.common import catalog
from bench.analysis.cache import resident_note
from bench.results import ResultsError, Sample, load
from bench.suite_view import RERUN
from synthetic import BANDWIDTH_SIZES, LATENCY_SIZES, MiB, collective_samples, copy_samples, noisy_runs, write_run

REPO = Path(__file__).resolve().parent.parent
H200_PAIR = [REPO / "results" / "reference" / "h200-x2" / r for r in ("20261122-214352", "20261122-214411")]
# Noise studies live apart from results/reference, whose runs plots and reports take per instance.
CPU_STUDY = REPO / "results" / "noise" / "cpu"
GPU_STUDY = REPO / "results" / "noise" / "h200-x2"
NOISE_STUDY = REPO / "scripts" / "noise_study.py"
CATALOG = catalog()   # the suites: each declares its between-run noise


def _defaults(variant: dict, size_class: str) -> float:
    return default_noise(CATALOG, variant, size_class)


def _load_script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem + "_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the statistics, on synthetic runs of known between-run noise ----------------------------

def _alarms(seeds: int, base_runs: int, alpha: float, tolerance: float, noise=_defaults) -> int:
    """Comparisons of unchanged runs that fail. Every size of a family moves with its run
    (correlation 1): the worst case for a median over sizes, which then averages nothing away."""
    alarms = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        base, cur = (noisy_runs(rng, runs, noise, side, trial_noise=0, correlation=1.0)
                     for runs, side in ((base_runs, "b"), (1, "c")))
        alarms += compare(base, cur, CATALOG, tolerance, alpha).regressed
    return alarms


def _binomial_ceiling(seeds: int, rate: float) -> float:
    return seeds * rate + 3 * np.sqrt(seeds * rate * (1 - rate))   # a true rate <= `rate` stays below, but by chance


@pytest.mark.parametrize("alpha, tolerance", [(0.01, 0.05), (0.25, 0.0)])
def test_false_alarm_rate_with_one_run_a_side_stays_within_alpha(alpha, tolerance):
    # The noise is what the defaults say (at alpha 0.25: 3 of 40 fail, about alpha/2 as the
    # fully correlated sizes predict).
    seeds = 40
    assert _alarms(seeds, 1, alpha, tolerance) <= _binomial_ceiling(seeds, alpha)


def test_false_alarm_rate_with_a_measured_baseline_stays_within_alpha():
    # Twice the default noise: five baseline runs must measure it, or unchanged runs would alarm.
    seeds, alpha = 40, 0.25
    assert _alarms(seeds, 5, alpha, 0.0, lambda v, c: 2 * _defaults(v, c)) <= _binomial_ceiling(seeds, alpha)


def test_a_10_percent_drop_is_caught_with_90_percent_power_and_nothing_else_is(monkeypatch):
    # Stated power: 1% between-run noise, a store of 10 runs, 1 current run, tolerance 5%, alpha 1%
    # (150 seeds: 97%; with 5 baseline runs 87%, with 1 run 73%; at 0.5% noise 100% from 1 run).
    for suite in CATALOG.values():   # every suite's declared noise
        monkeypatch.setattr(suite, "noise", dict.fromkeys(suite.noise, 0.01))
    dropped = ("h2d", "bandwidth")
    caught = others = 0
    for seed in range(30):
        rng = np.random.default_rng(1000 + seed)
        base = noisy_runs(rng, 10, lambda v, c: 0.01, "b", trial_noise=0)
        cur = noisy_runs(rng, 1, lambda v, c: 0.01, "c", trial_noise=0,
                         slowdown=lambda v, size: 1 / 0.9 if v["op"] == "h2d" and size in BANDWIDTH_SIZES else 1)
        flagged = {(f.variant["op"], f.size_class) for f in compare(base, cur, CATALOG).regressions}
        caught += dropped in flagged
        others += bool(flagged - {dropped})
    assert caught >= 27 and others == 0


def test_size_classes_follow_the_baseline_curve():
    levels = cmp.point_levels(noisy_runs(np.random.default_rng(0), 1, lambda v, c: 0.0), CATALOG)
    classes = dict(zip(zip(levels["op"], levels["size_bytes"]), size_classes(levels)))
    assert {s for (op, s), c in classes.items() if op == "h2d" and c == "latency"} == set(LATENCY_SIZES)
    assert {s for (op, s), c in classes.items() if op == "h2d" and c == "bandwidth"} == set(BANDWIDTH_SIZES)


def test_a_point_is_host_slow_by_every_trial_of_its_run_not_by_the_trials_kept():
    """The gate's and the doctor's levels mark a point host slow as the summary does
    (test_mislead): a spell slowed three trials of five of every d2h point, its other two read
    the host at its usual pace (one quicker than usual), so no point ran slow throughout. Read
    again on the trials kept, the usual pace became the quick reading's and every h2d point,
    read at the usual pace in every trial, was host slow."""
    from bench.results import samples_frame
    sizes = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]
    spell = {0: 4e-4, 1: 4e-4, 2: 4e-4, 3: 0.7e-4, 4: 1e-4}
    rows = [Sample("copy", op, size, time_s=5e-6 + size / 50e9, trial=trial, memory="pinned", backend="cuda",
                   src="host", dst="cuda:0", algbw_gbps=size / (5e-6 + size / 50e9) / 1e9, verified=True, run_id="r",
                   host_pace_s=spell[trial] if op == "d2h" else 1e-4)
            for op in ("h2d", "d2h") for size in sizes for trial in range(5)]
    levels = cmp.point_levels(samples_frame(rows).assign(run_dir="r"), CATALOG)
    assert len(levels) == 2 * len(sizes) and not levels["host_slow"].any()
    assert levels["paced"].all()


def test_quiet_baseline_runs_narrow_the_limit_and_one_run_uses_the_default():
    def quiet(variant: dict, size_class: str) -> float:
        return 0.001   # far below every default

    rng = np.random.default_rng(1)
    cur = noisy_runs(rng, 1, quiet, "c", trial_noise=0)
    one, ten = (compare(noisy_runs(rng, runs, quiet, "b", trial_noise=0), cur, CATALOG).families for runs in (1, 10))
    # (these runs read no host pace: a latency-bound family's default is doubled, cmp.UNPACED_NOISE;
    # eager on a GPU, a latency-bound family is the launch path, judged with its own default)
    unpaced = {"latency": cmp.UNPACED_NOISE}
    assert all(f.noise == (launch_path_noise(CATALOG, f.variant, rerun=True) if f.launch_path else _defaults(f.variant, f.size_class))
               * unpaced.get(f.size_class, 1) and f.noise_df == 0 for f in one)
    assert {f.launch_path for f in one if f.size_class == "latency"} == {True}
    # the measured spread outweighs the default's PRIOR_DF: sigma^2 ~ PRIOR_DF * default^2 / (PRIOR_DF + df)
    assert all(t.noise < 0.5 * o.noise and t.limit > o.limit for o, t in zip(one, ten))


def test_one_disturbed_baseline_run_barely_moves_the_measured_noise():
    rng = np.random.default_rng(2)
    quiet = noisy_runs(rng, 8, lambda v, c: 0.01, "b")
    disturbed = quiet.copy()
    one_run = disturbed["run_dir"] == "/synthetic/b0"
    disturbed.loc[one_run, "time_s"] *= 3   # one run three times slower everywhere
    cur = noisy_runs(rng, 1, lambda v, c: 0.01, "c")
    before, after = (max(f.noise for f in compare(b, cur, CATALOG).families) for b in (quiet, disturbed))
    assert after < 1.5 * before


def test_a_shift_within_the_between_run_noise_is_no_regression_however_tight_the_trials():
    # The old failure: trials 1% apart, runs 15% apart (latency-bound collectives move that much).
    rng = np.random.default_rng(3)
    base, cur = noisy_runs(rng, 1, lambda v, c: 0.0, "b"), noisy_runs(rng, 1, lambda v, c: 0.0, "c")
    slow = (cur["suite"] == "collectives") & cur["size_bytes"].isin(LATENCY_SIZES)
    cur.loc[slow, "time_s"] *= 1.15
    assert not compare(base, cur, CATALOG).regressed


# --- the committed runs ------------------------------------------------------------------------

def test_committed_h200_runs_of_one_sweep_do_not_regress():
    # The same sweep twice, the second with NCCL_GRAPH_REGISTER=0, which changes nothing measurable.
    result = compare_paths(*H200_PAIR, CATALOG)
    assert not result.regressed and len(result.families) == 8


def _study_runs(group: str, study: Path = CPU_STUDY) -> dict[str, pd.DataFrame]:
    frame = load(study / group)
    return {Path(r).name: g for r, g in frame.groupby("run_dir")}


def test_committed_cpu_study_identical_pairs_pass_and_the_traced_run_is_named():
    # 20 identical runs on a shared 2-core machine, and one under a line tracer (python -m trace),
    # which adds about a microsecond to every copy: h2h copies' latency-bound sizes, nothing else.
    identical = _study_runs("identical")
    names = sorted(identical)
    pairs = list(zip(names[0::2], names[1::2]))
    assert len(pairs) == 10
    assert sum(compare(identical[a], identical[b], CATALOG).regressed for a, b in pairs) <= 1
    (traced,) = _study_runs("traced").values()
    result = compare(pd.concat(identical.values()), traced, CATALOG)
    assert {(f.variant["op"], f.size_class) for f in result.regressions} == {("h2h", "latency")}


@pytest.mark.skipif(not GPU_STUDY.exists(), reason="the GPU noise study is not committed yet")
@pytest.mark.parametrize("handicap", ["nch1", "simple"])
def test_committed_gpu_study_identical_runs_pass_and_nccl_handicaps_flag_collectives_only(handicap):
    # Three identical short sweeps on nvidia-h200-x2, and one with NCCL_MAX_NCHANNELS=1 (less
    # bandwidth) or NCCL_PROTO=Simple (no low-latency protocol): only collectives may be named.
    identical = _study_runs("identical", GPU_STUDY)
    assert not any(compare(identical[a], identical[b], CATALOG).regressed
                   for a, b in itertools.combinations(sorted(identical), 2))
    (run,) = _study_runs(handicap, GPU_STUDY).values()
    flagged = compare(pd.concat(identical.values()), run, CATALOG).regressions
    assert flagged and {f.variant["suite"] for f in flagged} == {"collectives"}


H200_X1_STUDY = REPO / "results" / "noise" / "h200-x1"


def test_committed_one_gpu_study_out_of_sample_passes_identical_runs_and_names_the_loaded_link():
    # Four identical copy + overlap sweeps on nvidia-h200, judged with noise fitted on other runs
    # (results/noise/h200-x1-fit), and one while another process copied host->device all along.
    identical = _study_runs("identical", H200_X1_STUDY)
    assert len(identical) == 4
    assert not any(compare(identical[a], identical[b], CATALOG).regressed
                   for a, b in itertools.combinations(sorted(identical), 2))
    (loaded,) = _study_runs("h2d-load", H200_X1_STUDY).values()
    result = compare(pd.concat(identical.values()), loaded, CATALOG)
    flagged = {(f.variant["suite"], f.variant["op"], f.variant["memory"], f.size_class) for f in result.regressions}
    assert ("copy", "h2d", "pinned", "bandwidth") in flagged
    # The GPU's own work, which crosses no host link, is not named.
    assert not any(op == "make_tensor" and memory == "device" for _, op, memory, _ in flagged)


def test_a_tagged_noise_covers_the_families_holding_the_tag_and_no_other():
    copy = CATALOG["copy"]
    tagged = copy.noise[("gpu", "bandwidth", "pageable")]
    base = {"suite": "copy", "backend": "cuda", "op": "h2d", "engine": "ce", "launch": "eager"}
    assert default_noise(CATALOG, {**base, "memory": "pageable"}, "bandwidth") == tagged
    assert default_noise(CATALOG, {**base, "memory": "pinned"}, "bandwidth") == copy.noise[("gpu", "bandwidth")]
    assert default_noise(CATALOG, {**base, "memory": "pageable"}, "latency") == copy.noise[("gpu", "latency")]
    assert tagged > copy.noise[("gpu", "bandwidth")]


def test_the_most_specific_tagged_noise_wins_over_a_larger_looser_one():
    # Held staged copies: the round trip (one slot) keeps held-1's wide sigma, a ring of slots has its own.
    p2p = CATALOG["p2p"]
    base = {"suite": "p2p", "backend": "cuda", "op": "uni", "memory": "device", "mode": "staged", "launch": "held",
            "engine": "ce", "params": ""}
    ring = {**base, "params": '{"slots": 4}'}
    assert default_noise(CATALOG, base, "latency") == p2p.noise[("gpu", "latency", "staged", "held")] == 0.19
    assert default_noise(CATALOG, ring, "latency") == p2p.noise[("gpu", "latency", "staged", "held", '{"slots": 4}')]
    assert default_noise(CATALOG, ring, "latency") < default_noise(CATALOG, base, "latency")
    assert default_noise(CATALOG, {**ring, "launch": "eager"}, "latency") == p2p.noise[("gpu", "latency")]


def test_a_launch_path_between_two_runs_may_be_wider_than_between_hosts():
    # p2p's launch paths moved 3x between the two runs of one host: the gate reads its rerun sigma;
    # the fleet and the doctor keep the spread between hosts, at which a halved one still fails.
    p2p, copy = CATALOG["p2p"], CATALOG["copy"]
    eager = {"suite": "p2p", "backend": "cuda", "op": "uni", "memory": "device", "mode": "peer", "launch": "eager",
             "engine": "ce", "params": ""}
    assert launch_path_noise(CATALOG, eager) == p2p.noise[("gpu", "launch")]
    assert launch_path_noise(CATALOG, eager, rerun=True) == p2p.noise[("gpu", "launch", RERUN)] > p2p.noise[("gpu", "launch")]
    pinned = {"suite": "copy", "backend": "cuda", "op": "h2d", "memory": "pinned", "launch": "eager", "engine": "ce"}
    assert launch_path_noise(CATALOG, pinned, rerun=True) == launch_path_noise(CATALOG, pinned) == copy.noise[("gpu", "launch")]


def test_a_copy_the_l2_holds_is_shown_but_not_gated(tmp_path):
    # d2d within one GPU of 50 MiB L2: at 16 MiB the copy suite notes it cache-resident, at 64 MiB
    # not. A drop at 16 MiB alone (the cache's state) passes; the same drop past the L2 regresses.
    def run(name: str, slower: dict[int, float]) -> pd.DataFrame:
        samples = [Sample(suite="copy", op="d2d", memory="device", backend="cuda", src="cuda:0", dst="cuda:0",
                          size_bytes=size, trial=trial, iters=10, time_s=size / 2e12 * slower.get(size, 1.0),
                          algbw_gbps=2e3 / slower.get(size, 1.0), verified=True,
                          note=resident_note(size, 50 * MiB))
                   for size in (4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB) for trial in range(5)]
        return load(write_run(tmp_path / name, samples))
    base = run("base", {})
    cached = compare(base, run("cached", {16 * MiB: 1.5}), CATALOG)
    assert not cached.regressed
    assert {p.size_class for p in cached.points if p.key["size_bytes"] == 16 * MiB} == {"cache"}
    assert compare(base, run("past", {64 * MiB: 1.5, 256 * MiB: 1.5}), CATALOG).regressed


def test_noise_study_reads_handicaps_as_a_shell_would_and_spreads_them_among_the_runs():
    study = _load_script(NOISE_STUDY)
    assert study._handicap("nch1:NCCL_MAX_NCHANNELS=1 NCCL_ALGO=Ring") == (
        "nch1", {"NCCL_MAX_NCHANNELS": "1", "NCCL_ALGO": "Ring"}, [], [])
    label, env, command, background = study._handicap("traced:OMP_NUM_THREADS=1 python -m trace --count --module bench")
    assert env == {"OMP_NUM_THREADS": "1"} and command == [sys.executable, "-m", "trace", "--count", "--module", "bench"]
    assert background == []
    loaded = study._handicap("load:bg=python scripts/h2d_load.py --size 256MiB")
    assert (loaded.command, loaded.background) == ([], [sys.executable, "scripts/h2d_load.py", "--size", "256MiB"])
    a, b = study.Handicap("a", {"X": "1"}, [], []), study.Handicap("b", {"X": "2"}, [], [])
    order = [h.label for h in study._schedule(4, [a, b])]
    assert order == ["identical", "a", "identical", "identical", "b", "identical"]
    with pytest.raises(Exception, match="expected LABEL"):
        study._handicap("identical:X=1")


def test_noise_study_report_on_runs_already_made(tmp_path, capsys):
    for i in range(3):
        write_run(tmp_path / "identical" / f"identical-0{i + 1}", _samples(20 + i))
    write_run(tmp_path / "slow" / "slow-01", _samples(30, _h2d_big_drop))
    assert _load_script(NOISE_STUDY).main(["--out", str(tmp_path), "--compare-only"]) == 0
    text = (tmp_path / "study.md").read_text()
    assert text == capsys.readouterr().out
    assert "| identical-01 vs identical-02 | 0 | none |" in text and "| identical-02 vs identical-03 | 0 | none |" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| all 3 identical runs vs slow-01 |")]
    _, exits, flagged = row.strip("| ").split(" | ")
    assert exits == "1" and set(flagged.split("; ")) == {"copy h2d pinned eager host->cuda:0 (bandwidth-bound)",
                                                         "copy h2d pinned graph host->cuda:0 (bandwidth-bound)"}
    assert 'copy: ("gpu", "bandwidth"):' in text   # the form of the copy suite's `noise`


# --- the command line and the baseline store ---------------------------------------------------

def _samples(seed: int, change=None) -> list:
    rng = np.random.default_rng(seed)
    samples = copy_samples(rng, noise=0.015) + collective_samples(rng, noise=0.015)
    changed = []
    for s in samples:
        factor = change(s) if change else 1.0
        changed.append(replace(s, algbw_gbps=s.algbw_gbps * factor, busbw_gbps=s.busbw_gbps * factor,
                               time_s=s.time_s / factor))
    return changed


def _h2d_big_drop(sample) -> float:
    big_h2d = sample.suite == "copy" and sample.op == "h2d" and sample.memory == "pinned" and sample.size_bytes >= MiB
    return 0.5 if big_h2d else 1.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Three reruns of one sweep (a folder of several runs), and one where pinned h2d >= 1 MiB lost half."""
    root = tmp_path_factory.mktemp("runs")
    made = {f"base{i}": write_run(root / "bases" / f"base{i}", _samples(i)) for i in range(3)}
    made["noise"] = write_run(root / "noise", _samples(10))
    made["regressed"] = write_run(root / "regressed", _samples(11, _h2d_big_drop))
    made["bases"] = root / "bases"
    return made


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_real_regression_exits_1_names_the_families_and_appends_the_summary(runs, tmp_path):
    report, summary = tmp_path / "report.json", tmp_path / "summary.md"
    summary.write_text("earlier step's summary\n")
    proc = subprocess.run([sys.executable, "-m", "bench.cli.compare", str(runs["base0"]), str(runs["regressed"]),
                           "--json", str(report), "--markdown", str(summary)],
                          capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(report.read_text())
    assert data["verdict"] == "fail"
    assert sorted(data["regressions"]) == ["copy h2d pinned eager host->cuda:0 (bandwidth-bound)",
                                           "copy h2d pinned graph host->cuda:0 (bandwidth-bound)"]
    assert data["improvements"] == [] and data["failed_now"] == []
    family = next(f for f in data["families"] if f["verdict"] == "regression")
    assert -0.55 < family["change"] < -0.45 and family["limit"] > family["change"]
    text = summary.read_text()
    assert text.startswith("earlier step's summary\n## xferbench comparison: FAIL")
    assert "**regression** -50" in text and "### Largest changes" in text and "### Baseline noise" in text
    assert "copy h2d pinned eager host->cuda:0 64MiB" in proc.stdout   # per-size details stay in the table


def test_noise_between_reruns_passes(runs):
    result = compare_paths(runs["base0"], runs["noise"], CATALOG)
    assert result.regressions == [] and result.improvements == [] and len(result.families) == 28
    assert cli_compare.main([str(runs["base0"]), str(runs["noise"])]) == 0


def test_a_gain_is_an_improvement_and_exits_0(runs):
    result = compare_paths(runs["regressed"], runs["base0"], CATALOG)   # reversed: the loss is now a gain
    assert result.regressions == [] and {f.label for f in result.improvements} == {
        "copy h2d pinned eager host->cuda:0", "copy h2d pinned graph host->cuda:0"}
    assert "2 improvement(s)" in result.to_markdown()


def test_several_runs_on_either_side(runs, capsys):
    script = cli_compare
    assert script.main([str(runs["bases"]), "--current", str(runs["noise"])]) == 0
    assert "Baseline: 3 run(s)" in capsys.readouterr().out
    assert script.main([str(runs["base0"]), str(runs["base1"]), "--current", str(runs["regressed"])]) == 1
    # One current run halved beside one that is not: they disagree by 2x, and that is their noise
    assert script.main([str(runs["base0"]), str(runs["base1"]), "--current", str(runs["regressed"]),
                        str(runs["noise"])]) == 0
    result = compare_paths([runs["base0"], runs["base1"]], [runs["noise"], runs["base2"]], CATALOG)
    assert all(f.noise_df > 0 for f in result.families) and len(result.current_runs) == 2


def test_baseline_store_is_seeded_grows_on_a_pass_and_not_on_a_fail(runs, tmp_path, capsys):
    script, store = cli_compare, tmp_path / "store"
    assert script.main(["--baseline-dir", str(store), str(runs["base0"])]) == 2   # empty, and not asked to seed
    assert script.main(["--baseline-dir", str(store), str(runs["base0"]), "--add-on-pass"]) == 0
    assert script.main(["--baseline-dir", str(store), str(runs["base1"]), "--add-on-pass"]) == 0
    assert script.main(["--baseline-dir", str(store), str(runs["regressed"]), "--add-on-pass"]) == 1
    assert sorted(p.name for p in store.iterdir()) == ["base0", "base1"]
    capsys.readouterr()
    assert script.main(["--baseline-dir", str(store), "--last", "1", str(runs["noise"])]) == 0
    assert "Baseline: 1 run(s) (base1)" in capsys.readouterr().out
    assert len(load(store)["run_dir"].unique()) == 2   # runs in the store are copies, loadable as they were


def test_a_point_whose_data_check_now_fails_exits_1(runs, tmp_path):
    samples = [replace(s, status="failed", verified=False, algbw_gbps=math.nan, busbw_gbps=math.nan)
               if s.suite == "copy" and s.op == "d2d" and s.size_bytes == 4 * MiB else s for s in _samples(12)]
    run = write_run(tmp_path / "broken", samples)
    result = compare_paths(runs["base0"], run, CATALOG)
    assert result.regressions == [] and result.failed_now == ["copy d2d device eager cuda:0->cuda:0 4MiB"]
    assert result.regressed and "### Failing now" in result.to_markdown()
    assert cli_compare.main([str(runs["base0"]), str(run)]) == 1


def _run_with_meta(path: Path, **changes) -> Path:
    run = write_run(path, copy_samples(np.random.default_rng(0), trials=3))
    meta = json.loads((run / "meta.json").read_text())
    meta.update(changes)
    (run / "meta.json").write_text(json.dumps(meta))
    return run


@pytest.mark.parametrize("case", ["missing", "empty", "schema", "disjoint", "two_instances", "one_path",
                                  "store_and_both", "add_without_store", "keep_without_store", "alpha", "same_run",
                                  "overlapping_sides", "a_copy_on_both_sides", "a_store_of_copies",
                                  "json_unwritable", "markdown_unwritable",
                                  "markdown_unwritable_on_a_regression", "store_unwritable", "seed_missing"])
def test_unusable_input_exits_2_with_one_line(case, runs, tmp_path, capsys):
    base, extra = str(runs["base0"]), []
    if case == "missing":
        args = [base, str(tmp_path / "nope")]
    elif case == "empty":
        (tmp_path / "empty").mkdir()
        args = [base, str(tmp_path / "empty")]
    elif case == "schema":
        args = [base, str(_run_with_meta(tmp_path / "v99", schema_version=99))]
    elif case == "disjoint":   # only collectives against only copies
        coll = write_run(tmp_path / "coll", collective_samples(np.random.default_rng(0), trials=3))
        args = [str(coll), str(write_run(tmp_path / "copy", copy_samples(np.random.default_rng(0), trials=3)))]
    elif case == "two_instances":
        write_run(tmp_path / "both" / "a", copy_samples(np.random.default_rng(0), trials=3), instance="a")
        write_run(tmp_path / "both" / "b", copy_samples(np.random.default_rng(1), trials=3), instance="b")
        args = [base, str(tmp_path / "both")]
    elif case == "one_path":
        args = [base]
    elif case == "store_and_both":
        args = ["--baseline-dir", str(runs["bases"]), base, "--current", base]
    elif case == "add_without_store":
        args = [base, base, "--add-on-pass"]
    elif case == "keep_without_store":
        args = [base, str(runs["noise"]), "--keep", "5"]
    elif case == "a_copy_on_both_sides":
        args = [str(shutil.copytree(base, tmp_path / "copy")), base]
    elif case == "a_store_of_copies":   # what --add-on-pass left on a first try, and nothing else
        args = ["--baseline-dir", str(tmp_path / "store"), base]
        shutil.copytree(base, tmp_path / "store" / "base0")
    elif case == "seed_missing":
        args = ["--baseline-dir", str(tmp_path / "new_store"), str(tmp_path / "nope"), "--add-on-pass"]
    elif case == "same_run":
        args = [base, base]
    elif case == "overlapping_sides":    # base0 is one of the runs in bases
        args = [str(runs["bases"]), "--current", base, str(runs["noise"])]
    elif case.endswith("unwritable") or case.endswith("on_a_regression"):
        (tmp_path / "file").write_text("")
        option = {"json": "--json", "markdown": "--markdown", "store": "--baseline-dir"}[case.split("_")[0]]
        current = runs["regressed"] if case.endswith("regression") else runs["noise"]
        args = [option, str(tmp_path / "file" / "out"), base, str(current)]
        if option == "--baseline-dir":   # an empty store, seeded with both runs: it cannot be made
            args.append("--add-on-pass")
    else:
        args, extra = [base, str(runs["noise"])], ["--alpha", "0"]
    assert cli_compare.main(args + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("compare: ") and len(err.splitlines()) == 1


def test_compare_refuses_a_bad_tolerance(runs):
    with pytest.raises(ResultsError, match="tolerance"):
        compare_paths(runs["base0"], runs["noise"], CATALOG, tolerance=5)


def test_a_store_copy_that_fails_leaves_no_half_run_and_exits_2(runs, tmp_path, monkeypatch, capsys):
    script, store = cli_compare, tmp_path / "store"
    assert script.main(["--baseline-dir", str(store), str(runs["base0"]), "--add-on-pass"]) == 0
    real_copytree = store_module.shutil.copytree

    def disk_full(src, dst, **kwargs):
        real_copytree(src, dst, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module.shutil, "copytree", disk_full)
    capsys.readouterr()
    assert script.main(["--baseline-dir", str(store), str(runs["base1"]), "--add-on-pass"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"compare: cannot add to the baseline store {store}: No space left on device"]
    assert [p.name for p in store.iterdir()] == ["base0"]      # no partial copy, hidden or not


def test_a_store_holding_the_current_run_leaves_it_out_of_its_baseline(runs, capsys):
    script = cli_compare
    assert script.main(["--baseline-dir", str(runs["bases"]), str(runs["base1"])]) == 0
    out = capsys.readouterr()
    assert "the baseline holds 1 of the current run(s) itself: left out of its own baseline" in out.err
    assert "Baseline: 2 run(s) (base0, base2)" in out.out


def test_a_store_holding_a_copy_of_the_current_run_leaves_it_out_and_says_so(runs, tmp_path, capsys):
    # A retried CI job: its first try passed and --add-on-pass copied the run into the store.
    store = tmp_path / "store"
    for name in ("base0", "base2"):
        shutil.copytree(runs[name], store / name)
    assert cli_compare.main(["--baseline-dir", str(store), str(runs["base2"]), "--add-on-pass"]) == 0
    out = capsys.readouterr()
    assert out.err.splitlines()[0] == (f"compare: baseline run {store / 'base2'} is a copy of the current run "
                                       f"{runs['base2']} (same run_id, same samples): left out of its own baseline")
    assert "Baseline: 1 run(s) (base0)" in out.out
    # the same run_id with other samples (a rerun under a fixed run_id) is another run: it stays
    rerun = write_run(tmp_path / "rerun" / "base2", _samples(12))
    assert cli_compare.main(["--baseline-dir", str(store), str(rerun)]) == 0
    assert "Baseline: 2 run(s) (base0, base2)" in capsys.readouterr().out


def test_an_incomplete_run_is_never_judged_whole_nor_stored(runs, tmp_path, capsys):
    script, store = cli_compare, tmp_path / "store"
    assert script.main(["--baseline-dir", str(store), str(runs["base0"]), "--add-on-pass"]) == 0
    for status in ("failed", "interrupted", "running"):
        run = tmp_path / status
        shutil.copytree(runs["noise"], run)
        meta = json.loads((run / "meta.json").read_text())
        (run / "meta.json").write_text(json.dumps({**meta, "status": status, "pid": -1}))
        assert script.main(["--baseline-dir", str(store), str(run), "--add-on-pass"]) == 4
        assert f"{run} is {status}: not judged as a whole run, and not added to any store" in capsys.readouterr().err
    assert sorted(p.name for p in store.iterdir()) == ["base0"]


def test_runs_of_other_machine_classes_are_refused_unless_asked(runs, tmp_path, capsys):
    script = cli_compare
    other = tmp_path / "h100"
    shutil.copytree(runs["noise"], other)
    meta = json.loads((other / "meta.json").read_text())
    meta["system"]["gpus"] = [{"name": "NVIDIA H100 80GB HBM3"}]
    (other / "meta.json").write_text(json.dumps(meta))
    assert script.main([str(runs["base0"]), str(other)]) == 2
    assert "different machine classes (--any-class to compare them anyway)" in capsys.readouterr().err
    assert script.main([str(runs["base0"]), str(other), "--any-class"]) in (0, 1)


def test_a_point_measured_only_while_the_host_was_slow_is_judged_with_its_noise_widened(tmp_path):
    # Small h2d copies, host-bound: in "slow" every trial of 4 KiB read the host's pace at twice
    # its run's usual and took twice as long, in "one" all but one did (one trial is one moment,
    # not a figure); in "some" half of them did (those are left out). Eager, the family is the
    # launch path, a device-side family (graph) holding such a point is not: each is judged with
    # its declared noise doubled.
    def run(name: str, slow_trials: int) -> pd.DataFrame:
        samples = [Sample(suite="copy", op="h2d", memory="pinned", backend="cuda", src="host", dst="cuda:0",
                          size_bytes=size, trial=trial, iters=100, verified=True, launch=launch,
                          time_s=5e-6 * (2 if size == 4096 and trial < slow_trials else 1),
                          host_pace_s=2e-4 if size == 4096 and trial < slow_trials else 1e-4)
                   for launch in ("eager", "graph") for size in (1024, 2048, 4096, 8192) for trial in range(6)]
        return load(write_run(tmp_path / name, samples))
    base = run("base", 0)
    for slow_trials in (6, 5):
        slow = compare(base, run(f"slow-{slow_trials}", slow_trials), CATALOG)
        assert not slow.regressed
        assert {(p.size_class, p.host_slow) for p in slow.points if p.key["size_bytes"] == 4096} == {("latency", True)}
        families = {f.variant["launch"]: f for f in slow.families}
        assert families["eager"].launch_path and families["eager"].host_slow == 1
        assert families["eager"].noise == cmp.HOST_SLOW_NOISE * launch_path_noise(CATALOG, families["eager"].variant, rerun=True)
        assert families["graph"].noise == cmp.HOST_SLOW_NOISE * _defaults(families["graph"].variant, "latency")
        assert "2 point(s) measured only while the host was slow on one side" in slow.to_markdown()
    some = compare(base, run("some", 3), CATALOG)
    assert not some.regressed and max(abs(p.change) for p in some.points) < 1e-9   # only usual trials count


def _ci_writes() -> list[str]:
    """The paths inside the clone that the README's CI example and the example workflow write."""
    readme = (REPO / "README.md").read_text()
    workflow = (REPO / ".github" / "workflows" / "gpu-bench.yml").read_text()
    stores = re.findall(r"--baseline-dir (\S+)", readme) + re.findall(r"^\s*STORE: (\S+)", workflow, re.M)
    written = [f"{store}/run/meta.json" for store in stores]
    written += [name.replace("$name", "xferbench") for name in re.findall(r'--json "?([^"\s]+)"?', workflow)]
    written += [f"{folder}/figure.png" for folder in re.findall(r"xferbench-plot \S+ --out (\S+)", workflow)]
    return [path for path in written if not path.startswith(("~", "/", "$"))]


def test_a_ci_jobs_clone_stays_clean():
    written = _ci_writes()
    assert {p.split("/")[0] for p in written} >= {"baselines", "compare-xferbench.json", "plots"}
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *written], cwd=REPO, capture_output=True, text=True)
    assert sorted(ignored.stdout.split()) == sorted(written)
