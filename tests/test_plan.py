"""The plan (bench.driver.plan) and the size ladder: what a run will measure and how long it will take.

The timing model is checked against the real timing core on real (busy-waiting) work, the
estimate against the committed reference runs' wall times, the ladder against the committed
curves it thins, and `plan=true` through the real command.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from bench import ConfigError, suites
from bench.driver import schema
from bench.config.files import CONF_DIR
from bench.driver import plan, reference_times
from bench.driver.machine import Machine, instance_machine
from bench.driver.sweep import plan_suites, suite_sizes
from bench.links import Speeds
from bench.measure import timing as timing_module
from bench.measure.timing import HostClock, TimingConfig, measure
from bench.results import POINT_KEYS, point_key, read_samples, samples_file
from bench.sizes import format_size, ladder, sweep
from bench.suites import p2p
from bench.suites.collectives.points import world_sizes
from bench.contract import Context

REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"
MAIN_SWEEP = REFERENCE / "h200-x2" / "20261122-212206"
# What the committed runs were measured with; today's defaults thin the sweep and add the nccl api.
THEN = ["sizes.collectives.ladder=[]", "sizes.p2p.ladder=[]", "sizes.copy.ladder=[]", "collectives.api=[torch]",
        "p2p.pairs=all", "timing.min_trial_s=0.01", "launch=both"]
# The committed h200-x2 runs measured the nccl api in graphs too (collectives.nccl_launch since).
NCCL_GRAPHS = "collectives.nccl_launch=[eager,graph]"


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return schema.to_config(compose(config_name="config",
                                        overrides=schema.normalize_overrides(list(overrides), False)))


def _nvswitch(n: int) -> dict[str, str]:
    return {f"{i},{j}": "NV18" for i in range(n) for j in range(n) if i != j}


def _h200(n: int, links: dict[str, str] | None = None) -> Machine:
    return Machine(f"h200-x{n}", "cuda", n, Speeds(5, 16, 450.0, _nvswitch(n) if links is None else links),
                   "h200", here=False)


def _plan(cfg, machine: Machine, root: Path | None = None) -> plan.Plan:
    """The plan for a machine that is not this one (a fake topology), as plan=true makes it."""
    planned, skipped = plan_suites(cfg, machine)
    return plan.estimate(cfg, planned, machine, skipped, root=root)


def _p2p_hooked() -> bool:
    """Whether p2p.points takes its default pairs from bench.pairs (p2p.pairs=auto)."""
    try:
        p2p.Settings(pairs="auto")
    except ConfigError:
        return False
    return True


# ---------------------------------------------------------------- the timing model


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.parametrize("per_op", [30e-6, 2e-3, 15e-3])
def test_replayed_timing_matches_the_timing_core_on_real_work(per_op, monkeypatch):
    # 30 µs: a small op (split trials); 2 ms: N of a few; 15 ms: one op a trial already. The core
    # runs on this process's own CPU time (its clock, and the work spinning on it), so other
    # processes on a busy machine take nothing from it; the fastest of three runs is the core's own.
    monkeypatch.setattr(timing_module.time, "perf_counter", time.process_time)
    cfg = TimingConfig(warmup=3, trials=5, min_trial_s=0.01)

    def work(n: int) -> None:
        _spin(n * per_op)

    spent = []
    for _ in range(3):
        start = time.process_time()
        measure(work, HostClock(), cfg)
        spent.append(time.process_time() - start)
    assert plan.timing_seconds(per_op, cfg) == pytest.approx(min(spent), rel=0.2)


def test_graph_points_replay_measure_graphs_steps():
    # An op longer than a trial: 1 op a graph and 1 replay a trial, so every step is one op:
    # the side stream's warm-up, the timed warm-up's one (it alone lasts a trial), capture's
    # replay, 2 readings of replays (they agree), 5 trials.
    cfg = TimingConfig(warmup=3, trials=5, min_trial_s=0.01)
    assert plan.timing_seconds(0.02, cfg, graph=True) == pytest.approx(10 * 0.02)
    # Small ops: 2 or 3 readings of replays and 5 trials of 1 to 1.6 x min_trial_s, whatever the op costs.
    for per_op in (2e-6, 20e-6, 200e-6):
        assert 7 * cfg.min_trial_s < plan.timing_seconds(per_op, cfg, graph=True) < 11 * 1.6 * cfg.min_trial_s


# ---------------------------------------------------------------- the estimate against measured runs


# Runs from here on were measured with today's timing core (ranks agree on each trial in one round
# trip after it, calibration on two agreeing readings) and a collectives world started while the
# suite before it runs: older runs carry costs the tool no longer has.
CURRENT_CORE_SINCE = "2026-11-27T07:20"


def _one_node_collectives_runs() -> list[str]:
    """The committed h200-x2 runs of today's core that measured collectives on one node (the planner's model)."""
    runs = []
    for meta_path in sorted((REFERENCE / "h200-x2").glob("*/meta.json")):
        meta = json.loads(meta_path.read_text())
        if "collectives" in meta.get("suite_wall_s", {}) and meta["start_time"] >= CURRENT_CORE_SINCE:
            samples = read_samples(samples_file(meta_path.parent))
            if set(samples[samples.suite == "collectives"].nnodes) == {1}:
                runs.append(meta_path.parent.name)
    return runs


@pytest.mark.parametrize("run", _one_node_collectives_runs())
def test_collectives_estimate_is_within_25_percent_of_each_committed_run(run):
    # Per-op times and the per-point cost come from the main sweep; the other runs (another trial
    # length, graph-only runs of small messages) differ in sizes, timing and start-up share.
    meta = json.loads((REFERENCE / "h200-x2" / run / "meta.json").read_text())
    args = [a for a in meta["argv"] if not a.startswith(("out_dir=", "progress=", "suite=", "run_id="))]
    timing, launches = meta["config"]["timing"], meta["config"]["collectives"]["nccl_launch"]
    recorded = [f"timing.min_trial_s={timing['min_trial_s']}", f"timing.launch=[{','.join(timing['launch'])}]",
                f"collectives.nccl_launch=[{','.join(launches)}]"]   # the defaults then
    got = _plan(_cfg(*args, *recorded, "suite=collectives"), _h200(2)).suites[0]
    # The estimate carries its basis host's pace; the same default collectives took 14.9-19.8 s on
    # six 2x H200 hosts (x2p's ranks' Python ran 1.3x quicker than the basis x2s's): 25% holds them.
    assert got.seconds == pytest.approx(meta["suite_wall_s"]["collectives"], rel=0.25), got


@pytest.mark.parametrize("instance", ["h200-x2", "h200-x4"])   # h200-x1's newest host ran an older default
def test_the_default_plan_gives_back_the_walls_of_the_runs_it_is_fitted_to(instance):
    # The newest host's main sweeps that measured today's default points: their per-op times and
    # per-point cost give back their suites' mean walls. A held point is replayed alike in the
    # fit and in the estimate (its latch outlasting its eager twin's launches), else the held
    # points' latches are counted once as timing and again as per-point cost.
    machine = instance_machine(_cfg(f"instance={instance}").instance)
    got = _plan(_cfg(), machine)
    fitted = [REFERENCE / name for name in got.suites[0].basis.split("per-point cost ", 1)[1].split(", ")]
    walls = [json.loads((run / "meta.json").read_text())["suite_wall_s"] for run in fitted]
    measured = [read_samples(samples_file(run)) for run in fitted]
    for suite in got.suites:
        assert all(len(m[m.suite == suite.name][POINT_KEYS].drop_duplicates()) == suite.points for m in measured)
        # per-op times are the newest run's, the per-point cost the mean over the basis host's runs,
        # a fresh machine's first run the slower (x2ap's copy suite took 11.3 s, its second run
        # 9.1 s; x2ai's p2p 6.0 s, that host's fourth run 4.7 s): within 5% of their mean wall
        assert suite.seconds == pytest.approx(np.mean([w[suite.name] for w in walls]), rel=0.05), suite




# The 4x H200 default sweeps of one timing core each: that of 02754e3 (method held-3) on six
# hosts, three the plan was fitted to and three held out; that of d378323 (calibration's reading
# is the first trial: a trial fewer a point) on two, the newest reference host and one held out.
# The plan of each stands on the reference runs up to its own (their start before the cut), the
# newest of them its basis.
ERAS = {
    "02754e3": ("2026-11-27T15:30", ["h200-x4/x4[lno]-default-*"], ["heldout/h200-x4/*/x4[qrs]-default-*"]),
    "d378323": ("2026-11-27T17:05", ["h200-x4/x4w-default-*"], ["heldout/h200-x4/*/x4x-default-*"]),
    "2f9ebf8": ("2026-11-27T23:50", ["h200-x4/x4a[fgk]-default-*"], ["heldout/h200-x4/*/x4x-default-*"]),   # x4ak: 370cd59, the same core
    # today's (held staged copies round a ring of slots), fitted to x4aq's first and second runs,
    # given back on two hosts in no table (a301fcbd12f8's first run was a fresh machine's first
    # process, with no bytecode warm-up before it: 64.3 s of command wall)
    "a2e7fe0": ("2026-11-28T08:30", ["h200-x4/x4aq-default-*"],
                ["noise/launch/h200-x4/a301fcbd12f8/x4ao-default-*", "noise/launch/h200-x4/x4ao-default-1"]),
}


def _x4_sweeps(fitted: list[str], held_out: list[str]) -> list[Path]:
    return sorted([*(r for g in fitted for r in REFERENCE.glob(g)), *(r for g in held_out for r in REFERENCE.parent.glob(g))])


@pytest.mark.parametrize("era", ERAS)
def test_the_host_work_follows_the_hosts_pace_within_the_reference_hosts(era):
    # A default sweep's wall follows its host's pace: with each run's own (within the reference
    # hosts' paces) the plan gives back every 4x H200 run's suite walls within 10%, fitted to the
    # newest reference host of the runs' own timing core; with its basis host's pace alone, not
    # the slowest hosts'.
    machine = instance_machine(_cfg("instance=h200-x4").instance)
    planned, _ = plan_suites(_cfg(), machine)
    cut, fitted, held_out = ERAS[era]
    shipped = plan.Reference.find(machine)
    reference = plan.Reference(shipped.label, [r for r in shipped.runs if r.start_time < cut])
    quickest, slowest = reference.paces()
    basis_only = sum(plan.estimate_suite(p, machine, reference).seconds for p in planned)
    errors, unscaled = [], []
    for run in _x4_sweeps(fitted, held_out):
        walls = sum(json.loads((run / "meta.json").read_text())["suite_wall_s"].values())
        pace = min(max(reference_times.read_run(run).host_pace_s, quickest), slowest)
        got = sum(plan.estimate_suite(p, machine, reference, pace_here=pace).seconds for p in planned)
        errors.append(got / walls - 1)
        unscaled.append(basis_only / walls - 1)
    assert len(errors) == {"02754e3": 12, "d378323": 4, "2f9ebf8": 8, "a2e7fe0": 5}[era] and max(map(abs, errors)) <= 0.10, errors
    if era == "02754e3":
        assert max(map(abs, unscaled)) > 0.10


def test_the_plan_on_this_machine_reads_its_pace_within_the_reference_hosts():
    machine = instance_machine(_cfg("instance=h200-x4").instance)
    planned, _ = plan_suites(_cfg(), machine)
    reference = plan.Reference.find(machine)
    quickest, slowest = reference.paces()
    # the plan on this machine reads its pace, and goes no further than the kind's reference hosts
    for read, expect in ((slowest * 3, slowest), (quickest / 3, quickest)):
        fixed = plan.estimate(_cfg(), planned, replace(machine, here=True), pace_here=lambda: read)
        assert fixed.pace_here_s == expect and fixed.pace_basis_s == reference.pace_s()
        assert f"host's work scaled {expect / reference.pace_s():.2f}x" in plan.format_plan(fixed)
    assert plan.estimate(_cfg(), planned, machine).pace_here_s is None   # another machine keeps its basis's


def test_collectives_points_are_what_the_reference_sweep_measured():
    got = _plan(_cfg(*THEN, "suite=collectives"), _h200(2)).suites[0].points
    measured = read_samples(MAIN_SWEEP / "samples.parquet")
    assert got == len(measured[measured.suite == "collectives"][POINT_KEYS].drop_duplicates())


def test_a_reference_run_sets_the_per_point_cost(tmp_path):
    # The same run with 10 s more on its wall clock: 10 s more, spread over its points. (Both walls
    # are above the model's start-up and timing, whose excess the fit takes as per-point cost.)
    source = REFERENCE / "h200-x2" / "20261122-214411"
    cfg = _cfg(*THEN, "suite=collectives", "collectives.ops=[all_reduce,all_gather]", "sizes.min=64KiB",
               "sizes.max=16MiB", "sizes.factor=4")
    estimates = []
    for extra in (5.0, 15.0):
        run = tmp_path / str(extra) / "h200-x2" / source.name
        shutil.copytree(source, run)
        meta = json.loads((run / "meta.json").read_text())
        meta["suite_wall_s"]["collectives"] += extra
        (run / "meta.json").write_text(json.dumps(meta))
        estimates.append(_plan(cfg, _h200(2), root=run.parent.parent).suites[0])
    assert estimates[1].seconds - estimates[0].seconds == pytest.approx(10.0)
    assert estimates[1].seconds == pytest.approx(meta["suite_wall_s"]["collectives"], rel=0.05)
    assert estimates[0].basis == f"per-op times h200-x2; per-point cost h200-x2/{source.name}"
    model = _plan(cfg, _h200(2), root=tmp_path / "nothing").suites[0]
    assert model.basis.startswith("model") and model.points == estimates[0].points


def test_the_shipped_reference_table_is_the_committed_runs():
    fresh = reference_times.table_text(reference_times.folder_runs(REFERENCE))
    assert fresh == reference_times.TABLE.read_text(), \
        "bench/driver/reference_times.json is stale: run python scripts/make_reference_times.py"


def test_the_shipped_table_plans_as_the_run_folders_do():
    cfg = _cfg(*THEN, "suite=collectives", "collectives.ops=[all_reduce,all_gather]", NCCL_GRAPHS)
    from_table, from_folders = _plan(cfg, _h200(2)), _plan(cfg, _h200(2), root=REFERENCE)
    assert from_table.seconds == pytest.approx(from_folders.seconds, rel=1e-9)
    assert from_table.suites[0].basis == from_folders.suites[0].basis
    assert "(" not in from_table.suites[0].basis.split(";")[0]   # every point's time from a reference series


def test_a_missing_or_foreign_table_plans_from_the_model(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps({"columns": ["suite"], "kinds": {"h200-x2": []}}))
    assert reference_times.shipped(tmp_path / "other.json") == {}
    assert reference_times.shipped(tmp_path / "missing.json") == {}


def test_another_world_size_scales_by_the_bus_factor():
    reference = plan.Reference.find(_h200(2))
    ctx = Context("cuda", TimingConfig(), [1 << 30], world_size=8, launches=("eager",))
    point = suites.get("collectives").points(_cfg(*THEN, "collectives.ops=[all_reduce]").collectives, ctx)[0]
    two = reference.op_time(point.__class__(**{**point.__dict__, "world_size": 2}), "")
    eight = reference.op_time(point, "")
    assert eight / two == pytest.approx(1.75, rel=0.01)   # 2(n-1)/n: 1 on 2 GPUs, 1.75 on 8


def test_a_gpu_model_without_its_own_reference_borrows_the_one_with_most_gpus():
    assert plan.Reference.find(_h200(8)).label == "h200-x4"
    assert plan.Reference.find(Machine("a100-x8", "cuda", 8, gpu_model="a100", here=False)) is None


def test_resumed_runs_count_only_what_is_left():
    cfg = _cfg("suite=collectives", "collectives.ops=[all_reduce]")
    machine = _h200(2)
    full = _plan(cfg, machine)
    planned, _ = plan_suites(cfg, machine)
    points = planned[0].points()
    half = plan.estimate(cfg, planned, machine, done={point_key(p) for p in points[::2]})
    assert half.points == full.points - len(points[::2]) and half.seconds < full.seconds


# ---------------------------------------------------------------- many GPUs (fake topologies)


def test_scaling_worlds_are_capped_at_the_gpus_present():
    cfg = _cfg("suite=collectives", "collectives.nproc=[2,4,8]")
    ctx = Context("cuda", TimingConfig(), [8], gpu_count=4)
    assert world_sizes(cfg.collectives, ctx) == [2, 4]
    by_world = _plan(cfg, _h200(4)).suites[0].points
    one_world = _plan(_cfg("suite=collectives"), _h200(4)).suites[0].points
    assert by_world == 2 * one_world


def test_eight_gpus_default_collectives_points():
    got = {s.name: s for s in _plan(_cfg(), _h200(8)).suites}
    # 16 ladder sizes eager and the 6 up to 64 KiB held (timing.held_max_size), 7 ops through torch;
    # through nccl the 12 up to 16 MiB (collectives.nccl_max_size), eager only (collectives.nccl_launch)
    assert got["collectives"].points == (16 + 6) * 7 + 12 * 7
    assert got["collectives"].basis.startswith("per-op times h200-x4")


# The pair ops of the matrices; SM copies, concurrent traffic and latency have their own sizes.
PAIR_OPS = ("suite=p2p", "p2p.ops=[uni,bidir]", "p2p.engine=[ce]")


@pytest.mark.skipif(not _p2p_hooked(), reason="p2p.points does not take bench.pairs' default yet")
def test_eight_gpus_p2p_sweeps_one_pair_per_link_class():
    # Two NVLink islands of four GPUs on two sockets: NV18 within an island, SYS across.
    links = {f"{i},{j}": "NV18" if i // 4 == j // 4 else "SYS" for i in range(8) for j in range(8) if i != j}
    got = _plan(_cfg(*PAIR_OPS), _h200(8, links)).suites[0]
    ends, middle = 2, 10  # 4 KiB and 1 GiB; the 10 ladder sizes between
    per_size_all = (56 + 28) * 2   # ordered pairs uni, unordered bidir; peer and staged
    per_size_classes = 2 * 2 * 2   # two classes, uni and bidir, peer and staged
    # Held again up to timing.held_max_size (64 KiB): peer copies of every pair at 4 KiB and of the
    # classes at 16 and 64 KiB; staged ones of the classes at all three.
    held = per_size_all // 2 + per_size_classes // 2 + 2 * per_size_classes
    assert got.points == ends * per_size_all + middle * per_size_classes + held


@pytest.mark.skipif(not _p2p_hooked(), reason="p2p.points does not take bench.pairs' default yet")
def test_p2p_by_link_class_is_what_lets_8_gpus_scale():
    auto, every = (_plan(_cfg(*PAIR_OPS, f"p2p.pairs={spec}"), _h200(8)).suites[0] for spec in ("auto", "all"))
    # held at 4, 16 and 64 KiB: every pair's peer copies at 4 KiB, staged ones only on the class's pair (auto)
    held_every, held_auto = 3 * (56 + 28) * 2, (56 + 28) + 2 * 2 + 3 * 2
    assert every.points == 12 * (56 + 28) * 2 + held_every and auto.points == 2 * (56 + 28) * 2 + 10 * 2 * 2 + held_auto
    assert auto.seconds < every.seconds / 3


def test_instance_machine_is_nvswitch_where_it_has_nvlink():
    cfg = _cfg("instance=p5.48xlarge")
    machine = instance_machine(cfg.instance)
    assert machine.gpus == 8 and set(machine.speeds.classes.values()) == {"NV18"} and machine.gpu_model == "h100"
    pcie_only = instance_machine(_cfg("instance=g6e.48xlarge").instance)
    assert set(pcie_only.speeds.classes.values()) == {"SYS"}


# ---------------------------------------------------------------- what is printed


def test_a_long_run_says_so_plainly():
    short = plan.Plan(_h200(2), [plan.SuiteEstimate("copy", 10, 50.0, 10.0, "model")])
    long = plan.Plan(_h200(2), [plan.SuiteEstimate("copy", 9000, 700.0, 100.0, "model")])
    assert plan.start_line(short) == "xferbench: 10 points (copy 10), about 1 min 0 s"
    assert "more than 10 minutes (about 13 min)" in plan.start_line(long)
    assert "more than 10 minutes" in plan.format_plan(long) and "more than" not in plan.format_plan(short)


@pytest.mark.parametrize("seconds, text", [(44.6, "45 s"), (91, "1 min 31 s"), (840, "14 min"), (7500, "2 h 5 min")])
def test_durations(seconds, text):
    assert plan.duration(seconds) == text


def test_plan_true_prints_points_and_estimate_and_makes_no_folder(xferbench, tmp_path):
    proc, runs = xferbench("plan=true", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not runs and not (tmp_path / "results").exists()
    lines = proc.stdout.splitlines()
    assert lines[0] == "xferbench plan for cpu: no GPU (cpu); nothing measured"
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.split() and line.split()[0] in
            ("copy", "collectives", "total")}
    assert int(rows["total"][1]) == int(rows["copy"][1]) + int(rows["collectives"][1])
    assert "p2p: skipped, needs 2 or more GPUs, found 0" in proc.stdout


def test_plan_for_a_catalogued_machine_from_here(xferbench):
    proc, runs = xferbench("plan=true", "instance=h200-x2", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not runs
    assert proc.stdout.startswith("xferbench plan for h200-x2: 2 GPU(s) (NV18); nothing measured")
    # the newest main sweep and the other of its host
    assert "per-point cost h200-x2/x2ap-default-1, h200-x2/x2ap-default-2" in proc.stdout


def test_every_run_prints_its_estimate_first(xferbench):
    proc, runs = xferbench("suite=copy", "sizes.max=16KiB", "timing.trials=1")
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("xferbench: 2 points (copy 2), about ") and len(runs) == 1   # 4 KiB, 16 KiB: x4 below 64 KiB


# ---------------------------------------------------------------- the size ladder


def test_ladder_keeps_named_sizes_and_the_max():
    steps = ["8B:x8", "64KiB:x4", "1MiB:x2", "16MiB:x4"]
    got = [format_size(s) for s in ladder("8B", "4GiB", 2, steps)]
    assert got == ["8B", "64B", "512B", "4KiB", "32KiB", "64KiB", "256KiB", "1MiB", "2MiB", "4MiB", "8MiB",
                   "16MiB", "64MiB", "256MiB", "1GiB", "4GiB"]
    assert ladder("8B", "3GiB", 2, steps)[-2:] == [1 << 30, 3 << 30]   # a max off the grid still ends it
    assert ladder("4KiB", "64KiB", 8, ["4KiB:x2"]) == [4096, 32768, 65536]   # never finer than sizes.factor
    assert ladder("8B", "1MiB", 2, []) == sweep("8B", "1MiB", 2)


@pytest.mark.parametrize("steps, message", [(["1MiB"], "not SIZE:xFACTOR"), (["1MiB:x1"], "factor >= 2"),
                                            (["lots:x2"], "not a size")])
def test_bad_ladders_are_one_line(steps, message):
    with pytest.raises(ConfigError, match=message):
        _cfg(f"sizes.collectives.ladder=[{','.join(steps)}]")


def test_the_old_x2_sweep_is_one_setting_away():
    cfg = _cfg("sizes.collectives.ladder=[]")
    assert suite_sizes(cfg, suites.get("collectives"), "cuda") == sweep("8B", "4GiB", 2)
    assert len(suite_sizes(_cfg(), suites.get("collectives"), "cuda")) == 16


def _line_errors(series: pd.DataFrame, kept: list[int]) -> list[float]:
    """Each left-out size's distance from the log-log line through the kept sizes around it."""
    x, t = np.log(series.index.to_numpy(float)), np.log(series.to_numpy(float))
    keep = np.isin(series.index, kept)
    return [abs(math.exp(np.interp(x[i], x[keep], t[keep]) - t[i]) - 1) for i in np.flatnonzero(~keep)]


def test_the_ladder_leaves_out_only_what_its_neighbours_predict():
    # On the committed 2x H200 sweep, the x2 points the default ladder leaves out sit no further
    # from the line through their ladder neighbours than measured x2 points sit from the line
    # through theirs (the curves' own roughness, mostly noise), and within 2% where bandwidth
    # is flat (64 MiB and up).
    frame = pd.read_parquet(MAIN_SWEEP / "samples.parquet")
    frame = frame[(frame.suite == "collectives") & (frame.part == "total")]
    steps = _cfg().sizes.collectives.ladder
    left_out, roughness, flat = [], [], []
    for _, g in frame.groupby(["op", "launch"]):
        series = g.groupby("size_bytes").time_s.median()
        sizes = series.index.to_list()
        kept = [s for s in sizes if any(abs(math.log2(s / k)) < 0.5 for k in ladder(min(sizes), max(sizes), 2, steps))]
        errors = _line_errors(series, kept)
        left_out += errors
        flat += [e for e, s in zip(errors, [s for s in sizes if s not in kept]) if s >= 64 << 20]
        roughness += _line_errors(series, sizes[::2]) + _line_errors(series, sizes[:1] + sizes[1::2] + sizes[-1:])
    assert np.median(left_out) <= np.median(roughness)
    assert np.median(flat) <= 0.02


def test_oversubscribed_ranks_share_their_cores_in_the_plan(monkeypatch):
    """collectives.oversubscribe=true, 8 ranks on 2 cores: each world's start-up and every
    operation's host work take 4x as long as with one rank a core."""
    monkeypatch.setattr(plan.os, "sched_getaffinity", lambda pid: {0, 1})
    cpu = Machine("cpu", "cpu", 0)
    two = _plan(_cfg("suite=collectives", "collectives.nproc=[2]", "device=cpu"), cpu).suites[0]
    eight = _plan(_cfg("suite=collectives", "collectives.nproc=[8]", "collectives.oversubscribe=true", "device=cpu"),
                  cpu).suites[0]
    assert eight.points == two.points and eight.seconds == pytest.approx(4 * two.seconds, rel=0.05)
    # The plan names each suite's worlds of ranks, and how they crowd the cores.
    assert two.worlds == "world sizes [2]"
    assert eight.worlds == ("world sizes [8]; 8 ranks on 2 CPU cores, up to 4 a core: a world's start and host work "
                            "take as many times as long")
    assert "\n  collectives: world sizes [8]; 8 ranks" in plan.format_plan(plan.Plan(cpu, [eight]))


@pytest.mark.parametrize("host, run, args", [
    ("h200-x1", "quick", ("suite=pipeline", "pipeline.workers=[0,4,8]", "timing.trials=6")),   # the former default
    ("h200-x1", "full", ("suite=pipeline-full",)),
    ("h200-x4", "full", ("suite=pipeline-full",)),
])
def test_the_pipeline_plan_counts_its_rounds(host, run, args):
    # Committed runs of 2026-11-27 on nvidia-h200 and 4x H200: the plan for their instance, from
    # this machine (workers capped at that host's cores, not these), counts their points and is
    # within 15% of their walls (from the settings, never a reference run's per-point cost); a
    # run of one round, its trials in one segment a point, is planned shorter.
    folder = REFERENCE.parent / "noise" / f"pipeline-{host}" / "quick" / run
    meta = json.loads((folder / "meta.json").read_text())
    machine = instance_machine(_cfg(f"instance={host}").instance)
    planned = _plan(_cfg(*args), machine).suites[0]
    assert planned.points == len(read_samples(folder / "samples.parquet")[POINT_KEYS].drop_duplicates())
    assert planned.seconds == pytest.approx(meta["suite_wall_s"]["pipeline"], rel=0.15)
    assert _plan(_cfg(*args, "pipeline.rounds=1"), machine).suites[0].seconds < 0.75 * planned.seconds


@pytest.mark.parametrize("instance", ["h200-x1", "h200-x4"])
def test_the_pipelines_default_is_planned_under_50_s_and_its_full_sweep_far_longer(monkeypatch, instance):
    """suite=pipeline answers in under 50 s on nvidia-h200 and on a four-GPU host, start-up
    included, with that host's cores whatever this machine's; suite=pipeline-full plans more
    than three times as long."""
    monkeypatch.setattr("bench.suites.pipeline.model.usable_cores", lambda: 2)
    machine = instance_machine(_cfg(f"instance={instance}").instance)
    quick = _plan(_cfg("suite=pipeline"), machine)
    full = _plan(_cfg("suite=pipeline-full"), machine)
    assert quick.points == 40 and quick.seconds < 50 and full.seconds > 3 * quick.seconds   # 0 and 8 workers
    assert quick.suites[0].basis.startswith("per-op times") and "per-point cost" not in quick.suites[0].basis
