"""The pipeline suite's reading face: its tables, its figure, its noise, and the rows it is
judged by (each loop's fraction of its own bound)."""
from __future__ import annotations

from pathlib import Path

from bench import lazy
from bench.suite_view import Canvas, SuiteView
from bench.suites.pipeline.figure import pipeline_figure
from bench.suites.pipeline.tables import judged, summary_tables

pd = lazy.module("pandas")


class PipelineView(SuiteView):
    curves = False          # its own figures say what its rows mean
    # Between-run sigma of the judged figure, a loop's fraction of its own bound (judged): two
    # default runs on nvidia-h200 agreed to 0.01 at the median loop and 0.09 at the worst
    # (docs/training.md); the host's pace, which moved their GB/s by up to 1.42x, cancels in it.
    noise = {("gpu", "bandwidth"): 0.08, ("gpu", "latency"): 0.08}

    def tables(self, frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame | str]]:
        return summary_tables(frame)

    def figures(self, frame: pd.DataFrame, canvas: Canvas) -> list[Path]:
        return pipeline_figure(frame, canvas)

    def judged(self, rows: pd.DataFrame) -> pd.DataFrame:
        return judged(rows)
