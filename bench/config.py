"""Turning the composed Hydra config into checked settings, before any GPU work."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bench import ConfigError
from bench.sizes import parse_size, sweep
from bench.timing import TimingConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("suite", "sizes", "instance", "launch")
LAUNCHES = ("eager", "graph")


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def precheck_argv(argv: list[str]) -> None:
    """`suite=foo`, a bad resume folder: one clear line instead of Hydra's multi-line error."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if sep and key == "resume" and value not in ("", "null"):
            run_dir(value, "", "", "")
        if not sep or key not in GROUPS:
            continue
        options = group_options(key)
        for choice in value.split(","):  # a multirun sweep names several
            if choice not in options:
                raise ConfigError(f"{key}={choice!r} is unknown; choose from: {', '.join(options)}")


def external_rank() -> int | None:
    """This process's global rank when torchrun or Slurm started it, else None."""
    for var in ("RANK", "SLURM_PROCID"):
        if var in os.environ and ("WORLD_SIZE" in os.environ or "SLURM_NTASKS" in os.environ):
            return int(os.environ[var])
    return None


def instance_label(name: str) -> str:
    if name != "local":
        return name
    from bench.system import instance_label as detect

    return detect()


def run_dir(resume: str | None, out_dir: str, instance: str, run_id: str) -> str:
    if resume:
        if not (Path(resume) / "meta.json").exists():
            raise ConfigError(f"resume={resume}: not an xferbench run folder (no meta.json)")
        return str(resume)
    if external_rank() not in (None, 0):  # only rank 0 writes; keep other ranks out of results/
        return tempfile.mkdtemp(prefix="xferbench-rank-")
    return str(Path(out_dir) / instance_label(instance) / run_id)


def register_resolvers() -> None:
    for name, fn in (("xb_run_dir", run_dir), ("xb_label", instance_label)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def timing_config(cfg: DictConfig) -> TimingConfig:
    t = cfg.timing
    for launch in t.launch:
        if launch not in LAUNCHES:
            raise ConfigError(f"timing.launch: {launch!r} is unknown; choose from: {', '.join(LAUNCHES)}")
    try:
        return TimingConfig(int(t.warmup), int(t.trials), float(t.min_trial_s), int(t.min_iters), int(t.max_iters))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"timing: {exc}") from None


def suite_sizes(cfg: DictConfig, suite: str, device: str) -> list[int]:
    """The suite's sweep: its own range unless sizes.min/max are set; capped without a GPU."""
    s = cfg.sizes
    own = s.get(suite, {})
    lo = s.min if s.min is not None else own.get("min", "4KiB")
    hi = s.max if s.max is not None else own.get("max", "1GiB")
    sizes = sweep(lo, hi, int(s.factor) if str(s.factor).isdigit() else s.factor)
    if device == "cpu" and s.cpu_max is not None and s.max is None:
        cap = parse_size(s.cpu_max, "sizes.cpu_max")
        sizes = [x for x in sizes if x <= cap] or [min(sizes)]
    return sizes


def detect_device(cfg: DictConfig) -> str:
    import torch

    choice = cfg.device
    if choice not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"device={choice!r} is unknown; choose from: auto, cuda, cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA GPU is visible (torch.cuda.is_available() is False)")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice
