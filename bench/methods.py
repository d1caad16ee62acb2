"""How a point is measured, named, and which runs' figures may judge which.

METHOD is recorded in each run's meta.json (tool.method), so the tables of healthy machines
(scripts/make_expected.py) pool the runs of every commit that measures alike, from as many hosts
as the lent machines gave. Change it with any change to what a point's figure means (a clock, a
launch, a check, the trials kept); not for which points a sweep holds, nor for analysis. A suite
declares which methods changed its figures (`SuiteView.methods`), which of them changed some
launches only (`SuiteView.changed_launches`), and after which of them the earlier figures of a
launch judge nothing newer (`SuiteView.splits`).
"""
from __future__ import annotations

from typing import Mapping

METHOD = "held-4"
METHOD_ORDER = ("held-0", "held-1", "held-2", "held-3", "held-4")


def _newest_up_to(method: str | None, among) -> str | None:
    """The newest of `among` at or before `method` in METHOD_ORDER; None where none is, or where
    `method` is none of ours."""
    if method not in METHOD_ORDER:
        return None
    return next((m for m in reversed(METHOD_ORDER[:METHOD_ORDER.index(method) + 1]) if m in among), None)


def method_of(method: str, changed: tuple[str, ...], only: Mapping[str, tuple[str, ...]] | None = None,
              launches: tuple[str, ...] | None = None) -> str:
    """The method a run of `method` measured a suite's figures with: the newest of the methods
    that changed that suite (`changed`) up to it; `method` itself where it is none of ours. With
    `launches`, of those figures' launches alone: a method that changed other launches only
    (`only`: method -> the launches it changed) does not count."""
    only = only or {}
    among = [m for m in changed if launches is None or m not in only or set(only[m]) & set(launches)]
    return _newest_up_to(method, among) or method


def launch_groups(changed_launches: Mapping[str, tuple[str, ...]], every: tuple[str, ...]) -> list[tuple[str, ...] | None]:
    """How a suite's figures divide by the methods that changed them: None (all launches at once)
    where no method changed only some launches; else those launches, and the rest of `every`."""
    some = tuple(dict.fromkeys(launch for launches in changed_launches.values() for launch in launches))
    rest = tuple(launch for launch in every if launch not in some)
    return [some, rest] if some and rest else [None]


def generation(method: str | None, splits: Mapping[str, tuple[str, ...]], launch: str) -> str:
    """The generation of a run's figures of one launch of a suite: the newest of the suite's
    splits up to the run's method that split that launch, '' before any (and for a run that
    recorded no method of ours)."""
    return _newest_up_to(method, [m for m, launches in splits.items() if launch in launches]) or ""


def generation_order(name: str) -> int:
    """A generation's place: later generations sort after earlier ones ('' first)."""
    return METHOD_ORDER.index(name) + 1 if name in METHOD_ORDER else 0
