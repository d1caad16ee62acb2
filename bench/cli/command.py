"""The xferbench command, as bench/cli/run.py starts it once its signal handlers are in place:
`xferbench [key=value ...]` or `python -m bench ...` (torchrun too).

Every override is checked before anything runs: each is read by Hydra's grammar alone (so an
unreadable value is named, with how to quote it), then the config is composed once through
Hydra's compose API, its interpolations resolved, and built into the typed schema, so a bad key,
type or value is one line and exit 2, with no folder made. A plain run is that config, run
here; a multirun (-m) and Hydra's own flags (--help, --cfg) go through Hydra's main, which
composes again per job. `resume=FOLDER` continues a run with its own stored config, as stored,
and bypasses composition. This module owns the command line: the driver gets the user's
arguments from here (app.run's `argv`), never from sys.argv.
"""
from __future__ import annotations

import os
import re
import shlex
import sys

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig

import bench
from bench import ConfigError, interrupts
from bench.config.files import CONF_DIR

try:   # building the schema reads every suite: a suite file that breaks the contract is one line
    from bench.driver import schema
    from bench.driver import app, folders
except ConfigError as exc:
    print(f"xferbench: error: {exc}", file=sys.stderr)
    sys.exit(2)

# Flags after which Hydra does something other than run the job (help, print the config).
_NO_JOB_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc",
                 "--resolve"}
_started = False
_args: list[str] = []   # the user's arguments, for the run's meta.json and the settings it named


def _fail(message: str) -> None:
    print(f"xferbench: error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _task(cfg: DictConfig) -> None:
    global _started
    _started = True
    hydra_cfg = HydraConfig.get()
    job = hydra_cfg.job.num if hydra_cfg.mode == RunMode.MULTIRUN else None
    try:
        code = app.run(schema.to_config(cfg), _args, job=job)
    except ConfigError as exc:
        _fail(str(exc))
    if code:
        sys.exit(code)


def _compose(overrides: list[str]):
    """The typed config these overrides compose to; ConfigError in one line otherwise."""
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return schema.to_config(compose(config_name="config", overrides=overrides))
    except ConfigError:
        raise
    except Exception as exc:  # Hydra's override and composition errors wrap OmegaConf's
        raise ConfigError(schema.one_line(exc)) from None


def check_syntax(args: list[str], overrides: list[str], multirun: bool) -> None:
    """Each override (`overrides`: `args` normalized) read as Hydra will: a value its grammar cannot
    read, or several values without -m, is one line saying what to write instead."""
    parser = OverridesParser.create()
    for arg, line in zip(args, overrides):
        key, _, value = arg.partition("=")
        try:
            override = parser.parse_override(line)
        except Exception as exc:  # Hydra's grammar: its message names the character
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            inner = '"' if "'" in value else "'"
            quoted = f"{key}={inner}{value}{inner}"
            shell = f'"{quoted}"' if not re.search(r'["$`\\!]', quoted) else shlex.quote(quoted)
            raise ConfigError(f"{arg}: cannot be read ({reason}); quote the value inside the argument, e.g. "
                              f"{shell} (in a list, each item)") from None
        if override.is_sweep_override() and not multirun:
            if key.lstrip("+~") in schema.GROUPS:
                hint = f", or use suites=[{value}]" if key.lstrip("+~") == "suite" else ""
                raise ConfigError(f"{arg}: several values of a config group need -m (a multirun){hint}")
            raise ConfigError(f"{arg}: several values need -m (a multirun, one run each); "
                              "quote the value if the comma belongs to it")


def precheck(overrides: list[str], multirun: bool):
    """Compose and type-check the config: a plain run's typed config; in a multirun, each swept
    value once (None: Hydra runs the jobs)."""
    if not multirun:
        return _compose(overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:
        raise ConfigError(schema.one_line(exc)) from None
    sweeps = {o.input_line: list(o.sweep_string_iterator()) for o in parsed if o.is_sweep_override()}
    first = {line: f"{line.partition('=')[0]}={values[0]}" for line, values in sweeps.items()}
    base = [first.get(o, o) for o in overrides]
    _compose(base)
    for line, values in sweeps.items():
        key = line.partition("=")[0]
        for value in values[1:]:
            _compose([f"{key}={value}" if o == first[line] else o for o in base])
    return None


def main() -> None:
    global _args
    interrupts.check()   # one that came while this module's imports ran (Hydra, every suite)
    # Set before anything starts: every rank and library process inherits the safe defaults.
    for key, value in bench.SAFE_ENV.items():
        os.environ.setdefault(key, value)
    args = _args = sys.argv[1:]
    flags = {a for a in args if a.startswith("-")}
    multirun = bool(flags & {"-m", "--multirun"})
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        resume = [a.partition("=")[2] for a in overrides if a.partition("=")[0] == "resume"]
        if resume and resume[-1] not in ("", "null") and not flags:
            others = [a for a in overrides if a.partition("=")[0] != "resume"]
            cfg, meta = folders.resume_config(resume[-1], others)
            sys.exit(app.run(cfg, args, resumed=(resume[-1], meta)))
        schema.precheck_groups(overrides)
        normalized = dict(zip(overrides, schema.normalize_overrides(overrides, multirun)))
        check_syntax(overrides, [normalized[a] for a in overrides], multirun)
        args = [normalized.get(a, a) for a in args]
        cfg = None if flags & _NO_JOB_FLAGS else precheck([normalized[a] for a in overrides], multirun)
        if cfg is not None and not flags:   # a plain run: the config just composed, no second composition
            sys.exit(app.run(cfg, args))
    except ConfigError as exc:
        _fail(str(exc))
    sys.argv = [sys.argv[0], *args]
    try:
        _task()
    except SystemExit as exc:
        # Hydra reports its own override errors with exit 1 before the task starts: that is bad input.
        if exc.code == 1 and not _started:
            sys.exit(2)
        raise

