"""The summary's analysis, loaded while this process only waits on a distributed suite's ranks.

A run's verdicts read the shipped tables (bench.analysis.expected: a second or two of pandas
before the first verdict, more on a slow host); while the ranks of a distributed suite measure,
this process only watches them, so it loads them then, on a thread, where the machine has a core
to spare beside every rank."""
from __future__ import annotations

import os
import threading

from bench.contract import Distribution


class AnalysisWarmer:
    """Loads the analysis once, on a thread, when a distributed suite starts (start_for)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def start_for(self, distribution: Distribution | None) -> None:
        """Starts the loading for a suite measured in ranks, unless they need every core."""
        if self._thread is not None or distribution is None:
            return
        if len(os.sched_getaffinity(0)) <= max(distribution.world_sizes) + 1:
            return
        self._thread = threading.Thread(target=_load, name="xferbench-analysis", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Waits for the loading, where it started: the summary reads what it loads."""
        if self._thread is not None:
            self._thread.join()


def _load() -> None:
    from bench.analysis import expected, fleet_levels, judge, tables  # noqa: F401  (imported to load)

    try:
        expected.shipped()
        expected.shipped_noise()
    except Exception:   # the summary reads them again, and says what is wrong with them
        pass
