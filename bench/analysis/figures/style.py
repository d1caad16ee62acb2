"""What every figure shares: where it goes and in which formats (Canvas), colours, the order of
values (of ops: their declarations, bench.ops.op_order), size and log axes, legends (a few
series, then 'and N more')."""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")  # files only: no window, works headless (CI, SSH)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

from bench.suite_view import Catalog, bandwidth_column  # noqa: E402
from bench.analysis.runs import SERIES, unmarked  # noqa: E402
from bench.sizes import format_size  # noqa: E402


SMALL_BYTES = 1 << 20           # the latency figure's upper size
VALUE_ORDER = ["pinned", "pageable", "device", "host", "peer", "staged", "default", "socket", "eager", "graph",
               "float32", "bfloat16", "float16", "torch", "nccl", "ce", "sm", "local", "remote", "none"]
DASHES = ["-", "--", ":", "-."]
LOG_SPAN = 20                   # a panel whose values span more than this factor gets a log y axis
PANEL_IN = (3.5, 2.55)          # one panel's width and height, inches
LEGEND_SERIES = 8               # a legend lists this many series, then 'and N more'
DPI = 100


@dataclass


class Canvas:
    """Where figures go (a folder, in some formats), one colour per series, and the catalog that
    says how each suite's rows are read."""

    out_dir: Path
    formats: list[str]
    colours: dict[str, tuple]
    catalog: Catalog = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)   # file stem -> what the figure shows
    SERIES: str = SERIES

    def save(self, fig, stem: str, caption: str = "") -> list[Path]:
        """The figure written once per format as out_dir/<stem>.<format>, then closed."""
        self.captions[stem] = caption
        self.out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for fmt in self.formats:
            path = self.out_dir / f"{stem}.{fmt}"
            # layouts are set when drawn: no second, bbox 'tight' draw; no timestamp, so files diff cleanly
            fig.savefig(path, dpi=DPI, metadata={"Software": None} if fmt == "png" else {"Date": None})
            paths.append(path)
        plt.close(fig)
        return paths


def with_bandwidth(frame: pd.DataFrame, catalog: Catalog) -> pd.DataFrame:
    """The frame plus 'bandwidth_gbps': the column each suite is judged by (busbw for collectives)."""
    out = frame.copy()
    cols = out["suite"].map(lambda suite: bandwidth_column(catalog, suite))
    out["bandwidth_gbps"] = np.where(cols == "busbw_gbps", out["busbw_gbps"], out["algbw_gbps"])
    return out


def file_slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(value)).strip("_") or "unnamed"


def rank_in(value: str, order: list[str]) -> int:
    return order.index(value) if value in order else len(order)


def in_order(values: Iterable, order: list[str]) -> list:
    return sorted(set(values), key=lambda v: (rank_in(v, order), str(v)))


def size_axis(ax, sizes: Iterable[int]) -> None:
    """log2 x axis labelled 4KiB, 1MiB, ...: at most 6 ticks, on the sweep's own sizes where they
    are powers of two, counted down from the largest (the size that matters most for bandwidth)."""
    sizes = [int(s) for s in sizes if s > 0]
    exps = sorted({s.bit_length() - 1 for s in sizes if s & (s - 1) == 0})
    if len(exps) < 2:
        exps = list(range(math.floor(math.log2(min(sizes))), math.ceil(math.log2(max(sizes))) + 1))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2.0**e for e in exps[::-1][::math.ceil(len(exps) / 6)]]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_size(int(round(v))) if v >= 1 else ""))
    ax.xaxis.set_minor_locator(NullLocator())


def log_y_axis(ax, span: float) -> None:
    """Log y axis labelled 0.1, 1, 10 (not 10^0); over less than three decades also 2 and 5."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if span < 1000:
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2, 5)))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:
        ax.yaxis.set_minor_locator(NullLocator())   # unlabelled minor ticks cost most of the drawing time


def capped(names: Iterable[str], limit: int = LEGEND_SERIES) -> tuple[list[str], int]:
    """The series a legend lists: the first `limit`, and beyond them any run that did not
    complete (its mark is never hidden); and how many are left out."""
    names = list(names)
    shown = names[:limit] + [n for n in names[limit:] if unmarked(n) != n]
    return shown, len(names) - len(shown)


def more(left_out: int) -> list[Line2D]:
    """The legend's last entry when series are left out: 'and N more'."""
    return [Line2D([], [], linestyle="none", label=f"and {left_out} more")] if left_out else []


def series_handles(colours: dict, linewidth: float) -> list[Line2D]:
    """A legend's entries for the series (name -> colour): the first LEGEND_SERIES, then 'and N more'."""
    shown, left_out = capped(colours)
    return [Line2D([], [], color=colours[s], linewidth=linewidth, label=s) for s in shown] + more(left_out)


def add_legend(fig, colours: dict, styles: dict, style_title: str | None, marks: Iterable[Line2D] = ()) -> None:
    """The figure's one legend, below it: the series (the first LEGEND_SERIES, then 'and N
    more'), the style key's dash styles, and any marks drawn (handles given)."""
    handles = series_handles(colours, 2.5)
    if len(styles) > 1:
        handles += [Line2D([], [], color="0.3", linestyle=ls, linewidth=1.6, label=f"{style_title}: {v}")
                    for v, ls in styles.items()]
    handles += list(marks)
    fig.legend(handles=handles, loc="outside lower center", ncols=legend_columns(fig, handles, 5), frameon=False,
               fontsize=9)


def suptitle(fig, title: str, fontsize: int = 12) -> None:
    """The figure's title, each line wrapped to the figure's width (a one-panel figure is narrow:
    about 0.11 in a character at size 12), so none runs past its edges."""
    width = max(20, int(fig.get_figwidth() / (0.11 * fontsize / 12)))
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.split("\n")), fontsize=fontsize)


def legend_columns(fig, handles: list, most: int) -> int:
    """Columns of a legend below the figure: at most `most`, and no wider than the figure (about
    0.07 in a character at font size 9, plus the handle), so no entry is cut off at its edges."""
    widest = max((len(h.get_label()) for h in handles), default=1)
    return max(1, min(len(handles), most, int(fig.get_figwidth() // (0.07 * widest + 0.7))))


def device_key(name: str) -> tuple:
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)
