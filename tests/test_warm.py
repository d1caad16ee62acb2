"""The summary's analysis, loaded on a thread while a distributed suite's ranks measure."""
from __future__ import annotations

import os

from bench.analysis import expected
from bench.contract import Distribution
from bench.driver.warm import AnalysisWarmer

RANKS = Distribution(world_sizes=[2, 4], backend="gloo", timeout_s=60)


def test_loads_the_tables_where_a_core_is_spare(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    expected.shipped.cache_clear()
    warmer = AnalysisWarmer()
    warmer.start_for(None)   # a suite this process measures itself: nothing loads beside it
    warmer.join()
    assert expected.shipped.cache_info().currsize == 0
    warmer.start_for(RANKS)
    warmer.join()
    assert expected.shipped.cache_info().currsize == 1


def test_leaves_every_core_to_the_ranks(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(5)))   # 4 ranks and this process
    expected.shipped.cache_clear()
    warmer = AnalysisWarmer()
    warmer.start_for(RANKS)
    warmer.join()
    assert expected.shipped.cache_info().currsize == 0
