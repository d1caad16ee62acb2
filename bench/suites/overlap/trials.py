"""A point's trials read as one: parts summed over rounds, the slowest rank's times kept, their
median time per op."""
from __future__ import annotations

import statistics
from dataclasses import replace

from bench.measure.consensus import Consensus
from bench.measure.timing import Trial


def settle(trials: list[Trial], ranks: Consensus) -> list[Trial]:
    """Each trial's parts summed over rounds ('copy3' -> 'copy'); with ranks, the slowest rank's
    times, and the fastest's beside them."""
    trials = [replace(t, parts=_summed(t.parts)) for t in trials]
    if ranks.device is None:
        return trials
    flat = [v for t in trials for v in (t.time_s, t.parts.get("copy", 0.0), t.parts.get("compute", 0.0))]
    hi, lo = ranks.reduce(flat, "max"), ranks.reduce(flat, "min")
    return [replace(t, time_s=hi[3 * i], fastest_rank_s=lo[3 * i],
                    parts={"copy": hi[3 * i + 1], "compute": hi[3 * i + 2]} if t.parts else {})
            for i, t in enumerate(trials)]


def _summed(parts) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, seconds in parts.items():
        name = key.rstrip("0123456789")
        out[name] = out.get(name, 0.0) + seconds
    return out


def median_op(trials: list[Trial]) -> float:
    return statistics.median(t.per_op_s for t in trials)
