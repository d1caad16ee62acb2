"""The overlap and pipeline suites without a GPU: planning, the rows a pair or a sync step gives,
the data checks, the loader loop for real (workers included), tables and figures."""
from __future__ import annotations

import functools
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import replace

import pandas as pd
import pytest
import torch

from bench import ConfigError, suites
from bench.measure.stream import measure_stream
from bench.measure.timing import Trial, TimingConfig
from bench.results import load, params_text
from bench.suites import pipeline
from bench.suites.overlap import (model as omodel, pairs as opairs, points as opoints, reading as oreading,
                                  syncs as osyncs, work as owork)
from bench.suites.pipeline import (feed as pfeed, figure as pfigure, measure as pmeasure, model as pmodel,
                                   source as psource, tables as ptables)
from bench.suites.pipeline import advice as padvice
from bench.suites.pipeline import causes as pcauses
from bench.suites.pipeline.rounds import round_timing
from bench.contract import Context, Point
from synthetic import write_run

MiB = 1 << 20
OVERLAP, PIPELINE = suites.get("overlap"), suites.get("pipeline")


def _ctx(device="cuda", gpus=1, world=1, size_cap=None) -> Context:
    return Context(device, TimingConfig(), [4096], gpu_count=gpus, world_size=world, size_cap=size_cap)


def _described(what):
    """The loop or stage a row names: its point's params as the results store them, read back."""
    return pmodel.descriptor(json.loads(params_text(what)))


# ---------------------------------------------------------------- planning


def test_overlap_plans_pairs_syncs_and_tensors_with_all_reduce_last():
    settings = omodel.Settings()
    assert opoints.world_sizes(settings, _ctx(gpus=1)) == [1]
    assert opoints.world_sizes(settings, _ctx(gpus=2)) == [2]
    no_reduce = omodel.Settings(ops=[omodel.OverlapOp.h2d, omodel.OverlapOp.peer])
    assert opoints.world_sizes(no_reduce, _ctx(gpus=8)) == [1]  # no idle ranks beside rank 0's copies

    pts = OVERLAP.points(settings, _ctx(gpus=2, world=2))
    pairs = [(p.op, p.memory) for p in pts if p.mode == "mm8192"]
    assert {p.params for p in pts if p.mode == "mm8192"} == {omodel.Product(8192)}   # the product beside each
    assert pairs == [("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"), ("d2h", "pageable"),
                     ("peer", "device"), ("all_reduce", "device")]
    assert pts[-1].op == "all_reduce" and pts[-1].world_size == 2 and pts[-1].dtype == "bfloat16"
    assert pts[-1].size_bytes == 256 * MiB and pts[-1].backend == "nccl"
    syncs = [(p.op, p.mode) for p in pts if p.op.startswith("sync_")]
    assert len(syncs) == 8 and set(syncs) == {(f"sync_{k}", s) for k in omodel.SYNCS for s in ("idle", "busy")}
    made = [(p.memory, p.size_bytes, p.src) for p in pts if p.op == "make_tensor"]
    assert len(made) == 9 and ("device", 4096, "cuda:0") in made and ("pageable", 64 * MiB, "host") in made
    assert len({p for p in pts}) == len(pts)  # every point is its own in the results


def test_overlap_skips_without_a_gpu():
    assert OVERLAP.check(omodel.Settings(), _ctx(device="cpu")) == "needs a CUDA GPU"


@pytest.mark.parametrize("kw, message", [
    (dict(matmul=8), "overlap.matmul=8: must be >= 16"),
    (dict(sizes=["lots"]), "overlap.sizes='lots': not a size"),
    (dict(make_sizes=[]), "overlap.make_sizes is empty"),
])
def test_overlap_settings_are_checked(kw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        omodel.Settings(**kw)


# suite=pipeline-full's settings (conf/suite/pipeline-full.yaml): the exhaustive sweep
FULL = dict(producers=[pmodel.Producer.numpy, pmodel.Producer.free], workers=[0, 4, 8], grid=pmodel.Grid.ablation,
            min_size="64KiB", max_size="16MiB", size_factor=4, rounds=5)


def test_pipeline_grid_is_the_base_loop_each_switch_changed_alone_and_the_defaults():
    Loop, Producer, sample = pmodel.Loop, pmodel.Producer, 64 * 1024
    base = Loop(Producer.numpy, sample, 8, True, True, True, 2, False, 1)
    ablation = pmodel.loops(pmodel.Settings(**FULL), "cuda", sample, cores=16)
    numpy_loops = [lp for lp in ablation if lp.producer == Producer.numpy]
    assert numpy_loops[0] == base and len(numpy_loops) == 9 and len(ablation) == 18
    # the DataLoader's defaults, at torch's default threads and at each other thread setting
    assert numpy_loops[-2] == pmodel.dataloader_defaults(Producer.numpy, sample) == Loop(Producer.numpy, sample, 0)
    assert numpy_loops[-1] == Loop(Producer.numpy, sample, 0, threads=1)
    changed = [{f for f in ("workers", "pin_memory", "non_blocking", "prefetch", "threads")
                if getattr(lp, f) != getattr(base, f)} for lp in numpy_loops[1:-2]]
    assert all(len(c) == 1 for c in changed) and {"threads"} in changed
    assert sorted(lp.workers for lp in numpy_loops) == [0, 0, 0, 4, 8, 8, 8, 8, 8]
    assert {lp.workers for lp in pmodel.loops(pmodel.Settings(), "cuda", sample, cores=2)} == {0, 2}   # capped
    # the quick default: the base at 0 and 8 workers and each thread setting, and the defaults at each
    quick = pmodel.loops(pmodel.Settings(), "cuda", sample, cores=16)
    assert quick == [base, replace(base, workers=0), replace(base, threads=0),
                     Loop(Producer.numpy, sample), Loop(Producer.numpy, sample, threads=1)]
    twins = pmodel.loops(pmodel.Settings(sharing=[pmodel.Sharing.file_system, pmodel.Sharing.file_descriptor]), "cuda",
                         sample, cores=16)
    assert replace(base, sharing=pmodel.Sharing.file_system) in twins and len(twins) == 6
    full = pmodel.loops(pmodel.Settings(grid=pmodel.Grid.full, producers=[Producer.free], workers=[0, 4, 8]), "cuda",
                        sample, cores=16)
    assert len(full) == 48
    knobs = pmodel.Settings(**FULL, prefetch_factor=[2, 4], persistent_workers=[False, True], epoch_batches=8)
    varied = pmodel.loops(knobs, "cuda", sample, cores=16)
    assert Loop(Producer.numpy, sample, 8, True, True, True, 2, True, 1) in varied   # each changed alone from the base ...
    assert Loop(Producer.numpy, sample, 8, True, True, True, 4, False, 1) in varied
    # ... where they matter
    assert all(lp.prefetch_factor == 2 and not lp.persistent_workers for lp in varied if not lp.workers)
    cpu = pmodel.loops(pmodel.Settings(producers=[Producer.numpy]), "cpu", sample, cores=16)
    assert cpu == [Loop(Producer.numpy, sample, 8, threads=1), Loop(Producer.numpy, sample, 0, threads=1),
                   Loop(Producer.numpy, sample, 8), Loop(Producer.numpy, sample, 0)]
    for lp in full + varied + cpu:   # a row's params name its loop
        assert _described(lp) == lp
    for grid, device in ((full, "cuda"), (varied, "cuda"), (cpu, "cpu")):   # and its memory and mode tell loops apart
        assert len({(lp.memory, lp.mode(device)) for lp in grid}) == len(grid)


def test_stages_of_a_loop_are_grouped_by_who_runs_them():
    Loop, Stage, P = pmodel.Loop, pmodel.Stage, pmodel.Producer
    names = lambda groups: {who: [f"{st.name}{'/' + st.memory if st.memory else ''}" for st in g]
                            for who, g in groups.items()}
    assert names(pmodel.stages_of(Loop(P.numpy, workers=4, pin_memory=True, non_blocking=True), True)) == {
        "4 workers": ["make", "collate"], "pin thread": ["handoff", "pin"], "copy engine": ["h2d/pinned"],
        "main thread": ["launch/pinned", "consume"]}
    assert names(pmodel.stages_of(Loop(P.numpy, workers=4, pin_memory=False, non_blocking=True), True)) == {
        "4 workers": ["make", "collate"], "main thread": ["handoff", "h2d/pageable", "consume"]}
    assert names(pmodel.stages_of(Loop(P.free, workers=0, pin_memory=True, non_blocking=False), True)) == {
        "main thread": ["make", "collate", "handoff", "pin", "h2d/pinned", "consume"]}
    assert names(pmodel.stages_of(Loop(P.numpy, workers=2), False)) == {
        "2 workers": ["make", "collate"], "main thread": ["handoff", "consume"]}
    assert pmodel.stages_of(Loop(P.numpy, workers=2), False)["main thread"][1] == Stage(pmodel.CONSUME, P.free, 2)
    assert pmodel.stages_of(Loop(P.numpy, workers=2), True)["main thread"][-1] == Stage(pmodel.CONSUME)
    groups = pmodel.stages_of(Loop(P.numpy, workers=4, pin_memory=False), True)
    assert groups["4 workers"][0] == Stage(pmodel.MAKE, P.numpy, 4)      # the loop's producer makes ...
    assert groups["main thread"][0] == Stage(pmodel.HANDOFF, P.free, 4)  # ... the free one feeds the host's stages
    for st in {st for g in groups.values() for st in g}:   # a row's params name its stage
        assert _described(st) == st
    sized = pmodel.stages_of(Loop(P.numpy, 64 * 1024, 4), True)   # a loop's stages are of its samples
    assert {st.sample_size for g in sized.values() for st in g} == {64 * 1024}


def test_pipeline_sizes_points_and_the_cpu_cap(monkeypatch):
    from bench.driver.schema import Config
    from bench.driver.sweep import size_cap

    monkeypatch.setattr(pmodel, "usable_cores", lambda: 16)
    settings = pmodel.Settings(**FULL)
    sample = 64 * 1024
    assert pipeline.batch_sizes(settings, _ctx(), sample) == [64 * 1024 * 4 ** i for i in range(5)]   # 64KiB .. 16MiB
    odd = pmodel.Settings(sample_sizes=["48KiB"], min_size="64KiB", max_size="1MiB", size_factor=4)
    assert pipeline.batch_sizes(odd, _ctx(), 48 * 1024) == [48 * 1024, 240 * 1024, 1008 * 1024]   # whole samples
    assert pipeline.batch_sizes(settings, _ctx(), MiB) == [MiB, 4 * MiB, 16 * MiB]   # none smaller than a sample
    small = pmodel.Settings(max_size="256MiB")
    cpu_cap = size_cap(Config(), "cpu")   # sizes.cpu_max, as the driver hands it to a suite without a GPU
    assert pipeline.batch_sizes(small, _ctx("cpu", 0, size_cap=cpu_cap), sample)[-1] == 16 * MiB
    pts = PIPELINE.points(settings, _ctx())
    first = [p for p in pts if PIPELINE.together(p) == ("uint8[65536]", sample)]
    assert first[0].op == "host_pace" and first[0].params == pmodel.Pace(sample, sample)   # the pace, then ...
    is_stage = [p.op in pmodel.STAGES for p in first[1:]]
    assert is_stage == sorted(is_stage, reverse=True)   # ... a size's stages, then its loops
    # launch: timed only in the loops; the step: only with pipeline.step
    alone = [op for op in pmodel.STAGES if op not in pmodel.LOOP_ONLY + (pmodel.STEP,)]
    assert sorted({p.op for p in first}) == sorted(alone + ["loader_to_gpu", "host_pace"])
    assert {PIPELINE.together(p) for p in first} == {("uint8[65536]", sample)}   # measured together, in rounds
    loop = next(p for p in first if p.op == "loader_to_gpu")
    assert (loop.memory, loop.mode, loop.dtype) == (
        "pinned", "numpy workers=8 prefetch_factor=2 threads=1 non_blocking prefetch", "uint8[65536]")
    link = [p for p in first if p.op == "stage_h2d" and p.memory == "pinned"]
    assert len(link) == 1 and link[0].mode == "" and link[0].dst == "cuda:0"
    assert loop.params == pmodel.Loop(pmodel.Producer.numpy, sample, 8, True, True, True, threads=1)
    assert len({p for p in pts}) == len(pts)   # every point is its own in the results
    cpu = PIPELINE.points(settings, _ctx(device="cpu", gpus=0))
    assert {p.op for p in cpu} == {"loader", "stage_make", "stage_collate", "stage_handoff", "stage_consume", "host_pace"}
    assert {p.mode for p in cpu if p.op == "loader"} >= {"numpy workers=0", "free workers=0"}


@pytest.mark.parametrize("kw, message", [
    (dict(sample_sizes=["32MiB"]), "pipeline.sample_sizes=32MiB: is larger than pipeline.max_size=4MiB"),
    (dict(min_size="1GiB"), "pipeline.min_size=1GiB: is larger than pipeline.max_size=4MiB"),
    (dict(workers=[2, -1]), "pipeline.workers=-1: must be >= 0"),
    (dict(prefetch=[]), "pipeline.prefetch is empty"),
    (dict(prefetch_factor=[0]), "pipeline.prefetch_factor=0: must be >= 1"),
    (dict(persistent_workers=[False, True]), "keeps workers between epochs; set pipeline.epoch_batches"),
])
def test_pipeline_settings_are_checked(kw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        pmodel.Settings(**kw)


def test_pipeline_refuses_batches_that_do_not_fit_in_shared_memory(monkeypatch):
    monkeypatch.setattr(pipeline, "_free_bytes", lambda path: 64 * MiB)   # docker's default /dev/shm
    monkeypatch.setattr(pmodel, "usable_cores", lambda: 16)
    with pytest.raises(ConfigError, match="/dev/shm, which has 64.0 MiB free"):
        PIPELINE.check(pmodel.Settings(**FULL), _ctx(device="cpu", gpus=0))


# ---------------------------------------------------------------- balancing and rows


@pytest.mark.parametrize("transfer, product, expected", [
    (4.9, 1.45, (2, 7)),     # pinned 256 MiB h2d beside an 8192 product: 9.8 against 10.15 ms
    (18.0, 1.45, (1, 12)),   # pageable: one copy is worth twelve products
    (0.69, 1.45, (2, 1)),    # a peer copy is the shorter one
    (1.0, 1.0, (1, 1)),
])
def test_balance_keeps_both_streams_equally_busy(transfer, product, expected):
    c, m = opairs.balance(transfer, product)
    assert (c, m) == expected
    assert abs(c * transfer - m * product) <= opairs.BALANCE_GAP * max(c * transfer, m * product)


def test_balance_takes_the_closest_when_none_is_close_enough():
    c, m = opairs.balance(1.0, 1.5, most=2)   # k=1 gives 2:1, 25% apart; k=2 gives 3:2, exact
    assert (c, m) == (3, 2)
    c, m = opairs.balance(1.0, 1.45, most=1)
    assert (c, m) == (1, 1)


def _trials(per_op: float, iters: int, parts=None, n: int = 3, jitter: float = 0.0) -> list[Trial]:
    return [Trial(iters, per_op * iters * (1 + jitter * i), dict(parts or {})) for i in range(n)]


PAIR = Point("overlap", "h2d", 64 * MiB, memory="pinned", mode="mm4096", backend="cuda", src="host", dst="cuda:0",
             params=omodel.Product(4096))


def _pair_rows(copied=True, computed=True, point=PAIR, factor=1.0) -> list:
    copy_s, mm_s, (c, m) = 2e-3, 0.5e-3, (1, 4)
    # Two streams: each side as long as alone plus 5%, the round 10% over the longer side.
    concurrent = _trials(2.2e-3, 5, {"copy": 5 * c * copy_s * 1.05, "compute": 5 * m * mm_s * 1.05})
    return opairs.pair_rows(point, _trials(copy_s, 10), _trials(mm_s, 40), concurrent,
                            _trials(4e-3, 5), (c, m), factor, copied, computed)


def test_pair_rows_carry_gbps_per_transfer_round_times_and_the_overlap():
    rows = pd.DataFrame([vars(r) for r in _pair_rows()])
    assert set(rows.part) == set(omodel.PAIR_PARTS) and (rows.groupby("part").size() == 3).all()
    first = rows[rows.trial == 0].set_index("part")
    assert first.time_s["copy_alone"] == pytest.approx(2e-3)
    assert first.algbw_gbps["copy_alone"] == pytest.approx(64 * MiB / 2e-3 / 1e9)
    assert first.time_s["copy_during_compute"] == pytest.approx(2.1e-3)
    assert first.time_s["compute_during_copy"] == pytest.approx(0.525e-3)
    assert first.iters["compute_during_copy"] == 20 and first.iters["total"] == 5
    assert math.isnan(first.algbw_gbps["compute_alone"])   # TFLOP/s: the params' product's flops / time_s
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
    rows = pd.DataFrame([vars(r) for r in osyncs.sync_rows(point, _trials(50e-6, 400, jitter=0.01),
                                                           _trials(30e-6, 600, jitter=0.02), True, "work: x")])
    cost = rows[rows.part == "cost"].time_s.to_numpy()
    assert cost == pytest.approx([19.4e-6, 19.9e-6, 20.4e-6])   # each step trial less the median work (30.6 µs)
    assert set(rows.part) == {"step", "work", "cost"} and rows.algbw_gbps.isna().all()
    assert (rows.part != "total").all()   # no bandwidth: kept out of the curves and the summary
    failed = osyncs.sync_rows(point, _trials(50e-6, 400), _trials(30e-6, 600), False, "work: x")
    assert {r.status for r in failed} == {"failed"}


def test_matmul_check_passes_a_product_and_catches_a_wrong_one():
    mm = owork.Matmul(64, "cpu", seed=3)
    assert not mm.correct()              # nothing computed yet: C is zero
    mm(2)
    assert mm.correct() and mm.flops == 2 * 64 ** 3 == omodel.Product(64).flops
    mm.c[5, 7] += mm.c.abs().max() * 0.1
    assert not mm.correct()
    mm.c.copy_(mm.b @ mm.a)              # the other product: the right shape and scale, the wrong data
    assert not mm.correct()
    # Runs from before params (schema 2) name the product in the mode; rows naming none have no TFLOP/s.
    older = pd.DataFrame([vars(r) for r in _pair_rows(point=replace(PAIR, params=None))])
    assert oreading.table(older).tflops.notna().all() and older["mode"].str.fullmatch(r"mm\d+").all()
    no_product = older.assign(mode="")
    assert oreading.table(no_product).tflops.isna().all()


# ---------------------------------------------------------------- the loader loop, for real


class _Swapped(psource.NumpySamples):
    """Two samples exchanged, as a loader that reorders would deliver them."""

    swap = {5: 6, 6: 5}

    def __getitem__(self, i: int) -> torch.Tensor:
        return super().__getitem__(self.swap.get(i, i))


@pytest.mark.parametrize("producer, workers", [("numpy", 0), ("numpy", 2), ("free", 2)])
def test_feed_delivers_checked_batches_in_order(producer, workers):
    feed = pfeed.Feed(4, 1024, pmodel.Loop(pmodel.Producer(producer), workers=workers), torch.device("cpu"))
    try:
        feed(3 + feed.queued)
        assert feed.consumed == 3 + 2 * workers and feed.correct()
    finally:
        feed.close()


def test_feed_check_catches_reordered_samples(monkeypatch):
    monkeypatch.setattr(psource, "NumpySamples", _Swapped)
    feed = pfeed.Feed(4, 1024, pmodel.Loop(), torch.device("cpu"))
    feed(1)
    assert feed.correct()      # samples 0..3 are untouched
    feed(1)
    assert not feed.correct()  # the second batch holds 4, 6, 5, 7
    feed.close()


class _LastSwapped(_Swapped):
    swap = {4 * 39 + 1: 4 * 39 + 2, 4 * 39 + 2: 4 * 39 + 1}   # inside the 40th batch


def test_every_batch_of_a_point_is_checked_to_the_last(monkeypatch):
    """A point's stream checks each batch it consumes, the last included: one wrong batch among
    40 fails the point, in workers too."""
    monkeypatch.setattr(psource, "NumpySamples", _LastSwapped)
    for workers in (0, 2):
        feed = pfeed.Feed(4, 1024, pmodel.Loop(pmodel.Producer.numpy, workers=workers), torch.device("cpu"))
        try:
            feed(39)
            assert feed.correct() and feed.consumed == 39
            feed(1)
            assert not feed.correct() and feed.consumed == 40
        finally:
            feed.close()


def test_epochs_restart_the_loader_and_the_check_follows(monkeypatch):
    loop = pmodel.Loop(pmodel.Producer.free, workers=2, persistent_workers=True)
    feed = pfeed.Feed(4, 1024, loop, torch.device("cpu"), epoch_batches=3)
    try:
        feed(10)   # three epochs and a batch: sample indices start again at each epoch
        assert feed.correct() and feed.consumed == 10 and feed.next_sample == 4
    finally:
        feed.close()


class _Paced(psource.NumpySamples):
    """A producer of known rate: each sample takes SAMPLE_S to make, in whichever worker."""

    SAMPLE_S = 0.02

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.SAMPLE_S)
        return super().__getitem__(i)


def test_a_prefilled_queue_reads_at_the_producers_steady_rate_not_its_burst(monkeypatch):
    """2 workers, each making a batch of 2 samples in 40 ms: one batch every 20 ms steady. The
    workers queue 4 batches while the loop waits, which then come at once; the warm-up drains
    them, and the trials, cut from one stream, leave the workers no pause to queue more, so no
    trial reads faster than the producer. (Trials restarted after a pause read 10.6 ms a batch.)
    A busy machine only slows a trial: no upper bound here."""
    monkeypatch.setattr(psource, "NumpySamples", _Paced)
    settings = pmodel.Settings(min_trial_s=0.05, rounds=1)   # the three trials in one segment
    ctx = Context("cpu", TimingConfig(warmup=1, trials=3, min_trial_s=0.004), [1])
    feed = pfeed.Feed(2, 1024, pmodel.Loop(pmodel.Producer.numpy, workers=2), torch.device("cpu"))
    try:
        time.sleep(0.3)                      # the queue fills: 2 workers x prefetch_factor 2
        trials = pmeasure.loop_stream(feed, pmeasure.Segment(round_timing(ctx, settings)))
        assert feed.correct()
    finally:
        feed.close()
    steady = 2 * _Paced.SAMPLE_S / 2
    assert all(t.iters >= 2 * 4 for t in trials)   # each trial spans twice what the workers hold ahead
    assert min(t.per_op_s for t in trials) >= 0.85 * steady


def test_a_loop_on_one_thread_accounts_for_its_time_stage_by_stage():
    """Without workers the main thread runs every stage: the stages the loop timed add up to
    nearly all of its time per batch, never more."""
    loop = pmodel.Loop(pmodel.Producer.numpy, 64 * 1024)
    feed = pfeed.Feed(16, 64 * 1024, loop, torch.device("cpu"))
    ctx = Context("cpu", TimingConfig(warmup=1, trials=3, min_trial_s=0.02), [1])
    try:
        trials = pmeasure.loop_stream(feed, pmeasure.Segment(round_timing(ctx, pmodel.Settings(min_trial_s=0.02, rounds=1))))
        assert feed.correct()
    finally:
        feed.close()
    for t in trials:
        assert set(t.parts) == {"make", "collate", "handoff", "consume", pmodel.FAULTS + "main thread"}
        assert all(t.parts[stage] > 0 for stage in ("make", "collate", "handoff", "consume"))
        assert t.parts[pmodel.FAULTS + "main thread"] >= 0
    accounted = [sum(v for k, v in t.parts.items() if not k.startswith(pmodel.FAULTS)) / t.time_s for t in trials]
    assert max(accounted) <= 1.0 and max(accounted) > 0.8   # a trial the test machine did not preempt: nearly all


class _SlowToRebuild:
    """Unpickles after REBUILD_S: a batch whose shared memory is slow to map."""

    REBUILD_S = 0.05

    def __reduce__(self):
        return _rebuilt_slowly, ()


def _rebuilt_slowly():
    time.sleep(_SlowToRebuild.REBUILD_S)
    return "batch"


def test_the_hand_off_times_the_receiver_rebuilding_the_batch():
    """The receiver's clock is read before the batch's tensor is rebuilt, so the hand-off holds
    that rebuild; what was spent before travels with the batch."""
    import pickle

    got = pickle.loads(pickle.dumps(pfeed.LoaderBatch(_SlowToRebuild(), {"make": 0.25})))
    assert got.data == "batch" and got.spent["make"] == 0.25
    assert _SlowToRebuild.REBUILD_S <= got.spent["handoff"] < 10 * _SlowToRebuild.REBUILD_S


def test_workers_send_their_stage_times_with_each_batch(monkeypatch):
    """Through real workers: make, collate and the hand-off arrive with each batch, and make
    reads the producer's pace (2 samples of SAMPLE_S a batch), however long the loop waited."""
    monkeypatch.setattr(psource, "NumpySamples", _Paced)
    loop = pmodel.Loop(pmodel.Producer.numpy, 1024, workers=2)
    feed = pfeed.Feed(2, 1024, loop, torch.device("cpu"))
    try:
        feed(2)
        time.sleep(0.2)   # the workers fill their queue meanwhile: no stage's time, only waiting
        before = dict(feed.spent)
        feed(4)
        assert feed.correct()
    finally:
        feed.close()
    made = {k: feed.spent[k] - before.get(k, 0.0) for k in feed.spent}
    assert set(made) == {"make", "collate", "handoff", "consume"}
    assert made["make"] == pytest.approx(4 * 2 * _Paced.SAMPLE_S, rel=0.25)


class _ScriptedMarks:
    """A stream whose operations take `per_op` seconds each, read by marks: its log says when
    each mark and step came."""

    def __init__(self, per_op: float) -> None:
        self.per_op, self.now, self.log = per_op, 0.0, []

    def step(self, n: int) -> None:
        self.now += n * self.per_op
        self.log.append(("step", n))

    def mark(self) -> float:
        self.log.append(("mark", self.now))
        return self.now

    def seconds(self, a: float, b: float) -> float:
        return b - a


def test_measure_stream_cuts_one_stream_into_trials_of_whole_epochs():
    work = _ScriptedMarks(1e-3)
    trials = measure_stream(work.step, work, TimingConfig(warmup=3, trials=4, min_trial_s=0.01),
                            warmup=9, min_ops=16, multiple=5)
    assert work.log[0] == ("step", 10)                     # the warm-up, whole epochs
    assert [t.iters for t in trials] == [20] * 4           # >= min_ops, a multiple of the epoch
    assert [t.time_s for t in trials] == pytest.approx([0.02] * 4)
    tail = work.log[-9:]                                   # the trials: a mark between two steps, nothing else
    assert [kind for kind, _ in tail] == ["mark", "step"] * 4 + ["mark"]
    short = measure_stream(work.step, work, TimingConfig(warmup=0, trials=2, min_trial_s=0.01, max_iters=4))
    assert all(t.short for t in short)                     # capped below min_trial_s: flagged


def test_worker_busy_sums_the_rates_of_processes_at_once():
    marks = pmeasure.WorkerBusy()
    a = marks.mark()
    marks.add(0, 0.10, 100, 30)    # 1 ms an operation
    marks.add(1, 0.10, 50, 12)     # 2 ms an operation
    b = marks.mark()
    assert marks.count(a, b) == 150
    assert marks.seconds(a, b) == pytest.approx(150 / (1000 + 500))   # 1500 operations a second together
    assert marks.parts(a, b) == {pmodel.FAULTS: 42}                  # the page faults of both


def test_disagreeing_trials_say_so():
    agree = [Trial(10, 0.1 * (1 + 0.01 * i)) for i in range(5)]
    assert pmeasure.disagreement(agree) == ""
    spread = agree[:4] + [Trial(10, 0.16)]
    assert pmeasure.disagreement(spread) == "trials disagree: 0.98x to 1.57x their median time"


def _stage_rates(**slow) -> dict:
    """GB/s of every stage a loop can need, by name; `slow` overrides some."""
    rates = dict(make=3.6, collate=60.0, handoff=40.0, pin=8.0, h2d_pinned=50.0, h2d_pageable=6.0, launch=300.0,
                 consume=400.0)
    return {**rates, **slow}


def _rate_of(rates: dict):
    def rate(st):
        key = st.name + (f"_{st.memory}" if st.op == pmodel.H2D else "")
        return rates[key] * (st.workers if st.op in (pmodel.MAKE, pmodel.COLLATE) and st.workers > 1 else 1)
    return rate


def _loop(producer: str, workers: int, pin_memory: bool, non_blocking: bool) -> pmodel.Loop:
    return pmodel.Loop(pmodel.Producer(producer), workers=workers, pin_memory=pin_memory,
                         non_blocking=non_blocking)


@pytest.mark.parametrize("loop, slow, bottleneck, on", [
    (_loop("numpy", 4, True, True), {}, "pin", "pin thread"),
    (_loop("numpy", 1, True, True), {}, "make", "1 worker"),
    (_loop("free", 4, True, True), {"pin": 80.0, "make": 100.0, "handoff": 400.0}, "h2d pinned", "copy engine"),
    (_loop("free", 4, False, True), {}, "h2d pageable", "main thread"),
    (_loop("free", 4, False, True), {"handoff": 1.0}, "handoff", "main thread"),
    (_loop("free", 4, True, True), {"consume": 0.5}, "consume", "main thread"),
    (_loop("free", 4, True, True), {"launch": 0.5}, "launch pinned", "main thread"),
])
def test_attribution_names_the_stage_made_slow(loop, slow, bottleneck, on):
    att = ptables.attribute(loop, True, _rate_of(_stage_rates(**slow)))
    assert (att["bottleneck"], att["on"]) == (bottleneck, on)
    assert att["bound_gbps"] <= att["stage_gbps"]


def test_attribution_adds_the_stages_one_thread_runs():
    loop = _loop("free", 0, False, False)   # all on the main thread
    att = ptables.attribute(loop, True, _rate_of(_stage_rates(make=10.0, collate=10.0, h2d_pageable=10.0)))
    assert att["on"] == "main thread" and att["stage_gbps"] == 10.0
    assert att["bound_gbps"] == pytest.approx(1 / (3 / 10 + 1 / 40 + 1 / 400))   # and the loader's own work
    assert ptables.attribute(loop, True, lambda st: None) is None   # a stage not measured: no attribution
    pinned = _loop("free", 4, True, True)
    rates = _rate_of(_stage_rates(consume=0.5))
    older = ptables.attribute(pinned, True, lambda st: None if st.op == pmodel.LAUNCH else rates(st))
    assert (older["bottleneck"], older["bound_gbps"]) == ("consume", 0.5)   # a run from before launch was timed


def test_training_suite_on_a_cpu_runs_the_loader_and_its_stages(xferbench):
    proc, runs = xferbench("suite=training", "pipeline.producers=[free]", "pipeline.workers=[0,2]",
                           "pipeline.threads=[0]", "pipeline.rounds=2", "pipeline.min_size=64KiB", "pipeline.max_size=64KiB",
                           "pipeline.min_trial_s=0.01", "timing.trials=4", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "overlap: skipped, needs a CUDA GPU" in proc.stderr
    df = load(runs)
    assert set(df.suite) == {"pipeline"} and set(df[df.op != "loader"].part) == {"total"}
    assert set(df[df.op == "loader"].part) == {"total", "make", "collate", "handoff", "consume"}   # as the loop ran them
    assert set(df.op) == {"loader", "stage_make", "stage_collate", "stage_handoff", "stage_consume", "host_pace"}
    # two rounds of two trials each (4 trials over 2 rounds), trial numbers running on; the pace
    # read before each round and after the last
    measured = df[df.op != "host_pace"].groupby(["op", "mode", "part"])
    assert (measured["round"].apply(sorted) == pd.Series([[0, 0, 1, 1]] * measured.ngroups, index=measured.size().index)).all()
    assert (measured["trial"].apply(sorted) == pd.Series([[0, 1, 2, 3]] * measured.ngroups, index=measured.size().index)).all()
    pace = df[df.op == "host_pace"].sort_values("round")
    assert list(pace["round"]) == [0, 1, 2]
    # the pace is the timing core's (timing.host_pace), in host_pace_s; each point's rows of a round
    # carry the pace its own segment met (read around it: one value per point and round, each a
    # single reading, not the round's 20 ms median)
    assert (pace.host_pace_s > 0).all() and (pace.host_pace_s == pace.time_s).all() and pace.algbw_gbps.isna().all()
    segment = df[df.op != "host_pace"].groupby(["op", "mode", "round"])["host_pace_s"]
    assert (segment.nunique() == 1).all() and (segment.first() > 0).all()
    assert df[df.op != "host_pace"].groupby(["round"])["host_pace_s"].nunique().min() > 1
    assert (df.status == "ok").all() and df.verified.all() and (df[df.op != "host_pace"].algbw_gbps > 0).all()
    assert set(df[df.op != "host_pace"].size_bytes) == {64 * 1024} and set(pace.size_bytes) == {0}
    assert set(df.dtype) == {"uint8[65536]"}
    loops = df[(df.op == "loader") & (df.part == "total")]
    assert set(loops["mode"]) == {"free workers=0", "free workers=2 prefetch_factor=2"}
    assert (loops[loops["mode"] != "free workers=0"].iters >= 2 * 2 * 2).all()   # twice what 2 workers hold ahead
    assert set(df[df.op == "stage_make"]["mode"]) == {"free workers=0", "free workers=2"}
    assert set(df[df.op == "stage_consume"]["mode"]) == {"free workers=0", "free workers=2"}   # batches as received
    table = ptables.table(df)
    assert len(table) == 2 and "of_link" not in table   # no link without a GPU
    assert table.bottleneck.notna().all() and (table.bound_gbps > 0).all()
    one = loops[loops["mode"] == "free workers=0"]
    row = table[table["mode"] == "free workers=0"].iloc[0]
    per_round = one.groupby("round").time_s.median()   # the figure: the median over rounds
    assert row.batch == 1 and row.samples_per_s == round(1 / per_round.median())   # whole samples a second
    assert "loader" in proc.stdout   # the run's summary


def test_a_producer_made_slow_is_named_the_bottleneck(monkeypatch):
    """The numpy producer at 10 ms a sample: make (in 2 workers) names the loop's bottleneck,
    and the loop delivers about what make alone does."""
    monkeypatch.setattr(psource, "NumpySamples", _Paced)
    monkeypatch.setattr(_Paced, "SAMPLE_S", 0.01)
    settings = pmodel.Settings(producers=[pmodel.Producer.numpy], sample_sizes=["1KiB"], workers=[2],
                                 pin_memory=[False], non_blocking=[False], prefetch=[False],
                                 threads=[0], grid=pmodel.Grid.full, min_size="4KiB", max_size="4KiB",
                                 min_trial_s=0.05, rounds=1)
    ctx = Context("cpu", TimingConfig(warmup=1, trials=3), [1])
    rows = [r for point in PIPELINE.points(settings, ctx) for r in PIPELINE.measure(point, settings, ctx, None)]
    frame = pd.DataFrame([vars(r) for r in rows])
    assert frame.verified.all()
    row = ptables.table(frame).iloc[0]
    assert (row.bottleneck, row.on) == ("make", "2 workers"), ptables.table(frame).T
    # Paced, the make stage's rate holds on a busy machine too (its workers sleep); the loop's
    # share of it is relative: other processes may take the consumer's time, never add to it.
    assert row.stage_gbps == pytest.approx(4096 / (4 * 0.01) * 2 / 1e9, rel=0.35)
    assert 0.5 < row.of_bound < 1.15


def test_overlap_alone_on_a_cpu_is_one_line_and_exit_2(xferbench_in_process):
    code, stderr, _ = xferbench_in_process("suite=overlap")
    assert code == 2
    assert stderr.strip().endswith("nothing to run here: overlap: skipped, needs a CUDA GPU")


@pytest.mark.parametrize("args, message", [
    (["suite=overlap", "overlap.ops=[h2d,teleport]"], "overlap.ops: 'teleport' is not allowed; choose from: h2d, d2h"),
    (["suite=pipeline", "pipeline.grid=some"], "pipeline.grid: 'some' is not allowed; choose from: quick, ablation, full"),
    (["suite=pipeline", "pipeline.sample_sizes=1GiB"], "pipeline.sample_sizes=1GiB: is larger than pipeline.max_size"),
    (["suite=pipeline", "pipeline.producers=[numpy,jpeg]"],
     "pipeline.producers: 'jpeg' is not allowed; choose from: numpy, free"),
])
def test_bad_settings_are_one_line_exit_2(xferbench_in_process, args, message):
    code, stderr, runs = xferbench_in_process(*args)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1
    assert not runs


# ---------------------------------------------------------------- tables and figures


def _overlap_run() -> list:
    rows = _pair_rows()
    ar = Point("overlap", "all_reduce", 64 * MiB, memory="device", mode="mm4096", backend="nccl", world_size=2,
               dtype="bfloat16", params=omodel.Product(4096))
    rows += _pair_rows(point=ar, factor=1.0)
    for kind in omodel.SYNCS:
        for state, step, work in (("idle", 12e-6, 4e-6), ("busy", 45e-6, 30e-6)):
            point = Point("overlap", f"sync_{kind}", 0, mode=state, backend="cuda", src="cuda:0", dst="cuda:0")
            rows += osyncs.sync_rows(point, _trials(step, 100), _trials(work, 100), True, "work")
    for size in (4096, MiB):
        for memory, us in (("pageable", 80), ("pinned", 60), ("device", 6)):
            point = Point("overlap", "make_tensor", size, memory=memory, backend="cuda", dst="cuda:0")
            rows += [point.sample(trial=0, iters=10, time_s=us * 1e-6, algbw_gbps=size / us / 1e3, verified=True)]
    return rows


PIPE_SIZES = (64 * 1024, MiB, 16 * MiB)
PIPE_SAMPLE = 64 * 1024
# GB/s alone by stage (h2d: by memory); make and collate per worker, so n workers make n times as much
PIPE_STAGES = {"make_numpy": 1.0, "make_free": 40.0, "collate": 5.0, "handoff": 30.0, "pin": 6.0, "h2d_pinned": 50.0,
               "h2d_pageable": 8.0, "consume": 300.0}


def _pipe_stage_gbps(st, stages: dict = PIPE_STAGES) -> float:
    if st.op in (pmodel.MAKE, pmodel.COLLATE):
        key = st.name + (f"_{st.producer.value}" if st.op == pmodel.MAKE else "")
        return stages[key] * max(st.workers, 1)
    return stages[st.name + (f"_{st.memory}" if st.op == pmodel.H2D else "")]


def _pipeline_run(stage_gbps: dict = PIPE_STAGES) -> list:
    """Loops at 95% of their bound, the stages alone as stage_gbps says, at three batch sizes."""
    measured = functools.partial(_pipe_stage_gbps, stages=stage_gbps)
    rate = lambda st: None if st.op in pmodel.LOOP_ONLY else measured(st)   # runs from before loops timed launch
    Loop, P = pmodel.Loop, pmodel.Producer
    loops = [Loop(p, PIPE_SAMPLE, w, pin, True, True) for p in (P.numpy, P.free)
             for w, pin in ((4, True), (0, True), (4, False))]
    loops += [pmodel.dataloader_defaults(P.numpy, PIPE_SAMPLE), pmodel.dataloader_defaults(P.free, PIPE_SAMPLE)]
    stages = {st for lp in loops for group in pmodel.stages_of(lp, True).values() for st in group
              if st.op not in pmodel.LOOP_ONLY}
    rows, dtype = [], pmodel.sample_dtype(PIPE_SAMPLE)
    for size in PIPE_SIZES:
        for st in stages:
            point = Point("pipeline", st.op, size, memory=st.memory, mode=st.mode(), backend="cuda", src="host",
                          dst="cuda:0" if st.op in (pmodel.H2D, pmodel.CONSUME) else "host", dtype=dtype, params=st)
            gbps = rate(st)
            rows.append(point.sample(trial=0, iters=10, time_s=size / (gbps * 1e9), algbw_gbps=gbps, verified=True))
        for lp in loops:
            gbps = 0.95 * ptables.attribute(lp, True, rate)["bound_gbps"]
            point = Point("pipeline", "loader_to_gpu", size, memory=lp.memory, mode=lp.mode(), backend="cuda",
                          src="host", dst="cuda:0", dtype=dtype, params=lp)
            rows.append(point.sample(trial=0, iters=10, time_s=size / (gbps * 1e9), algbw_gbps=gbps, verified=True))
    return rows


@pytest.fixture(scope="module")
def runs_frame(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_run(root / "overlap", _overlap_run(), instance="h200-x2", pcie_gen=5, pcie_width=16)
    write_run(root / "pipeline", _pipeline_run(), instance="h200-x1", pcie_gen=5, pcie_width=16)
    return load(root)


def test_tables_of_overlap_and_pipeline_runs(runs_frame):
    pairs = oreading.table(runs_frame).set_index("op")
    assert list(pairs.index) == ["h2d", "all_reduce"]
    h2d = pairs.loc["h2d"]
    assert h2d["round"] == "1+4" and h2d["size"] == "64MiB"
    assert h2d.overlap == pytest.approx(4e-3 / 2.2e-3, abs=0.01) and h2d.overlap_one_stream == 1.0
    assert h2d.tflops == pytest.approx(2 * 4096 ** 3 / 0.5e-3 / 1e12, abs=0.1)
    assert h2d.tflops_copying == pytest.approx(h2d.tflops / 1.05, abs=0.1)
    assert h2d.copy_gbps == pytest.approx(33.6, abs=0.1)

    syncs = oreading.sync_table(runs_frame)
    assert list(syncs.op) == [f"sync_{k}" for k in omodel.SYNCS]
    assert syncs.cost_us_idle.tolist() == [8.0] * 4 and syncs.cost_us_busy.tolist() == [15.0] * 4
    made = oreading.make_table(runs_frame).set_index("size")
    assert made.loc["1MiB", "device_us"] == 6.0 and made.loc["4KiB", "pageable_us"] == 80.0

    pipe = ptables.table(runs_frame)
    assert len(pipe) == 8 * len(PIPE_SIZES) and pipe.bottleneck.notna().all()
    best = pipe[(pipe["mode"] == "numpy workers=4 prefetch_factor=2 non_blocking prefetch") & (pipe.memory == "pinned")
                & (pipe["size"] == "1MiB")].iloc[0]
    # 4 workers make 4 GB/s and collate 20 (3.33 one after the other): below the pin thread's 5.
    assert (best.bottleneck, best.on, best.stage_gbps) == ("make", "4 workers", 4.0)
    assert best.bound_gbps == pytest.approx(1 / (1 / 4 + 1 / 20)) and best.of_bound == pytest.approx(0.95)
    assert best.of_stage == pytest.approx(best.gbps / 4.0)
    assert best.of_link == pytest.approx(best.gbps / 50) and best.batch == 16
    assert best.samples_per_s == pytest.approx(best.gbps * 1e9 / MiB * 16, abs=1)
    free = pipe[(pipe["mode"] == "free workers=4 prefetch_factor=2 non_blocking prefetch") & (pipe.memory == "pinned")]
    assert set(free.bottleneck) == {"pin"} and set(free.on) == {"pin thread"}
    defaults = pipe[pipe["mode"] == "numpy workers=0 blocking"]
    assert set(defaults.bottleneck) == {"make"} and set(defaults.on) == {"main thread"}

    adv = padvice.advice(runs_frame).set_index(["producer", "size"])
    numpy_1m = adv.loc[("numpy", "1MiB")]
    assert numpy_1m.best == "pageable numpy workers=4 prefetch_factor=2 non_blocking prefetch"
    assert numpy_1m.limit == "host" and numpy_1m.bottleneck == "make"
    # 4 workers: 3.33 GB/s bound; the defaults: make, collate, the loader's own work, the pageable
    # copy and the check on one thread
    defaults_bound = 1 / (1 / 1 + 1 / 5 + 1 / 30 + 1 / 8 + 1 / 300)
    assert numpy_1m.gain == pytest.approx(round((1 / (1 / 4 + 1 / 20)) / defaults_bound, 2))
    lines = padvice.advice_lines(padvice.advice(runs_frame))
    assert len(lines) == 2 * len(PIPE_SIZES)
    assert any(line.startswith("1MiB batches of 64KiB numpy samples: best pageable numpy workers=4") for line in lines)


def test_a_loop_is_judged_by_its_own_stage_times_where_it_has_them():
    """A loop that timed its pin at 2 GB/s is judged by that, not by the pin alone (6 GB/s,
    measured at another moment): its bound and the fraction of it follow the loop's reading."""
    rows = _pipeline_run()
    loop = next(r for r in rows if r.op == "loader_to_gpu" and r.size_bytes == MiB and r.memory == "pinned"
                and r.mode == "free workers=4 prefetch_factor=2 non_blocking prefetch")
    spent = [replace(loop, part=stage, time_s=MiB / (gbps * 1e9), algbw_gbps=gbps)
             for stage, gbps in (("pin", 2.0), ("handoff", 20.0), ("make", 50.0), ("collate", 30.0))]
    pipe = ptables.table(pd.DataFrame([vars(r) for r in rows + spent]))
    row = pipe[(pipe["mode"] == loop.mode) & (pipe.memory == "pinned") & (pipe["size"] == "1MiB")].iloc[0]
    assert (row.bottleneck, row.on, row.stage_gbps, row.alone_gbps) == ("pin", "pin thread", 2.0, 6.0)
    assert row.bound_gbps == pytest.approx(1 / (1 / 2 + 1 / 20))
    assert row.of_bound == pytest.approx(row.gbps / row.bound_gbps)
    other = pipe[(pipe["mode"] == loop.mode) & (pipe.memory == "pinned") & (pipe["size"] == "16MiB")].iloc[0]
    assert other.stage_gbps == other.alone_gbps == 6.0   # no times of its own: the stages alone


def test_advice_says_when_the_link_limits_the_best_loop():
    slow_copies = {**PIPE_STAGES, "h2d_pinned": 2.0, "h2d_pageable": 1.0}
    frame = pd.DataFrame([vars(r) for r in _pipeline_run(slow_copies)])
    adv = padvice.advice(frame)
    assert set(adv.limit) == {"link"} and set(adv.bottleneck) == {"h2d pinned"}
    assert set(adv.on) == {"copy engine"} and (adv.of_link.round(6) == 0.95).all()
    assert "the link limits it: h2d pinned on the copy engine" in padvice.advice_lines(adv)[0]


def test_overlap_and_pipeline_figures(runs_frame, tmp_path):
    from bench.analysis.figures.style import Canvas
    from bench.analysis.runs import palette, with_series
    from bench.cli.common import catalog

    frame = with_series(runs_frame)
    canvas = Canvas(tmp_path, ["png"], palette(frame), catalog())
    drawn = {p.name for f in (oreading.overlap_figure, oreading.sync_figure, pfigure.pipeline_figure)
             for p in f(frame, canvas)}
    assert drawn == {"overlap.png", "sync.png", "pipeline.png"}
    for name in drawn:
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    none = Canvas(tmp_path / "none", ["png"], palette(frame), catalog())
    copies_only = frame[frame.suite != "pipeline"]
    assert pfigure.pipeline_figure(copies_only, none) == []
    assert oreading.overlap_figure(frame[frame.suite == "pipeline"], none) == []


def test_overlap_and_pipeline_print_their_tables(runs_frame, capsys):
    from bench.cli import summary

    folders = sorted(set(runs_frame.run_dir))
    assert summary.main(folders[:1]) == 0   # the overlap run
    out = capsys.readouterr().out
    assert "pairs: a transfer beside a bf16 product" in out and "sync_stream" in out and "device_us" in out
    assert summary.main(folders[1:]) == 0   # the pipeline run
    out = capsys.readouterr().out
    assert "of_link" in out and "stages alone" in out and "the DataLoader's defaults" in out
    with pytest.raises(SystemExit) as no_runs:
        summary.main([])
    assert no_runs.value.code == 2


def test_the_doctor_and_the_gate_judge_a_loop_by_the_fraction_of_its_bound():
    """Each loop's judged figure is the share of its bound it reached (the loops here: 95%),
    whatever its GB/s; stages alone and the host's pace are not judged."""
    frame = pd.DataFrame([vars(r) for r in _pipeline_run()])
    judged = PIPELINE.judged(frame)
    assert set(judged.op) == {"loader_to_gpu"} and len(judged) == 8 * len(PIPE_SIZES)
    assert judged.algbw_gbps.to_numpy() == pytest.approx(0.95)
    assert (judged.size_bytes / judged.time_s / 1e9).to_numpy() == pytest.approx(0.95)   # a row as any other
    slow_host = frame.assign(time_s=frame.time_s * 1.4, algbw_gbps=frame.algbw_gbps / 1.4)   # the host's pace moved
    assert PIPELINE.judged(slow_host).algbw_gbps.to_numpy() == pytest.approx(0.95)


def test_advice_names_the_thread_setting_that_moves_a_loop_beyond_its_spread():
    rows = _pipeline_run()
    defaults = [r for r in rows if r.op == "loader_to_gpu" and r.mode == "numpy workers=0 blocking"]
    loop = replace(pmodel.dataloader_defaults(pmodel.Producer.numpy, PIPE_SAMPLE), threads=1)
    twin = [replace(r, mode=loop.mode(), params=params_text(loop), time_s=r.time_s / 3, algbw_gbps=r.algbw_gbps * 3)
            for r in defaults]
    lines = padvice.advice_lines(padvice.advice(pd.DataFrame([vars(r) for r in rows + twin])))
    said = [line for line in lines if line.strip().startswith("threads:")]
    assert len(said) == len(PIPE_SIZES)
    assert "pageable numpy workers=0 blocking delivers" in said[0] and "with 1 intra-op thread" in said[0]
    assert "3.00x: set pipeline.threads=[1]" in said[0]


def test_a_slow_check_is_named_the_host_caches_where_a_host_copy_slows_it_alone():
    loop = pmodel.Loop(pmodel.Producer.free, PIPE_SAMPLE, 0, True, True, True, threads=1)
    best = pd.Series({"bottleneck": "consume", "stage_gbps": 2.3, "alone_gbps": 7.8, "alone_lo_gbps": 7.2,
                      "alone_hi_gbps": 8.4, "what": loop, "memory": "pinned", "mode": loop.mode()})
    h = pd.DataFrame([best])
    caches = pcauses._cause_line(best, h, cold=3.9)
    assert caches.startswith("cause: consume runs at 2.30 GB/s in the loop against 7.80 alone")
    assert "3.90 GB/s after a host copy of the batch (2.0x slower)" in caches and "pipeline.threads" not in caches
    for cold in (7.0, None):   # the copy barely slows it, or the run did not measure it: unexplained
        assert pcauses._cause_line(best, h, cold=cold).startswith("unexplained: consume runs at 2.30")
    assert "ruled out: the host's caches (the check alone after a host copy of the batch: 7.00 GB/s, 1.1x)" in \
        pcauses._cause_line(best, h, cold=7.0)
    other = best.copy()
    other["bottleneck"] = "collate"   # a host stage: not the check's launches
    assert pcauses._cause_line(other, h, cold=3.9).startswith("unexplained: collate")
    rows = pd.DataFrame({"suite": "pipeline", "op": pmodel.CONSUME, "part": ["cold"] * 3 + ["total"],
                         "status": "ok", "size_bytes": MiB, "algbw_gbps": [3.0, 4.0, 9.0, 30.0]})
    assert pcauses.cold_check(rows, []) == {(MiB,): 4.0}   # the median of the cold trials, not the hot one


_MAKE_FAULTS = ("from bench.suites.pipeline.measure import MakeBatch\n"
                "from bench.suites.pipeline.source import NumpySamples\n"
                "make = MakeBatch(NumpySamples(64 * 1024), 64)\n"
                "for _ in range(10): make()\n"
                "before = make.faults\n"
                "for _ in range(20): make()\n"
                "print((make.faults - before) / 20)")


def _make_faults(env: dict[str, str]) -> float:
    """Page faults a 4 MiB batch of numpy samples costs make, in a process started with `env`."""
    done = subprocess.run([sys.executable, "-c", _MAKE_FAULTS], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120, check=True)
    return float(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator settings")
def test_page_faults_count_the_memory_the_allocator_gives_back():
    """Every 64 KiB sample mapped anew (glibc's mmap threshold below it): each of a batch's 1,024
    pages is a fault; with the settings the advice gives, the memory is kept and none is."""
    given_back = _make_faults({"MALLOC_MMAP_THRESHOLD_": str(64 * 1024)})
    kept = _make_faults({"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"})
    assert given_back >= 1024 and kept < 16


def test_a_stage_the_allocator_slows_is_named_with_its_page_faults():
    loop = pmodel.Loop(pmodel.Producer.numpy, PIPE_SAMPLE, 0, True, True, True, threads=1)
    best = pd.Series({"bottleneck": "make", "on": "main thread", "stage_gbps": 2.7, "alone_gbps": 13.2,
                      "alone_lo_gbps": 12.3, "alone_hi_gbps": 14.3, "what": loop, "memory": "pinned",
                      "mode": loop.mode(), "size_bytes": 4 * MiB, "faults": 1003.0, "alone_faults": 0.0,
                      "alone_lo_faults": 0.0, "alone_hi_faults": 0.0})
    h = pd.DataFrame([best])
    line = pcauses._cause_line(best, h)
    assert line.startswith("cause: make runs at 2.70 GB/s in the loop against 13.20 alone")
    assert "the main thread takes 1,003 page faults a batch in the loop against 0 for its stages alone (1,024 pages" in line
    assert pcauses.KEEP_MEMORY in line
    few = best.copy()
    few["faults"] = 100.0   # under a quarter of the batch's pages: not the allocator's doing
    said = pcauses._cause_line(few, h)
    assert said.startswith("unexplained: make") and "ruled out: the allocator (100 page faults a batch in the loop" in said
    erratic = best.copy()
    erratic[["stage_gbps", "alone_lo_gbps", "alone_hi_faults"]] = [12.0, 3.0, 700.0]   # alone: 3.0-14.3 GB/s
    assert "make alone took 0 page faults a batch in one round and 700 in another" in pcauses._cause_line(erratic, h)


def test_a_stage_slowed_by_the_intra_op_pool_is_named_with_its_twin_at_one_thread():
    """collate 5x slower in the loop at torch's 64 threads, its twin at one thread beyond both spreads."""
    loop = pmodel.Loop(pmodel.Producer.free, PIPE_SAMPLE)
    best = pd.Series({"bottleneck": "collate", "on": "main thread", "stage_gbps": 0.35, "alone_gbps": 1.69,
                      "alone_lo_gbps": 0.81, "alone_hi_gbps": 3.72, "what": loop, "memory": "pageable",
                      "mode": loop.mode(), "size_bytes": 64 * 1024, "gbps": 0.20, "lo_gbps": 0.18, "hi_gbps": 0.30})
    twin = best.copy()
    twin[["what", "gbps", "lo_gbps", "hi_gbps"]] = [replace(loop, threads=1), 0.64, 0.41, 0.69]
    line = pcauses._cause_line(best, pd.DataFrame([best, twin]))
    assert line.startswith("cause: collate runs at 0.35 GB/s in the loop") and "intra-op thread pool" in line
    assert "at threads=1 the same loop delivers 0.64 GB/s (0.41–0.69), 3.20x its 0.20" in line
    twin[["lo_gbps"]] = [0.25]   # within the loop's spread: not named
    assert pcauses._cause_line(best, pd.DataFrame([best, twin])).startswith("unexplained: collate")


def test_a_thread_setting_whose_slower_twin_took_the_faults_says_so():
    base = pmodel.Loop(pmodel.Producer.numpy, PIPE_SAMPLE, 0, False, False, False, threads=0)
    rows = [{"memory": "pageable", "what": loop, "mode": loop.mode(), "gbps": gbps, "lo_gbps": gbps * 0.9,
             "hi_gbps": gbps * 1.1, "faults": faults, "size_bytes": 4 * MiB}
            for loop, gbps, faults in ((base, 4.08, 666.0), (replace(base, threads=1), 16.11, 0.1))]
    line = padvice._thread_line(pd.DataFrame(rows), "2 threads")
    assert line.startswith("threads: pageable") and "3.95x" in line
    assert "but the slower took 666 page faults a batch against 0" in line
    rows[0]["faults"] = 0.2   # both kept their memory: the threads alone
    assert "page faults" not in padvice._thread_line(pd.DataFrame(rows), "2 threads")


def test_file_system_sharing_is_the_base_loop_changed_alone_and_named_apart():
    Sharing, sample = pmodel.Sharing, 64 * 1024
    plain = pmodel.loops(pmodel.Settings(producers=[pmodel.Producer.numpy]), "cuda", sample, cores=16)
    both = pmodel.loops(pmodel.Settings(producers=[pmodel.Producer.numpy],
                                        sharing=[Sharing.file_system, Sharing.file_descriptor]), "cuda", sample, cores=16)
    added = [lp for lp in both if lp not in plain]
    assert added == [replace(plain[0], sharing=Sharing.file_system)] and "file_system" in added[0].mode()
    assert _described(added[0]) == added[0]
    assert all(lp.sharing == Sharing.file_descriptor for lp in both if not lp.workers)   # nothing shared without workers


def test_a_hand_off_that_waits_on_its_workers_is_named_with_the_sharing_that_fixes_it():
    loop = pmodel.Loop(pmodel.Producer.user, 150536, 4, True, True, True, threads=1, dataset="m:f")
    best = pd.Series({"bottleneck": "handoff", "on": "pin thread", "stage_gbps": 0.74, "alone_gbps": 1.53,
                      "alone_lo_gbps": 1.22, "alone_hi_gbps": 1.84, "what": loop, "memory": "pinned",
                      "mode": loop.mode(), "size_bytes": 903216, "cpu_share": 0.46, "gbps": 0.39,
                      "lo_gbps": 0.28, "hi_gbps": 0.50})
    line = pcauses._cause_line(best, pd.DataFrame([best]))
    assert line.startswith("cause: handoff runs at 0.74 GB/s in the loop against 1.53 alone")
    assert "the pin thread ran on a CPU for 46% of each hand-off (0.56 of 1.22 ms a batch)" in line
    assert 'set_sharing_strategy("file_system")' in line
    busy = best.copy()
    busy["cpu_share"] = 0.9   # it ran all along: not waiting on its workers
    said = pcauses._cause_line(busy, pd.DataFrame([busy]))
    assert said.startswith("unexplained: handoff") and "a wait on the workers (the pin thread ran on a CPU for 90%" in said
    twin = best.copy()
    twin[["what", "mode", "gbps", "lo_gbps", "hi_gbps"]] = [replace(loop, sharing=pmodel.Sharing.file_system),
                                                           "fs", 0.60, 0.56, 0.65]
    line = padvice._sharing_line(pd.DataFrame([best, twin]))
    assert line.startswith("sharing: pinned") and "with file_system 0.60 (0.56–0.65), 1.54x" in line


def test_a_loop_that_waits_at_its_epochs_starts_is_told_to_keep_its_workers():
    loop = pmodel.Loop(pmodel.Producer.user, 150536, 2, threads=1, dataset="m:f")
    rows = [{"memory": "pageable", "mode": lp.mode("cpu"), "what": lp, "gbps": gbps, "lo_gbps": lo, "hi_gbps": hi,
             "epoch_share": share}
            for lp, gbps, lo, hi, share in ((loop, 0.12, 0.06, 0.41, 0.33),
                                            (replace(loop, persistent_workers=True), 0.36, 0.25, 0.43, 0.10))]
    line = padvice._epochs_line(pd.DataFrame(rows))
    assert line.startswith("epochs: pageable user workers=2 prefetch_factor=2 threads=1 waits 33% of its time")
    assert "set persistent_workers=True; with it, 0.36 GB/s (0.25–0.43) against 0.12 (0.06–0.41)" in line
    assert padvice._epochs_line(pd.DataFrame(rows[1:])) is None   # the workers kept: nothing to say
