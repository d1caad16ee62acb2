"""Figures from load() frames, one file per figure; a figure whose data is absent is skipped,
never drawn empty. The families: curves against size (curves), peaks against links and price
(peaks), bars (bars), pair matrices (matrix); each suite adds its own through its `figures`
hook, drawn with these. `render` draws every run in the frame it is given, one colour per run
(its series: bench.analysis.runs), choose runs first with bench.analysis.runs.

`write_figures` first removes the figures it wrote into a folder before, as listed in the
folder's MANIFEST, and nothing else. GB/s = 1e9 bytes/s throughout.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd
import seaborn as sns

from bench.suite_view import Catalog, view
from bench.analysis.figures import curves, peaks, scaling
from bench.analysis.figures.style import Canvas
from bench.analysis.runs import SERIES, palette, with_series

MANIFEST = ".xferbench-plots"   # in an output folder: the figures written there last, which the next call removes
MANIFEST_HEADER = "# figures xferbench-plot wrote here; its next call into this folder removes them\n"
COMMON = (peaks.peak_fraction_figure, curves.bandwidth_figures, curves.latency_figures, peaks.per_dollar_figure,
          scaling.scaling_figure)


def _draw(frame: pd.DataFrame, out_dir: str | Path, catalog: Catalog, formats: Iterable[str],
          captions: dict[str, str] | None = None) -> Iterator[Path]:
    """render()'s files, each as soon as it is written."""
    formats = list(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in ("png", "svg")]
    if unknown:
        raise ValueError(f"format {unknown[0]!r}: choose png or svg")
    frame = frame if SERIES in frame.columns else with_series(frame)
    canvas = Canvas(Path(out_dir), formats, palette(frame), catalog, {} if captions is None else captions)
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):  # no global style change
        for figure in COMMON:
            yield from figure(frame, canvas)
        for suite in dict.fromkeys(frame["suite"]):
            yield from view(catalog, suite).figures(frame, canvas)


def render(frame: pd.DataFrame, out_dir: str | Path, catalog: Catalog, formats: Iterable[str] = ("png",),
           captions: dict[str, str] | None = None) -> list[Path]:
    """Every figure the data allows, written to out_dir; returns the files written, and fills
    `captions` (file stem -> what the figure shows) when given."""
    return list(_draw(frame, out_dir, catalog, formats, captions))


def _written_before(out_dir: Path) -> list[Path]:
    """The figures the MANIFEST names: plain file names of figure formats in out_dir, nothing else."""
    try:
        names = (out_dir / MANIFEST).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    return [out_dir / n for n in names if n and n == Path(n).name and Path(n).suffix in (".png", ".svg")]


def write_figures(frame: pd.DataFrame, out_dir: str | Path, catalog: Catalog,
                  formats: Iterable[str] = ("png",)) -> list[Path]:
    """render() into out_dir, first removing the figures an earlier call wrote there (those its
    MANIFEST names: never another file), so the folder holds this call's figures and the user's
    own files; the manifest then names the new ones. OSError when out_dir cannot be written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in _written_before(out_dir):
        old.unlink(missing_ok=True)
    written: list[Path] = []
    try:
        for path in _draw(frame, out_dir, catalog, formats):
            written.append(path)
    finally:   # a figure that failed half-way still leaves the ones before it named
        (out_dir / MANIFEST).write_text(MANIFEST_HEADER + "".join(f"{p.name}\n" for p in written))
    return written
