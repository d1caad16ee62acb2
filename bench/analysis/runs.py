"""Which runs a figure or a report shows: one run per instance unless runs are named, each a
series of its own (its colour), marked where it did not complete."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import seaborn as sns

from bench.results import COMPLETE, ResultsError, find_runs, load, read_meta, set_aside_note, suites_asked, usable_rows


SERIES = "series"               # the column that colours lines: one value per run drawn


def _per_run(frame: pd.DataFrame, column: str, of_meta: Callable[[dict], object], missing: object) -> pd.Series:
    """run_dir -> one fact of the run: the column load() provides, else read from its meta.json
    (`missing` where there is none: imports, hand-made folders)."""
    dirs = frame["run_dir"].unique()
    if column in frame.columns:
        return frame.groupby("run_dir")[column].first().reindex(dirs).fillna(missing)
    facts = {}
    for run_dir in dirs:
        try:
            facts[run_dir] = of_meta(read_meta(run_dir))
        except ResultsError:
            facts[run_dir] = missing
    return pd.Series(facts, dtype=object)


def _matches(name: str, run_id: str, run_dir: str, instance: str) -> bool:
    if name in (run_id, f"{instance}/{run_id}"):
        return True
    return Path(name).resolve() == Path(run_dir).resolve()


def run_index(frame: pd.DataFrame, names: Sequence[str] = (), every: bool = False) -> pd.DataFrame:
    """One row per run in the frame, with 'chosen' and 'why'. The rule, per instance:

    - runs named (a run id, instance/run_id, or a run folder) are chosen, and only those;
    - else, among its complete runs (any run when none is complete), the main sweep: the run
      asked for the most suites (its config's, those skipped here included), then covering the
      most, then the most ops, then the newest. Special-purpose runs (one suite, however many
      ops) are left out in favour of the default sweep beside them;
    - every=True chooses every run.
    """
    ok = usable_rows(frame)
    runs = frame.groupby("run_dir", sort=False).agg(
        instance=("instance", "first"), run_id=("run_id", "first"), start_time=("start_time", "first"))
    runs["status"] = _per_run(frame, "run_status", lambda meta: meta.get("status") or "", "").astype(str)
    runs["suites"] = ok.groupby("run_dir")["suite"].nunique().reindex(runs.index, fill_value=0)
    runs["ops"] = (ok["suite"] + ":" + ok["op"]).groupby(ok["run_dir"]).nunique().reindex(runs.index, fill_value=0)
    asked = _per_run(frame, "run_suites", suites_asked, 0).reindex(runs.index).astype(int)
    runs["asked"] = np.maximum(asked, runs["suites"])
    runs = runs.reset_index()
    named = {n: [i for i, r in runs.iterrows() if _matches(n, r.run_id, r.run_dir, r.instance)] for n in names}
    unknown = [n for n, hits in named.items() if not hits]
    if unknown:
        known = ", ".join(f"{r.instance}/{r.run_id}" for r in runs.itertuples())
        raise ResultsError(f"run {unknown[0]!r} is not among the runs loaded ({known})")
    picked = {i for hits in named.values() for i in hits}
    runs["chosen"], runs["why"] = every, "every run" if every else ""
    if not every:
        for instance, group in runs.groupby("instance", sort=False):
            mine = picked & set(group.index)
            if mine:
                runs.loc[list(mine), ["chosen", "why"]] = True, "named"
                continue
            complete = group[group["status"].isin(COMPLETE)]
            pool = complete if len(complete) else group
            best = pool.sort_values(["asked", "suites", "ops", "start_time", "run_id"]).index[-1]
            runs.loc[best, ["chosen", "why"]] = True, "main sweep" if len(complete) else "no complete run"
    return runs


def select_runs(frame: pd.DataFrame, names: Sequence[str] = (), every: bool = False) -> pd.DataFrame:
    """The rows of the runs run_index() chooses."""
    runs = run_index(frame, names, every)
    return frame[frame["run_dir"].isin(runs.loc[runs["chosen"], "run_dir"])]


def with_series(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame plus SERIES: the instance's name where it has one run here, else instance/run_id;
    a run that did not complete (run_status failed, interrupted, running) says so: 'h200-x2 (failed)'."""
    per_instance = frame.groupby("instance")["run_dir"].transform("nunique")
    label = frame["instance"].where(per_instance == 1, frame["instance"] + "/" + frame["run_id"]).astype(str)
    if "run_status" in frame.columns:
        status = frame["run_status"].fillna("").astype(str)
        label = label.where(status.isin(COMPLETE), label + " (" + status + ")")
    return frame.assign(**{SERIES: label})


def unmarked(series: str) -> str:
    """A series without with_series()'s status mark: file names stay the same whatever the status."""
    return re.sub(r" \([a-z]+\)$", "", series)


def palette(frame: pd.DataFrame) -> dict[str, tuple]:
    """One colour per series, fixed for every figure of a frame."""
    names = sorted(with_series(frame)[SERIES].unique())
    return dict(zip(names, sns.color_palette("colorblind" if len(names) <= 10 else "husl", len(names))))


def load_runs(args: argparse.Namespace,
              warn: Callable[[str], None] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The chosen runs' rows and run_index() of every run found; ResultsError on unusable input.
    `warn` (default: stderr) gets a line when committed runs below a folder given were left out."""
    aside: list[Path] = []
    folders = list(dict.fromkeys(p.resolve() for p in find_runs(args.results, aside)))
    if aside:
        (warn or (lambda line: print(line, file=sys.stderr)))(set_aside_note(aside))
    named = [str(Path(p)) for p in args.results if (Path(p) / "meta.json").is_file()] + list(args.runs)
    frame = load(folders)
    runs = run_index(frame, named, args.all_runs)
    return frame[frame["run_dir"].isin(runs.loc[runs["chosen"], "run_dir"])], runs


def default_out(runs: pd.DataFrame, name: str, option: str) -> Path:
    """Where an output goes without --out: `name` in the folder of the one run chosen.
    ResultsError when several runs are chosen: they have no folder of their own to share."""
    chosen = runs[runs["chosen"]]
    if len(chosen) != 1:
        shown = ", ".join(f"{r.instance}/{r.run_id}" for r in chosen.itertuples())
        raise ResultsError(f"{len(chosen)} runs chosen ({shown}): say where the output goes with {option} "
                           "(without it, it goes into the run's own folder, which needs one run)")
    return Path(chosen["run_dir"].iloc[0]) / name


def describe_choice(runs: pd.DataFrame) -> list[str]:
    """One line per instance with runs left out: which run is used, and how to name another."""
    lines = []
    for instance, group in runs.groupby("instance", sort=False):
        left = group[~group["chosen"]]
        if len(left):
            used = ", ".join(group.loc[group["chosen"], "run_id"])
            lines.append(f"{instance}: using {used} ({group.loc[group['chosen'], 'why'].iloc[0]}); "
                         f"{len(left)} other run(s) left out, name them with --runs or use --all-runs")
    return lines
