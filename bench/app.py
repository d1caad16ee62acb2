"""One xferbench run: check the config, describe the machine, run the suites, write, summarize."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import bench
from bench import ConfigError, config, suites
from bench.results import SCHEMA_VERSION, RunWriter, read_meta, write_json
from bench.runner import run_suite
from bench.summary import format_summary


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def plan(cfg: DictConfig) -> tuple[str, list[tuple], list[str]]:
    """Every check that needs no GPU work: (device, [(suite module, context)], skip lines)."""
    device = config.detect_device(cfg)
    timing = config.timing_config(cfg)
    graph_max = config.parse_size(cfg.timing.graph_max_size, "timing.graph_max_size")
    import torch

    gpus = torch.cuda.device_count() if device == "cuda" else 0
    launches = tuple(cfg.timing.launch) if device == "cuda" else ("eager",)
    external = config.external_rank() is not None
    planned, skipped = [], []
    if not cfg.suites:
        raise ConfigError("suites is empty; choose suite=all or one of: " + ", ".join(suites.SUITES))
    for name in cfg.suites:
        module = suites.get(name)
        if external and not module.DISTRIBUTED:
            skipped.append(f"{name}: skipped under torchrun/Slurm (run it without a launcher, once per node)")
            continue
        ctx = suites.Context(device=device, timing=timing, sizes=config.suite_sizes(cfg, name, device),
                             gpu_count=gpus, launches=launches, graph_max_bytes=graph_max)
        reason = module.check(cfg, ctx)
        if reason:
            skipped.append(f"{name}: skipped, {reason}")
        else:
            planned.append((module, ctx))
    if not planned:
        raise ConfigError("nothing to run here: " + "; ".join(skipped))
    return device, planned, skipped


def _meta(cfg: DictConfig, device: str) -> dict:
    from bench.system import describe

    instance = OmegaConf.to_container(cfg.instance, resolve=True)
    label = config.instance_label(cfg.instance.name)
    catalogued = config.CONF_DIR / "instance" / f"{label}.yaml"
    if cfg.instance.name == "local" and catalogued.exists():  # detected as a catalogued kind: its specs
        instance = {**OmegaConf.to_container(OmegaConf.load(catalogued)), "detected": True}
    instance["label"] = label
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": cfg.run_id,
        "start_time": _now(),
        "end_time": None,
        "status": "running",
        "device": device,
        "instance": instance,
        "system": describe(),
        "tool": {"name": "xferbench", "version": bench.__version__, "git_commit": _git_commit()},
        "argv": sys.argv[1:],
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def run(cfg: DictConfig, run_dir: Path) -> int:
    """The whole run; returns the process exit code."""
    device, planned, skipped = plan(cfg)
    lead = config.external_rank() in (None, 0)  # under torchrun/Slurm only rank 0 reports
    for line in skipped if lead else []:
        print(f"xferbench: {line}", file=sys.stderr)
    if cfg.resume:
        meta = read_meta(run_dir)
        meta["resumed"] = meta.get("resumed", []) + [_now()]
    else:
        meta = _meta(cfg, device)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "meta.json", meta)
    if lead:
        print(f"xferbench: {device}, writing {run_dir}", file=sys.stderr)

    writer = RunWriter(run_dir, meta["run_id"])
    status, code = "complete", 0
    wall = meta.setdefault("suite_wall_s", {})
    try:
        for module, ctx in planned:
            started = time.perf_counter()
            if module.DISTRIBUTED:
                from bench import dist

                dist.run_distributed(module, cfg, ctx, run_dir, meta["run_id"])
                writer = RunWriter(run_dir, meta["run_id"])  # rank 0 wrote to the same folder
            else:
                run_suite(module, cfg, ctx, writer, progress=cfg.progress)
            wall[module.NAME] = round(wall.get(module.NAME, 0) + time.perf_counter() - started, 1)
    except KeyboardInterrupt:
        status, code = "interrupted", 130
        print(f"\nxferbench: interrupted; finished points are in {run_dir} (resume={run_dir})", file=sys.stderr)
    except Exception as exc:
        status, code = "failed", 1
        print(f"xferbench: error: {exc}\nxferbench: finished points are in {run_dir} (resume={run_dir})",
              file=sys.stderr)
    finally:
        meta.update(end_time=_now(), status=status, skipped_suites=skipped)
        write_json(run_dir / "meta.json", meta)
    if lead:
        print(format_summary(RunWriter(run_dir, meta["run_id"]).frame))
    return code
