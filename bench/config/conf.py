"""From the command line to checked settings and a run folder, before any GPU work.

Hydra composes conf/ (shipped inside the package as bench/conf in a wheel) against the schema
in bench/schema.py; this module finds that folder, refuses unknown config choices in one line,
derives each suite's sweep, and makes the run folder: exclusively, so two runs never share one.
"""
from __future__ import annotations

import datetime as dt
import os
import socket
from dataclasses import asdict
from pathlib import Path

from bench import ConfigError
from bench.sizes import ladder, parse_size
from bench.timing import TimingConfig


def _conf_dir() -> Path:
    """The packaged config (a wheel installs conf/ as bench/conf), else the repository's conf/."""
    packaged = Path(__file__).resolve().parent / "conf"
    if (packaged / "config.yaml").exists():
        return packaged
    try:  # an editable install maps the package bench.conf onto the repository's conf/
        from importlib.resources import files

        mapped = Path(str(files("bench.conf")))
        if (mapped / "config.yaml").exists():
            return mapped
    except (ImportError, TypeError, ValueError):
        pass
    return Path(__file__).resolve().parent.parent / "conf"


CONF_DIR = _conf_dir()
GROUPS = ("suite", "sizes", "instance", "launch")


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def precheck_groups(argv: list[str]) -> None:
    """`suite=foo`: one clear line instead of Hydra's multi-line error."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in GROUPS:
            continue
        options = group_options(key)
        for choice in value.split(","):  # a multirun sweep names several
            if choice not in options:
                raise ConfigError(f"{key}={choice!r} is unknown; choose from: {', '.join(options)}")


def external_rank() -> int | None:
    """This process's global rank when torchrun or srun started it, else None."""
    from bench.dist import launcher_layout

    layout = launcher_layout(os.environ)
    return layout.rank if layout else None


def instance_label(name: str) -> str:
    """The run folder's parent name: the instance's name, or for `local` the detected label (checked
    like any name, as it becomes a folder)."""
    if name != "local":
        return name
    from bench.settings import check_name
    from bench.system import instance_label as detect

    label = detect()
    check_name("instance label (detected)", label)
    return label


def explicit_keys(args: list[str]) -> frozenset[str]:
    """The settings named in command-line arguments (`key=value`; `~key` deletes, so it names none)."""
    return frozenset(a.partition("=")[0].lstrip("+") for a in args
                     if "=" in a and not a.startswith(("-", "~")))


def instance_mismatch(instance, gpus: list[str]) -> str:
    """What a named instance (a catalogue entry) says that the GPUs this run has (their names) are
    not: its GPU count or model. '' when it fits, or is `local`, or names neither."""
    if instance.name == "local" or (instance.gpu is None and instance.gpu_count is None):
        return ""
    count_ok = instance.gpu_count is None or instance.gpu_count == len(gpus)
    # Loosely: the catalogue's words ('NVIDIA H200') among the device's name's ('NVIDIA H200 NVL').
    model_ok = instance.gpu is None or bool(gpus) and set(instance.gpu.lower().split()) <= set(gpus[0].lower().split())
    if count_ok and model_ok:
        return ""
    described = " ".join(str(x) for x in (f"{instance.gpu_count}x" if instance.gpu_count is not None else "",
                                          instance.gpu or "GPUs") if x)
    found = f"{len(gpus)}x {gpus[0]}" if gpus else "no GPU"
    return (f"instance={instance.name} is {described}, but this run has {found}; its results are labelled "
            f"{instance.name} with that entry's links and price all the same")


def _new_folder(path: Path, out_dir: str) -> bool:
    """mkdir that reports a taken name as False and any other failure as one line."""
    try:
        path.mkdir()
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        raise ConfigError(f"out_dir={out_dir}: cannot create {path} ({exc.strerror})") from None


def _within(out_dir: str, run_dir: Path) -> None:
    """ConfigError unless run_dir lies below out_dir (the names were checked; this guards the path
    itself). Compared as written, not through symlinks: a link the user made under out_dir is theirs."""
    root, path = os.path.abspath(out_dir), os.path.abspath(run_dir)
    if os.path.commonpath([root, path]) != root or len(Path(path).relative_to(root).parts) != 2:
        raise ConfigError(f"out_dir={out_dir}: the run folder {run_dir} would not be <out_dir>/<instance>/<run_id>")


def make_run_dir(out_dir: str, label: str, run_id: str | None, job: int | None = None) -> Path:
    """Create this run's folder exclusively and return it.

    A default id (the start time) that is taken gets a suffix (-2, -3, ...), so runs started in
    the same second never share a folder; an id the user chose is refused if it exists.
    """
    parent = Path(out_dir) / label
    _within(out_dir, parent / (run_id or "run"))
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"out_dir={out_dir}: cannot create {parent} ({exc.strerror})") from None
    if run_id is not None:
        chosen = parent / (run_id if job is None else f"{run_id}-{job}")
        if not _new_folder(chosen, out_dir):
            raise ConfigError(f"run_id={chosen.name}: {chosen} already exists; choose another run_id, "
                              f"or resume={chosen} to finish it")
        return chosen
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        candidate = parent / (stamp if n == 1 else f"{stamp}-{n}")
        if _new_folder(candidate, out_dir):
            return candidate
    raise ConfigError(f"out_dir={out_dir}: could not find a free run folder under {parent}")


def timing_config(cfg) -> TimingConfig:
    t = cfg.timing
    return TimingConfig(t.warmup, t.trials, t.min_trial_s, t.min_iters, t.max_iters)


def suite_sizes(cfg, suite: str, device: str) -> list[int]:
    """The suite's sweep: its own range (and ladder) unless sizes.min/max are set; capped without a GPU."""
    s = cfg.sizes
    own = getattr(s, suite, None)
    lo = s.min if s.min is not None else (own.min if own else "4KiB")
    hi = s.max if s.max is not None else (own.max if own else "1GiB")
    sizes = ladder(lo, hi, s.factor, own.ladder if own else ())
    if device == "cpu" and s.cpu_max is not None and s.max is None:
        cap = parse_size(s.cpu_max, "sizes.cpu_max")
        sizes = [x for x in sizes if x <= cap] or [min(sizes)]
    return sizes


def detect_device(choice: str) -> str:
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA GPU is visible (torch.cuda.is_available() is False)")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(choice)


def local_gpus() -> int:
    """CUDA GPUs visible to this process (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def machine_identity() -> dict:
    """What a resumed run must share with the run it continues: host, GPU model and count."""
    import torch

    count = local_gpus()
    return {"hostname": socket.gethostname(), "gpu_count": count,
            "gpu_name": torch.cuda.get_device_name(0) if count else "cpu"}


def _stored_identity(meta: dict) -> dict:
    system = meta.get("system", {})
    gpus = system.get("gpus") or []
    return {"hostname": system.get("hostname", ""), "gpu_count": len(gpus),
            "gpu_name": gpus[0].get("name", "") if gpus else "cpu"}


def resume_config(folder: str, extra_overrides: list[str]):
    """The typed config of an unfinished run to continue, after every check that it may be.

    Only a run whose meta says it did not finish, made on this machine, resumes; it takes its own
    config, so any other override is refused rather than measuring a different sweep into it.
    """
    from bench.results import ResultsError, read_meta, run_status
    from bench.schema import to_config

    if not (Path(folder) / "meta.json").exists():
        raise ConfigError(f"resume={folder}: not an xferbench run folder (no meta.json)")
    # How the run is shown, and where new runs would go: neither changes what this one measures.
    harmless = {"progress", "out_dir"}
    extra = [a for a in extra_overrides if a.partition("=")[0].lstrip("+~") not in harmless]
    if extra:
        raise ConfigError(f"resume={folder} continues that run with its own settings; drop: {' '.join(extra)}")
    try:
        meta = read_meta(folder)
    except ResultsError as exc:
        raise ConfigError(f"resume={folder}: {exc}") from None
    status = run_status(meta)
    if status == "complete":
        raise ConfigError(f"resume={folder}: that run is complete; nothing to resume")
    if status == "running":
        raise ConfigError(f"resume={folder}: that run is still running (pid {meta.get('pid')})")
    here, there = machine_identity(), _stored_identity(meta)
    differs = [f"{k} {there[k]!r} there, {here[k]!r} here" for k in here if here[k] != there[k]]
    if differs:
        raise ConfigError(f"resume={folder}: made on another machine ({'; '.join(differs)})")
    stored = meta.get("config")
    if not isinstance(stored, dict) or meta.get("schema_version") != 2:
        raise ConfigError(f"resume={folder}: made by an older xferbench (schema {meta.get('schema_version')}); "
                          "start a new run instead")
    for arg in extra_overrides:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "progress":
            stored["progress"] = value.lower() in ("true", "1", "yes")
    return to_config(stored), meta


def config_dict(cfg) -> dict:
    """The typed config as plain JSON-ready data (enums as their strings)."""
    return asdict(cfg)
