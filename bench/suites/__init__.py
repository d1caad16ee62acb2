"""The suite registry: the Suite each module of this package defines, and each file that
XFERBENCH_SUITES names (paths separated by os.pathsep: suites of your own, outside the package),
checked against the contract (bench/contract.py) when the registry is first read.

Importing a suite costs no torch (measurement code imports it on first use, bench.lazy), so the
config schema, --help and the analysis commands read every suite's declarations cheaply.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

from bench import ConfigError
from bench.contract import Suite, SuiteError, check_suite

DEFAULT = "links"       # the group a plain `xferbench` runs
PLUGINS = "XFERBENCH_SUITES"


def _package_modules() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)]


def _plugin(path: str) -> ModuleType:
    """A suite file outside the package, imported under a name of its own."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise SuiteError(f"{PLUGINS}: {path}: no such file")
    name = f"xferbench_suite_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def _discover() -> dict[str, Suite]:
    modules = _package_modules() + [_plugin(p) for p in os.environ.get(PLUGINS, "").split(os.pathsep) if p]
    found: dict[str, Suite] = {}
    for module in modules:
        suite = check_suite(module)
        if suite.name in found:
            raise SuiteError(f"{module.__file__}: suite {suite.name!r} is defined twice")
        found[suite.name] = suite
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


@functools.cache
def _registry() -> dict[str, Suite]:
    """Read once, at the first question: a broken suite file is then a SuiteError the command
    line reports in one line, not a failure to import this package."""
    return _discover()


def all() -> list[Suite]:   # noqa: A001 - the registry's vocabulary: every suite
    """Every suite, in the order a run measures them."""
    return list(_registry().values())


def names() -> list[str]:
    return list(_registry())


def get(name: str) -> Suite:
    if name not in _registry():
        raise ConfigError(f"suite {name!r} is unknown; choose from: {', '.join(_registry())}")
    return _registry()[name]


def groups() -> dict[str, list[str]]:
    """The `suite=` config group: `all`, each suite alone, and each group suites declare."""
    out = {"all": names(), **{name: [name] for name in _registry()}}
    for suite in _registry().values():
        for group in suite.groups:
            out.setdefault(group, []).append(suite.name)
    return out


def group(name: str) -> list[str]:
    return groups()[name]
