"""A suite of one file, outside the package (XFERBENCH_SUITES names it): the host's memset rate.

What tests/test_contract.py proves with it: a new suite is this file and nothing else, and it
goes through the plan, a run, the summary, the figures, the comparison and the report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

import pandas as pd

from bench import lazy
from bench.suite_view import Metric
from bench.config.settings import SizeRange, nonempty
from bench.measure import timing
from bench.measure.timing import HostClock
from bench.contract import Point, Suite, trial_rows

torch = lazy.module("torch")


@dataclass
class Settings:
    values: List[int] = field(default_factory=lambda: [7])   # the bytes each fill writes

    def __post_init__(self) -> None:
        nonempty("fill.values", self.values)


@dataclass(frozen=True)
class Value:
    byte: int


class Fill(Suite):
    name = "fill"
    title = "Host fills"
    Settings = Settings
    sizes = SizeRange("4KiB", "64KiB", ["4KiB:x4"])
    headline = (Metric("Host fill", "fill", "fill"),)
    noise = {("cpu", "latency"): 0.3, ("cpu", "bandwidth"): 0.2}

    def check(self, s: Settings, ctx) -> str | None:
        return None

    def points(self, s: Settings, ctx) -> list[Point]:
        return [Point(self.name, "fill", size, memory="host", mode=f"byte {v}", backend="cpu", params=Value(v))
                for size in ctx.sizes for v in s.values]

    def start(self, s: Settings, ctx):
        return torch.empty(max(ctx.sizes), dtype=torch.uint8)

    def measure(self, point: Point, s: Settings, ctx, buffer) -> list:
        view, byte = buffer[:point.size_bytes], point.params.byte

        def fill(n: int) -> None:
            for _ in range(n):
                view.fill_(byte)

        trials = timing.measure(fill, HostClock(), ctx.timing)
        return trial_rows(point, trials, point.size_bytes, 1.0, bool((view == byte).all()))

    def tables(self, frame: pd.DataFrame) -> list:
        rows = frame[(frame["suite"] == self.name) & (frame["status"] == "ok")]
        return [("fill: median GB/s per size", rows.groupby("size_bytes")["algbw_gbps"].median().round(2).to_frame())]

    def figures(self, frame: pd.DataFrame, canvas) -> list:
        import matplotlib.pyplot as plt

        rows = frame[(frame["suite"] == self.name) & (frame["status"] == "ok")]
        fig, ax = plt.subplots()
        rows.groupby("size_bytes")["algbw_gbps"].median().plot.bar(ax=ax)
        return canvas.save(fig, "fill_rates", "The host's memset rate per size.")
