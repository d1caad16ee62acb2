"""What the P2P suite decides without GPUs: pairs, points, and the printed matrix."""
import pandas as pd
import pytest

from bench import ConfigError, suites
from bench.measure.timing import TimingConfig
from bench.results import Sample
from bench.suites import p2p
from bench.suites.p2p.points import select_pairs
from bench.suites.p2p.reading import matrices
from bench.contract import Context

P2P = suites.get("p2p")


def test_pair_selection():
    assert select_pairs("all", 3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert select_pairs("ring", 4) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert select_pairs("ring", 2) == [(0, 1), (1, 0)]
    assert select_pairs([[0, 3], [3, 0]], 4) == [(0, 3), (3, 0)]


@pytest.mark.parametrize("spec, message", [("star", "p2p.pairs='star' is unknown"),
                                           ([[0, 0]], "[0, 0] is not a pair of two different GPU indices"),
                                           ([[0, 1, 2]], "[0, 1, 2] is not a pair")])
def test_bad_pairs_are_refused_by_the_settings(spec, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        p2p.Settings(pairs=spec)


def test_pairs_beyond_the_gpus_present_are_refused_when_planned():
    with pytest.raises(ConfigError, match=r"p2p.pairs: \[0, 4\] needs two different GPUs among 0\.\.3"):
        select_pairs(p2p.Settings(pairs=[[0, 4]]).pairs, 4)


def test_points_measure_each_bidirectional_pair_once():
    settings = p2p.Settings(pairs="all", ops=["uni", "bidir"], modes=["peer", "staged"], engine=["ce"])
    pts = P2P.points(settings, Context("cuda", TimingConfig(), [4096, 8192], gpu_count=3))
    uni = [p for p in pts if p.op == "uni"]
    bidir = {(p.src, p.dst) for p in pts if p.op == "bidir"}
    assert len(uni) == 6 * 2 * 2  # ordered pairs x modes x sizes
    assert bidir == {("cuda:0", "cuda:1"), ("cuda:0", "cuda:2"), ("cuda:1", "cuda:2")}


def test_held_staged_copies_name_their_ring_of_slots_and_nothing_else_does():
    settings = p2p.Settings(pairs="ring", ops=["uni", "bidir"], modes=["peer", "staged"], engine=["ce"])
    pts = P2P.points(settings, Context("cuda", TimingConfig(), [4096, 1 << 20], gpu_count=2,
                                       launches=("eager", "held"), held_max_bytes=65536))
    ringed = {(p.op, p.mode, p.launch, p.size_bytes) for p in pts if p.params is not None}
    assert ringed == {("uni", "staged", "held", 4096), ("bidir", "staged", "held", 4096)}
    row = next(p for p in pts if p.params is not None).sample(time_s=1e-5)
    assert row.params == '{"slots": 4}'


def test_one_gpu_is_a_skip_not_an_error():
    settings = p2p.Settings(pairs="all", ops=["uni"], modes=["peer"], engine=["ce"])
    assert P2P.check(settings, Context("cuda", TimingConfig(), [4096], gpu_count=1)) == "needs 2 or more GPUs, found 1"


def test_matrix_is_peak_of_medians():
    rows = [Sample("p2p", "uni", size, trial=t, mode="peer", src=s, dst=d, algbw_gbps=bw, verified=True)
            for s, d, base in (("cuda:0", "cuda:1", 100.0), ("cuda:1", "cuda:0", 50.0))
            for size, scale in ((4096, 0.1), (1 << 20, 1.0))
            for t, bw in enumerate((base * scale, base * scale * 1.02, base * scale * 0.5))]
    matrix = matrices(pd.DataFrame([r.__dict__ for r in rows]))["uni peer"]
    assert matrix.loc["cuda:0", "cuda:1"] == 100.0 and matrix.loc["cuda:1", "cuda:0"] == 50.0


def test_held_staged_copies_without_the_drivers_flags_are_skipped_with_the_reason(monkeypatch):
    from bench.measure import flags
    from bench.suites.p2p.measure import measure_pair

    def no_driver(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    flags._driver.cache_clear()
    monkeypatch.setattr(flags.ctypes, "CDLL", no_driver)
    try:
        point = next(p for p in P2P.points(p2p.Settings(pairs="ring", ops=["uni"], modes=["staged"], engine=["ce"]),
                                           Context("cuda", TimingConfig(), [4096], gpu_count=2, launches=("held",),
                                                   held_max_bytes=4096))
                     if p.launch == "held")
        (row,) = measure_pair(point, None, None)
    finally:
        flags._driver.cache_clear()
    assert row.status == "skipped"
    assert row.note == ("held staged copies need the driver's stream memory operations: "
                        "no CUDA driver library (libcuda.so.1): libcuda.so.1: cannot open shared object file")


def test_a_driver_without_stream_memory_operations_is_named(monkeypatch):
    from bench.measure import flags

    class OldDriver:
        cuStreamWriteValue32 = type("Fn", (), {})()
    flags._driver.cache_clear()
    monkeypatch.setattr(flags.ctypes, "CDLL", lambda name: OldDriver())
    try:
        with pytest.raises(flags.FlagsUnavailable, match="the CUDA driver has no cuStreamWaitValue32"):
            flags.require()
    finally:
        flags._driver.cache_clear()
