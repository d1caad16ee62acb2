"""The pipeline's tables from a run's rows: each loop with its bottleneck and the fraction of
its bound, each stage alone, the host's pace, and what to do. A point's figure and its spread
(lo_gbps, hi_gbps) are bench.analysis.agreement's, over its rounds at the host's usual pace:
docs/method.md."""
from __future__ import annotations

from bench import lazy

import json
from dataclasses import replace
from typing import Callable


from bench.analysis.agreement import RUN_NOISE, over_rounds
from bench.results import params, params_text, usable_rows
from bench.sizes import format_size
from bench.suites.pipeline.model import (COLD, CONSUME, H2D, LOOP_ONLY, PACE_OP, STAGE_NAMES, STAGES, Loop,
                                         Producer, Stage, dataloader_defaults, descriptor, stages_of)

np = lazy.module("numpy")
pd = lazy.module("pandas")

SUITE = "pipeline"
_ROW = ["op", "memory", "mode", "backend", "dtype", "params", "size_bytes"]
# A stage this many times slower in the loop than alone at its fastest round, or alone whose
# rounds differ this much, is a cause to find: the advice then names the settings that move it.
SLOWER = 2.0
ERRATIC = 2.0
# The check alone this many times slower after a batch-sized host copy than back to back: the
# host's caches, which the loop's main thread fills with each batch's bytes, slow its launches.
CACHES = 1.3


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
    out = out.sort_values(runs + ["dtype", "size_bytes"], kind="stable")
    out["size"] = out["size_bytes"].map(format_size)
    cols = ["stage", "memory", "mode", "producer", "workers", "sample", "size", "size_bytes", "gbps", "lo_gbps",
            "hi_gbps"]
    return out[runs + cols].reset_index(drop=True)


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
                    "stage": group[slowest]}
    return best


def _spent(frame: pd.DataFrame, runs: list[str]) -> dict[tuple, float]:
    """GB/s of each stage as the loops ran it (their rows of part = a stage's name), from the
    trials the loop's own figure is made of (those at the host's usual pace), over rounds as it
    is: {(run keys, size_bytes, params text, stage name): GB/s}."""
    rows = frame[(frame["suite"] == SUITE) & (frame["status"] == "ok")]
    parts = rows[rows["part"].isin(STAGE_NAMES)]
    if parts.empty:
        return {}
    trial, keys = runs + ["size_bytes", "params", "trial"], runs + ["size_bytes", "params", "part"]
    parts = parts.merge(usable_rows(rows)[trial].drop_duplicates(), on=trial)
    med = over_rounds(parts, keys)
    return {tuple(r[k] for k in keys): r["gbps"] for r in med.to_dict("records") if r["gbps"] > 0}


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per loop and batch size: samples/s and GB/s delivered (median over rounds, and
    the lowest and highest round); the bottleneck (the group of stages that limits it, `on`, and
    that group's slowest stage), that stage's GB/s in the loop and alone (with alone's spread)
    and the fraction of it the loop reaches, the group's bound (its stages one after another)
    and the fraction of that; the link (pinned h2d of that size) and the fraction of it.

    A stage's GB/s is the loop's own reading of it where the loop timed it (the host's stages,
    read in the same trials, so host speed that drifts between points moves loop and bound
    together), else the stage alone (the copy engine's and the GPU's, and runs from before loops
    timed their stages)."""
    med, runs = rounds(frame)
    if med.empty:
        return pd.DataFrame()
    is_stage = med["op"].isin(STAGES)
    loops_ = med[~is_stage & (med["op"] != PACE_OP)].copy()
    if loops_.empty:
        return pd.DataFrame()
    alone: dict[tuple, tuple[float, float, float]] = {}
    for row in med[is_stage].itertuples(index=False):
        key = tuple(getattr(row, k) for k in runs) + (row.size_bytes,)
        alone[key + (row.what,)] = (row.gbps, row.lo_gbps, row.hi_gbps)
    spent = _spent(frame, runs)
    found = []
    for row in loops_.itertuples(index=False):
        key = tuple(getattr(row, k) for k in runs) + (row.size_bytes,)
        loop = row.what

        def rate(st: Stage) -> float | None:
            return spent.get(key + (row.params, st.name)) or alone.get(key + (st,), (None,))[0]

        att = attribute(loop, row.backend == "cuda", rate) or {}
        by_itself = alone.get(key + (att["stage"],), (None, None, None)) if att else (None, None, None)
        link = alone.get(key + (Stage(H2D, memory="pinned", sample_size=loop.sample_size),), (None,))[0]
        found.append({**{k: v for k, v in att.items() if k != "stage"}, "alone_gbps": by_itself[0],
                      "alone_lo_gbps": by_itself[1], "alone_hi_gbps": by_itself[2],
                      "producer": loop.producer.value, "link_gbps": link})
    loops_ = pd.concat([loops_.reset_index(drop=True), pd.DataFrame(found)], axis=1)
    for col in ("bottleneck", "on", "stage_gbps", "alone_gbps", "alone_lo_gbps", "alone_hi_gbps", "bound_gbps",
                "link_gbps"):
        if col not in loops_:
            loops_[col] = np.nan
    sample = loops_["what"].map(lambda loop: loop.sample_size)
    loops_["sample"] = sample.map(format_size)
    loops_["batch"] = loops_["size_bytes"] // sample
    loops_["samples_per_s"] = (loops_["batch"] / loops_["time_s"]).round(0).astype("int64")
    for col in ("stage_gbps", "alone_gbps", "alone_lo_gbps", "alone_hi_gbps", "bound_gbps", "link_gbps"):
        loops_[col] = loops_[col].astype(float)
    loops_["of_stage"] = loops_["gbps"] / loops_["stage_gbps"]
    loops_["of_bound"] = loops_["gbps"] / loops_["bound_gbps"]
    loops_["of_link"] = loops_["gbps"] / loops_["link_gbps"]
    loops_ = loops_.sort_values(runs + ["producer", "dtype", "memory", "mode", "size_bytes"], kind="stable")
    loops_["size"] = loops_["size_bytes"].map(format_size)
    cols = runs + ["op", "memory", "mode", "producer", "sample", "size", "size_bytes", "batch", "samples_per_s", "gbps",
                   "lo_gbps", "hi_gbps", "bottleneck", "on", "stage_gbps", "of_stage", "alone_gbps", "alone_lo_gbps",
                   "alone_hi_gbps", "bound_gbps", "of_bound", "link_gbps", "of_link"]
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


def _spread(lo: float, hi: float) -> str:
    return f"{lo:.2f}–{hi:.2f}"


def _thread_line(h: pd.DataFrame, threads_default: str) -> str | None:
    """Where a loop and its twin at another thread setting differ beyond their spreads: the
    largest such gain, as a sentence of the two measured figures."""
    twins = {}
    for row in h.to_dict("records"):
        twins.setdefault((row["memory"], row["what"].__class__, replace(row["what"], threads=0)), []).append(row)
    best = None
    for group in twins.values():
        for a in group:
            for b in group:
                if b["gbps"] > a["gbps"] and b["lo_gbps"] > a["hi_gbps"] and (best is None or
                                                                            b["gbps"] / a["gbps"] > best[2]):
                    best = (a, b, b["gbps"] / a["gbps"])
    if best is None:
        return None
    slow, fast, gain = best
    return (f"threads: {slow['memory']} {slow['mode']} delivers {slow['gbps']:.2f} GB/s "
            f"({_spread(slow['lo_gbps'], slow['hi_gbps'])} over rounds) with {_threads(slow['what'], threads_default)}; "
            f"with {_threads(fast['what'], threads_default)} {fast['gbps']:.2f} ({_spread(fast['lo_gbps'], fast['hi_gbps'])})"
            f", {gain:.2f}x: set pipeline.threads=[{fast['what'].threads}] here, torch.set_num_threads"
            f"({fast['what'].threads or 'default'}) in your training process")


def _threads(what, threads_default: str) -> str:
    return f"torch's default intra-op threads ({threads_default})" if not what.threads \
        else f"{what.threads} intra-op thread{'s' if what.threads > 1 else ''}"


def _erratic_line(stages: pd.DataFrame, threads_default: str) -> str | None:
    """A stage alone whose rounds differ ERRATIC times or more, beside its twin at another thread
    setting where that one holds steadier and faster."""
    for row in stages.to_dict("records"):
        if not (row["lo_gbps"] > 0 and row["hi_gbps"] / row["lo_gbps"] >= ERRATIC):
            continue
        twins = [r for r in stages.to_dict("records") if r["what"] != row["what"]
                 and replace(r["what"], threads=0) == replace(row["what"], threads=0) and r["gbps"] > row["gbps"]]
        text = (f"erratic: {row['stage']} {row['mode']} alone moves {row['hi_gbps'] / row['lo_gbps']:.1f}x between "
                f"rounds ({_spread(row['lo_gbps'], row['hi_gbps'])} GB/s) with {_threads(row['what'], threads_default)}")
        if twins:
            twin = twins[0]
            text += (f"; with {_threads(twin['what'], threads_default)} {twin['gbps']:.2f} "
                     f"({_spread(twin['lo_gbps'], twin['hi_gbps'])})")
        return text
    return None


def cold_check(frame: pd.DataFrame, runs: list[str]) -> dict[tuple, float]:
    """The check alone after a batch-sized host copy (the consume stage's COLD rows), GB/s,
    median of its trials: {(run keys, size_bytes): GB/s}."""
    rows = frame[(frame["suite"] == SUITE) & (frame["op"] == CONSUME) & (frame["part"] == COLD)
                 & (frame["status"] == "ok")]
    if rows.empty:
        return {}
    med = rows.groupby(runs + ["size_bytes"], sort=False)["algbw_gbps"].median()
    return {key if isinstance(key, tuple) else (key,): gbps for key, gbps in med.items() if gbps > 0}


def _caches(best: pd.Series, cold: float | None) -> str | None:
    """Where the main thread's check is the bottleneck and the check alone after a host copy of
    the batch runs CACHES times slower than back to back: that measurement, as the cause."""
    alone = best.get("alone_gbps")
    if best.get("bottleneck") != Stage(CONSUME).label or cold is None or not (pd.notna(alone) and alone / cold >= CACHES):
        return None
    return (f"the check alone runs at {cold:.2f} GB/s after a host copy of the batch ({alone / cold:.1f}x slower): "
            "the batch's bytes, which the main thread moves itself (collate, pin, a pageable copy's staging), "
            "evict the host's caches its launches run from; larger batches launch less per byte")


def _cause_line(best: pd.Series, h: pd.DataFrame, cold: float | None = None) -> str | None:
    """Where the best loop's bottleneck runs SLOWER times slower in the loop than alone at its
    fastest round, or alone is ERRATIC across rounds: what was measured, the cause where the run
    measured it (the host's caches, for the check: `cold`, its GB/s after a host copy), and the
    loop's twin at another thread setting beside it where the grid measured one."""
    stage, alone_hi, alone_lo = best.get("stage_gbps"), best.get("alone_hi_gbps"), best.get("alone_lo_gbps")
    if not (pd.notna(stage) and pd.notna(alone_hi) and pd.notna(alone_lo) and alone_lo > 0):
        return None
    slower, erratic = alone_hi / stage >= SLOWER, alone_hi / alone_lo >= ERRATIC
    if not (slower or erratic):
        return None
    said = []
    if slower:
        said.append(f"{best['bottleneck']} runs at {stage:.2f} GB/s in the loop against {best['alone_gbps']:.2f} alone "
                    f"({_spread(alone_lo, alone_hi)} over rounds)")
    if erratic:
        said.append(f"{best['bottleneck']} alone moves {alone_hi / alone_lo:.1f}x between rounds "
                    f"({_spread(alone_lo, alone_hi)} GB/s)")
    twins = h[[replace(w, threads=0) == replace(best["what"], threads=0) and w != best["what"] for w in h["what"]]]
    beside = "; the same loop " + ", ".join(f"at threads={r['what'].threads or 'default'}: {r['gbps']:.2f} GB/s "
                                          f"({_spread(r['lo_gbps'], r['hi_gbps'])})" for r in twins.to_dict("records")) \
        if len(twins) else ""
    caches = _caches(best, cold) if slower and not erratic else None
    if caches:
        return "cause: " + " and ".join(said) + "; " + caches + beside
    return "cause to find: " + " and ".join(said) + (
        beside or "; measure it with pipeline.threads=[0,1] to see whether intra-op threads cause it")


def advice(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run, producer, sample and batch size: the best loop measured, its GB/s against the
    DataLoader's defaults', and what limits it: the link (pinned copies at the copy engine's
    pace) or the host (the stage named); where the thread settings or a slow stage say more,
    that too (`threads`, `cause`)."""
    loops_ = table(frame)
    if loops_.empty:
        return pd.DataFrame()
    runs = runs_of(frame[frame["suite"] == SUITE])
    threads_default = _default_threads(frame)
    med, _ = rounds(frame)
    alone = med[med["op"].isin(STAGES)] if not med.empty else med
    cold = cold_check(frame, runs)
    out = []
    for key, g in loops_.groupby(runs + ["sample", "size_bytes"], sort=False):
        for producer, h in g.groupby("producer", sort=False):
            best = h.loc[h["gbps"].idxmax()]
            defaults = dataloader_defaults(Producer(producer), best["what"].sample_size, best["what"].dataset)
            default = h[[w == defaults for w in h["what"]]]["gbps"]
            link = best.get("bottleneck") == Stage(H2D, memory="pinned").label   # the pinned copy itself
            out.append({**dict(zip(runs, key[:len(runs)])), "producer": producer, "sample": key[-2],
                        "size": best["size"], "size_bytes": key[-1], "best": f"{best['memory']} {best['mode']}",
                        "gbps": best["gbps"], "lo_gbps": best["lo_gbps"], "hi_gbps": best["hi_gbps"],
                        "defaults_gbps": default.iloc[0] if len(default) else np.nan,
                        "limit": "link" if link else "host", "bottleneck": best.get("bottleneck", np.nan),
                        "on": best.get("on", np.nan), "stage_gbps": best.get("stage_gbps", np.nan),
                        "alone_gbps": best.get("alone_gbps", np.nan),
                        "bound_gbps": best.get("bound_gbps", np.nan), "of_bound": best.get("of_bound", np.nan),
                        "of_link": best.get("of_link", np.nan),
                        "threads": _thread_line(h, threads_default), "cause": _worst_cause(h, cold.get(key[:len(runs)] + key[-1:])),
                        "erratic": _erratic_line(_at(alone, runs, key, producer), threads_default)})
    adv = pd.DataFrame(out)
    adv["gain"] = (adv["gbps"] / adv["defaults_gbps"].where(adv["defaults_gbps"] > 0)).round(2)
    return adv


def _at(alone: pd.DataFrame, runs: list[str], key: tuple, producer: str) -> pd.DataFrame:
    """The stages alone of one run, batch size and producer (make and collate: of that producer), with their names."""
    if alone.empty:
        return alone
    mask = (alone["size_bytes"] == key[-1]) & np.array([w.op not in STAGES[:2] or w.producer.value == producer
                                                        for w in alone["what"]], dtype=bool)
    for k, v in zip(runs, key):
        mask &= alone[k] == v
    got = alone[mask]
    return got.assign(stage=[w.name for w in got["what"]])


def _worst_cause(h: pd.DataFrame, cold: float | None) -> str | None:
    """The cause line of the loop at this size whose bottleneck is furthest below itself alone."""
    ranked = h.assign(gap=h.get("alone_hi_gbps", np.nan) / h.get("stage_gbps", np.nan)).sort_values("gap",
                                                                                                       ascending=False)
    for _, row in ranked.iterrows():
        line = _cause_line(row, h, cold)
        if line:
            return f"{row['memory']} {row['mode']}: {line}"
    return None


def _default_threads(frame: pd.DataFrame) -> str:
    """What torch's default number of threads was, as the loops' notes say ('torch threads 16')."""
    notes = frame.loc[(frame["suite"] == SUITE) & (frame["op"] != PACE_OP) & (frame["mode"].str.contains("workers=")
                      & ~frame["mode"].str.contains("threads=")), "note"]
    found = notes.str.extract(r"torch threads (\d+)")[0].dropna()
    return f"{found.iloc[0]} threads" if len(found) else "one per core"


def advice_lines(adv: pd.DataFrame) -> list[str]:
    """advice() as sentences, one per batch size and producer, and the thread and cause findings."""
    lines = []
    for row in adv.to_dict("records"):
        text = (f"{row['size']} batches of {row['sample']} {row['producer']} samples: best {row['best']}, "
                f"{row['gbps']:.2f} GB/s")
        if pd.notna(row.get("lo_gbps")) and row["hi_gbps"] > row["lo_gbps"]:
            text += f" ({_spread(row['lo_gbps'], row['hi_gbps'])} over rounds)"
        if pd.notna(row["defaults_gbps"]):
            text += f", {row['gain']:.2f}x the DataLoader's defaults ({row['defaults_gbps']:.2f})"
        if pd.notna(row["bottleneck"]):
            alone = f", {row['alone_gbps']:.2f} alone" if pd.notna(row.get("alone_gbps")) else ""
            text += (f"; the {row['limit']} limits it: {row['bottleneck']} on the {row['on']}, "
                     f"{row['stage_gbps']:.2f} GB/s in the loop{alone}; {row['bound_gbps']:.2f} with what the "
                     f"{row['on']} run{'s' if row['on'] in ('main thread', 'pin thread', 'copy engine') else ''} "
                     f"beside it (the loop reaches {row['of_bound']:.0%} of that)")
        if pd.notna(row.get("of_link")):
            text += f"; {row['of_link']:.0%} of the link"
        lines.append(text)
        lines += [f"  {row[k]}" for k in ("threads", "cause", "erratic") if isinstance(row.get(k), str)]
    return lines


DIGITS = {"gbps": 2, "lo_gbps": 2, "hi_gbps": 2, "stage_gbps": 2, "of_stage": 3, "alone_gbps": 2, "alone_lo_gbps": 2,
          "alone_hi_gbps": 2, "bound_gbps": 2, "of_bound": 3, "link_gbps": 1, "of_link": 3}


def summary_tables(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame | str]]:
    rows = table(frame)
    if rows.empty:
        return []
    out = [("pipeline loops: GB/s delivered (median over rounds; lo-hi: its spread, the slowest and fastest round "
            f"at the host's usual pace, at least ±{RUN_NOISE:.0%}, the between-run noise); the group of stages that "
            "bounds each, and the fraction of that bound reached",
            rows.drop(columns=["size_bytes", "what", "alone_lo_gbps", "alone_hi_gbps"], errors="ignore")
            .round(DIGITS).fillna(""))]
    stages = stage_table(frame)
    if not stages.empty:
        out.append(("pipeline stages alone: GB/s (median over rounds, lo-hi)",
                    stages.drop(columns=["size_bytes", "producer", "workers"]).round(DIGITS)))
    pace = pace_table(frame)
    if not pace.empty:
        out.append(("pipeline: the host's single-thread pace between rounds (µs per unit of work)", pace.round(2)))
    return out + [("pipeline: what to do", "\n".join(advice_lines(advice(frame))))]

