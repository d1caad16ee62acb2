"""The gate's power (bench.analysis.power) on the committed CPU noise runs, and the noise
study's background handicap (scripts/noise_study.py, scripts/h2d_load.py) with real processes."""
from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis import power
from bench.analysis.compare import compare, log_limit, point_levels
from bench.analysis.noise import family_sigma
from bench.cli.common import catalog
from bench.results import load
from conftest import env

ROOT = Path(__file__).resolve().parent.parent
CPU_STUDY = ROOT / "results" / "noise" / "cpu" / "identical"


def _script(name: str):
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cat():
    return catalog()


@pytest.fixture(scope="module")
def runs():
    frame = load(CPU_STUDY)
    return [g for _, g in sorted(frame.groupby("run_dir"))][:6]


def test_formula_is_the_gates_limit(runs, cat):
    powers = {p.key: p for p in power.formula(runs, cat)}
    pair = compare(runs[0], runs[1], cat)
    assert len(powers) == len(power.bandwidth_bound(pair)) == 8
    for family in power.bandwidth_bound(pair):
        # one run a side: the declared sigma alone, so the formula is the comparison's own limit
        assert powers[power.family_key(family)].one_run == pytest.approx(-family.limit)
    # a store of five against one, sigma measured between the same five: the comparison's limit again
    store = compare(pd.concat(runs[:5]), runs[5], cat)
    for family in power.bandwidth_bound(store):
        measured = power.measured_sigma(pd.concat(runs[:5]), family, cat)
        sigma = family_sigma(family.noise if family.noise_df == 0 else _declared(cat, family), measured,
                             len(family.sizes) * 4)
        assert -math.expm1(log_limit(sigma, 5, 1, 0.05, store.z)) == pytest.approx(-family.limit)
        assert sigma == pytest.approx(family.noise)


def _declared(cat, family) -> float:
    return cat[family.variant["suite"]].noise[("cpu", "bandwidth")]


def test_injected_drops_are_flagged_where_the_limit_says(runs, cat):
    powers = power.gate_power(runs, cat, resolution=0.005)
    assert {p.label for p in powers} >= {"copy h2h pageable eager host->host"}
    for p in powers:
        for caught in (p.one_run_injected, p.store_injected):
            # the bisection lands on the drop the limit and the family's own change predict
            assert abs(caught.injected - caught.expected) <= 0.005 + 1e-9, (p.label, caught)
        assert 0 < p.store <= p.one_run < 1 or p.measured > p.declared
    h2h = next(p for p in powers if p.label.startswith("copy h2h"))
    # on this shared 2-core machine one run a side misses a 15% copy slowdown (issue 25), as stated
    assert h2h.one_run > 0.15
    assert "with one baseline run" in power.summary(powers) and "store of 5" in power.summary(powers)


def test_injection_scales_only_the_familys_rows(runs, cat):
    family = next(f for f in power.bandwidth_bound(compare(runs[0], runs[1], cat)) if f.variant["suite"] == "copy")
    slower = power.inject(runs[1], {power.family_key(family): 0.5}, [family])
    changed = (slower["time_s"] != runs[1]["time_s"]).to_numpy()
    assert changed.any() and (slower["time_s"][changed] == 2 * runs[1]["time_s"][changed]).all()
    assert set(runs[1].loc[changed, "size_bytes"]) == set(family.sizes)
    assert set(runs[1].loc[changed, "op"]) == {"h2h"}
    assert point_levels(slower, cat)["y"].notna().all()


# ---------------------------------------------------------------- the background handicap


def test_handicap_reads_a_background_command():
    study = _script("noise_study")
    h = study._handicap("h2d-load:bg=python scripts/h2d_load.py --size 64MiB")
    assert h == study.Handicap("h2d-load", {}, [], [sys.executable, "scripts/h2d_load.py", "--size", "64MiB"])
    h = study._handicap("both:CUDA_VISIBLE_DEVICES=0 bg=python -c pass")
    assert h.env == {"CUDA_VISIBLE_DEVICES": "0"} and h.background[1:] == ["-c", "pass"] and h.command == []
    with pytest.raises(Exception, match="bg="):
        study._handicap("empty:bg=")


SLEEPER = ("import signal, sys, time; "
           "signal.signal(signal.SIGTERM, lambda *a: (print('bye', flush=True), sys.exit(0))); "
           "print('up', flush=True); time.sleep(60)")


def test_background_is_stopped_cleanly_or_killed(monkeypatch):
    study = _script("noise_study")
    bg = study.Background([sys.executable, "-c", SLEEPER], env())
    assert bg.started(30)
    started = time.perf_counter()
    assert bg.stop() is True and time.perf_counter() - started < 10
    assert bg.proc.returncode == 0 and "up\nbye\n" in bg.log("stopped")
    quits = study.Background([sys.executable, "-c", "print('no')"], env())
    assert not quits.started(30)                   # it spoke, but is gone: no handicap
    quits.stop()
    monkeypatch.setattr(study, "BG_STOP_S", 1)
    stubborn = study.Background([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); print('up', flush=True); time.sleep(60)"], env())
    assert stubborn.started(30) and stubborn.stop() is True and stubborn.proc.returncode == -9


def test_a_handicapped_run_keeps_its_background_log(tmp_path, monkeypatch):
    study = _script("noise_study")
    monkeypatch.setattr(study.os, "environ", env())
    handicap = study.Handicap("load", {}, [], [sys.executable, "-c", SLEEPER])
    code, _ = study._run(tmp_path, "load", "load-01", handicap,
                         ["suite=copy", "sizes.max=16KiB", "timing.trials=2"])
    assert code == 0
    log = (tmp_path / "load" / "load-01" / "background.log").read_text()
    assert "up\nbye\n" in log and "stopped after the run; exit 0" in log
    assert load(tmp_path / "load" / "load-01")["status"].eq("ok").all()


def test_h2d_load_needs_no_gpu_for_help_and_says_why_without_one():
    cmd = [sys.executable, str(ROOT / "scripts" / "h2d_load.py")]
    assert subprocess.run(cmd + ["--help"], capture_output=True, text=True, env=env(), timeout=60).returncode == 0
    bad = subprocess.run(cmd + ["--duty", "0"], capture_output=True, text=True, env=env(), timeout=60)
    assert bad.returncode == 2 and "share of time" in bad.stderr
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
        assert run.returncode == 2 and "no CUDA GPU 0" in run.stderr


def test_each_gpus_family_is_named_apart(cat):
    # the 2x H200 study measured each copy on cuda:0 and cuda:1 alone: two families, each named by its GPU
    frame = load(ROOT / "results" / "noise" / "h200-x2" / "identical")
    runs = [g for _, g in sorted(frame.groupby("run_dir"))]
    powers = power.formula(runs[:2], cat)
    labels = [p.label for p in powers]
    assert len(set(labels)) == len(labels) == len({p.key for p in powers})
    assert {"copy h2d pinned eager ce numa=local host->cuda:0", "copy h2d pinned eager ce numa=local host->cuda:1",
            "copy d2d device eager ce cuda:0->cuda:0"} <= set(labels)
