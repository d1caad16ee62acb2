"""The pipeline's tables from a run's rows: each loop with its bottleneck and the fraction of
its bound, each stage alone, the host's pace; and the rows it is judged by. What to do with them:
advice.py. A point's figure and its spread (lo_gbps, hi_gbps) are bench.analysis.agreement's,
over its rounds at the host's usual pace: docs/method.md."""
from __future__ import annotations

import json
from typing import Callable

from bench import lazy
from bench.analysis.agreement import over_rounds
from bench.results import params, params_text, usable_rows
from bench.sizes import format_size
from bench.suites.pipeline.model import (EPOCH, H2D, LOOP_ONLY, PACE_OP, STAGE_NAMES, STAGES, STEP, Loop, Stage,
                                         descriptor, stages_of)

np = lazy.module("numpy")
pd = lazy.module("pandas")

SUITE = "pipeline"
_ROW = ["op", "memory", "mode", "backend", "dtype", "params", "size_bytes"]


def runs_of(rows: pd.DataFrame) -> list[str]:
    return [k for k in ("instance", "run_id") if k in rows.columns and rows[k].nunique() > 1]


def rounds(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Per measured pipeline point, from its trials at the host's usual pace: the figure and its
    spread over rounds (agreement.over_rounds: gbps, time_s, lo_gbps, hi_gbps, rounds), its
    descriptor (`what`); and the columns that tell runs apart."""
    rows = usable_rows(frame[frame["suite"] == SUITE])
    rows = rows[rows["params"] != ""]   # runs from before the points carried params: no descriptors
    runs = runs_of(rows)
    if rows.empty:
        return pd.DataFrame(), runs
    med = over_rounds(rows, runs + _ROW)
    med["what"] = [descriptor(d) for d in params(med)]
    return med, runs


def stage_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per stage point: GB/s alone, median and spread over rounds."""
    med, runs = rounds(frame)
    if med.empty:
        return pd.DataFrame()
    out = med[med["op"].isin(STAGES)].copy()
    if out.empty:
        return pd.DataFrame()
    named = list(out["what"])
    out["stage"] = [st.name for st in named]
    out["producer"] = [st.producer.value if st.producer else "" for st in named]
    out["workers"] = [st.workers for st in named]     # -1: none involved
    out["sample"] = [format_size(st.sample_size) for st in named]
    faulted = faults_over_rounds(frame, runs)
    out["faults"] = [faulted.get(tuple(r[k] for k in runs) + (r["size_bytes"], r["params"], "total"), (np.nan,))[0]
                     for r in out.to_dict("records")]
    out = out.sort_values(runs + ["dtype", "size_bytes"], kind="stable")
    out["size"] = out["size_bytes"].map(format_size)
    cols = ["stage", "memory", "mode", "producer", "workers", "sample", "size", "size_bytes", "gbps", "lo_gbps",
            "hi_gbps", "faults"]
    return out[runs + cols].dropna(axis="columns", how="all").reset_index(drop=True)   # runs before faults were counted


def pace_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run: the host's pace read between rounds, µs per reading of timing.host_pace (a
    fixed piece of single-thread Python work): median, fastest and slowest reading, and how many."""
    rows = frame[(frame["suite"] == SUITE) & (frame["op"] == PACE_OP) & (frame["status"] == "ok")]
    if rows.empty:
        return pd.DataFrame()
    runs = runs_of(frame[frame["suite"] == SUITE])
    us = rows.assign(us=rows["time_s"] * 1e6)
    groups = us.groupby(runs, sort=False) if runs else [((), us)]
    out = [{**dict(zip(runs, key if isinstance(key, tuple) else (key,))), "unit": g["mode"].iloc[0],
            "us": float(np.median(g["us"])), "fastest_us": float(g["us"].min()), "slowest_us": float(g["us"].max()),
            "readings": len(g)}
           for key, g in groups]
    return pd.DataFrame(out)


def attribute(loop: Loop, gpu: bool, rate: Callable[[Stage], float | None]) -> dict | None:
    """The group of stages that limits a loop (the lowest rate of its stages one after another),
    and its slowest stage; None where a stage it needs was not measured."""
    best = None
    for who, group in stages_of(loop, gpu).items():
        group = tuple(st for st in group if st.op not in LOOP_ONLY or rate(st) is not None)   # older runs: untimed
        rates = [rate(st) for st in group]
        if any(r is None or not r > 0 for r in rates):
            return None
        bound = 1 / sum(1 / r for r in rates)
        slowest = min(range(len(group)), key=lambda i: rates[i])
        if best is None or bound < best["bound_gbps"]:
            best = {"bottleneck": group[slowest].label, "on": who, "stage_gbps": rates[slowest], "bound_gbps": bound,
                    "stage": group[slowest], "held_by": _held_by(loop, group, rates)}
    return best


def _held_by(loop: Loop, group: tuple[Stage, ...], rates: list[float]) -> str | None:
    """With the user's step: the slowest stage of the limiting group that is not the step (what the
    step waits for there), or the step where the group runs nothing else."""
    if not loop.step:
        return None
    data = [i for i, st in enumerate(group) if st.op != STEP] or range(len(group))
    return group[min(data, key=lambda i: rates[i])].label


def _of_usable_trials(frame: pd.DataFrame, runs: list[str], rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (the pipeline's, of any part) of the trials its figures are made of: those whose
    total row results.usable_rows keeps (the host's usual pace)."""
    trial = runs + ["size_bytes", "params", "trial"]
    return rows.merge(usable_rows(frame[frame["suite"] == SUITE])[trial].drop_duplicates(), on=trial)


def _spent(frame: pd.DataFrame, runs: list[str]) -> dict[tuple, float]:
    """GB/s of each stage as the loops ran it (their rows of part = a stage's name), from the
    trials the loop's own figure is made of (those at the host's usual pace), over rounds as it
    is: {(run keys, size_bytes, params text, stage name): GB/s}."""
    parts = frame[(frame["suite"] == SUITE) & (frame["status"] == "ok") & frame["part"].isin(STAGE_NAMES)]
    if parts.empty:
        return {}
    keys = runs + ["size_bytes", "params", "part"]
    med = over_rounds(_of_usable_trials(frame, runs, parts), keys)
    return {tuple(r[k] for k in keys): r["gbps"] for r in med.to_dict("records") if r["gbps"] > 0}


def faults_over_rounds(frame: pd.DataFrame, runs: list[str]) -> dict[tuple, tuple[float, float, float]]:
    """Page faults a batch, from the trials the figures are made of: each loop's stages (the
    faults of the thread that runs each) and each stage alone; the median over rounds of each
    round's median, and the lowest and highest round: {(run keys, size_bytes, params text, part):
    (median, lo, hi)}, part a stage's name for loops and 'total' for a stage alone."""
    rows = frame[(frame["suite"] == SUITE) & (frame["status"] == "ok") & frame["page_faults"].notna()] \
        if "page_faults" in frame.columns else frame.iloc[:0]
    if rows.empty:
        return {}
    keys = runs + ["size_bytes", "params", "part"]
    rows = _of_usable_trials(frame, runs, rows)
    per = rows.groupby(keys + ["round"], sort=False)["page_faults"].median().reset_index()
    out = per.groupby(keys, sort=False)["page_faults"].agg(["median", "min", "max"])
    return {key: tuple(float(v) for v in values) for key, values in zip(out.index, out.to_numpy())}


def cpu_shares(frame: pd.DataFrame, runs: list[str]) -> dict[tuple, float]:
    """The share of a loop's stage's time its thread ran on a CPU (cpu_s over time_s), median of
    the trials the figures are made of, where the loop timed it (the hand-off and pinning):
    {(run keys, size_bytes, params text, part): share}."""
    rows = frame[(frame["suite"] == SUITE) & (frame["status"] == "ok") & frame["cpu_s"].notna()
                 & (frame["time_s"] > 0)] if "cpu_s" in frame.columns else frame.iloc[:0]
    if rows.empty:
        return {}
    keys = runs + ["size_bytes", "params", "part"]
    rows = _of_usable_trials(frame, runs, rows)
    share = (rows["cpu_s"] / rows["time_s"]).groupby([rows[k] for k in keys], sort=False).median()
    return {key: float(v) for key, v in share.items()}


def epoch_shares(frame: pd.DataFrame, runs: list[str]) -> dict[tuple, float]:
    """The share of a loop's time its main thread waited at epochs' starts (part EPOCH), over all
    the trials the figures are made of together (an epoch's start falls in some trials, not in
    most): {(run keys, size_bytes, params text): share}."""
    rows = frame[(frame["suite"] == SUITE) & (frame["status"] == "ok")]
    trial = runs + ["size_bytes", "params", "trial"]
    waits = rows[rows["part"] == EPOCH]
    if waits.empty:
        return {}
    totals = usable_rows(rows)[trial + ["time_s"]].rename(columns={"time_s": "total_s"})
    joined = waits[trial + ["time_s", "iters"]].merge(totals, on=trial)
    by = [joined[k] for k in trial[:-1]]
    share = (joined["time_s"] * joined["iters"]).groupby(by, sort=False).sum() / \
        (joined["total_s"] * joined["iters"]).groupby(by, sort=False).sum()
    return {key if isinstance(key, tuple) else (key,): float(v) for key, v in share.items()}


# The columns table() adds to each loop: its bottleneck's readings, in the loop and alone.
_FOUND = ("stage_gbps", "alone_gbps", "alone_lo_gbps", "alone_hi_gbps", "bound_gbps", "link_gbps", "faults",
          "alone_faults", "alone_lo_faults", "alone_hi_faults", "cpu_share", "epoch_share", "step_s")


def _bottlenecks(frame: pd.DataFrame, med: pd.DataFrame, loops_: pd.DataFrame, runs: list[str]) -> list[dict]:
    """Per loop (a row of loops_): attribute()'s bottleneck, that stage alone (GB/s and spread),
    the link, and the page faults of the stage's thread in the loop and of the stage alone."""
    alone: dict[tuple, tuple[float, float, float]] = {}
    faulted = faults_over_rounds(frame, runs)
    faulted_alone: dict[tuple, tuple[float, float, float]] = {}
    for row in med[med["op"].isin(STAGES)].itertuples(index=False):
        key = tuple(getattr(row, k) for k in runs) + (row.size_bytes,)
        alone[key + (row.what,)] = (row.gbps, row.lo_gbps, row.hi_gbps)
        faulted_alone[key + (row.what,)] = faulted.get(key + (row.params, "total"), (np.nan,) * 3)
    spent, on_cpu, restarts = _spent(frame, runs), cpu_shares(frame, runs), epoch_shares(frame, runs)
    found = []
    for row in loops_.itertuples(index=False):
        key = tuple(getattr(row, k) for k in runs) + (row.size_bytes,)
        loop = row.what

        def rate(st: Stage) -> float | None:
            return spent.get(key + (row.params, st.name)) or alone.get(key + (st,), (None,))[0]

        att = attribute(loop, row.backend == "cuda", rate) or {}
        by_itself = alone.get(key + (att["stage"],), (None, None, None)) if att else (None, None, None)
        link = alone.get(key + (Stage(H2D, memory="pinned", sample_size=loop.sample_size),), (None,))[0]
        faults = faulted.get(key + (row.params, att["stage"].name), (np.nan,))[0] if att else np.nan
        faults_alone = faulted_alone.get(key + (att["stage"],), (np.nan,) * 3) if att else (np.nan,) * 3
        # the same work alone: every stage of the bottleneck's thread, as the loop counts that thread's faults
        group = stages_of(loop, row.backend == "cuda").get(att["on"], ()) if att else ()
        counted = [faulted_alone.get(key + (st,), (np.nan,))[0] for st in group]
        same_work = float(np.nansum(counted)) if any(np.isfinite(counted)) else np.nan
        step = next((st for g in stages_of(loop, row.backend == "cuda").values() for st in g if st.op == STEP), None)
        step_gbps = alone.get(key + (step,), (np.nan,))[0] if step else np.nan
        found.append({**{k: v for k, v in att.items() if k != "stage"}, "alone_gbps": by_itself[0],
                      "step_s": row.size_bytes / step_gbps / 1e9 if step_gbps > 0 else np.nan,
                      "alone_lo_gbps": by_itself[1], "alone_hi_gbps": by_itself[2],
                      "producer": loop.producer.value, "link_gbps": link, "faults": faults,
                      "alone_faults": same_work, "alone_lo_faults": faults_alone[1],
                      "alone_hi_faults": faults_alone[2],
                      "cpu_share": on_cpu.get(key + (row.params, att["stage"].name), np.nan) if att else np.nan,
                      "epoch_share": restarts.get(key + (row.params,), np.nan)})
    return found


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per loop and batch size: samples/s and GB/s delivered (median over rounds, and
    the lowest and highest round); the bottleneck (the group of stages that limits it, `on`, and
    that group's slowest stage), that stage's GB/s in the loop and alone (with alone's spread)
    and the fraction of it the loop reaches, the group's bound (its stages one after another)
    and the fraction of that; the link (pinned h2d of that size) and the fraction of it; the
    page faults a batch of the bottleneck's thread in the loop and of its stages alone (and the
    bottleneck alone's lowest and highest round), and the
    share of its time in the loop the bottleneck ran on a CPU (where timed), and the share of
    the loop's time its main thread waited at epochs' starts (where it has epochs). With the
    user's step (pipeline.step): the step alone's seconds a batch (`step_s`), the share of each
    step's time in the loop that waits for data (`waits`), and the stage it waits for (`held_by`).

    A stage's GB/s is the loop's own reading of it where the loop timed it (the host's stages,
    read in the same trials, so host speed that drifts between points moves loop and bound
    together), else the stage alone (the copy engine's and the GPU's, and runs from before loops
    timed their stages)."""
    med, runs = rounds(frame)
    if med.empty:
        return pd.DataFrame()
    loops_ = med[~med["op"].isin(STAGES) & (med["op"] != PACE_OP)].copy()
    if loops_.empty:
        return pd.DataFrame()
    found = _bottlenecks(frame, med, loops_, runs)
    loops_ = pd.concat([loops_.reset_index(drop=True), pd.DataFrame(found)], axis=1)
    for col in ("bottleneck", "on", "held_by") + _FOUND:
        if col not in loops_:
            loops_[col] = np.nan
    sample = loops_["what"].map(lambda loop: loop.sample_size)
    loops_["sample"] = sample.map(format_size)
    loops_["batch"] = loops_["size_bytes"] // sample
    loops_["samples_per_s"] = (loops_["batch"] / loops_["time_s"]).round(0).astype("int64")
    loops_[list(_FOUND)] = loops_[list(_FOUND)].astype(float)
    loops_["of_stage"] = loops_["gbps"] / loops_["stage_gbps"]
    loops_["of_bound"] = loops_["gbps"] / loops_["bound_gbps"]
    loops_["of_link"] = loops_["gbps"] / loops_["link_gbps"]
    # the share of each step's time the loop waits for data: its time a batch beyond the step alone's
    loops_["waits"] = (1 - loops_["step_s"] / loops_["time_s"]).clip(lower=0)
    loops_ = loops_.sort_values(runs + ["producer", "dtype", "memory", "mode", "size_bytes"], kind="stable")
    loops_["size"] = loops_["size_bytes"].map(format_size)
    cols = runs + ["op", "memory", "mode", "producer", "sample", "size", "size_bytes", "batch", "samples_per_s", "time_s", "gbps",
                   "lo_gbps", "hi_gbps", "bottleneck", "on", "stage_gbps", "of_stage", "alone_gbps", "alone_lo_gbps",
                   "alone_hi_gbps", "bound_gbps", "of_bound", "link_gbps", "of_link", "faults", "alone_faults",
                   "alone_lo_faults", "alone_hi_faults", "cpu_share", "epoch_share", "step_s", "waits", "held_by"]
    return loops_[cols + ["what"]].dropna(axis="columns", how="all").reset_index(drop=True)   # no link without a GPU


def judged(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the doctor and the gate judge the pipeline by: each loop's trials, their GB/s
    replaced by the fraction of the loop's bound that trial reached (the bound from the stage
    times the loop read in that trial, the stages it did not time from their median alone), as
    if the bound were 1 GB/s: a figure of what the host gave, not of the host's pace. Stages
    alone and the host's pace are kept out; so are loops without stage times (older runs)."""
    rows = frame[(frame["suite"] == SUITE) & (frame["status"] == "ok") & (frame["params"] != "")]
    loops_ = rows[(rows["part"] == "total") & ~rows["op"].isin(STAGES + (PACE_OP,))]
    if loops_.empty:
        return loops_
    med, runs = rounds(frame)
    alone = {tuple(getattr(r, k) for k in runs) + (r.size_bytes, r.what): r.gbps
             for r in med[med["op"].isin(STAGES)].itertuples(index=False)}
    trial_keys = ["run_dir", "params", "size_bytes", "trial"]
    parts = rows[rows["part"].isin(STAGE_NAMES)]
    parts = parts.assign(run_dir=parts.get("run_dir", "")).groupby(trial_keys + ["part"], sort=False)["algbw_gbps"]
    spent = parts.first().to_dict() if len(parts) else {}
    loops_ = loops_.assign(run_dir=loops_.get("run_dir", ""))
    shares = []
    for row in loops_.to_dict("records"):
        loop, key = descriptor(json.loads(row["params"])), tuple(row[k] for k in runs)
        trial = tuple(row[k] for k in trial_keys)

        def rate(st: Stage) -> float | None:
            return spent.get(trial + (st.name,)) or alone.get(key + (row["size_bytes"], st))

        att = attribute(loop, row["backend"] == "cuda", rate)
        shares.append(row["algbw_gbps"] / att["bound_gbps"] if att else np.nan)
    # params as this version writes them (older runs' loops lack the newer switches, at their defaults)
    out = loops_.assign(algbw_gbps=shares, busbw_gbps=shares,
                        params=[params_text(descriptor(d)) for d in params(loops_)])
    out = out[out["algbw_gbps"] > 0]
    return out.assign(time_s=out["size_bytes"] / (out["algbw_gbps"] * 1e9))
