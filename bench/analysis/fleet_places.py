"""Where a node's low family sits and why: a launch path (an eager latency-bound transfer on a
GPU) on the host's launch path, as the judge reads it; else its GPU or pair where it stands out
from its siblings in the node (the same role on the node's other GPUs or pairs), else what every
GPU of the node shares: the host side for traffic to and from host memory, NCCL for collectives,
every link, every GPU; and the causes its own record shows (causes.py), read from the node's run
that measured it lowest.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bench.analysis import causes
from bench.analysis.judge import host_record
from bench.results import load, read_meta, samples_file

GPU, LINK, HOST_SIDE, LAUNCH, NCCL, EVERY_LINK, EVERY_GPU = (
    "gpu", "link", "host side", "launch path", "nccl", "every link", "every gpu")
NO_CAUSE = "no cause found"   # how causes.explain begins where it found none


class FleetView(Protocol):
    """What places and causes read of the fleet's judgment (bench/analysis/fleet.py's FleetContext)."""

    survey: Any           # fleet_nodes.Survey: its runs
    matrix: Any           # fleet_nodes.RunMatrix: the runs' levels and values
    fams: list            # per family: key, role, size_class, launch_path
    stats: list           # per family: fleet_verdicts.FleetFamily (peer_limit)
    peer: np.ndarray      # families x nodes: each node's change against the fleet
    links: dict
    catalog: Any          # the suites' declarations (bench.suite_view.Catalog)
    tolerance: float


@dataclass(frozen=True)
class Place:
    kind: str
    gpus: tuple[int, ...]

    def __str__(self) -> str:
        ends = " and ".join(f"GPU {g}" for g in self.gpus)
        return {GPU: f"GPU {self.gpus[0] if self.gpus else '?'}",
                LINK: f"the link between {ends}",
                HOST_SIDE: "the host side: traffic between host memory and every GPU",
                LAUNCH: "the host's launch path: its eager launches' time",
                NCCL: f"NCCL among GPUs {', '.join(map(str, self.gpus))}" if self.gpus else "NCCL",
                EVERY_LINK: "every GPU pair's link",
                EVERY_GPU: "every GPU"}[self.kind]


def _stands_out(k: int, n: int, ctx: FleetView) -> bool | None:
    """Whether node n's family k is below its siblings in the node (the same role and size class
    on its other GPUs or pairs) by more than the family's limit; None without two siblings."""
    fam = ctx.fams[k]
    siblings = [j for j, g in enumerate(ctx.fams)
                if j != k and g.role == fam.role and g.size_class == fam.size_class and math.isfinite(ctx.peer[j, n])]
    if len(siblings) < 2 or not math.isfinite(ctx.peer[k, n]):
        return None
    limit = ctx.stats[k].peer_limit
    limit = limit if math.isfinite(limit) else math.log1p(-ctx.tolerance)
    return bool(ctx.peer[k, n] - np.median(ctx.peer[siblings, n]) < limit)


def _place(k: int, n: int, ctx: FleetView) -> Place | None:
    """Where node n's low family k sits; None for one GPU's or pair's family with no siblings in
    the node to tell it from (places() settles it)."""
    if ctx.fams[k].launch_path:
        return Place(LAUNCH, ())
    s = causes.subject(ctx.fams[k].key, ctx.links, ctx.catalog)
    apart = _stands_out(k, n, ctx)
    if apart is not False:
        if len(s.pairs) == 1 and not s.host_memory:
            return Place(LINK, s.pairs[0]) if apart else None
        shared = set.intersection(*(set(p) for p in s.pairs)) if s.pairs else set(s.gpus)
        if len(shared) == 1:
            return Place(GPU, tuple(shared)) if apart else None
    if s.host_memory:
        return Place(HOST_SIDE, ())
    if s.nccl:
        return Place(NCCL, s.gpus)
    return Place(EVERY_LINK if s.pairs else EVERY_GPU, ())


def places(low: list[int], n: int, ctx: FleetView) -> list[Place]:
    """Where each of node n's low families sits. One GPU's or pair's family without siblings to
    tell it apart goes with what the node's other low families share (its host traffic with the
    host side where that is low), else it sits on its own GPU or pair."""
    found = [_place(k, n, ctx) for k in low]
    shared = {p.kind for p in found if p is not None and p.kind not in (GPU, LINK)}
    out = []
    for k, place in zip(low, found):
        if place is None:
            s = causes.subject(ctx.fams[k].key, ctx.links, ctx.catalog)
            if s.host_memory and HOST_SIDE in shared:
                place = Place(HOST_SIDE, ())
            elif len(s.pairs) == 1 and not s.host_memory:
                place = Place(LINK, s.pairs[0])
            else:
                place = Place(GPU, s.gpus[:1])
        out.append(place)
    return out


class NodeCauses:
    """The causes of a node's low families from its own runs' records, each run's facts read once
    (and once more with its host's pace, for a launch path)."""

    def __init__(self, ctx: FleetView) -> None:
        self.ctx = ctx
        self._facts: dict[tuple[int, bool], causes.Facts] = {}

    def _of(self, row: int, launch_path: bool) -> causes.Facts:
        if (row, launch_path) not in self._facts:
            run = self.ctx.survey.runs[row]
            path = Path(run.run)
            # The host as the single-run judge reads it, so that a low launch path names its pace;
            # only a launch path's causes read it, and its run's rows cost more than the rest.
            rows = load(path) if launch_path and samples_file(path) is not None else None
            self._facts[row, launch_path] = causes.facts(read_meta(path), path, causes.healthy_clocks(run.machine),
                                                         host_record(rows, run.machine))
        return self._facts[row, launch_path]

    def explain(self, key: dict, bandwidth: bool, launch_path: bool, rows: np.ndarray, cols: np.ndarray) -> list[str]:
        """causes.explain for the family, from the node's run that measured it lowest (its figure
        at the family's judged sizes: a link explains a drop only down to what it carries)."""
        y = self.ctx.matrix.y[np.ix_(rows, cols)]
        seen = np.isfinite(y).any(axis=1)
        lowest = int(rows[seen][np.argmin(np.nanmean(y[seen], axis=1))] if seen.any() else rows[0])
        gbps = float(np.nanmedian(self.ctx.matrix.value[lowest, cols])) if bandwidth and seen.any() else math.nan
        facts = self._of(lowest, launch_path)
        return causes.explain(facts, causes.subject(key, facts.links, self.ctx.catalog, (), gbps, launch_path))

    @staticmethod
    def summary(low: list) -> list[str]:
        """The node's causes, most families first; 'no cause found' only where nothing was found."""
        counted = Counter(c for v in low for c in v.causes)
        found = [c for c, _ in counted.most_common() if not c.startswith(NO_CAUSE)]
        return found or [c for c, _ in counted.most_common(1)]
