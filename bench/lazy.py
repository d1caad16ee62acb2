"""Modules imported when first used: torch (and Triton) load only once a measurement needs them,
pandas, numpy and pyarrow once rows are read or written.

Measurement code names torch at its top (`torch = lazy.module("torch")`) but importing that code
costs nothing: the registry reads every suite's declarations, `--help` lists them, bad input is
refused, `plan=true` plans and the analysis commands read a suite's tables and figures without
the seconds torch takes to import. The first attribute read imports the module and copies its
namespace in, so later reads cost a plain attribute lookup.

Such an import makes objects by the hundred thousand (torch: about a million) that live as long
as the process. The garbage collector, left on, traverses them again and again while they are
made and at every full collection after (with torch loaded, a second and a half of a 7 s run on
the CPU, and the teardown's collection a second more): it is paused while they are made, and
they are frozen (gc.freeze) once made, so later collections look at the run's own objects only.
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
    """The collector off for the block, and what the block made frozen after it."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
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
