"""The root config, built from the suite registry and registered in Hydra's ConfigStore, and
turning input into a typed Config.

The root holds what every run shares (suites, device, out_dir, run_id, timing, sizes, instance)
and one section per registered suite, typed by its Settings; `sizes` gets one range per suite
that has a sweep; the `suite` config group gets an option per suite, per group the suites
declare (links, training) and `all`. conf/config.yaml names `xferbench_schema` first in its
defaults, so every value Hydra composes (YAML files, overrides) is checked against these
dataclasses: a wrong type, an unknown key or a value outside an enum fails before anything runs.
`resolved` evaluates every `${...}` once, at the start; `to_config` then builds the dataclass
objects from plain values (running their range checks) and evaluates nothing, so a stored config
resumes as it was written; `one_line` turns any of these failures into the single line the user sees.
"""
from __future__ import annotations

import copy
import re
import sys
from dataclasses import asdict, field, fields, is_dataclass, make_dataclass
from typing import List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf import errors as omegaconf_errors
from omegaconf.errors import (ConfigAttributeError, ConfigKeyError, InterpolationResolutionError,
                              OmegaConfBaseException, ValidationError)

from bench import ConfigError, suites
from bench.config.files import group_options
from bench.config.settings import (Choice, InstanceSettings, SizeRange, SizesSettings, TimingSettings, check_name,
                                   nonempty)

SuiteName = Choice("SuiteName", [(name, name) for name in suites.names()])
GROUPS = ("suite", "sizes", "instance", "launch")


class Device(Choice):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def _check_root(self) -> None:
    nonempty("suites", self.suites)
    if not self.out_dir.strip():
        raise ConfigError("out_dir is empty; name the folder runs go under (default: results)")
    if self.run_id is not None:
        check_name("run_id", self.run_id)


def _section(default):
    return field(default_factory=lambda: copy.deepcopy(default))


Sizes = make_dataclass("Sizes", [(s.name, SizeRange, _section(s.sizes)) for s in suites.all() if s.sizes],
                       bases=(SizesSettings,))
Config = make_dataclass("Config", [
    ("suites", List[SuiteName], field(default_factory=lambda: [SuiteName(n) for n in suites.group(suites.DEFAULT)])),
    ("device", Device, field(default=Device.auto)),
    ("out_dir", str, field(default="results")),
    ("run_id", Optional[str], field(default=None)),       # default: the start time, e.g. 20261123-101500
    ("resume", Optional[str], field(default=None)),
    ("progress", bool, field(default=True)),
    ("plan", bool, field(default=False)),                  # print the points and the time it will take, measure nothing
    ("timing", TimingSettings, field(default_factory=TimingSettings)),
    ("sizes", Sizes, field(default_factory=Sizes)),
    ("instance", InstanceSettings, field(default_factory=InstanceSettings)),
    *((s.name, s.Settings, field(default_factory=s.Settings)) for s in suites.all()),
], namespace={"__post_init__": _check_root})

_store = ConfigStore.instance()
_store.store(name="xferbench_schema", node=Config)
for _group, _members in suites.groups().items():
    _store.store(group="suite", name=_group, node={"suites": _members}, package="_global_")


def precheck_groups(argv: list[str]) -> None:
    """`suite=foo`: one clear line instead of Hydra's multi-line error."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in GROUPS:
            continue
        options = sorted({*suites.groups(), *group_options(key)}) if key == "suite" else group_options(key)
        for choice in value.split(","):  # a multirun sweep names several
            if choice not in options:
                raise ConfigError(f"{key}={choice!r} is unknown; choose from: {', '.join(options)}")


def config_dict(cfg) -> dict:
    """The typed config as plain JSON-ready data (enums as their strings)."""
    return asdict(cfg)


def resolved(cfg: DictConfig) -> dict:
    """A composed config as plain values: every `${...}` evaluated here, once, at the start of the
    run; ConfigError naming the key when one cannot be (an unset environment variable)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(one_line(exc, _raw(cfg, getattr(exc, "full_key", None) or ""))) from None


def _raw(cfg: DictConfig, key: str) -> object:
    """The value at `key` (e.g. copy.memory[0]) as written, before any interpolation is evaluated."""
    node: object = OmegaConf.to_container(cfg, resolve=False)
    for part in re.findall(r"[^.\[\]]+", key):
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            return None
    return node


def _literal(value: object) -> object:
    """`value` with every `${` escaped, so OmegaConf takes strings as they are and evaluates nothing."""
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    if isinstance(value, str):  # str(): a Choice member is a str too
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", str(value))
    return value


def to_config(values: DictConfig | dict) -> Config:
    """The typed Config; ConfigError with one line otherwise. A composed config is resolved first;
    plain values (a run's stored config) are taken as they are: a string that looks like an
    interpolation stays that string."""
    if isinstance(values, DictConfig):
        values = resolved(values)
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), _literal(values)))
    except OmegaConfBaseException as exc:
        raise ConfigError(one_line(exc)) from None


def _known_keys(full_key: str) -> list[str]:
    """The setting names allowed beside `full_key` (its parent's fields)."""
    node: object = Config()
    for part in full_key.split(".")[:-1]:
        node = getattr(node, part, None)
    return [f.name for f in fields(node)] if is_dataclass(node) else []


# Hydra names only the file when a config group's YAML (a conf/instance entry) does not fit the schema.
_IN_GROUP = re.compile(r"In '(\w+)/([^']+)': (\w+) raised while composing config:\n(.*)\n\s+full_key: (\S*)")


def one_line(exc: BaseException, raw: object = None) -> str:
    """One line naming the key and what is allowed, from Hydra's or OmegaConf's error; `raw` is
    the value as written, when it was an interpolation."""
    while not isinstance(exc, OmegaConfBaseException) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, ConfigError):
        return str(exc)
    mark = getattr(exc, "problem_mark", None)   # PyYAML's: a config file that is not YAML
    if mark is not None:
        return f"{mark.name}, line {mark.line + 1}: not valid YAML ({getattr(exc, 'problem', None) or exc})"
    m = _IN_GROUP.match(str(exc))
    if m:
        group, option, kind, msg, key = m.groups()
        cls = getattr(omegaconf_errors, kind, OmegaConfBaseException)
        return f"{group}={option} ({group}/{option}.yaml): {_describe(cls, key, msg, None)}"
    key = getattr(exc, "full_key", None) or ""
    msg = (getattr(exc, "msg", None) or str(exc)).splitlines()[0]
    return _describe(type(exc), key, msg, raw)


def _describe(kind: type, key: str, msg: str, raw: object) -> str:
    m = re.match(r"While dereferencing interpolation '(.*?)': (.*)", msg)
    if m:  # the interpolation resolved to a value the schema refuses
        raw, msg = m.groups()
    if issubclass(kind, InterpolationResolutionError) and not issubclass(kind, ValidationError):
        m = re.search(r"raised while resolving interpolation: (.*)", msg)
        why = m.group(1).strip("\"'") if m else msg
        why = re.sub(r"Environment variable '(.*)' not found", r"environment variable \1 is not set", why)
        return f"{key}={raw}: cannot be resolved: {why}" if raw is not None else f"{key}: {why}"
    if issubclass(kind, (ConfigKeyError, ConfigAttributeError)) or re.match(r"Key '.*' not in '.*'", msg):
        known = _known_keys(key)
        where = key.rsplit(".", 1)[0] if "." in key else "the config"
        return f"{key} is not a setting" + (f"; {where} has: {', '.join(known)}" if known else "")
    if issubclass(kind, ValidationError):
        m = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", msg)
        if m:
            given = f"{raw} gives {m.group(1)!r}, which" if raw is not None else repr(m.group(1))
            return f"{key.split('[')[0]}: {given} is not allowed; choose from: {m.group(2)}"
        m = re.match(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", msg)
        if m:
            names = {"Integer": "a whole number", "Float": "a number", "Boolean": "true or false"}
            what = names.get(m.group(3), m.group(3))
            given = f"{raw} (gives {m.group(1)!r})" if raw is not None else m.group(1)
            return f"{key}={given}: must be {what}"
        if "is not a ListConfig" in msg:
            return f"{key}: expects a list, e.g. {key}=[a,b]"
    return f"{key}: {msg}" if key else msg


# Settings whose schema type is a list: a bare value there means a one-element list.
def _list_keys(node: object, prefix: str = "") -> set[str]:
    keys = set()
    for f in fields(node):
        value = getattr(node, f.name)
        if is_dataclass(value):
            keys |= _list_keys(value, f"{prefix}{f.name}.")
        elif isinstance(value, list):
            keys.add(f"{prefix}{f.name}")
    return keys


LIST_KEYS = _list_keys(Config())


def _auto_keys(node: object, prefix: str = "") -> dict[str, str]:
    """Settings whose metadata spells out `auto` (collectives.nproc=auto means [])."""
    keys = {}
    for f in fields(node):
        value = getattr(node, f.name)
        if is_dataclass(value):
            keys |= _auto_keys(value, f"{prefix}{f.name}.")
        elif "auto" in f.metadata:
            keys[f"{prefix}{f.name}"] = f.metadata["auto"]
    return keys


_AUTO = _auto_keys(Config())


# Keys renamed since a release: still accepted, with a line saying what they set now.
RENAMED = {"pipeline.sample_size": "pipeline.sample_sizes"}


def renamed(stored: dict) -> dict:
    """A stored config (a run's meta.json) with the keys renamed since (RENAMED) under their names of now."""
    out = copy.deepcopy(stored)
    for old, new in RENAMED.items():
        (section, old_key), (_, new_key) = old.split(".", 1), new.split(".", 1)
        values = out.get(section)
        if isinstance(values, dict) and old_key in values:
            value = values.pop(old_key)
            values.setdefault(new_key, value if isinstance(value, list) else [value])
    return out


def normalize_overrides(argv: list[str], multirun: bool) -> list[str]:
    """`copy.memory=pinned` -> `copy.memory=[pinned]`, so a bare value where a list belongs is a
    one-element list (in a multirun, commas keep meaning a sweep over such lists); `+key=value`
    -> `key=value`."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        bare = key.lstrip("+~")
        if bare in RENAMED:
            print(f"xferbench: {bare} is deprecated; it sets {RENAMED[bare]}", file=sys.stderr)
            key, bare = key.replace(bare, RENAMED[bare]), RENAMED[bare]
        if key.startswith("+") and not bare.startswith("hydra"):
            key = bare  # `+key=` would add a key the schema does not have: set it, so a typo is refused
        if sep and bare in _AUTO and value == "auto":
            value = _AUTO[bare]
        elif sep and bare in LIST_KEYS and value.startswith(("'", '"')):
            value = f"[{value}]"  # one quoted item, commas and all
        elif sep and bare in LIST_KEYS and value and not value.startswith(("[", "$")):
            items = value.split(",") if multirun else [value]
            value = ",".join(f"[{v}]" for v in items) if multirun else f"[{value}]"
        out.append(f"{key}{sep}{value}" if sep else arg)
    return out
