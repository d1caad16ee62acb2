"""A fleet's verdicts (bench/analysis/fleet.py reaches them): each node wrong, normal or not judged,
its low families with where they sit and why, the lines xferbench-doctor --fleet prints, its
Markdown and JSON, and the exit status.

A node is wrong where a family is low (against the fleet or the class's table), a data check
failed, it measured nothing of a suite it asked for that most nodes measured, or it moved between
its own runs; normal where nothing is wrong and at least min_judged of its measured families were
judged; else not judged.
Exit 1 where any node is wrong (listed first), 3 where none is but some node was not judged
enough, 0 where every node is normal.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from bench.analysis.verdicts import short_number
from bench.sizes import format_size

WRONG, NORMAL, NOT_JUDGED = "wrong", "normal", "not judged"
SHOWN = 5                # low families printed per node; --json has every one
NAMED = 20               # normal nodes named one by one up to this many


@dataclass
class FleetFamily:
    family: str
    key: dict
    size_class: str
    nodes: int            # nodes with a figure of it
    sigma: float          # the fleet's spread of a node's change (log units)
    peer_limit: float     # log change below which a node is low against the fleet (NaN: too few nodes)
    table_limit: float    # ... against the class's table (NaN: no expectation)
    source: str           # where the table's expectation came from
    cols: list[int]       # its judged points, columns of the fleet's matrix
    declared: float       # the suite's declared between-run noise of it (log units)


@dataclass
class Low:
    family: str
    key: dict
    size_class: str
    ratio: float          # node / fleet (or / table), median over its judged sizes
    limit: float
    against: str          # the fleet | the class's table
    measured: float       # at at_size, in unit
    expected: float
    unit: str
    at_size: int
    place: str            # where it sits: 'GPU 2', 'the link between GPU 0 and GPU 3', 'the host side: ...'
    place_kind: str       # gpu | link | host side | nccl | every link | every gpu
    gpus: list[int]
    causes: list[str]


@dataclass
class Node:
    host_id: str
    hostname: str
    runs: list[str]
    low: list[Low]
    moved: list[str]      # families its runs disagree on beyond the fleet's noise
    failed: list[str]     # variants whose data check failed
    missing: list[str]    # suites it asked for and most nodes measured, not this one
    judged: int
    measured: int
    unjudged: dict[str, int]
    min_judged: float
    causes: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.judged / self.measured if self.measured else 0.0

    @property
    def state(self) -> str:
        if self.low or self.moved or self.failed or self.missing:
            return WRONG
        return NORMAL if self.measured and self.share >= self.min_judged else NOT_JUDGED

    @property
    def places(self) -> list[dict]:
        """Where its low families sit, most families first: what, which GPUs, how many families."""
        counted = Counter((v.place, v.place_kind, tuple(v.gpus)) for v in self.low)
        return [{"place": place, "kind": kind, "gpus": list(gpus), "families": n}
                for (place, kind, gpus), n in counted.most_common()]

    @property
    def where(self) -> list[str]:
        return [p["place"] for p in self.places]

    @property
    def worst(self) -> float:
        return min((v.ratio for v in self.low), default=math.inf)

    def to_json(self) -> dict:
        return {"host_id": self.host_id, "hostname": self.hostname, "state": self.state, "where": self.places,
                "causes": self.causes, "runs": self.runs, "judged": self.judged, "measured": self.measured,
                "not_judged": self.unjudged, "moved": self.moved, "failed": self.failed, "missing": self.missing,
                "low": [asdict(v) for v in self.low]}


def _ratio(v: Low) -> str:
    return f"{v.ratio:.2f}x {v.against} ({short_number(v.measured)} against {short_number(v.expected)} {v.unit} at " \
           f"{format_size(v.at_size)}; limit {v.limit:.2f}x)"


def _span(low: list[Low]) -> str:
    lo, hi = min(v.ratio for v in low), max(v.ratio for v in low)
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


@dataclass
class FleetJudgement:
    machine: str
    runs: int
    nodes: list[Node]
    families: list[FleetFamily]
    left_out: list[str]
    tolerance: float
    alpha: float
    z: float
    min_judged: float
    ratios: np.ndarray    # nodes x families: node / fleet (NaN where not judged against the fleet)

    def ordered(self) -> list[Node]:
        """Wrong nodes first (worst first), then those not judged, then the normal ones."""
        rank = {WRONG: 0, NOT_JUDGED: 1, NORMAL: 2}
        return sorted(self.nodes, key=lambda n: (rank[n.state], n.worst, n.host_id))

    def state(self, state: str) -> list[Node]:
        return [n for n in self.ordered() if n.state == state]

    def name(self, node: Node) -> str:
        """The host's id, with its hostname where that tells it apart from the others."""
        shared = Counter(n.hostname for n in self.nodes)
        return f"{node.host_id} ({node.hostname})" if node.hostname and shared[node.hostname] == 1 else node.host_id

    def exit_code(self) -> int:
        if self.state(WRONG):
            return 1
        return 3 if self.state(NOT_JUDGED) or not self.nodes else 0

    @property
    def result(self) -> str:
        return {0: "normal", 1: "not normal", 3: "not enough judged"}[self.exit_code()]

    def _node_lines(self, node: Node) -> list[str]:
        runs = f"{len(node.runs)} run{'s' * (len(node.runs) != 1)}"
        if node.state != WRONG:
            return [f"{node.state.upper():<10} {self.name(node)} ({runs}): judged {node.judged} of {node.measured} "
                    f"families ({node.share:.0%})" + "".join(f"; {why}: {k}" for why, k in node.unjudged.items())]
        said = []
        if node.low:
            said.append(f"{len(node.low)} famil{'ies' if len(node.low) > 1 else 'y'} low ({_span(node.low)}), "
                        f"on {'; '.join(node.where)}")
        said += [f"{len(node.moved)} moved between its runs"] * bool(node.moved)
        said += [f"{len(node.failed)} failed their data check"] * bool(node.failed)
        said += [f"{len(node.missing)} suites missing"] * bool(node.missing)
        cause = f"; cause: {'; '.join(node.causes)}" if node.causes else ""
        out = [f"{'WRONG':<10} {self.name(node)} ({runs}): {', '.join(said)}{cause}"]
        several = len(node.where) > 1   # each family's place said where they differ
        out += [f"  LOW    {v.family}: {_ratio(v)}" + f"; {v.place}" * several for v in node.low[:SHOWN]]
        out += [f"  and {len(node.low) - SHOWN} more low (--json has every one)"] * (len(node.low) > SHOWN)
        out += [f"  MOVED  {m}" for m in node.moved[:SHOWN]]
        out += [f"  FAILED {f}" for f in node.failed[:SHOWN]]
        out += [f"  MISSING {m}" for m in node.missing[:SHOWN]]
        return out

    def summary(self) -> str:
        counts = Counter(n.state for n in self.nodes)
        parts = ", ".join(f"{counts[s]} {s}" for s in (WRONG, NOT_JUDGED, NORMAL) if counts[s])
        peers = sum(math.isfinite(f.peer_limit) for f in self.families)
        return (f"fleet: {len(self.nodes)} nodes ({self.runs} runs) of {self.machine}: {parts}; {len(self.families)} "
                f"families, {peers} judged against the fleet (median and spread over nodes), "
                f"{sum(math.isfinite(f.table_limit) for f in self.families)} against the class's table")

    def lines(self) -> list[str]:
        out = [line for node in self.state(WRONG) + self.state(NOT_JUDGED) for line in self._node_lines(node)]
        normal = self.state(NORMAL)
        if len(normal) > NAMED:
            judged = [n.share for n in normal]
            out.append(f"{'NORMAL':<10} {len(normal)} nodes (judged {min(judged):.0%}-{max(judged):.0%} of their "
                       "families; --json names every one)")
        else:
            out += [line for node in normal for line in self._node_lines(node)]
        out += self.left_out
        wrong = self.state(WRONG)
        why = {0: "every node normal",
               1: f"{len(wrong)} node{'s' * (len(wrong) != 1)} wrong: "
                  + ", ".join(n.host_id for n in wrong[:NAMED]) + (", ..." if len(wrong) > NAMED else ""),
               3: "nothing wrong found, but not every node was judged enough (--min-judged)"}[self.exit_code()]
        return out + [self.summary(), f"result: {self.result} (xferbench-doctor exits {self.exit_code()}): {why}"]

    def to_json(self) -> dict:
        return {"verdict": self.result, "exit_code": self.exit_code(), "machine": self.machine, "runs": self.runs,
                "tolerance": self.tolerance, "alpha": self.alpha, "z": self.z, "min_judged": self.min_judged,
                "counts": dict(Counter(n.state for n in self.nodes)), "left_out": self.left_out,
                "nodes": [n.to_json() for n in self.ordered()],
                "families": [{k: v for k, v in asdict(f).items() if k != "cols"} for f in self.families],
                "lines": self.lines()}

    def to_markdown(self) -> str:
        wrong, unjudged = self.state(WRONG), self.state(NOT_JUDGED)
        lines = [f"## xferbench fleet: {self.result}", "", self.summary() + ".", ""]
        if wrong or unjudged:
            lines += ["| node | state | where | low | worst | cause |", "| --- | --- | --- | ---: | --- | --- |"]
            for n in wrong + unjudged:
                worst = f"{n.low[0].family}: {n.low[0].ratio:.2f}x {n.low[0].against}" if n.low else \
                    "; ".join(n.moved[:1] + n.failed[:1] + n.missing[:1])
                lines.append(f"| {self.name(n)} | {n.state} | {'; '.join(n.where)} | {len(n.low)} | {worst} | "
                             f"{'; '.join(n.causes)} |")
            lines.append("")
        lines += [f"{len(self.state(NORMAL))} nodes normal."] + [f"- {line}" for line in self.left_out]
        return "\n".join(lines) + "\n"
