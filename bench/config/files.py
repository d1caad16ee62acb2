"""Where the user-facing config files are: the repository's conf/, shipped in a wheel as
bench/config/conf (config.yaml, the groups sizes/, launch/, instance/)."""
from __future__ import annotations

from pathlib import Path


def _conf_dir() -> Path:
    """The packaged config (a wheel installs conf/ as bench/config/conf), else the repository's conf/."""
    packaged = Path(__file__).resolve().parent / "conf"
    if (packaged / "config.yaml").exists():
        return packaged
    try:  # an editable install maps the package bench.config.conf onto the repository's conf/
        from importlib.resources import files

        mapped = Path(str(files("bench.config.conf")))
        if (mapped / "config.yaml").exists():
            return mapped
    except (ImportError, TypeError, ValueError):
        pass
    return Path(__file__).resolve().parent.parent.parent / "conf"


CONF_DIR = _conf_dir()
INSTANCES = CONF_DIR / "instance"


def group_options(group: str) -> list[str]:
    """The options of a config group kept as YAML files (sizes, launch, instance)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
