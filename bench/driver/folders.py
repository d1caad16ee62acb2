"""Run folders: made exclusively at <out_dir>/<instance>/<run_id>, so two runs never share one; and
the checks before an unfinished run is resumed in its own folder."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from bench import ConfigError
from bench.driver.machine import identity
from bench.results import SCHEMA_VERSION, ResultsError, read_meta, run_status


_held: list[int] = []   # this process's locks: open while it lives, released by the kernel when it ends


def hold_run(run_dir: Path) -> None:
    """Take the run folder's lock for the rest of this process: one writer per run. ConfigError
    when another process holds it (a resume started beside another, or beside the run itself).
    An OS lock on the folder itself (flock), not a pid file: taken or refused atomically, gone
    with its holder however it ends, and no file written (a full disk still takes it)."""
    import fcntl   # POSIX: the runs' machines are Linux

    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            pid = read_meta(run_dir).get("pid")
        except ResultsError:
            pid = None
        raise ConfigError(f"{run_dir}: another xferbench is writing this run{f' (pid {pid})' if pid else ''}; "
                          "wait for it to end, then resume it if it did not finish") from None
    _held.append(fd)


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
    out_dir = os.path.expanduser(out_dir)   # out_dir=~/x quoted past the shell: the home folder, not ./~
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


def explicit_keys(args: list[str]) -> frozenset[str]:
    """The settings named in command-line arguments (`key=value`; `~key` deletes, so it names none)."""
    return frozenset(a.partition("=")[0].lstrip("+") for a in args
                     if "=" in a and not a.startswith(("-", "~")))


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
    from bench.driver.schema import to_config   # the schema imports every suite (and torch): only a resume needs it

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
    here, there = identity(), _stored_identity(meta)
    differs = [f"{k} {there[k]!r} there, {here[k]!r} here" for k in here if here[k] != there[k]]
    if differs:
        raise ConfigError(f"resume={folder}: made on another machine ({'; '.join(differs)})")
    stored = meta.get("config")
    if not isinstance(stored, dict) or meta.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(f"resume={folder}: made by an older xferbench (schema {meta.get('schema_version')}); "
                          "start a new run instead")
    for arg in extra_overrides:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "progress":
            stored["progress"] = value.lower() in ("true", "1", "yes")
    return to_config(stored), meta
