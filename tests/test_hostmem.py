"""The host's own memory figures (bench.measure.hostmem): real copies, reads and writes of host
buffers, checked, on one thread and on two."""
from __future__ import annotations

import pytest
import torch

from bench.measure import hostmem, timing
from bench.measure.timing import HostClock, TimingConfig

QUICK = TimingConfig(warmup=1, trials=2, min_trial_s=0.001, min_iters=1, max_iters=50)


@pytest.mark.parametrize("kind", hostmem.KINDS)
@pytest.mark.parametrize("threads", [1, 2])
def test_each_kind_moves_the_bytes_it_says_and_checks_them(kind, threads):
    src = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8)
    dst = torch.zeros_like(src)
    traffic = hostmem.HostTraffic(kind, dst, src)
    before = torch.get_num_threads()
    with hostmem.threads(threads, []):
        assert torch.get_num_threads() == threads
        trials = timing.measure(traffic, HostClock(), QUICK)
    assert torch.get_num_threads() == before
    assert len(trials) >= 2 and all(t.time_s > 0 for t in trials)   # small ops: more, shorter trials
    assert traffic.check()
    if kind == "copy":
        assert torch.equal(dst, src)
    elif kind == "write":
        assert bool((dst == hostmem.FILL).all())


def test_a_wrong_result_fails_its_check():
    src = torch.randint(0, 256, (1 << 16,), dtype=torch.uint8)
    dst = torch.zeros_like(src)
    copy, write, read = (hostmem.HostTraffic(k, dst, src) for k in ("copy", "write", "read"))
    copy(1)
    dst[7] ^= 1
    assert not copy.check()
    write(1)
    dst[3] = 0
    assert not write.check()
    read(1)
    src[0] ^= 0xFF   # the data changed under the reads: a later read sums differently
    read(1)
    assert not read.check()
    assert not hostmem.HostTraffic("read", dst, src).check()   # never read: nothing to vouch for
