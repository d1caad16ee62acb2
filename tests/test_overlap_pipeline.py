"""The overlap and pipeline suites without a GPU: planning, the rows a pair or a sync step gives,
the data checks, the loader loop for real (workers included), tables and figures."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from bench import ConfigError, plots
from bench.results import load
from bench.suites import Context, Point, overlap, pipeline
from bench.timing import Trial, TimingConfig
from synthetic import write_run

MiB = 1 << 20


def _cfg(overlap_settings=None, pipeline_settings=None) -> SimpleNamespace:
    return SimpleNamespace(overlap=overlap_settings or overlap.Settings(),
                           pipeline=pipeline_settings or pipeline.Settings(), sizes=SimpleNamespace(cpu_max="16MiB"))


def _ctx(device="cuda", gpus=1, world=1) -> Context:
    return Context(device, TimingConfig(), [4096], gpu_count=gpus, world_size=world)


# ---------------------------------------------------------------- planning


def test_overlap_plans_pairs_syncs_and_tensors_with_all_reduce_last():
    cfg = _cfg()
    assert overlap.world_sizes(cfg, _ctx(gpus=1)) == [1]
    assert overlap.world_sizes(cfg, _ctx(gpus=2)) == [2]
    no_reduce = _cfg(overlap.Settings(ops=[overlap.OverlapOp.h2d, overlap.OverlapOp.peer]))
    assert overlap.world_sizes(no_reduce, _ctx(gpus=8)) == [1]  # no idle ranks beside rank 0's copies

    pts = overlap.points(cfg, _ctx(gpus=2, world=2))
    pairs = [(p.op, p.memory) for p in pts if p.mode == "mm8192"]
    assert pairs == [("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"), ("d2h", "pageable"),
                     ("peer", "device"), ("all_reduce", "device")]
    assert pts[-1].op == "all_reduce" and pts[-1].world_size == 2 and pts[-1].dtype == "bfloat16"
    assert pts[-1].size_bytes == 256 * MiB and pts[-1].backend == "nccl"
    syncs = [(p.op, p.mode) for p in pts if p.op.startswith("sync_")]
    assert len(syncs) == 8 and set(syncs) == {(f"sync_{k}", s) for k in overlap.SYNCS for s in ("idle", "busy")}
    made = [(p.memory, p.size_bytes, p.src) for p in pts if p.op == "make_tensor"]
    assert len(made) == 9 and ("device", 4096, "cuda:0") in made and ("pageable", 64 * MiB, "host") in made
    assert len({p for p in pts}) == len(pts)  # every point is its own in the results


def test_overlap_skips_without_a_gpu():
    assert overlap.check(_cfg(), _ctx(device="cpu")) == "needs a CUDA GPU"


@pytest.mark.parametrize("kw, message", [
    (dict(matmul=8), "overlap.matmul=8: must be >= 16"),
    (dict(sizes=["lots"]), "overlap.sizes='lots': not a size"),
    (dict(make_sizes=[]), "overlap.make_sizes is empty"),
])
def test_overlap_settings_are_checked(kw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        overlap.Settings(**kw)


def test_pipeline_grid_is_the_best_loop_and_each_switch_changed_alone():
    base = pipeline.Loop(4, True, True, True)
    ablation = pipeline.loops(pipeline.Settings(), "cuda")
    assert ablation[0] == base and len(ablation) == 6
    changed = [{k for k in ("workers", "pin_memory", "non_blocking", "prefetch") if getattr(lp, k) != getattr(base, k)}
               for lp in ablation[1:]]
    assert all(len(c) == 1 for c in changed)
    assert sorted(lp.workers for lp in ablation) == [0, 2, 4, 4, 4, 4]
    full = pipeline.loops(pipeline.Settings(grid=pipeline.Grid.full), "cuda")
    assert len(set(full)) == 24
    assert pipeline.loops(pipeline.Settings(), "cpu") == [pipeline.Loop(0), pipeline.Loop(2), pipeline.Loop(4)]
    for lp in full:   # a row's memory and mode name its loop
        assert pipeline.Loop.of(lp.memory, lp.mode()) == lp


def test_pipeline_sizes_points_and_the_cpu_cap():
    cfg = _cfg()
    assert pipeline.batch_sizes(cfg, "cuda") == [64 * 1024 * 4 ** i for i in range(7)]   # 64KiB .. 256MiB
    assert pipeline.batch_sizes(cfg, "cpu")[-1] == 16 * MiB
    odd = _cfg(pipeline_settings=pipeline.Settings(sample_size="48KiB", min_size="64KiB", max_size="1MiB"))
    assert pipeline.batch_sizes(odd, "cuda") == [48 * 1024, 240 * 1024, 1008 * 1024]   # whole samples
    pts = pipeline.points(cfg, _ctx())
    assert [p.op for p in pts[:7]] == ["h2d"] + ["loader_to_gpu"] * 6    # the link beside each size's loops
    loop = pts[1]
    assert (loop.memory, loop.mode, loop.dtype) == ("pinned", "workers=4 non_blocking prefetch", "uint8[65536]")
    cpu = pipeline.points(cfg, _ctx(device="cpu", gpus=0))
    assert {p.op for p in cpu} == {"loader"} and {p.mode for p in cpu} == {"workers=0", "workers=2", "workers=4"}


@pytest.mark.parametrize("kw, message", [
    (dict(sample_size="1MiB"), "pipeline.sample_size=1MiB: is larger than pipeline.min_size=64KiB"),
    (dict(min_size="1GiB"), "pipeline.min_size=1GiB: is larger than pipeline.max_size=256MiB"),
    (dict(workers=[2, -1]), "pipeline.workers=-1: must be >= 0"),
    (dict(prefetch=[]), "pipeline.prefetch is empty"),
])
def test_pipeline_settings_are_checked(kw, message):
    with pytest.raises(ConfigError, match=message):
        pipeline.Settings(**kw)


def test_pipeline_refuses_batches_that_do_not_fit_in_shared_memory(monkeypatch):
    monkeypatch.setattr(pipeline, "_free_bytes", lambda path: 64 * MiB)   # docker's default /dev/shm
    with pytest.raises(ConfigError, match="/dev/shm, which has 64.0 MiB free"):
        pipeline.check(_cfg(), _ctx(device="cpu", gpus=0))


# ---------------------------------------------------------------- balancing and rows


@pytest.mark.parametrize("transfer, product, expected", [
    (4.9, 1.45, (2, 7)),     # pinned 256 MiB h2d beside an 8192 product: 9.8 against 10.15 ms
    (18.0, 1.45, (1, 12)),   # pageable: one copy is worth twelve products
    (0.69, 1.45, (2, 1)),    # a peer copy is the shorter one
    (1.0, 1.0, (1, 1)),
])
def test_balance_keeps_both_streams_equally_busy(transfer, product, expected):
    c, m = overlap.balance(transfer, product)
    assert (c, m) == expected
    assert abs(c * transfer - m * product) <= overlap.BALANCE_GAP * max(c * transfer, m * product)


def test_balance_takes_the_closest_when_none_is_close_enough():
    c, m = overlap.balance(1.0, 1.5, most=2)   # k=1 gives 2:1, 25% apart; k=2 gives 3:2, exact
    assert (c, m) == (3, 2)
    c, m = overlap.balance(1.0, 1.45, most=1)
    assert (c, m) == (1, 1)


def _trials(per_op: float, iters: int, parts=None, n: int = 3, jitter: float = 0.0) -> list[Trial]:
    return [Trial(iters, per_op * iters * (1 + jitter * i), dict(parts or {})) for i in range(n)]


PAIR = Point("overlap", "h2d", 64 * MiB, memory="pinned", mode="mm4096", backend="cuda", src="host", dst="cuda:0")


def _pair_rows(copied=True, computed=True, point=PAIR, factor=1.0) -> list:
    copy_s, mm_s, (c, m) = 2e-3, 0.5e-3, (1, 4)
    # Two streams: each side as long as alone plus 5%, the round 10% over the longer side.
    concurrent = _trials(2.2e-3, 5, {"copy": 5 * c * copy_s * 1.05, "compute": 5 * m * mm_s * 1.05})
    return overlap.pair_rows(point, _trials(copy_s, 10), _trials(mm_s, 40), concurrent,
                             _trials(4e-3, 5), (c, m), factor, copied, computed)


def test_pair_rows_carry_gbps_per_transfer_round_times_and_the_overlap():
    rows = pd.DataFrame([vars(r) for r in _pair_rows()])
    assert set(rows.part) == set(overlap.PAIR_PARTS) and (rows.groupby("part").size() == 3).all()
    first = rows[rows.trial == 0].set_index("part")
    assert first.time_s["copy_alone"] == pytest.approx(2e-3)
    assert first.algbw_gbps["copy_alone"] == pytest.approx(64 * MiB / 2e-3 / 1e9)
    assert first.time_s["copy_during_compute"] == pytest.approx(2.1e-3)
    assert first.time_s["compute_during_copy"] == pytest.approx(0.525e-3)
    assert first.iters["compute_during_copy"] == 20 and first.iters["total"] == 5
    assert math.isnan(first.algbw_gbps["compute_alone"])   # TFLOP/s: flops_of(mode) / time_s
    assert first.time_s["serial"] == pytest.approx(4e-3)
    assert first.algbw_gbps["total"] == pytest.approx(64 * MiB / 2.2e-3 / 1e9)   # bytes of a round over its time
    assert "overlap 1.82 on two streams; a round: 1 x h2d + 4 x mm4096" in first.note["total"]
    assert first.note["one_stream"].startswith("overlap 1.00 on one stream")
    assert rows.verified.all() and (rows.status == "ok").all()


@pytest.mark.parametrize("copied, computed, why", [(False, True, "transfer's data differs"),
                                                    (True, False, "product differs from a float32 reference")])
def test_a_failed_check_fails_every_row_of_the_pair(copied, computed, why):
    rows = pd.DataFrame([vars(r) for r in _pair_rows(copied, computed)])
    assert (rows.status == "failed").all() and not rows.verified.any()
    assert rows.algbw_gbps.isna().all() and rows.note.str.contains(why).all()


def test_sync_rows_cost_is_the_step_less_the_work_alone():
    point = Point("overlap", "sync_item", 0, mode="busy", backend="cuda", src="cuda:0", dst="cuda:0")
    rows = pd.DataFrame([vars(r) for r in overlap.sync_rows(point, _trials(50e-6, 400, jitter=0.01),
                                                            _trials(30e-6, 600, jitter=0.02), True, "work: x")])
    cost = rows[rows.part == "cost"].time_s.to_numpy()
    assert cost == pytest.approx([19.4e-6, 19.9e-6, 20.4e-6])   # each step trial less the median work (30.6 µs)
    assert set(rows.part) == {"step", "work", "cost"} and rows.algbw_gbps.isna().all()
    assert (rows.part != "total").all()   # no bandwidth: kept out of the curves and the summary
    failed = overlap.sync_rows(point, _trials(50e-6, 400), _trials(30e-6, 600), False, "work: x")
    assert {r.status for r in failed} == {"failed"}


def test_matmul_check_passes_a_product_and_catches_a_wrong_one():
    mm = overlap.Matmul(64, "cpu", seed=3)
    assert not mm.correct()              # nothing computed yet: C is zero
    mm(2)
    assert mm.correct() and mm.flops == 2 * 64 ** 3 == overlap.flops_of("mm64")
    mm.c[5, 7] += mm.c.abs().max() * 0.1
    assert not mm.correct()
    mm.c.copy_(mm.b @ mm.a)              # the other product: the right shape and scale, the wrong data
    assert not mm.correct()
    assert math.isnan(overlap.flops_of("idle"))


# ---------------------------------------------------------------- the loader loop, for real


class _Swapped(pipeline.SyntheticSamples):
    """Two samples exchanged, as a loader that reorders would deliver them."""

    def __getitem__(self, i: int) -> torch.Tensor:
        return super().__getitem__({5: 6, 6: 5}.get(i, i))


@pytest.mark.parametrize("workers", [0, 2])
def test_feed_delivers_checked_batches_in_order(workers):
    feed = pipeline.Feed(4, 1024, pipeline.Loop(workers), torch.device("cpu"))
    try:
        feed(3 + feed.queued)
        assert feed.consumed == 3 + 2 * workers and feed.correct()
    finally:
        feed.close()


def test_feed_check_catches_reordered_samples(monkeypatch):
    monkeypatch.setattr(pipeline, "SyntheticSamples", _Swapped)
    feed = pipeline.Feed(4, 1024, pipeline.Loop(0), torch.device("cpu"))
    feed(1)
    assert feed.correct()      # samples 0..3 are untouched
    feed(1)
    assert not feed.correct()  # the second batch holds 4, 6, 5, 7
    feed.close()


def test_loop_timing_drains_the_workers_queue_first():
    feed = SimpleNamespace(queued=8)
    t = pipeline.loop_timing(Context("cpu", TimingConfig(warmup=3, min_trial_s=0.01), [1]), 0.02, feed)
    assert (t.warmup, t.min_trial_s, t.min_iters) == (9, 0.02, pipeline.MIN_BATCHES)


def test_training_suite_on_a_cpu_runs_the_loader_alone(xferbench):
    proc, runs = xferbench("suite=training", "pipeline.workers=[0,2]", "pipeline.max_size=256KiB",
                           "pipeline.min_trial_s=0.01", "timing.trials=3", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "overlap: skipped, needs a CUDA GPU" in proc.stderr
    df = load(runs)
    assert set(df.suite) == {"pipeline"} and set(df.op) == {"loader"} and set(df.part) == {"total"}
    assert (df.status == "ok").all() and df.verified.all() and (df.algbw_gbps > 0).all()
    assert sorted(df.size_bytes.unique()) == [64 * 1024, 256 * 1024]
    assert set(df["mode"]) == {"workers=0", "workers=2"} and set(df.dtype) == {"uint8[65536]"}
    assert (df.iters >= pipeline.MIN_BATCHES).all()
    table = pipeline.table(df)
    assert len(table) == 4 and "of_link" not in table   # no link without a GPU
    one = df[(df["mode"] == "workers=2") & (df.size_bytes == 256 * 1024)]
    row = table[(table["mode"] == "workers=2") & (table["size"] == "256KiB")].iloc[0]
    assert row.batch == 4 and row.samples_per_s == pytest.approx(4 / one.time_s.median(), rel=1e-3)
    assert "loader" in proc.stdout   # the run's summary


def test_overlap_alone_on_a_cpu_is_one_line_and_exit_2(xferbench_in_process):
    code, stderr, _ = xferbench_in_process("suite=overlap")
    assert code == 2
    assert stderr.strip().endswith("nothing to run here: overlap: skipped, needs a CUDA GPU")


@pytest.mark.parametrize("args, message", [
    (["suite=overlap", "overlap.ops=[h2d,teleport]"], "overlap.ops: 'teleport' is not allowed; choose from: h2d, d2h"),
    (["suite=pipeline", "pipeline.grid=some"], "pipeline.grid: 'some' is not allowed; choose from: ablation, full"),
    (["suite=pipeline", "pipeline.sample_size=1MiB"], "pipeline.sample_size=1MiB: is larger than pipeline.min_size"),
])
def test_bad_settings_are_one_line_exit_2(xferbench_in_process, args, message):
    code, stderr, runs = xferbench_in_process(*args)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1
    assert not runs


# ---------------------------------------------------------------- tables and figures


def _overlap_run() -> list:
    rows = _pair_rows()
    ar = Point("overlap", "all_reduce", 64 * MiB, memory="device", mode="mm4096", backend="nccl", world_size=2,
               dtype="bfloat16")
    rows += _pair_rows(point=ar, factor=1.0)
    for kind in overlap.SYNCS:
        for state, step, work in (("idle", 12e-6, 4e-6), ("busy", 45e-6, 30e-6)):
            point = Point("overlap", f"sync_{kind}", 0, mode=state, backend="cuda", src="cuda:0", dst="cuda:0")
            rows += overlap.sync_rows(point, _trials(step, 100), _trials(work, 100), True, "work")
    for size in (4096, MiB):
        for memory, us in (("pageable", 80), ("pinned", 60), ("device", 6)):
            point = Point("overlap", "make_tensor", size, memory=memory, backend="cuda", dst="cuda:0")
            rows += [point.sample(trial=0, iters=10, time_s=us * 1e-6, algbw_gbps=size / us / 1e3, verified=True)]
    return rows


def _pipeline_run() -> list:
    rows = []
    for size in (64 * 1024, MiB, 16 * MiB):
        link = Point("pipeline", "h2d", size, memory="pinned", backend="cuda", src="host", dst="cuda:0")
        rows.append(link.sample(trial=0, iters=10, time_s=size / 50e9, algbw_gbps=50.0, verified=True))
        for lp, gbps in ((pipeline.Loop(4, True, True, True), 20.0), (pipeline.Loop(0, True, True, True), 5.0),
                         (pipeline.Loop(4, False, True, True), 10.0)):
            point = Point("pipeline", "loader_to_gpu", size, memory=lp.memory, mode=lp.mode(), backend="cuda",
                          src="host", dst="cuda:0", dtype=pipeline.sample_dtype(64 * 1024))
            rows.append(point.sample(trial=0, iters=10, time_s=size / (gbps * 1e9), algbw_gbps=gbps, verified=True))
    return rows


@pytest.fixture(scope="module")
def runs_frame(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_run(root / "overlap", _overlap_run(), instance="h200-x2", pcie_gen=5, pcie_width=16)
    write_run(root / "pipeline", _pipeline_run(), instance="h200-x1", pcie_gen=5, pcie_width=16)
    return load(root)


def test_tables_of_overlap_and_pipeline_runs(runs_frame):
    pairs = overlap.table(runs_frame).set_index("op")
    assert list(pairs.index) == ["h2d", "all_reduce"]
    h2d = pairs.loc["h2d"]
    assert h2d["round"] == "1+4" and h2d["size"] == "64MiB"
    assert h2d.overlap == pytest.approx(4e-3 / 2.2e-3, abs=0.01) and h2d.overlap_one_stream == 1.0
    assert h2d.tflops == pytest.approx(2 * 4096 ** 3 / 0.5e-3 / 1e12, abs=0.1)
    assert h2d.tflops_copying == pytest.approx(h2d.tflops / 1.05, abs=0.1)
    assert h2d.copy_gbps == pytest.approx(33.6, abs=0.1)

    syncs = overlap.sync_table(runs_frame)
    assert list(syncs.op) == [f"sync_{k}" for k in overlap.SYNCS]
    assert syncs.cost_us_idle.tolist() == [8.0] * 4 and syncs.cost_us_busy.tolist() == [15.0] * 4
    made = overlap.make_table(runs_frame).set_index("size")
    assert made.loc["1MiB", "device_us"] == 6.0 and made.loc["4KiB", "pageable_us"] == 80.0

    pipe = pipeline.table(runs_frame)
    best = pipe[(pipe["mode"] == "workers=4 non_blocking prefetch") & (pipe.memory == "pinned")
                & (pipe["size"] == "1MiB")]
    assert best.of_link.item() == 0.4 and best.batch.item() == 16
    assert best.samples_per_s.item() == pytest.approx(20e9 / MiB * 16, rel=1e-6)


def test_overlap_and_pipeline_figures(runs_frame, tmp_path):
    colours = plots.palette(runs_frame)
    drawn = {p.name for f in (plots.overlap_figure, plots.sync_figure, plots.pipeline_figure)
             for p in f(runs_frame, tmp_path, ["png"], colours)}
    assert drawn == {"overlap.png", "sync.png", "pipeline.png"}
    for name in drawn:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    copies_only = runs_frame[runs_frame.suite != "pipeline"]
    assert plots.pipeline_figure(copies_only, tmp_path / "none") == []
    assert plots.overlap_figure(runs_frame[runs_frame.suite == "pipeline"], tmp_path / "none") == []


def test_overlap_and_pipeline_print_their_tables(runs_frame, capsys):
    folders = sorted(set(runs_frame.run_dir))
    assert overlap.main(folders) == 0
    out = capsys.readouterr().out
    assert "pairs: a transfer beside a bf16 product" in out and "sync_stream" in out and "device_us" in out
    assert pipeline.main(folders) == 0
    assert "of_link" in capsys.readouterr().out
    assert overlap.main([]) == 2
