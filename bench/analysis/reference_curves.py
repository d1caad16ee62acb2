"""A class's reference curves, as the expectation table (expected.py) reads them: per class and
role, time per op against size, and what stands behind each size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.analysis.compare import BANDWIDTH_SHARE, LATENCY_RATIO, PLATEAU
from bench.points import ROLE_KEYS
from bench.suite_view import LATENCY_BOUND


@dataclass
class Curve:
    """One class's reference curve of one role: time per op against size."""

    sizes: np.ndarray    # ascending
    log_time: np.ndarray
    runs: np.ndarray
    spread: np.ndarray   # median |difference| of log time between two runs; NaN with one run
    theory: np.ndarray   # the link's GB/s for the role on this class; NaN where no link bounds it
    instances: str       # the instances whose runs made it: 'h200-x2'
    machine: str = ""    # its class
    hosts: np.ndarray | None = None   # the hosts behind each size (None: one each)
    host_spread: np.ndarray | None = None   # median |difference| of log time between two hosts

    def covers(self, size: int) -> bool:
        return bool(self.sizes[0] <= size <= self.sizes[-1])

    def at(self, size: int) -> tuple[float, int]:
        """(log time per op, runs behind it) at a size within the curve: a line on log-log axes
        between the two nearest sizes."""
        x = math.log(size)
        logs = np.log(self.sizes)
        k = int(np.searchsorted(self.sizes, size))
        if k < len(self.sizes) and self.sizes[k] == size:
            return float(self.log_time[k]), int(self.runs[k])
        return float(np.interp(x, logs, self.log_time)), int(min(self.runs[k - 1], self.runs[k]))

    def on_ramp(self, size: int) -> bool:
        """Whether the curve's value at a size is interpolated between two sizes whose rates differ
        by more than a plateau allows: a guess along a ramp, not a plateau's figure."""
        k = int(np.searchsorted(self.sizes, size))
        if k == 0 or k == len(self.sizes) or self.sizes[k] == size:
            return False
        rate = np.log(self.sizes[k - 1:k + 1]) - self.log_time[k - 1:k + 1]
        return bool(rate[0] < rate[1] + math.log(PLATEAU))

    def hosts_at(self, size: int) -> int:
        """The healthy hosts behind the curve at a size within it (several runs of one host: one)."""
        if self.hosts is None:
            return 1
        k = int(np.searchsorted(self.sizes, size))
        exact = k < len(self.sizes) and self.sizes[k] == size
        return int(self.hosts[k] if exact else min(self.hosts[k - 1], self.hosts[k]))

    def share(self, size: int) -> float:
        """The share of its link theory this class reached at a size (NaN: no theory there), in
        bytes moved per second over the theory in the same unit (a collective's bus factor out)."""
        theory = float(np.interp(math.log(size), np.log(self.sizes), self.theory))
        return size / math.exp(self.at(size)[0]) / 1e9 / theory if theory > 0 else math.nan

    def size_class(self, size: int) -> str:
        """latency | middle | bandwidth, by compare.size_classes' rule read off this curve: from the
        first size at BANDWIDTH_SHARE of its peak rate on; else within LATENCY_RATIO of its
        shortest time."""
        rate = self.sizes / np.exp(self.log_time)
        first = self.sizes[np.argmax(rate >= BANDWIDTH_SHARE * rate.max())]
        if size >= first:
            return "bandwidth"
        log_time, _ = self.at(size)
        return LATENCY_BOUND if log_time <= math.log(LATENCY_RATIO) + self.log_time.min() else "middle"


@dataclass
class Curves:
    """A table's curves: by (class, *role), and per role its classes' curves in the table's order."""

    by_key: dict[tuple, Curve]
    by_role: dict[tuple, list[Curve]]


def curves_of(rows: pd.DataFrame) -> Curves:
    """The curves of a table's rows (expected.COLUMNS, one generation per class and role). The rows
    are sorted once, not once per curve: a table of thousands of rows is made several times a judgment."""
    group = rows.groupby(["machine", *ROLE_KEYS], sort=False).ngroup().to_numpy()   # in order of first row
    order = np.lexsort((rows["size_bytes"].to_numpy(), group))
    rows, group = rows.iloc[order], group[order]
    starts = np.flatnonzero(np.diff(group, prepend=-1))
    ends = np.append(starts[1:], len(rows))
    sizes, runs, hosts = (rows[c].to_numpy(np.int64) for c in ("size_bytes", "runs", "hosts"))
    spread, host_spread, theory = (rows[c].to_numpy(float) for c in ("spread", "host_spread", "theory_gbps"))
    log_time, instances = np.log(rows["time_s"].to_numpy(float)), rows["instances"].to_numpy()
    out = Curves({}, {})
    for key, a, b in zip(rows[["machine", *ROLE_KEYS]].iloc[starts].itertuples(index=False, name=None), starts, ends):
        curve = Curve(sizes[a:b], log_time[a:b], runs[a:b], spread[a:b], theory[a:b], str(instances[a]), key[0],
                      hosts[a:b], host_spread[a:b])
        out.by_key[key] = curve
        out.by_role.setdefault(key[1:], []).append(curve)
    return out
