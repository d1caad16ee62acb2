import time

import pytest

from bench import ConfigError
from bench.timing import HostClock, TimingConfig, calibrate, measure


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


def test_calibration_respects_bounds_and_agreement():
    cfg = TimingConfig(0, 1, 1.0, 1, 8)
    assert calibrate(lambda n: None, HostClock(), cfg) == 8  # a no-op never reaches 1 s: capped
    cfg = TimingConfig(0, 1, 1e-9, 3, 8)
    assert calibrate(lambda n: time.sleep(1e-4 * n), HostClock(), cfg) == 3  # at least min_iters
    seen = []
    n = calibrate(lambda n: None, HostClock(), TimingConfig(0, 1, 1e-9, 1, 8),
                  agree=lambda x: seen.append(x) or max(x, 5))
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
    with pytest.raises(ConfigError, match=key):
        TimingConfig(**kwargs)
