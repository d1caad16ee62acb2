"""Modules imported when first used: torch (and Triton) load only once a measurement needs them,
pandas, numpy and pyarrow once rows are read or written.

Measurement code names torch at its top (`torch = lazy.module("torch")`) but importing that code
costs nothing: the registry reads every suite's declarations, `--help` lists them, bad input is
refused, `plan=true` plans and the analysis commands read a suite's tables and figures without
the seconds torch takes to import. The first attribute read imports the module and copies its
namespace in, so later reads cost a plain attribute lookup.

Such an import makes objects by the hundred thousand that live as long as the process. The
garbage collector, left on, traverses them again and again while they are made and at every
full collection after (with torch loaded, 2 s of a 7 s run on the CPU): it is paused while they
are made, runs once when they are (the import's own garbage freed, as it would have been: kept,
it changed where the allocator placed later memory, and the page faults the pipeline suite
counts), and what is left is frozen (gc.freeze), so later collections look at the run's own
objects only.
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import types
from collections.abc import Iterator

from bench import interrupts


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The collector off for the block; after it, one collection and what is left frozen."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if was_on:
            gc.enable()


class _Lazy(types.ModuleType):
    def __getattr__(self, name: str):
        # Frozen objects are never collected: only a module's own import freezes, not a stand-in's
        # first read of a module imported already (the run's garbage of the moment would stay).
        made = self.__name__ not in sys.modules
        with _collector_paused() if made else contextlib.nullcontext():
            target = importlib.import_module(self.__name__)
        vars(self).update(vars(target))
        interrupts.check()   # a signal that came meanwhile waited for the import (torch: seconds)
        return getattr(target, name)


def module(name: str) -> types.ModuleType:
    """A stand-in for `import name` that imports it on the first attribute read."""
    return _Lazy(name)
