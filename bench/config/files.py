"""Where the user-facing config files are: the repository's conf/ (config.yaml, the groups sizes/,
launch/, instance/), which the package reaches as bench/config/conf."""
from __future__ import annotations

from pathlib import Path


# bench/config/conf: in the repository a link to its top-level conf/, in a wheel their copy.
CONF_DIR = Path(__file__).resolve().parent / "conf"
INSTANCES = CONF_DIR / "instance"


def group_options(group: str) -> list[str]:
    """The options of a config group kept as YAML files (sizes, launch, instance)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
