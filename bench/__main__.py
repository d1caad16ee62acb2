"""The xferbench command: `xferbench [key=value ...]` or `python -m bench ...` (torchrun too)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import bench
from bench import ConfigError, config

config.register_resolvers()
_started = False


def _fail(message: str) -> None:
    print(f"xferbench: error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path=str(config.CONF_DIR), config_name="config")
def _task(cfg: DictConfig) -> None:
    global _started
    _started = True
    from bench import app

    try:
        code = app.run(cfg, Path(HydraConfig.get().runtime.output_dir))
    except ConfigError as exc:
        _fail(str(exc))
    if code:
        sys.exit(code)


def main() -> None:
    # Set before anything starts: every rank and library process inherits the safe defaults.
    for key, value in bench.SAFE_ENV.items():
        os.environ.setdefault(key, value)
    try:
        config.precheck_argv(sys.argv[1:])
    except ConfigError as exc:
        _fail(str(exc))
    try:
        _task()
    except SystemExit as exc:
        # Hydra reports its own override errors with exit 1 before the task starts: that is bad input.
        if exc.code == 1 and not _started:
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
