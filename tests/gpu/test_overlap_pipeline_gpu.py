"""The overlap and pipeline suites on GPUs: every point measured and checked, and what the README
says of them holds (a pinned copy overlaps a product on two streams and not on one; a stream
wait costs less than a device synchronize on a busy GPU; no loop beats the link)."""
import pytest
import torch

from bench.results import load
from bench.suites import overlap, pipeline

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
multigpu = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more GPUs")


def test_overlap_copies_syncs_and_tensors(xferbench):
    proc, runs = xferbench("suite=overlap", "overlap.ops=[h2d,d2h,sync,make_tensor]", "overlap.sizes=[64MiB]",
                           "overlap.matmul=4096", "overlap.make_sizes=[1MiB]", "timing.trials=3", timeout=240)
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all(), df[~df.verified].note.unique()
    pairs = overlap.table(df).set_index(["op", "memory"])
    assert len(pairs) == 4
    pinned = pairs.loc[("h2d", "pinned")]
    # A copy engine beside the SMs: both at once on two streams; on one stream, one after the other.
    assert pinned.overlap > 1.4 and pinned.overlap_one_stream < 1.15, pairs
    assert pinned.copy_gbps > 20 and pinned.tflops > 100
    assert pairs.loc[("h2d", "pageable")].overlap < pinned.overlap, pairs
    syncs = overlap.sync_table(df).set_index("op")
    assert syncs.loc["sync_stream", "cost_us_busy"] < syncs.loc["sync_device", "cost_us_busy"], syncs
    made = overlap.make_table(df).set_index("size")
    assert made.loc["1MiB", "device_us"] < made.loc["1MiB", "pageable_us"], made


@multigpu
def test_overlap_peer_copy_and_all_reduce(xferbench):
    n = torch.cuda.device_count()
    proc, runs = xferbench("suite=overlap", "overlap.ops=[peer,all_reduce]", "overlap.sizes=[64MiB]",
                           "overlap.matmul=4096", "timing.trials=3", timeout=240)
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all(), df[~df.verified].note.unique()
    reduce = df[df.op == "all_reduce"]
    assert set(reduce.world_size) == {n} and set(reduce.backend) == {"nccl"}
    assert (reduce.busbw_gbps / reduce.algbw_gbps).dropna().round(6).eq(round(2 * (n - 1) / n, 6)).all()
    whole = reduce[reduce.part.isin(["copy_alone", "compute_alone", "one_stream", "total"])]
    assert (whole.time_fastest_rank_s <= whole.time_s * (1 + 1e-9)).all()   # the slowest rank's time is kept
    pairs = overlap.table(df).set_index("op")
    assert set(pairs.index) == {"peer", "all_reduce"}
    assert (pairs.overlap_one_stream < 1.15).all() and pairs.loc["peer", "overlap"] > 1.2, pairs


def test_pipeline_loops_and_the_link(xferbench):
    proc, runs = xferbench("suite=pipeline", "pipeline.workers=[0,2]", "pipeline.min_size=256KiB",
                           "pipeline.max_size=4MiB", "timing.trials=3", timeout=240)
    assert proc.returncode == 0, proc.stderr
    df = load(runs)
    assert (df.status == "ok").all() and df.verified.all(), df[~df.verified].note.unique()
    assert set(df.op) == {"h2d", "loader_to_gpu"}
    table = pipeline.table(df)
    assert len(table) == 5 * 3   # the best loop and four changed alone, at three sizes
    assert (table.link_gbps[table["size"] == "4MiB"] > 10).all()
    assert (table.of_link < 1.05).all(), table   # no loop delivers more than the link carries


class _Swapped(pipeline.SyntheticSamples):
    def __getitem__(self, i: int) -> torch.Tensor:
        return super().__getitem__({5: 6, 6: 5}.get(i, i))


def test_prefetching_feed_checks_every_byte_on_the_gpu(monkeypatch):
    loop = pipeline.Loop(0, pin_memory=True, non_blocking=True, prefetch=True)
    feed = pipeline.Feed(4, 4096, loop, torch.device("cuda", 0))
    feed(8)
    assert feed.correct() and feed.consumed == 8
    feed.close()
    monkeypatch.setattr(pipeline, "SyntheticSamples", _Swapped)
    feed = pipeline.Feed(4, 4096, loop, torch.device("cuda", 0))
    feed(1)
    assert feed.correct()
    feed(1)
    assert not feed.correct()   # the second batch holds samples 4, 6, 5, 7
    feed.close()


def test_matmul_check_on_the_gpu():
    mm = overlap.Matmul(2048, torch.device("cuda", 0))
    assert not mm.correct()
    mm(3)
    torch.cuda.synchronize()
    assert mm.correct()
    mm.c[1, 2] = mm.c[1, 2] + 100
    assert not mm.correct()
