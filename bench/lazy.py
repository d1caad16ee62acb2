"""Modules imported when first used: torch (and Triton) load only once a measurement needs them,
pandas, numpy and pyarrow once rows are read or written.

Measurement code names torch at its top (`torch = lazy.module("torch")`) but importing that code
costs nothing: the registry reads every suite's declarations, `--help` lists them, bad input is
refused, `plan=true` plans and the analysis commands read a suite's tables and figures without
the seconds torch takes to import. The first attribute read imports the module and copies its
namespace in, so later reads cost a plain attribute lookup.
"""
from __future__ import annotations

import importlib
import types

from bench import interrupts


class _Lazy(types.ModuleType):
    def __getattr__(self, name: str):
        target = importlib.import_module(self.__name__)
        vars(self).update(vars(target))
        interrupts.check()   # a signal that came meanwhile waited for the import (torch: seconds)
        return getattr(target, name)


def module(name: str) -> types.ModuleType:
    """A stand-in for `import name` that imports it on the first attribute read."""
    return _Lazy(name)
