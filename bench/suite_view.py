"""What the analysis side needs of a suite, and the catalog that hands it over.

The command lines build the catalog from the suite registry (`catalog = {s.name: s for s in
bench.suites.all()}`) and pass it down; nothing here imports a suite. A suite's rows found in
results but absent from the catalog (a suite of someone else's) get `UNKNOWN`'s defaults.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Metric:
    """One headline row of the report: the curves of (suite, op) whose columns match `where`."""

    label: str
    suite: str
    op: str
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()
    latency: bool = False     # time per op at the smallest size; else GB/s at the largest


class Canvas(Protocol):
    """Where a suite's figures go (bench.analysis.figures.style.Canvas): the colour of each
    series (the SERIES column of the frame a suite's figures hook gets), the catalog, and save()."""

    SERIES: str
    colours: dict
    catalog: Mapping[str, Any]

    def save(self, fig: Any, stem: str, caption: str = "") -> list[Path]: ...


class SuiteView(Protocol):
    """A suite as the analysis side reads it (bench.contract.Suite provides all of it)."""

    name: str
    title: str                                      # its name in figure titles
    bandwidth: str                                  # algbw_gbps | busbw_gbps
    latency_sizes: tuple[int, ...]
    curves: bool                                    # its rows drawn as the common curves against size
    headline: tuple[Metric, ...]
    noise: Mapping[tuple[str, str], float]          # (platform, size class) -> between-run sigma
    host_own: tuple[str, ...]                       # ops that measure the host itself: no machine kind sets them

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame | str]]: ...

    def figures(self, frame: pd.DataFrame, canvas: Canvas) -> list[Path]: ...

    def link_limit(self, row: Mapping[str, Any]) -> tuple[float, str]: ...

    def expectation(self, row: Mapping[str, Any]) -> tuple[float, float, str] | None: ...

    def judged(self, rows: pd.DataFrame) -> pd.DataFrame: ...


Catalog = Mapping[str, SuiteView]


class _Unknown:
    """A suite the catalog does not hold: bytes per second, no tables or figures of its own."""

    name = title = ""
    bandwidth = "algbw_gbps"
    latency_sizes = (4096,)
    curves = True
    headline: tuple[Metric, ...] = ()
    noise: Mapping[tuple[str, str], float] = {}
    host_own: tuple[str, ...] = ()

    def tables(self, frame):
        return []

    def figures(self, frame, canvas):
        return []

    def link_limit(self, row):
        return math.nan, ""

    def expectation(self, row):
        return None

    def judged(self, rows):
        return rows


UNKNOWN = _Unknown()


def view(catalog: Catalog, suite: str) -> SuiteView:
    return catalog.get(suite, UNKNOWN)


def bandwidth_column(catalog: Catalog, suite: str) -> str:
    """The column a suite is judged by: bus bandwidth for collectives, bytes moved per second otherwise."""
    return view(catalog, suite).bandwidth
