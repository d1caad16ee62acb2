"""The root config schema, registered in Hydra's ConfigStore, and turning input into a typed Config.

conf/config.yaml names `xferbench_schema` first in its defaults, so every value Hydra composes
(yaml files, overrides) is checked against these dataclasses: a wrong type, an unknown key or
a value outside an enum fails before anything runs. `to_config` then builds the dataclass
objects (running their range checks), and `one_line` turns any of these failures into the
single line the user sees.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from bench import ConfigError
from bench.settings import Choice, InstanceSettings, SizesSettings, TimingSettings, nonempty
from bench.suites import SUITES, collectives, copy, overlap, p2p, pipeline

SuiteName = Choice("SuiteName", [(name, name) for name in SUITES])


class Device(Choice):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


@dataclass
class Config:
    suites: List[SuiteName] = field(default_factory=lambda: list(SuiteName))
    device: Device = Device.auto
    out_dir: str = "results"
    run_id: Optional[str] = None     # default: the start time, e.g. 20261123-101500
    resume: Optional[str] = None
    progress: bool = True
    plan: bool = False               # print the points and an estimate of the time, measure nothing
    timing: TimingSettings = field(default_factory=TimingSettings)
    sizes: SizesSettings = field(default_factory=SizesSettings)
    instance: InstanceSettings = field(default_factory=InstanceSettings)
    copy: copy.Settings = field(default_factory=copy.Settings)
    p2p: p2p.Settings = field(default_factory=p2p.Settings)
    collectives: collectives.Settings = field(default_factory=collectives.Settings)
    overlap: overlap.Settings = field(default_factory=overlap.Settings)
    pipeline: pipeline.Settings = field(default_factory=pipeline.Settings)

    def __post_init__(self) -> None:
        nonempty("suites", self.suites)
        if self.run_id is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", self.run_id):
            raise ConfigError(f"run_id={self.run_id!r}: use letters, digits, '.', '_' and '-' only")


ConfigStore.instance().store(name="xferbench_schema", node=Config)


def to_config(cfg: DictConfig | dict) -> Config:
    """The typed Config for a composed (or stored) config; ConfigError with one line otherwise."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), cfg))
    except OmegaConfBaseException as exc:
        raise ConfigError(one_line(exc)) from None


def _known_keys(full_key: str) -> list[str]:
    """The setting names allowed beside `full_key` (its parent's fields)."""
    node: object = Config()
    for part in full_key.split(".")[:-1]:
        node = getattr(node, part, None)
    return [f.name for f in fields(node)] if is_dataclass(node) else []


def one_line(exc: BaseException) -> str:
    """One line naming the key and what is allowed, from Hydra's or OmegaConf's error."""
    while not isinstance(exc, OmegaConfBaseException) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, ConfigError):
        return str(exc)
    key = getattr(exc, "full_key", None) or ""
    msg = (getattr(exc, "msg", None) or str(exc)).splitlines()[0]
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)) or re.match(r"Key '.*' not in '.*'", msg):
        known = _known_keys(key)
        where = key.rsplit(".", 1)[0] if "." in key else "the config"
        return f"{key} is not a setting" + (f"; {where} has: {', '.join(known)}" if known else "")
    if isinstance(exc, ValidationError):
        m = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", msg)
        if m:
            return f"{key.split('[')[0]}: {m.group(1)!r} is not allowed; choose from: {m.group(2)}"
        m = re.match(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)", msg)
        if m:
            kind = {"Integer": "a whole number", "Float": "a number", "Boolean": "true or false"}.get(m.group(3), m.group(3))
            return f"{key}={m.group(1)}: must be {kind}"
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
_AUTO = {"collectives.nproc": "[]"}  # 'auto' spelled out: the default, one rank per GPU


def normalize_overrides(argv: list[str], multirun: bool) -> list[str]:
    """`copy.memory=pinned` -> `copy.memory=[pinned]`, so a bare value where a list belongs is a
    one-element list (in a multirun, commas keep meaning a sweep over such lists); `+key=value`
    -> `key=value`."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        bare = key.lstrip("+~")
        if key.startswith("+") and not bare.startswith("hydra"):
            key = bare  # `+key=` would add a key the schema does not have: set it, so a typo is refused
        if sep and bare in _AUTO and value == "auto":
            value = _AUTO[bare]
        elif sep and bare in LIST_KEYS and value and not value.startswith(("[", "'", '"', "$")):
            items = value.split(",") if multirun else [value]
            value = ",".join(f"[{v}]" for v in items) if multirun else f"[{value}]"
        out.append(f"{key}{sep}{value}" if sep else arg)
    return out
