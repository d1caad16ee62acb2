"""A run's verdicts: one state per family, what makes the run not normal, the end-of-run lines,
verdicts.json and the exit status (bench/analysis/judge.py reaches them).

Each family ends in one state: normal, low, high (faster than healthy machines, within what the
record allows), inconsistent (a recorded fact contradicts the figure: above what the recorded
link, slot, peer access or class can carry), failed (a data check failed), too noisy (its
limit could not catch a halved figure), or not judged (why). The run adds its status and the
families its config asked for and its machine should have but it did not measure (missing).
Exit 0 only when nothing is low, failed, inconsistent or missing, the run completed, and at
least MIN_JUDGED of its measured families were judged; 1 when anything is; 3 when nothing is
wrong but too little was judged (exit_code).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field

from bench.results import COMPLETE
from bench.sizes import format_size

# Link theory's shares were measured on three machines and vary between hosts (bidir: 0.69 of
# PCIe on the H100 host, 0.79 on the H200s): a machine is low by theory only 15% below them.
THEORY_TOLERANCE = 0.15
MIN_JUDGED = 0.9          # exit 0 needs at least this share of the measured families judged
NORMAL, LOW, HIGH, INCONSISTENT, FAILED, NOISY, NOT_JUDGED = (
    "normal", "low", "high", "inconsistent", "failed", "too noisy", "not judged")
WRONG = (LOW, INCONSISTENT, FAILED)       # states that make a run not normal
JUDGED = (NORMAL, LOW, HIGH, INCONSISTENT)
# The reason a family of the host's own memory is not judged: counted apart from the measured ones.
HOST_OWN = "the host's own memory: hosts of one kind differ, so no kind sets it (reported, not judged)"
# Likewise a bandwidth-bound copy the GPU's L2 holds, which the gate does not gate either (cache.py).
RESIDENT = "cache-resident: the GPU's L2 holds the copy, so it measures the cache's state, not device memory"
APART = {HOST_OWN: "the host's own", RESIDENT: "the L2's"}


@dataclass
class Verdict:
    family: str                   # variant_label, class: 'copy h2d pinned eager ce host->cuda:0 (bandwidth-bound)'
    key: dict                     # the variant: every point key but the size
    size_class: str               # latency | bandwidth
    verdict: str                  # normal | low | high | inconsistent | failed | too noisy | not judged
    sizes: list[int]
    ratio: float | None = None    # measured / expected as performance (> 1: faster)
    limit: float | None = None    # the ratio below which it is low
    expected: float | None = None   # at at_size, in unit
    measured: float | None = None
    unit: str = ""                # GB/s | µs
    at_size: int | None = None
    source: str = ""              # where the expectation came from
    siblings: str = ""            # its peers in the run, where compared: 'median of 7 GPUs: 0.98x'
    causes: list[str] = field(default_factory=list)   # low: what explains it; high, inconsistent: what
    reason: str = ""              # not judged, too noisy, failed: why
    noise: str = ""               # where its between-run noise came from


@dataclass
class Judgement:
    run: str
    machine: str                  # the machine class
    tolerance: float
    alpha: float
    z: float
    verdicts: list[Verdict]
    status: str = "complete"      # the run's: complete, failed, interrupted, running, "" (not recorded)
    missing: list[str] = field(default_factory=list)   # asked for and expected here, not measured
    missing_checked: str = ""     # why missing was not checked ("" where it was)
    min_judged: float = MIN_JUDGED
    status_said: str = ""         # the status as the lines say it (results.status_said); "": `status`

    def state(self, state: str) -> list[Verdict]:
        out = [v for v in self.verdicts if v.verdict == state]
        return sorted(out, key=lambda v: v.ratio or 0) if state == LOW else out

    @property
    def low(self) -> list[Verdict]:
        """The families below their expectation, worst first."""
        return self.state(LOW)

    @property
    def high(self) -> list[Verdict]:
        return self.state(HIGH)

    @property
    def judged(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict in JUDGED]

    @property
    def measured(self) -> list[Verdict]:
        """Families with measured figures that a machine's kind sets: every family but the failed
        ones, the host's own (HOST_OWN) and copies the L2 holds (RESIDENT)."""
        return [v for v in self.verdicts if v.verdict != FAILED and v.reason not in APART]

    @property
    def host_own(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.reason == HOST_OWN]

    def _apart(self) -> str:
        counts = Counter(APART[v.reason] for v in self.verdicts if v.reason in APART)
        shown = ", ".join(f"{n} more {whose}" for whose, n in counts.items())
        return f" ({shown}, reported, not judged)" if shown else ""

    @property
    def judged_share(self) -> float:
        return len(self.judged) / len(self.measured) if self.measured else 0.0

    def not_judged(self) -> Counter:
        return Counter(v.reason for v in self.verdicts if v.verdict in (NOT_JUDGED, NOISY))

    def wrong(self) -> list[str]:
        """What makes the run not normal, one phrase each ([] when nothing does)."""
        out = [f"{len(self.state(s))} {s}" for s in WRONG if self.state(s)]
        if self.missing:
            out.append(f"{len(self.missing)} missing")
        if self.status not in COMPLETE:
            out.append(f"the run is {self.said}" if self.status == "running" else f"the run did not complete: {self.said}")
        if not self.verdicts:
            out.append("nothing measured")
        return out

    @property
    def said(self) -> str:
        return self.status_said or self.status

    def exit_code(self) -> int:
        """0: checked and normal; 1: something is wrong (wrong()); 3: nothing wrong, but less than
        min_judged of the measured families judged."""
        if self.wrong():
            return 1
        return 3 if self.judged_share < self.min_judged else 0

    @property
    def result(self) -> str:
        return {0: "normal", 1: "not normal", 3: "not enough judged"}[self.exit_code()]

    def to_json(self) -> dict:
        """verdicts.json: the verdict, how it was reached, and every family."""
        return {"verdict": self.result, "exit_code": self.exit_code(), "wrong": self.wrong(),
                "run": self.run, "machine": self.machine, "status": self.status,
                "tolerance": self.tolerance, "theory_tolerance": THEORY_TOLERANCE, "alpha": self.alpha, "z": self.z,
                "judged_share": round(self.judged_share, 4), "min_judged": self.min_judged,
                "counts": dict(Counter(v.verdict for v in self.verdicts)),
                "missing": self.missing, "missing_checked": self.missing_checked or "yes",
                "lines": self.lines(),
                "families": [asdict(v) for v in self.verdicts]}

    def lines(self) -> list[str]:
        """The end-of-run block: a line per family that is not normal, what is missing, how many
        families were judged, and the result with its exit status."""
        out = [_line(v) for state in (LOW, INCONSISTENT, FAILED, HIGH) for v in self.state(state)]
        out += [f"MISSING {m}" for m in self.missing]
        if self.status not in COMPLETE:
            after = ("judged on the points written so far" if self.status == "running"
                     else "the points after it stopped were never measured")
            out.append(f"INCOMPLETE {self.run}: {self.said}: {after}")
        counts = Counter(v.verdict for v in self.verdicts)
        if self.verdicts:
            parts = [f"{counts[s]} {s}" for s in (NORMAL, LOW, HIGH, INCONSISTENT, FAILED) if counts[s]]
            summary = (f"verdict: {len(self.verdicts)} families: {', '.join(parts) or 'none judged'}; judged "
                       f"{len(self.judged)} of {len(self.measured)} measured{self._apart()} "
                       f"({_share(self.judged_share)})")
        else:
            summary = "verdict: nothing measured to judge"
        reasons = self.not_judged()
        for reason in APART:
            reasons.pop(reason, None)
        if reasons:
            grouped = "; ".join(f"{reason}: {n}" for reason, n in reasons.most_common())
            summary += f"; {sum(reasons.values())} not judged ({grouped})"
        if self.missing_checked:
            summary += f"; missing families not checked ({self.missing_checked})"
        code = self.exit_code()
        why = {0: "checked and normal",
               1: ", ".join(self.wrong()),
               3: f"nothing wrong found, but {_share(self.judged_share)} of the measured families judged, under "
                  f"{self.min_judged:.0%} (--min-judged)"}[code]
        return out + [summary, f"result: {self.result} (xferbench-doctor exits {code}): {why}"]


def _share(share: float) -> str:
    """A share as a percentage that never rounds across a limit: 89.7%, not 90%."""
    return f"{share:.0%}" if round(share * 100, 6).is_integer() else f"{math.floor(share * 1000) / 10:.1f}%"


def short_number(value: float) -> str:
    """A figure as a line shows it: whole from 100 on, else three digits."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _figure(value: float | None, unit: str) -> str:
    return "?" if value is None or not math.isfinite(value) else f"{short_number(value)} {unit}"


def _line(v: Verdict) -> str:
    at = f" at {format_size(v.at_size)}" if v.at_size else ""
    if v.verdict in (HIGH, INCONSISTENT):
        return f"{v.verdict.upper()} {v.family}: {_figure(v.measured, v.unit)}{at}; {'; '.join(v.causes)}"
    if v.verdict == FAILED:
        return f"FAILED {v.family}: {v.reason}"
    shown = v.measured / v.expected if v.measured and v.expected else math.nan
    if v.unit == "µs" and math.isfinite(shown):
        shown = 1 / shown
    # The family's ratio is its median over sizes; where the size shown differs, say so.
    own = f"; {shown:.2f}x at that size" if math.isfinite(shown) and abs(math.log(shown / v.ratio)) > 0.05 else ""
    versus = (f"{v.ratio:.2f}x expected ({_figure(v.measured, v.unit)} against {_figure(v.expected, v.unit)}{at}"
              f"{own}")
    where = f"; {v.source}" if v.source else ""
    peers = f"; siblings: {v.siblings}" if v.siblings and not v.source.startswith("siblings") else ""
    return f"LOW  {v.family}: {versus}{where}{peers}); cause: {'; '.join(v.causes)}"
