import threading
import time
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from bench import ConfigError
import math

from bench.measure import timing
from bench.measure.timing import HostClock, TimingConfig, calibrate, measure


class ScriptedWork:
    """Fake work and clock: a trial of n operations reads n * per_op, except scripted readings.

    `glitches` maps a reading's index (0 for the first stop()) to the time it returns instead.
    """

    def __init__(self, per_op: float, glitches: dict[int, float] | None = None) -> None:
        self.per_op, self.glitches = per_op, glitches or {}
        self.n, self.readings = 0, []

    def enqueue(self, n: int) -> None:
        self.n = n

    def start(self) -> None:
        pass

    def stop(self, part_events=None) -> tuple[float, dict]:
        t = self.glitches.get(len(self.readings), self.n * self.per_op)
        self.readings.append((self.n, t))
        return t, {}


CFG = TimingConfig(warmup=0, trials=3, min_trial_s=0.01, min_iters=1, max_iters=10000)


def _calibrate(work: ScriptedWork) -> int:
    return calibrate(work.enqueue, work, CFG)


def test_one_slow_reading_no_longer_sets_n():
    work = ScriptedWork(1e-4, {0: 0.05})  # a hiccup: 1 op of 0.1 ms read as 50 ms
    n = _calibrate(work)
    assert n == 120  # 1.2 x min_trial_s at the true rate; the hiccup alone gave n=1
    assert work.readings[:3] == [(1, 0.05), (1, 1e-4), (1, 1e-4)]  # the median of three overruled it


def test_one_fast_reading_no_longer_sets_n():
    work = ScriptedWork(1e-3, {0: 1e-9})  # a glitch: 1 op of 1 ms read as 1 ns, so N jumps to the cap
    n = _calibrate(work)
    assert work.readings[1][0] == CFG.max_iters  # it did jump ...
    assert n == 12  # ... but N comes from the median rate there, not from trials of 10 s


def test_calibration_reaches_min_trial_by_the_median():
    work = ScriptedWork(1e-3, {2: 1e-6})  # one of the three confirming readings at n=12 is a glitch
    assert _calibrate(work) == 12
    assert [n for n, _ in work.readings] == [1, 12, 12, 12]


def test_short_trial_is_measured_again_once_then_flagged():
    # Calibration takes readings 0-2 (n=1, then two agreeing at n=12); trial 1 is short once,
    # trial 2 twice.
    work = ScriptedWork(1e-3, {4: 0.001, 6: 0.002, 7: 0.003})
    trials = measure(work.enqueue, work, CFG)
    assert [(t.iters, t.time_s, t.short) for t in trials] == [(12, 0.012, False), (12, 0.012, False),
                                                              (12, 0.003, True)]
    assert len(work.readings) == 3 + 3 + 2  # one retry each for the two short readings, no more


def test_small_ops_get_more_shorter_trials_for_the_same_budget():
    warmed = replace(CFG, warmup=3)
    work = ScriptedWork(1e-5)  # 10 µs ops: host-bound territory
    trials = measure(work.enqueue, work, warmed)
    assert len(trials) == 3 * 3 and {t.iters for t in trials} == {400}  # 1.2 x a third of 10 ms at 10 µs
    assert not any(t.short for t in trials)  # 4 ms trials are full-length for the split budget
    assert max(n for n, _ in work.readings) == 400   # calibrated for the short trials: no reading at 1200
    slow = ScriptedWork(2e-4)  # 200 µs ops: left as they were
    assert [t.iters for t in measure(slow.enqueue, slow, warmed)] == [60, 60, 60]
    unwarmed = ScriptedWork(1e-5)  # no warm-up, no rate: five full trials
    assert [t.iters for t in measure(unwarmed.enqueue, unwarmed, CFG)] == [1200] * 3


def test_warm_up_is_one_operation_when_one_alone_lasts_a_trial():
    cfg = TimingConfig(warmup=3, trials=3, min_trial_s=0.01)
    long_op = ScriptedWork(0.02)   # a 1 GiB host copy: a second warm-up op would only cost time
    measure(long_op.enqueue, long_op, cfg)
    assert [n for n, _ in long_op.readings[:2]] == [1, 1]   # warm-up 1 op, then calibration at n=1
    # the reading agrees with the warm-up's: taken, and it is the first trial
    assert len(long_op.readings) == 1 + cfg.trials
    short_op = ScriptedWork(1e-4)
    measure(short_op.enqueue, short_op, cfg)
    # 1 + 2 warm-up ops, then calibration where the warm-up's rate puts N, trusted as they agree
    assert [n for n, _ in short_op.readings] [:4] == [1, 2, 120, 120]
    assert len(short_op.readings) == 2 + cfg.trials


def test_a_slow_first_call_does_not_set_n():
    """A first call that sets up (a peer mapping, a kernel's compile) lasts a trial by itself: the
    reading after it, at N=1, is the op's own time, and N grows from there (4 KiB peer copies read
    39 µs, not 21, and pointer chases 110 µs an access, when such a first call alone set N to 1)."""
    setup = ScriptedWork(1e-5, {0: 0.5})
    trials = measure(setup.enqueue, setup, TimingConfig(warmup=3, trials=3, min_trial_s=0.01))
    assert {t.iters for t in trials} == {1200}   # 1.2 x 10 ms at 10 µs (the warm-up's rate did not say small)


def test_a_trials_time_and_pace_are_agreed_at_once_and_each_rank_keeps_its_own_time(host):
    """One round trip between the ranks a trial for its time and pace, not two; the collectives
    suite reduces each trial's own time over the ranks itself (slowest, fastest)."""
    seen = [[], []]
    ranks = Ranks(2)

    def rank(r: int) -> list:
        work = ScriptedWork(1e-5 * (1 + r))   # rank 1's ops take twice as long
        agree = ranks.agree(r)
        return measure(work.enqueue, ScriptedEvents(work), replace(CFG, warmup=3),
                       lambda values: seen[r].append(len(values)) or agree(values))

    with ThreadPoolExecutor(2) as pool:
        results = [f.result() for f in [pool.submit(rank, r) for r in range(2)]]
    split = CFG.trials * timing.SMALL_OP_SPLIT
    assert seen[0] == seen[1] and seen[0].count(2) == split   # each trial's time and pace in one call
    own = [{round(t.time_s / t.iters, 9) for t in trials} for trials in results]
    assert own == [{1e-5}, {2e-5}]   # each rank's own time per op, not the agreed one


def test_calibration_trusts_a_reading_only_where_the_warm_up_agrees():
    warmed = TimingConfig(warmup=3, trials=3, min_trial_s=0.01)
    steady = ScriptedWork(1e-3)
    calibrate(steady.enqueue, steady, warmed, per_op=1e-3)
    assert [n for n, _ in steady.readings] == [12]   # one reading at the warm-up's N, as it agrees
    hiccup = ScriptedWork(1e-3, {0: 0.03})   # the first reading at N=12 is 2.5x slow: not trusted
    assert calibrate(hiccup.enqueue, hiccup, warmed, per_op=1e-3) == 12
    assert [n for n, _ in hiccup.readings] == [12, 12, 12]   # the median of three overruled it
    unknown = ScriptedWork(0.02)   # no warm-up rate: a second reading that agrees confirms it
    calibrate(unknown.enqueue, unknown, warmed)
    assert [n for n, _ in unknown.readings] == [1, 1]


class Ranks:
    """agree() over threads standing in for the ranks of a collective: the max of every rank's value."""

    def __init__(self, size: int) -> None:
        self.barrier = threading.Barrier(size, timeout=10)  # a rank out of step breaks it: no hang
        self.values = [0.0] * size
        self.calls = [0] * size

    def agree(self, rank: int):
        def agree(values: list[float]) -> list[float]:
            self.calls[rank] += 1
            self.values[rank] = list(values)
            self.barrier.wait()
            agreed = [max(v) for v in zip(*self.values)]   # a rank out of step: lists differ, zip truncates
            same_length = len({len(v) for v in self.values}) == 1
            self.barrier.wait()  # every rank has read before any writes its next value
            assert same_length
            return agreed

        return agree


def test_ranks_stay_in_lockstep_whatever_their_local_timings():
    works = [ScriptedWork(1e-3, {0: 0.05}),                  # rank 0: a slow first calibration reading
             ScriptedWork(2e-4, {6: 1e-5, 7: 1e-5, 9: 1e-6})]  # rank 1: faster, with short trials of its own
    ranks = Ranks(len(works))
    with ThreadPoolExecutor(len(works)) as pool:
        futures = [pool.submit(measure, w.enqueue, w, CFG, ranks.agree(r)) for r, w in enumerate(works)]
        results = [f.result() for f in futures]
    assert ranks.calls[0] == ranks.calls[1]
    assert [len(w.readings) for w in works] == [len(works[0].readings)] * 2
    assert [[(t.iters, t.short) for t in trials] for trials in results] == [[(12, False)] * 3] * 2


def test_sleep_is_timed_per_operation():
    nap = 0.002

    def naps(n: int) -> None:
        for _ in range(n):
            time.sleep(nap)

    trials = measure(naps, HostClock(), TimingConfig(1, 3, 0.02, 1, 100))
    assert len(trials) == 3
    for t in trials:
        assert t.iters >= 5  # 20 ms of 2 ms naps: calibration asked for several per trial
        assert t.time_s >= 0.02 * 0.9
        assert nap <= t.per_op_s < nap * 3


def test_real_cpu_copies_through_measure():
    """The issue's case: 64 KiB host copies, each far below min_trial_s, on the real clock."""
    src, dst = torch.ones(64 * 1024, dtype=torch.uint8), torch.zeros(64 * 1024, dtype=torch.uint8)

    def copies(n: int) -> None:
        for _ in range(n):
            dst.copy_(src)

    cfg = TimingConfig(warmup=3, trials=5, min_trial_s=0.02, min_iters=1, max_iters=100000)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a busy machine a thread pool's stalls can outlast min_trial_s
    try:
        trials = measure(copies, HostClock(), cfg)
    finally:
        torch.set_num_threads(threads)
    assert len(trials) == 5 * 3 and torch.equal(dst, src)  # µs-scale copies: split into 3x the trials
    assert len({t.iters for t in trials}) == 1 and trials[0].iters > 1  # one N for every trial, grown from 1
    assert all(t.time_s >= cfg.min_trial_s / 3 / 2 or t.short for t in trials)  # long enough, or flagged


def test_calibration_respects_bounds_and_agreement():
    cfg = TimingConfig(0, 1, 1.0, 1, 8)
    assert calibrate(lambda n: None, HostClock(), cfg) == 8  # a no-op never reaches 1 s: capped
    cfg = TimingConfig(0, 1, 1e-9, 3, 8)
    assert calibrate(lambda n: time.sleep(1e-4 * n), HostClock(), cfg) == 3  # at least min_iters
    seen = []
    n = calibrate(lambda n: None, HostClock(), TimingConfig(0, 1, 1e-9, 1, 8),
                  agree=lambda xs: seen.append(xs) or [max(x, 5) for x in xs])
    assert n == 5 and seen  # every decision went through `agree`, as ranks of a collective need


def test_host_clock_syncs_on_both_sides():
    calls = []
    clock = HostClock(lambda: calls.append(time.perf_counter()))
    clock.start()
    time.sleep(0.01)
    elapsed, parts = clock.stop()
    assert len(calls) == 2 and parts == {}
    assert 0.009 < elapsed < 0.5


@pytest.mark.parametrize("kwargs, key", [
    ({"trials": 0}, "timing.trials"), ({"warmup": -1}, "timing.warmup"),
    ({"min_trial_s": 0}, "timing.min_trial_s"), ({"min_iters": 5, "max_iters": 2}, "timing.min_iters"),
])
def test_bad_timing_config(kwargs, key):
    from bench.config.settings import TimingSettings

    with pytest.raises(ConfigError, match=key):
        TimingSettings(**kwargs)


class ScriptedEvents(timing.EventClock):
    """A device clock (waits for the host, as GPU work does) reading scripted times."""

    def __init__(self, work: ScriptedWork) -> None:
        self.work = work

    def start(self) -> None:
        pass

    def stop(self, part_events=None) -> tuple[float, dict]:
        return self.work.stop()


@pytest.fixture
def host(monkeypatch):
    """The host's pace as scripted readings: `host.readings` is consumed, then `host.after` forever."""
    class Host:
        readings: list = []
        after = 1.0

        def __call__(self) -> float:
            return self.readings.pop(0) if self.readings else self.after

    scripted = Host()
    monkeypatch.setattr(timing, "host_pace", scripted)
    monkeypatch.setattr(timing, "_readings", [1.0])
    monkeypatch.setattr(timing, "_clock", {"first": time.perf_counter() - 100, "waited": 0.0})
    monkeypatch.setattr(timing, "_POLL_S", 0.001)
    return scripted


def test_small_and_host_clocked_ops_read_the_hosts_pace_before_each_trial(host):
    warmed = replace(CFG, warmup=3)
    host.readings = [1.0, 1.1, 3.0]
    work = ScriptedWork(1e-5)
    trials = measure(work.enqueue, work, warmed)
    assert [t.host_pace_s for t in trials[:3]] == [1.0, 1.1, 3.0] and all(t.host_pace_s == 1.0 for t in trials[3:])
    mid_op = ScriptedWork(2e-4)   # not split, but still within the host's reach: read
    assert all(t.host_pace_s == 1.0 for t in measure(mid_op.enqueue, mid_op, warmed))
    slow_op = ScriptedWork(2e-3)   # device-bound: its trials read nothing
    assert all(math.isnan(t.host_pace_s) for t in measure(slow_op.enqueue, slow_op, warmed))
    copied = measure(lambda n: None, HostClock(), replace(CFG, trials=2, min_trial_s=1e-4))
    assert all(t.host_pace_s == 1.0 for t in copied)   # the host does the work: its pace beside every trial


def test_calibrations_last_reading_is_the_first_trial_where_it_alone_set_n(host):
    """A reading taken on trust at the N the trials run is a trial like theirs: kept, one run fewer.
    A small op's reading then reads the host's pace before it, as every trial does."""
    warmed = TimingConfig(warmup=3, trials=3, min_trial_s=0.01)
    steady = ScriptedWork(2e-3)   # 2 ms ops: device-bound, no pace
    trials = measure(steady.enqueue, steady, warmed)
    assert [n for n, _ in steady.readings] == [1, 2, 6, 6, 6]   # warm-up, then three readings at N=6
    assert [t.iters for t in trials] == [6, 6, 6] and all(math.isnan(t.host_pace_s) for t in trials)
    hiccup = ScriptedWork(2e-3, {2: 0.03})   # calibration's reading disagrees with the warm-up's
    trials = measure(hiccup.enqueue, hiccup, warmed)
    assert len(hiccup.readings) == 2 + 3 + 3 and len(trials) == 3   # the median set N: no reading kept
    host.readings = [1.5, 1.0, 1.1]
    small = ScriptedWork(1e-5)
    trials = measure(small.enqueue, small, warmed)
    assert len(small.readings) == 2 + 3 * timing.SMALL_OP_SPLIT   # the first trial was calibration's
    assert [t.host_pace_s for t in trials[:3]] == [1.5, 1.0, 1.1]   # its pace, read before it, kept
    scaled = ScriptedWork(2e-3, {2: 0.0145})   # trusted but long: N scaled down, so not a trial
    trials = measure(scaled.enqueue, scaled, warmed)
    assert [n for n, _ in scaled.readings] == [1, 2, 6, 5, 5, 5] and len(trials) == 3


def test_an_op_whose_first_call_is_slow_still_reads_the_hosts_pace(host):
    work = ScriptedWork(1e-5, {0: 0.02})   # the warm-up's first call sets up (peers, NCCL): 20 ms
    trials = measure(work.enqueue, work, replace(CFG, warmup=3))
    assert trials and all(t.host_pace_s == 1.0 for t in trials)


def test_a_gpu_op_measured_while_the_host_was_slow_is_measured_again_once_it_is_back(host):
    warmed = replace(CFG, warmup=3)
    host.readings = [2.0] * 9 + [2.0, 2.0]   # nine trials in a slow mood, two polls still slow
    work = ScriptedWork(1e-5)
    trials = measure(work.enqueue, ScriptedEvents(work), warmed)
    assert [t.host_pace_s for t in trials] == [2.0] * 9 + [1.0] * 9   # the second round, at the usual pace
    assert not timing.at_pace(2.0) and timing.at_pace(1.2)


def test_a_host_that_stays_slow_costs_a_bounded_wait_and_keeps_the_trials(host, monkeypatch):
    monkeypatch.setattr(timing, "WAIT_FOR_HOST_S", 0.05)
    host.after = 2.0
    work = ScriptedWork(1e-5)
    trials = measure(work.enqueue, ScriptedEvents(work), replace(CFG, warmup=3))
    assert len(trials) == 9 and timing.WAIT_FOR_HOST_S <= timing._clock["waited"] < 1   # waited once, then gave up
    timing._clock["waited"] = 100.0   # the run's share of waiting spent: no more waiting
    assert len(measure(work.enqueue, ScriptedEvents(work), replace(CFG, warmup=3))) == 9
    assert timing._clock["waited"] == 100.0   # it did not wait


def test_ranks_that_judge_the_hosts_pace_apart_still_wait_together(host, monkeypatch):
    """Each rank's quickest reading is its own (rank 0 alone measures some points of the overlap
    suite), so two ranks can judge one agreed reading apart: they must still wait, poll and
    measure again together, or their collectives fall out of step (a hang on four GPUs)."""
    monkeypatch.setattr(timing, "WAIT_FOR_HOST_S", 0.02)
    slow_on_rank_0 = threading.local()
    monkeypatch.setattr(timing, "at_pace", lambda pace: not getattr(slow_on_rank_0, "yes", False))
    ranks = Ranks(2)

    def rank(r: int) -> list:
        slow_on_rank_0.yes = r == 0
        work = ScriptedWork(1e-5)
        return measure(work.enqueue, ScriptedEvents(work), replace(CFG, warmup=3), ranks.agree(r))

    with ThreadPoolExecutor(2) as pool:
        results = [f.result() for f in [pool.submit(rank, r) for r in range(2)]]
    assert ranks.calls[0] == ranks.calls[1]
    assert len(results[0]) == len(results[1]) == 9   # rank 0 never found the host back: neither measured again
    assert timing._clock["waited"] >= timing.WAIT_FOR_HOST_S   # but both waited for it
