"""What the analysis side needs of a suite, and the catalog that hands it over.

The command lines build the catalog from the suite registry (`catalog = {s.name: s for s in
bench.suites.all()}`) and pass it down; nothing here imports a suite. A suite's rows found in
results but absent from the catalog (a suite of someone else's) are read with `SuiteView`'s
defaults (`UNKNOWN`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol

from bench.ops import Op

if TYPE_CHECKING:
    import pandas as pd


# The size classes between-run noise and the gate key by (SuiteView.noise): sizes where a fixed
# cost sets the time, and where the bytes do. The first shares its word with the latency ops'
# name (a time per access); the analysis names the class, never the op.
LATENCY_BOUND = "latency"
# A launch path's noise entry between two runs of one host (("gpu", "launch", RERUN)), where a
# host's moods move it further than the spread between hosts (analysis/noise.py).
RERUN = "rerun"


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


class SuiteView:
    """A suite's reading face: what the analysis reads of it, with the defaults of a suite that
    declares nothing of it. Declared once: `bench.contract.Suite` adds the measuring face to
    it, each suite's `reading.py` sets what its rows mean, and a suite the catalog does not
    hold (someone else's rows) is read as `UNKNOWN`, the defaults themselves."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""                      # its name in figure titles ('Copies'); default: name
    bandwidth: ClassVar[str] = "algbw_gbps"        # algbw_gbps | busbw_gbps: the column it is judged by
    latency_sizes: ClassVar[tuple[int, ...]] = (4096,)   # the summary's time-per-op columns
    curves: ClassVar[bool] = True                  # its rows drawn as the common curves against size
    headline: ClassVar[tuple[Metric, ...]] = ()
    # (platform, size class) -> between-run sigma; (platform, size class, tag): for families one of
    # whose variant values is tag (e.g. "pageable"), where those run noisier than the suite.
    noise: ClassVar[Mapping[tuple[str, ...], float]] = {}
    host_own: ClassVar[tuple[str, ...]] = ()       # ops that measure the host itself: the doctor never judges them
    # What `judged` keeps, said where a run has none of it (the doctor: not judged, and why).
    judged_by: ClassVar[str] = "its measured rows"
    # Its ops, each declared once (bench/ops.py: what it moves, how it reads, its share of link
    # theory, other tools' names of it); an op it does not declare reads as Op's defaults.
    ops: ClassVar[tuple[Op, ...]] = ()
    # The share of a link's theoretical figure a healthy machine reaches at bandwidth-bound sizes,
    # for a suite whose ops declare none (keyed as its own `expectation` reads it); each figure's
    # measured basis is in docs/judging.md.
    efficiency: ClassVar[Mapping[Any, float]] = {}
    # The methods (bench/methods.py) that changed its figures, oldest first: a run's figures are
    # of the newest of them up to the run's method, and pool with the runs of that one.
    methods: ClassVar[tuple[str, ...]] = ("held-0", "held-1", "held-2")
    # Of those, the ones after which its figures of some launches differ from every earlier one's
    # by more than healthy hosts do (method -> launches): the runs before judge, and are judged
    # by, a table of their own for those launches.
    splits: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    # Of `methods`, those that changed its figures of some launches only (method -> those
    # launches): the runs either side of one pool for the other launches.
    changed_launches: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    def op(self, name: str) -> Op:
        """The declaration of its op `name` (Op's defaults where it declares none)."""
        return next((op for op in self.ops if op.name == name), None) or Op(name=str(name))

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame | str]]:
        """(title, table or text) for the summary, beside the common peak table."""
        return []

    def figures(self, frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
        """Figures of its own, beside the common curves; their files."""
        return []

    def link_limit(self, row: Mapping[str, Any]) -> tuple[float, str]:
        """The link a variant's peak crosses, in GB/s per direction, and its name; NaN, '' where none."""
        return math.nan, ""

    def judged(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The rows the doctor and the gate judge this suite by (its rows of one or more runs, as
        results.load gives them): by default the rows themselves. A suite whose absolute figures
        move with the host rather than the machine gives figures relative to what the host gave
        (the pipeline: each loop's fraction of its own bound)."""
        return rows

    def expectation(self, row: Mapping[str, Any]) -> tuple[float, float, str] | None:
        """Link theory for one point, for judging a machine no reference run describes
        (bench/analysis/point_expectations.py): (the figure no healthy machine exceeds, in GB/s of the suite's
        `bandwidth` column; the share of it a healthy machine reaches at this size, NaN where
        the suite cannot say, e.g. below the sizes where its curve levels off; the link's name),
        or None where no link bounds the point. `row` holds the point's keys (points.POINT_KEYS),
        its run's machine columns (results.meta_columns: pcie_gen, pcie_width,
        nvlink_gbps_per_gpu, ...), and from the judge: link_class (the pair's `nvidia-smi topo -m`
        class, '' unless src and dst are two GPUs) and hbm_gbps (device memory, both directions
        together; NaN where not recorded). Default: link_limit, and the op's declared share."""
        gbps, link = self.link_limit(row)
        gbps = float(gbps) if gbps is not None else math.nan
        if not gbps > 0:
            return None
        return gbps, self.op(str(row["op"])).share(), link


Catalog = Mapping[str, SuiteView]


UNKNOWN = SuiteView()


def view(catalog: Catalog, suite: str) -> SuiteView:
    return catalog.get(suite, UNKNOWN)


def bandwidth_column(catalog: Catalog, suite: str) -> str:
    """The column a suite is judged by: bus bandwidth for collectives, bytes moved per second otherwise."""
    return view(catalog, suite).bandwidth
