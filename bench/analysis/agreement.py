"""Do two runs agree within their stated spreads? Per point measured in rounds (results' `round`
column), each run's spread is its lowest and highest round (each round's figure the median of
its trials; a point in one round: its lowest and highest trial); two runs agree at a point where
their spreads overlap. The pipeline's acceptance test: at least 90% of the points of 1 MiB and
more agree (docs/method.md)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.points import POINT_KEYS
from bench.results import usable_rows

AGREE_SHARE = 0.9


@dataclass
class Agreement:
    points: pd.DataFrame   # per common point: each run's median, lo and hi, whether they overlap

    @property
    def share(self) -> float:
        return float(self.points["agree"].mean()) if len(self.points) else float("nan")

    def lines(self, limit: int = 20) -> list[str]:
        p = self.points
        out = [f"{int(p['agree'].sum())} of {len(p)} points agree within their spreads ({self.share:.0%}); "
               f"spread (hi/lo - 1) median {p['width_a'].median():.0%} and {p['width_b'].median():.0%}"]
        for row in p[~p["agree"]].head(limit).to_dict("records"):
            out.append(f"  {row['op']} {row['memory']} {row['mode']} {row['size_bytes']} B: "
                       f"{row['lo_a']:.3g}–{row['hi_a']:.3g} against {row['lo_b']:.3g}–{row['hi_b']:.3g} GB/s")
        return out


def spreads(frame: pd.DataFrame, min_size: int = 0, suite: str | None = None) -> pd.DataFrame:
    """Per point of one run: median, lo and hi GB/s over its rounds (over its trials where it has one round)."""
    rows = usable_rows(frame)
    rows = rows[(rows["size_bytes"] >= min_size) & (rows["algbw_gbps"] > 0)]
    if suite:
        rows = rows[rows["suite"] == suite]
    by_round = rows.groupby(POINT_KEYS + ["round"], sort=False)["algbw_gbps"].median().reset_index()
    several = by_round.groupby(POINT_KEYS, sort=False)["round"].transform("size") > 1
    values = pd.concat([by_round[several].drop(columns="round"),
                        rows.loc[~rows.set_index(POINT_KEYS).index.isin(by_round[several].set_index(POINT_KEYS).index),
                                 POINT_KEYS + ["algbw_gbps"]]])
    g = values.groupby(POINT_KEYS, sort=False)["algbw_gbps"]
    return pd.DataFrame({"median": g.median(), "lo": g.min(), "hi": g.max()}).reset_index()


def agreement(a: pd.DataFrame, b: pd.DataFrame, min_size: int = 1 << 20, suite: str | None = None) -> Agreement:
    """The points of runs a and b (results.load frames) of min_size bytes and more, and whether
    each pair of spreads overlaps."""
    joined = spreads(a, min_size, suite).merge(spreads(b, min_size, suite), on=POINT_KEYS, suffixes=("_a", "_b"))
    joined["agree"] = (joined["lo_a"] <= joined["hi_b"]) & (joined["lo_b"] <= joined["hi_a"])
    for side in ("a", "b"):
        joined[f"width_{side}"] = joined[f"hi_{side}"] / joined[f"lo_{side}"] - 1
    return Agreement(joined)
