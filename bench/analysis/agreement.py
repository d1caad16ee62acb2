"""A point's figure and spread over rounds, and whether two runs agree within their spreads.

Per point measured in rounds (results' `round` column), from its trials at the host's usual
pace (results.usable_rows): each round's figure is the median of its trials, the point's figure
the median over rounds, and its spread the lowest and highest round, widened where narrower to
RUN_NOISE either side of the figure (a point in one round: its lowest and highest trial). Rounds
show the seconds-long moods of one run; another run meets the host minutes later, so a figure
stands for at least the between-run noise measured on these hosts. Two runs agree at a point
where their spreads overlap. The pipeline's acceptance test: at least 90% of the points of 1 MiB
and more agree (docs/method.md)."""
from __future__ import annotations

from dataclasses import dataclass

from bench import lazy
from bench.points import POINT_KEYS
from bench.results import usable_rows

pd = lazy.module("pandas")

AGREE_SHARE = 0.9
# Between-run noise of a round-measured figure: the median gap between two runs' medians at the
# pipeline's points of 1 MiB and more, three runs on one 4x H200 host
# (results/noise/pipeline-h200-x4/fit; the runs that test it are apart: docs/training.md).
RUN_NOISE = 0.08


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


def over_rounds(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per point (`keys`) of usable rows: gbps and time_s (medians over rounds of each round's
    median), lo_gbps and hi_gbps (its spread), rounds."""
    by = keys + (["round"] if "round" in rows.columns else [])
    per = rows.groupby(by, sort=False).agg(gbps=("algbw_gbps", "median"), time_s=("time_s", "median"),
                                           lo=("algbw_gbps", "min"), hi=("algbw_gbps", "max")).reset_index()
    out = per.groupby(keys, sort=False).agg(gbps=("gbps", "median"), time_s=("time_s", "median"),
                                            lo_gbps=("gbps", "min"), hi_gbps=("gbps", "max"),
                                            rounds=("gbps", "size"), lo_trial=("lo", "min"),
                                            hi_trial=("hi", "max")).reset_index()
    one = out["rounds"] == 1
    out.loc[one, "lo_gbps"], out.loc[one, "hi_gbps"] = out.loc[one, "lo_trial"], out.loc[one, "hi_trial"]
    out["lo_gbps"] = out["lo_gbps"].clip(upper=out["gbps"] / (1 + RUN_NOISE))
    out["hi_gbps"] = out["hi_gbps"].clip(lower=out["gbps"] * (1 + RUN_NOISE))
    return out.drop(columns=["lo_trial", "hi_trial"])


def spreads(frame: pd.DataFrame, min_size: int = 0, suite: str | None = None) -> pd.DataFrame:
    """Per point of one run of min_size bytes and more: its figure and spread (over_rounds)."""
    rows = usable_rows(frame)
    rows = rows[(rows["size_bytes"] >= min_size) & (rows["algbw_gbps"] > 0)]
    if suite:
        rows = rows[rows["suite"] == suite]
    return over_rounds(rows, POINT_KEYS).rename(columns={"gbps": "median", "lo_gbps": "lo", "hi_gbps": "hi"})


def agreement(a: pd.DataFrame, b: pd.DataFrame, min_size: int = 1 << 20, suite: str | None = None) -> Agreement:
    """The points of runs a and b (results.load frames) of min_size bytes and more, and whether
    each pair of spreads overlaps."""
    joined = spreads(a, min_size, suite).merge(spreads(b, min_size, suite), on=POINT_KEYS, suffixes=("_a", "_b"))
    joined["agree"] = (joined["lo_a"] <= joined["hi_b"]) & (joined["lo_b"] <= joined["hi_a"])
    for side in ("a", "b"):
        joined[f"width_{side}"] = joined[f"hi_{side}"] / joined[f"lo_{side}"] - 1
    return Agreement(joined)
