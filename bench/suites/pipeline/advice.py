"""What to do, from the pipeline's tables: per batch size the best loop against the DataLoader's
defaults and what limits it, the share of the user's step that waits for data, the thread,
sharing and epoch twins, and the causes of slow stages (causes.py); and the summary's pipeline
tables with those lines under them."""
from __future__ import annotations

from dataclasses import replace

from bench import lazy
from bench.analysis.agreement import RUN_NOISE
from bench.suites.pipeline.causes import (ERRATIC, FAULTED, KEEP_MEMORY, PAGE, RESTARTS, cold_check, spread,
                                          worst_cause)
from bench.suites.pipeline.model import H2D, PACE_OP, STAGES, STEP, Producer, Sharing, Stage, dataloader_defaults
from bench.suites.pipeline.tables import (SUITE, faults_over_rounds, pace_table, rounds, runs_of, stage_table,
                                          table)

np = lazy.module("numpy")
pd = lazy.module("pandas")

# A user's step that waits this share of its time or more for data is input-bound: a loader
# setting that removes the wait buys at least this much of the step's time.
INPUT_BOUND = 0.1


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
    text = (f"threads: {slow['memory']} {slow['mode']} delivers {slow['gbps']:.2f} GB/s "
            f"({spread(slow['lo_gbps'], slow['hi_gbps'])} over rounds) with {_threads(slow['what'], threads_default)}; "
            f"with {_threads(fast['what'], threads_default)} {fast['gbps']:.2f} ({spread(fast['lo_gbps'], fast['hi_gbps'])})"
            f", {gain:.2f}x: set pipeline.threads=[{fast['what'].threads}] here, torch.set_num_threads"
            f"({fast['what'].threads or 'default'}) in your training process")
    extra = slow.get("faults", np.nan) - fast.get("faults", np.nan)
    if extra >= FAULTED * slow.get("size_bytes", np.nan) / PAGE:   # the allocator, not the threads, may make the difference
        text += (f"; but the slower took {slow['faults']:,.0f} page faults a batch against {fast['faults']:,.0f}: "
                 f"with {KEEP_MEMORY} the two may not differ")
    return text


def _sharing_line(h: pd.DataFrame) -> str | None:
    """Where a loop and its twin with file_system sharing differ beyond their spreads: the
    largest such gain, as a sentence of the two measured figures."""
    pairs: dict[tuple, dict] = {}
    for row in h.to_dict("records"):
        plain = replace(row["what"], sharing=Sharing.file_descriptor)
        pairs.setdefault((row["memory"], plain), {})[row["what"].sharing] = row
    best = None
    for pair in pairs.values():
        fd, fs = pair.get(Sharing.file_descriptor), pair.get(Sharing.file_system)
        if fd and fs and fs["lo_gbps"] > fd["hi_gbps"] and (best is None or fs["gbps"] / fd["gbps"] > best[2]):
            best = (fd, fs, fs["gbps"] / fd["gbps"])
    if best is None:
        return None
    fd, fs, gain = best
    return (f"sharing: {fd['memory']} {fd['mode']} delivers {fd['gbps']:.2f} GB/s "
            f"({spread(fd['lo_gbps'], fd['hi_gbps'])} over rounds) with file_descriptor sharing; with file_system "
            f"{fs['gbps']:.2f} ({spread(fs['lo_gbps'], fs['hi_gbps'])}), {gain:.2f}x: "
            "torch.multiprocessing.set_sharing_strategy(\"file_system\") in your training process (its batches "
            "are then files in /dev/shm, left there if a process is killed)")


def _epochs_line(h: pd.DataFrame) -> str | None:
    """The loop that waits longest at epochs' starts, where that is RESTARTS of its time or more:
    its workers started anew each epoch; persistent_workers keeps them (beside, where measured)."""
    if "epoch_share" not in h.columns:
        return None
    restarted = np.array([w.workers > 0 and not w.persistent_workers for w in h["what"]], dtype=bool)
    waiting = h[(h["epoch_share"] >= RESTARTS).to_numpy() & restarted]
    if waiting.empty:
        return None
    row = waiting.loc[waiting["epoch_share"].idxmax()]
    text = (f"epochs: {row['memory']} {row['mode']} waits {row['epoch_share']:.0%} of its time at epochs' starts, "
            f"while the DataLoader starts its {row['what'].workers} workers anew: set persistent_workers=True")
    kept = h[[w == replace(row["what"], persistent_workers=True) for w in h["what"]]]
    if len(kept):
        text += (f"; with it, {kept.iloc[0]['gbps']:.2f} GB/s ({spread(kept.iloc[0]['lo_gbps'], kept.iloc[0]['hi_gbps'])}) "
                 f"against {row['gbps']:.2f} ({spread(row['lo_gbps'], row['hi_gbps'])})")
    else:
        text += " (pipeline.persistent_workers=[False,True] measures it)"
    return text


def _step_line(h: pd.DataFrame, defaults) -> str | None:
    """With the user's step: the share of each step's time the DataLoader's defaults wait for
    data, and for what; and the best loop's share, where it is another loop."""
    if "waits" not in h.columns or h["waits"].isna().all():
        return None
    measured = h[h["waits"].notna()]
    at = measured[[w == defaults for w in measured["what"]]]
    first = at.iloc[0] if len(at) else measured.iloc[0]
    best = measured.loc[measured["gbps"].idxmax()]

    def said(row: pd.Series) -> str:
        held = f", waiting for {row['held_by']} on the {row['on']}" if row["waits"] >= INPUT_BOUND else ""
        return (f"{row['waits']:.0%} of each step waits for data ({row['time_s'] * 1e3:.3g} ms a step in the loop "
                f"against {row['step_s'] * 1e3:.3g} alone{held})")

    name = "the DataLoader's defaults" if len(at) else f"{first['memory']} {first['mode']}"
    text = f"step: {'input' if first['waits'] >= INPUT_BOUND else 'compute'}-bound: with {name} {said(first)}"
    if best["what"] != first["what"]:
        text += f"; with {best['memory']} {best['mode']}: {said(best)}"
    return text


def _threads(what, threads_default: str) -> str:
    return f"torch's default intra-op threads ({threads_default})" if not what.threads \
        else f"{what.threads} intra-op thread{'s' if what.threads > 1 else ''}"


def _erratic_line(stages: pd.DataFrame, threads_default: str) -> str | None:
    """A stage alone whose rounds differ ERRATIC times or more, beside its twin at another thread
    setting where that one holds steadier and faster."""
    for row in stages.to_dict("records"):
        if not (row["lo_gbps"] > 0 and row["hi_gbps"] / row["lo_gbps"] >= ERRATIC) or row["what"].op == STEP:
            continue
        twins = [r for r in stages.to_dict("records") if r["what"] != row["what"]
                 and replace(r["what"], threads=0) == replace(row["what"], threads=0) and r["gbps"] > row["gbps"]]
        text = (f"erratic: {row['stage']} {row['mode']} alone moves {row['hi_gbps'] / row['lo_gbps']:.1f}x between "
                f"rounds ({spread(row['lo_gbps'], row['hi_gbps'])} GB/s) with {_threads(row['what'], threads_default)}")
        lo, hi = row.get("lo_faults", np.nan), row.get("hi_faults", np.nan)
        if hi - lo >= FAULTED * row["size_bytes"] / PAGE:
            text += f", its rounds taking {lo:,.0f} to {hi:,.0f} page faults a batch (the allocator: {KEEP_MEMORY})"
        if twins:
            twin = twins[0]
            text += (f"; with {_threads(twin['what'], threads_default)} {twin['gbps']:.2f} "
                     f"({spread(twin['lo_gbps'], twin['hi_gbps'])})")
        return text
    return None


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
    if not alone.empty:
        faulted = faults_over_rounds(frame, runs)
        counts = [faulted.get(tuple(r[k] for k in runs) + (r["size_bytes"], r["params"], "total"), (np.nan,) * 3)
                  for r in alone.to_dict("records")]
        alone = alone.assign(lo_faults=[c[1] for c in counts], hi_faults=[c[2] for c in counts])
    cold = cold_check(frame, runs)
    out = []
    for key, g in loops_.groupby(runs + ["sample", "size_bytes"], sort=False):
        for producer, h in g.groupby("producer", sort=False):
            best = h.loc[h["gbps"].idxmax()]
            defaults = dataloader_defaults(Producer(producer), best["what"].sample_size, best["what"].dataset,
                                           best["what"].step)
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
                        "step": _step_line(h, defaults),
                        "threads": _thread_line(h, threads_default), "sharing": _sharing_line(h), "epochs": _epochs_line(h), "cause": worst_cause(h, cold.get(key[:len(runs)] + key[-1:])),
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
            text += f" ({spread(row['lo_gbps'], row['hi_gbps'])} over rounds)"
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
        lines += [f"  {row[k]}" for k in ("step", "threads", "sharing", "epochs", "cause", "erratic")
                  if isinstance(row.get(k), str)]
    return lines


DIGITS = {"gbps": 2, "lo_gbps": 2, "hi_gbps": 2, "stage_gbps": 2, "of_stage": 3, "alone_gbps": 2, "alone_lo_gbps": 2,
          "alone_hi_gbps": 2, "bound_gbps": 2, "of_bound": 3, "link_gbps": 1, "of_link": 3, "faults": 0,
          "alone_faults": 0, "cpu_share": 2, "epoch_share": 2, "step_s": 4, "waits": 2}


def summary_tables(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame | str]]:
    """The loops, the stages alone, the host's pace and what to do: those the rows hold (a run cut
    before its first loop still shows its stages)."""
    out = []
    rows = table(frame)
    if not rows.empty:
        out.append(("pipeline loops: GB/s delivered (median over rounds; lo-hi: its spread, the slowest and fastest "
                    f"round at the host's usual pace, at least ±{RUN_NOISE:.0%}, the between-run noise); the group of "
                    "stages that bounds each, and the fraction of that bound reached; faults: page faults a batch of "
                    "the bottleneck's thread (alone_faults: its stages alone); cpu_share: the share of the bottleneck's "
                    "time on a CPU, where timed; step_s, waits, held_by: the user's step alone (seconds a batch), the "
                    "share of each step the loop waits for data, and what for",
                    rows.drop(columns=["size_bytes", "time_s", "what", "alone_lo_gbps", "alone_hi_gbps",
                                       "alone_lo_faults", "alone_hi_faults"], errors="ignore")
                    .round(DIGITS).fillna("")))
    stages = stage_table(frame)
    if not stages.empty:
        out.append(("pipeline stages alone: GB/s (median over rounds, lo-hi)",
                    stages.drop(columns=["size_bytes", "producer", "workers"]).round(DIGITS)))
    pace = pace_table(frame)
    if out and not pace.empty:
        out.append(("pipeline: the host's single-thread pace between rounds (µs per unit of work)", pace.round(2)))
    return out + ([("pipeline: what to do", "\n".join(advice_lines(advice(frame))))] if not rows.empty else [])
