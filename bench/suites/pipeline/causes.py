"""Why a loop's bottleneck runs slower in the loop than alone, or moves between rounds: the causes
the run measured (the C allocator's page faults, a hand-off that waits on its workers, the host's
caches the check launches from), each with its fix, or what the run's readings rule out."""
from __future__ import annotations

from dataclasses import replace

from bench import lazy
from bench.suites.pipeline.model import COLD, CONSUME, HANDOFF, STEP, Sharing, Stage
from bench.suites.pipeline.tables import SUITE

np = lazy.module("numpy")
pd = lazy.module("pandas")

# A stage this many times slower in the loop than alone at its fastest round, or alone whose
# rounds differ this much, is a cause to find: the advice then names the settings that move it.
SLOWER = 2.0
ERRATIC = 2.0
# The check alone this many times slower after a batch-sized host copy than back to back: the
# host's caches, which the loop's main thread fills with each batch's bytes, slow its launches.
CACHES = 1.3
# A thread that takes page faults for this share of a batch's pages or more, beyond what the
# same stage takes alone (or one round alone beyond another), is given back by its allocator
# memory it then faults in anew, page by page: the cause named. Pages of 4 KiB (x86-64's; a host
# of larger pages takes fewer faults a batch, and is named less readily).
FAULTED = 0.25
PAGE = 4096
# What keeps glibc's allocator from giving freed batches back: its mmap threshold at its
# largest (32 MiB) and a trim threshold of 1 GiB, set in the environment before the process
# starts (either one alone leaves batches mapped anew, or trimmed, in every batch).
KEEP_MEMORY = "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824"
# A hand-off whose thread ran on a CPU for this share of its time or less waited the rest.
WAITS = 0.6
# A loop that waits this share of its time or more at epochs' starts is named for it.
RESTARTS = 0.25

def spread(lo: float, hi: float) -> str:
    return f"{lo:.2f}–{hi:.2f}"


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


def _faults(best: pd.Series, slower: bool, erratic: bool) -> str | None:
    """Where the bottleneck's thread takes FAULTED of a batch's pages or more in page faults
    beyond the stage alone (slower), or the stage alone takes that much more in one round than
    another (erratic): those counts, as the cause, and the settings that keep the memory."""
    pages = best.get("size_bytes", np.nan) / PAGE
    loop, alone = best.get("faults", np.nan), best.get("alone_faults", np.nan)
    lo, hi = best.get("alone_lo_faults", np.nan), best.get("alone_hi_faults", np.nan)
    said = None
    if slower and loop - (alone if pd.notna(alone) else 0) >= FAULTED * pages:
        said = (f"the {best['on']} takes {loop:,.0f} page faults a batch in the loop"
                + (f" against {alone:,.0f} for its stages alone" if pd.notna(alone) else ""))
    elif erratic and hi - lo >= FAULTED * pages:
        said = f"{best['bottleneck']} alone took {lo:,.0f} page faults a batch in one round and {hi:,.0f} in another"
    if said is None:
        return None
    return (f"{said} ({pages:,.0f} pages a batch): the C allocator gives freed batches back to the kernel and "
            f"faults them in again, page by page, as the process's history sets its thresholds; keep the memory: "
            f"{KEEP_MEMORY} in your training process's environment (glibc), or jemalloc or tcmalloc")


def _waits(best: pd.Series) -> str | None:
    """Where the hand-off from workers is the bottleneck and its thread ran on a CPU for WAITS of
    its time or less, with file-descriptor sharing: the wait, as the cause, and the setting."""
    share, what = best.get("cpu_share", np.nan), best["what"]
    if best.get("bottleneck") != Stage(HANDOFF).label or not share <= WAITS or \
            getattr(what, "sharing", Sharing.file_system) != Sharing.file_descriptor:
        return None
    ms = best["size_bytes"] / best["stage_gbps"] / 1e6
    return (f"the {best['on']} ran on a CPU for {share:.0%} of each hand-off ({share * ms:.2f} of {ms:.2f} ms a "
            "batch) and waited the rest: with torch.multiprocessing's file_descriptor sharing each batch's storage "
            "is fetched from the worker that made it, which answers between its own work; file_system sharing "
            "passes a file name instead: torch.multiprocessing.set_sharing_strategy(\"file_system\") before the "
            "DataLoader starts")


def _twins(best: pd.Series, h: pd.DataFrame) -> str:
    """The best loop's twins at another thread setting or sharing, measured beside: '; the same
    loop at threads=default: 2.73 GB/s (1.20-3.48)', or ''."""
    def plain(loop):
        return replace(loop, threads=0, sharing=Sharing.file_descriptor)

    def differs(loop) -> str:
        said = [f"at threads={loop.threads or 'default'}"] if loop.threads != best["what"].threads else []
        return " ".join(said + ([f"with {loop.sharing.value} sharing"] if loop.sharing != best["what"].sharing else []))

    twins = h[[plain(w) == plain(best["what"]) and w != best["what"] for w in h["what"]]]
    return ("; the same loop " + ", ".join(f"{differs(r['what'])}: {r['gbps']:.2f} GB/s "
                                          f"({spread(r['lo_gbps'], r['hi_gbps'])})" for r in twins.to_dict("records"))
            if len(twins) else "")


def _cause_line(best: pd.Series, h: pd.DataFrame, cold: float | None = None) -> str | None:
    """Where the best loop's bottleneck runs SLOWER times slower in the loop than alone at its
    fastest round, or alone is ERRATIC across rounds: what was measured, the cause where the run
    measured it (page faults the allocator causes; a hand-off that waits on its workers; the
    host's caches, for the check: `cold`, its GB/s after a host copy), and the loop's twins at
    another thread setting or sharing beside it where the grid measured them. The user's step is
    not a stage of the pipeline to fix: the step line says what it waits for."""
    stage, alone_hi, alone_lo = best.get("stage_gbps"), best.get("alone_hi_gbps"), best.get("alone_lo_gbps")
    if not (pd.notna(stage) and pd.notna(alone_hi) and pd.notna(alone_lo) and alone_lo > 0) or \
            best.get("bottleneck") == Stage(STEP).label:
        return None
    slower, erratic = alone_hi / stage >= SLOWER, alone_hi / alone_lo >= ERRATIC
    if not (slower or erratic):
        return None
    said = []
    if slower:
        said.append(f"{best['bottleneck']} runs at {stage:.2f} GB/s in the loop against {best['alone_gbps']:.2f} alone "
                    f"({spread(alone_lo, alone_hi)} over rounds)")
    if erratic:
        said.append(f"{best['bottleneck']} alone moves {alone_hi / alone_lo:.1f}x between rounds "
                    f"({spread(alone_lo, alone_hi)} GB/s)")
    beside = _twins(best, h)
    found = _faults(best, slower, erratic) or (_waits(best) if slower else None) or \
        (_caches(best, cold) if slower and not erratic else None)
    if found:
        return "cause: " + " and ".join(said) + "; " + found + beside
    if (pool := _intra_op(best, h)):
        return "cause: " + " and ".join(said) + "; " + pool
    ruled = _ruled_out(best, h, cold)
    return ("unexplained: " + " and ".join(said) + "; ruled out: " + ("; ".join(ruled) or "nothing this run measured")
            + beside + ("" if any(w.threads != best["what"].threads for w in h["what"])
                        else "; pipeline.threads=[0,1] measures whether intra-op threads cause it"))


def _intra_op(best: pd.Series, h: pd.DataFrame) -> str | None:
    """Where the loop runs torch's default intra-op threads and its twin at a set number delivers
    more beyond both spreads: the pool, with the twin's figure."""
    what = best["what"]
    twins = h[[w.threads > 0 and replace(w, threads=0) == what for w in h["what"]]] if not what.threads else h.iloc[:0]
    better = twins[twins["lo_gbps"] > best["hi_gbps"]] if len(twins) else twins
    if better.empty:
        return None
    fast = better.loc[better["gbps"].idxmax()]
    n = fast["what"].threads
    return (f"torch's intra-op thread pool, which the stage's work waits on: at threads={n} the same loop delivers "
            f"{fast['gbps']:.2f} GB/s ({spread(fast['lo_gbps'], fast['hi_gbps'])}), {fast['gbps'] / best['gbps']:.2f}x "
            f"its {best['gbps']:.2f}: torch.set_num_threads({n}) in your training process")


def _ruled_out(best: pd.Series, h: pd.DataFrame, cold: float | None) -> list[str]:
    """What the run's readings rule out as the cause of the bottleneck's slowdown: the allocator
    (its thread's page faults), the host's caches (the check after a host copy), a hand-off
    waiting on its workers (its thread's CPU share), the epochs' starts, torch's intra-op threads
    (a twin at another thread setting that does no better)."""
    out = []
    pages = best.get("size_bytes", np.nan) / PAGE
    faults, alone = best.get("faults", np.nan), best.get("alone_faults", np.nan)
    if pd.notna(faults) and faults - (alone if pd.notna(alone) else 0) < FAULTED * pages:
        against = f" against {alone:,.0f} for its stages alone" if pd.notna(alone) else ""
        out.append(f"the allocator ({faults:,.0f} page faults a batch in the loop{against}, of {pages:,.0f} pages)")
    stage_alone = best.get("alone_gbps", np.nan)
    if best.get("bottleneck") == Stage(CONSUME).label and cold and pd.notna(stage_alone) and stage_alone / cold < CACHES:
        out.append(f"the host's caches (the check alone after a host copy of the batch: {cold:.2f} GB/s, "
                   f"{stage_alone / cold:.1f}x)")
    share = best.get("cpu_share", np.nan)
    if best.get("bottleneck") == Stage(HANDOFF).label and share > WAITS:
        out.append(f"a wait on the workers (the {best['on']} ran on a CPU for {share:.0%} of each hand-off)")
    if best.get("epoch_share", np.nan) < RESTARTS:
        out.append(f"the epochs' starts ({best['epoch_share']:.0%} of the loop's time)")
    twins = h[[replace(w, threads=0) == replace(best["what"], threads=0) and w != best["what"] for w in h["what"]]]
    if len(twins) and (twins["gbps"] <= best["hi_gbps"]).all():
        out.append("torch's intra-op threads (the loop at another thread setting does no better)")
    return out


def worst_cause(h: pd.DataFrame, cold: float | None) -> str | None:
    """The cause line of the loop at this size whose bottleneck is furthest below itself alone."""
    ranked = h.assign(gap=h.get("alone_hi_gbps", np.nan) / h.get("stage_gbps", np.nan)).sort_values("gap",
                                                                                                       ascending=False)
    for _, row in ranked.iterrows():
        line = _cause_line(row, h, cold)
        if line:
            return f"{row['memory']} {row['mode']}: {line}"
    return None
