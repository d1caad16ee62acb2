"""The pipeline suite on a user's own Dataset (pipeline.dataset, pipeline.collate_fn), measured
in rounds, and two runs' agreement within their spreads: real loaders, real workers, on the CPU."""
from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from bench.analysis.agreement import RUN_NOISE, agreement
from bench.contract import Point
from bench.results import load
from bench.suites.pipeline import feed as pfeed, model as pmodel, source as psource, tables as ptables

MiB = 1 << 20


@pytest.mark.parametrize("args, message", [
    (["pipeline.dataset=no_such_module:dataset"], "pipeline.dataset=no_such_module:dataset: cannot import no_such_module"),
    (["pipeline.dataset=pipeline_datasets:nothing"], "pipeline_datasets has no nothing"),
    (["pipeline.dataset=pipeline_datasets:NOT_CALLABLE"], "is a int, not a callable that returns a Dataset"),
    (["pipeline.dataset=pipeline_datasets:not_a_dataset"], "factory() returned a list, not a map-style"),
    (["pipeline.dataset=pipeline_datasets:stream"], "factory() returned a Stream, not a map-style"),
    (["pipeline.dataset=pipeline_datasets"], "pipeline.dataset=pipeline_datasets: must be package.module:name"),
    (["pipeline.collate_fn=pipeline_datasets:pairs"], "collates pipeline.dataset's samples; set pipeline.dataset"),
    (["pipeline.dataset=pipeline_datasets:small", "pipeline.collate_fn=pipeline_datasets:NOT_CALLABLE"],
     "pipeline.collate_fn=pipeline_datasets:NOT_CALLABLE: is a int, not a function"),
    # 64 samples of 264 bytes fill no batch of 256 KiB or more: a smaller one would, never a larger
    (["pipeline.dataset=pipeline_datasets:small"], "lower pipeline.min_size to 16.5 KiB or less (a larger "),
    (["pipeline.dataset=pipeline_datasets:varying", "pipeline.min_size=4KiB", "pipeline.max_size=16KiB"],
     "its first 62 samples cannot be collated into one batch (RuntimeError: stack expects each tensor to be equal "
     "size, but got [256] at entry 0 and [255] at entry 9); samples of different shapes need a collate_fn that pads"),
    (["pipeline.step=no_such_module:step"], "pipeline.step=no_such_module:step: cannot import no_such_module"),
    (["pipeline.step=pipeline_datasets:NOT_CALLABLE"], "is a int, not a callable that returns a step"),
    (["pipeline.step=pipeline_datasets:raising_step"], "factory('cpu') raised ValueError: no model here"),
    (["pipeline.step=pipeline_datasets:not_a_step"], "factory('cpu') returned a int, not a callable that consumes"),
    (["pipeline.step=pipeline_datasets"], "pipeline.step=pipeline_datasets: must be package.module:name"),
])
def test_a_dataset_that_cannot_be_used_is_one_line_exit_2_and_no_folder(xferbench_in_process, args, message):
    psource.user_dataset.cache_clear()
    code, stderr, runs = xferbench_in_process("suite=pipeline", *args)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not runs


def test_a_plan_with_a_step_starts_no_model(xferbench_in_process):
    """plan=true imports the step's factory but does not call it: a plan makes nothing on a GPU."""
    code, stderr, runs = xferbench_in_process("suite=pipeline", "plan=true", "pipeline.step=pipeline_datasets:raising_step")
    assert code == 0 and not runs, stderr


def test_a_users_batches_are_checked_for_order_count_and_shape():
    loop = pmodel.Loop(pmodel.Producer.user, 264, workers=2, dataset="pipeline_datasets:small")
    feed = pfeed.Feed(4, 264, loop, torch.device("cpu"))
    try:
        feed(20)   # 16 whole batches an epoch: the loop goes on into the next, indices from 0 again
        assert feed.correct() and feed.consumed == 20 and feed.next_sample == 4 * 4
    finally:
        feed.close()
    odd = pmodel.Loop(pmodel.Producer.user, 264, workers=0, dataset="pipeline_datasets:varying pipeline_datasets:pairs")
    feed = pfeed.Feed(4, 264, odd, torch.device("cpu"))
    try:
        feed(2)
        assert feed.correct()
        with pytest.raises(RuntimeError):   # sample 9 cannot be stacked with its batch: the loop stops there
            feed(1)
    finally:
        feed.close()
    assert psource.user_sample("pipeline_datasets:small") == (256 + 8, "user:uint8[256]+int64[1]")


def test_the_jpeg_example_and_its_step_run_every_stage_and_say_what_limits_them(xferbench):
    """The example dataset with the example step (a small convolutional network's training step):
    the step timed alone and in each loop, and the share of each step that waits for data."""
    proc, runs = xferbench("suite=pipeline", "pipeline.dataset=bench.examples.jpeg:dataset", "pipeline.workers=[0,2]",
                           "pipeline.threads=[0]", "pipeline.rounds=2", "pipeline.max_size=320KiB",
                           "pipeline.step=bench.examples.jpeg:step", "pipeline.min_trial_s=0.01", "timing.trials=2",
                           timeout=240)
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all()
    assert set(df.dtype) == {"user:uint8[3x224x224]+int64[1]"}
    loops = df[(df.op == "loader") & (df.part == "total")]
    assert set(loops["mode"]) == {"user workers=0", "user workers=2 prefetch_factor=2"}
    # and "epoch" where an epoch's start fell in a trial: the dataset holds 256 images
    assert set(df[df.op == "loader"].part) - {"epoch"} == {"total", "make", "collate", "handoff", "consume", "step"}
    assert set(df[df.op == "stage_step"]["mode"]) == {"bench.examples.jpeg:step"}   # the step alone
    assert sorted(loops["round"].unique()) == [0, 1]
    table = ptables.table(df)
    assert table.bottleneck.notna().all() and (table.of_bound > 0).all()
    assert (table.step_s > 0).all() and table.waits.between(0, 1).all() and table.held_by.notna().all()
    said = re.search(r"step: (input|compute)-bound: with the DataLoader's defaults (\d+)% of each step waits", proc.stdout)
    assert said and (said[1] == "input") == (int(said[2]) >= 10), proc.stdout
    assert "user samples: best" in proc.stdout and "host_pace" in proc.stdout


def _rows(run: str, lows: list[float], size: int = MiB) -> list[dict]:
    """A point measured in len(lows) rounds of two trials, at lows[r] and 1.02 x that GB/s."""
    point = Point("pipeline", "loader_to_gpu", size, memory="pinned", mode="numpy workers=4", backend="cuda")
    out = []
    for r, gbps in enumerate(lows):
        for k, g in enumerate((gbps, 1.02 * gbps)):
            out.append(vars(point.sample(trial=2 * r + k, round=r, iters=10, time_s=size / g / 1e9, algbw_gbps=g,
                                         verified=True)) | {"run_dir": run})
    return out


def test_two_runs_agree_where_their_spreads_over_rounds_overlap():
    a = pd.DataFrame(_rows("a", [1.0, 1.2, 1.1]) + _rows("a", [5.0, 5.1, 5.2], 4 * MiB) + _rows("a", [9.0], 64 << 10))
    b = pd.DataFrame(_rows("b", [1.15, 1.3, 1.25]) + _rows("b", [3.0, 3.1, 3.2], 4 * MiB) + _rows("b", [1.0], 64 << 10))
    found = agreement(a, b)
    by_size = found.points.set_index("size_bytes")
    assert list(by_size.index) == [MiB, 4 * MiB]             # below 1 MiB: not counted
    assert by_size.loc[MiB, "agree"] and not by_size.loc[4 * MiB, "agree"]
    assert by_size.loc[MiB, "lo_a"] == pytest.approx(1.01) and by_size.loc[MiB, "hi_a"] == pytest.approx(1.212)
    assert found.share == 0.5 and "1 of 2 points agree" in found.lines()[0]


def test_a_spread_narrower_than_the_between_run_noise_is_widened_to_it():
    """Rounds 1% apart state a spread of RUN_NOISE either side of the figure; two runs 5% apart
    then agree, and 20% apart do not."""
    steady = _rows("a", [2.0, 2.01, 2.02], 4 * MiB)
    a = pd.DataFrame(steady)
    found = agreement(a, pd.DataFrame(_rows("b", [2.1, 2.11, 2.12], 4 * MiB)))
    row = found.points.iloc[0]
    assert row["lo_a"] == pytest.approx(row["median_a"] / (1 + RUN_NOISE))
    assert row["hi_a"] == pytest.approx(row["median_a"] * (1 + RUN_NOISE))
    assert found.share == 1.0
    assert agreement(a, pd.DataFrame(_rows("b", [2.4, 2.41, 2.42], 4 * MiB))).share == 0.0


def test_the_wait_at_each_epochs_start_is_timed_and_persistent_workers_shorten_it():
    """16 batches an epoch: the loop waits at each epoch's start while the loader restarts; with
    the workers started anew each time it waits longer than with them kept."""
    waited = {}
    for persistent in (False, True):
        loop = pmodel.Loop(pmodel.Producer.user, 264, workers=2, persistent_workers=persistent,
                           dataset="pipeline_datasets:small")
        feed = pfeed.Feed(4, 264, loop, torch.device("cpu"))
        try:
            feed(16 * 4 + 1)   # four epochs' starts
            assert feed.correct()
            waited[persistent] = feed.spent[pmodel.EPOCH]
        finally:
            feed.close()
    assert waited[True] > 0 and waited[False] > 2 * waited[True]   # forking two workers, four times
