"""One xferbench run: check the config, make the run folder, describe the machine, run the
suites, write, summarize. SIGINT, SIGTERM and SIGHUP end a run the same way: finished points
stay on disk, meta.json says interrupted, exit 128 + the signal's number."""
from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import bench
from bench import ConfigError, config, suites
from bench import plan as planning
from bench.results import (SCHEMA_VERSION, ResultsWriteError, RunWriter, point_key, run_samples, write_json,
                           write_meta)
from bench.runner import run_suite
from bench.schema import Config
from bench.summary import format_summary


class Interrupted(KeyboardInterrupt):
    """A signal that ends the run as Ctrl-C does; `signum` sets the exit code."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, _frame) -> None:
    raise Interrupted(signum)


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def plan(cfg: Config, explicit: frozenset[str] = frozenset()) -> tuple[str, list[tuple], list[str]]:
    """Every check that needs no GPU work: (device, [(suite module, context)], skip lines);
    `explicit`: the settings the user named (config.explicit_keys)."""
    device = config.detect_device(cfg.device)
    timing = config.timing_config(cfg)
    from bench.sizes import parse_size

    graph_max = parse_size(cfg.timing.graph_max_size, "timing.graph_max_size")
    import torch

    gpus = torch.cuda.device_count() if device == "cuda" else 0
    launches = tuple(str(x) for x in cfg.timing.launch) if device == "cuda" else ("eager",)
    external = config.external_rank() is not None
    planned, skipped = [], []
    for name in cfg.suites:
        module = suites.get(str(name))
        if external and not module.DISTRIBUTED:
            skipped.append(f"{name}: skipped under torchrun/Slurm (run it without a launcher, once per node)")
            continue
        ctx = suites.Context(device=device, timing=timing, sizes=config.suite_sizes(cfg, str(name), device),
                             gpu_count=gpus, launches=launches, graph_max_bytes=graph_max, explicit=explicit)
        reason = module.check(cfg, ctx)
        if reason:
            skipped.append(f"{name}: skipped, {reason}")
        else:
            planned.append((module, ctx))
    if not planned:
        raise ConfigError("nothing to run here: " + "; ".join(skipped))
    return device, planned, skipped


def _meta(cfg: Config, device: str, run_dir: Path, system: dict, mismatch: str) -> dict:
    from omegaconf import OmegaConf

    instance = config.config_dict(cfg)["instance"]
    label = config.instance_label(cfg.instance.name)
    catalogued = config.CONF_DIR / "instance" / f"{label}.yaml"
    if cfg.instance.name == "local" and catalogued.exists():  # detected as a catalogued kind: its specs
        instance = {**OmegaConf.to_container(OmegaConf.load(catalogued)), "detected": True}
    instance["label"] = label
    if mismatch:
        instance["mismatch"] = mismatch
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_dir.name,
        "start_time": _now(),
        "end_time": None,
        "status": "running",
        "pid": os.getpid(),
        "device": device,
        "instance": instance,
        "system": system,
        "tool": {"name": "xferbench", "version": bench.__version__, "git_commit": _git_commit()},
        "argv": sys.argv[1:],
        "config": {**config.config_dict(cfg), "run_id": run_dir.name},
    }


def _open_run(cfg: Config, device: str, resumed: tuple[str, dict] | None, job: int | None,
              system: dict, mismatch: str) -> tuple[Path, dict]:
    if resumed:
        folder, meta = resumed
        meta.update(status="running", pid=os.getpid(), end_time=None)
        meta["resumed"] = meta.get("resumed", []) + [_now()]
        return Path(folder), meta
    run_dir = config.make_run_dir(cfg.out_dir, config.instance_label(cfg.instance.name), cfg.run_id, job)
    return run_dir, _meta(cfg, device, run_dir, system, mismatch)


def _machine(cfg: Config, device: str, system: dict) -> planning.Machine:
    """This machine as the planner sees it: its label, GPUs, links and, under a launcher, its ranks."""
    from bench.dist import launcher_layout

    label = config.instance_label(cfg.instance.name)
    first = (system.get("gpus") or [{}])[0]
    model = re.fullmatch(r"(.+)-x\d+", label)
    return planning.Machine(label, device, config.local_gpus() if device == "cuda" else 0, system.get("links") or {},
                            cfg.instance.pcie_gen or first.get("pcie_gen_max"),
                            cfg.instance.pcie_width or first.get("pcie_width_max"),
                            cfg.instance.nvlink_gbps_per_gpu, model.group(1) if model else "",
                            launcher_layout(os.environ))


def _gpu_names(device: str) -> list[str]:
    """The GPUs this run measures on, by name (none when it runs on the CPU)."""
    import torch

    return [torch.cuda.get_device_name(i) for i in range(config.local_gpus())] if device == "cuda" else []


def _finished_points(resumed: tuple[str, dict] | None) -> set:
    return {point_key(r) for r in run_samples(resumed[0]).to_dict("records")} if resumed else set()


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _save_meta(run_dir: Path, meta: dict) -> str:
    """meta.json's final state; '' when written whole, else what became of it, for the user."""
    try:
        if write_meta(run_dir, meta):
            return ""
        return f"meta.json marked {meta['status']} in place"
    except OSError as exc:
        return f"meta.json not updated ({_reason(exc)}): it says running, which loads as interrupted"


def _final_rows(run_dir: Path, run_id: str, status: str, write: bool):
    """Every writer's rows (the ranks' too), with samples.parquet made whole from them unless
    writing is what failed; when it cannot be written, the journal is read as it is."""
    if write:
        try:
            writer = RunWriter(run_dir, run_id)
            writer.close()
            return writer.frame
        except ResultsWriteError as exc:
            if status == "complete":  # otherwise the run's own message has said enough
                print(f"xferbench: samples.parquet not written ({exc.reason}); samples.csv holds every row",
                      file=sys.stderr)
    return run_samples(run_dir)


def run(cfg: Config, resumed: tuple[str, dict] | None = None, job: int | None = None) -> int:
    """The whole run; returns the process exit code."""
    if cfg.plan and cfg.instance.gpu_count is not None and cfg.instance.gpu_count != config.local_gpus():
        # A catalogued machine that is not this one: plan for it, from its catalogue entry.
        print(planning.format_plan(planning.plan_machine(cfg, planning.catalogue_machine(cfg.instance))))
        return 0
    # The settings the user named: on resume, those of the command that started the run.
    explicit = config.explicit_keys(resumed[1].get("argv", []) if resumed else sys.argv[1:])
    device, planned, skipped = plan(cfg, explicit)
    if device == "cuda" and any(module.DISTRIBUTED for module, _ in planned):
        # NCCL's support for mixing graph and eager launches slows graph replays of collectives
        # (a 16 MiB all_reduce 96 µs against 73 µs on 2x H200). Without it NCCL asks that no eager
        # op meet a replay still running: the timing core waits for every replay before the next
        # barrier or check. Set before any communicator exists; a user's own value wins.
        os.environ.setdefault("NCCL_GRAPH_MIXING_SUPPORT", "0")
    # Under torchrun/Slurm only rank 0 makes the folder, writes and reports; the others measure.
    lead = config.external_rank() in (None, 0)
    if not lead:
        for module, ctx in planned:
            from bench import dist

            dist.run_distributed(module, cfg, ctx, None, "")
        return 0

    from bench.system import describe

    system = describe()
    mismatch = "" if resumed else config.instance_mismatch(cfg.instance, _gpu_names(device))
    if mismatch:
        print(f"xferbench: warning: {mismatch}", file=sys.stderr)
    for _, ctx in planned:
        ctx.extra["links"] = system["links"]  # P2P picks one pair per link class
    finished = _finished_points(resumed)
    estimate = planning.estimate(cfg, planned, _machine(cfg, device, system), skipped, finished)
    if cfg.plan:
        print(planning.format_plan(estimate))
        return 0
    run_dir, meta = _open_run(cfg, device, resumed, job, system, mismatch)
    for line in skipped:
        print(f"xferbench: {line}", file=sys.stderr)
    print(planning.start_line(estimate), file=sys.stderr)
    try:
        write_json(run_dir / "meta.json", meta)
    except OSError as exc:
        failed = ResultsWriteError(run_dir, exc, len(finished))
        print(f"xferbench: error: {failed if resumed else failed.sentence(fresh=True)}", file=sys.stderr)
        return 1
    print(f"xferbench: {device}, writing {run_dir}", file=sys.stderr)
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    status, code, failed_write = "complete", 0, None
    wall = meta.setdefault("suite_wall_s", {})
    try:
        writer = RunWriter(run_dir, meta["run_id"])
        for module, ctx in planned:
            started = time.perf_counter()
            if module.DISTRIBUTED:
                from bench import dist

                dist.run_distributed(module, cfg, ctx, run_dir, meta["run_id"])
                writer = RunWriter(run_dir, meta["run_id"])  # rank 0 wrote to the same folder
            else:
                run_suite(module, cfg, ctx, writer, progress=cfg.progress)
            wall[module.NAME] = round(wall.get(module.NAME, 0) + time.perf_counter() - started, 1)
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        status, code = "interrupted", 128 + signum
        print(f"\nxferbench: interrupted ({signal.Signals(signum).name}); finished points are in {run_dir} "
              f"(resume={run_dir})", file=sys.stderr)
    except ResultsWriteError as exc:  # said once meta.json is settled: the line tells what became of it
        status, code, failed_write = "failed", 1, exc
    except Exception as exc:
        status, code = "failed", 1
        print(f"xferbench: error: {exc}\nxferbench: finished points are in {run_dir} (resume={run_dir})",
              file=sys.stderr)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        meta.update(end_time=_now(), status=status, skipped_suites=skipped)
        meta_note = _save_meta(run_dir, meta)
    if failed_write is not None:
        print(f"xferbench: error: {failed_write.sentence(meta_note)}", file=sys.stderr)
    elif meta_note:
        print(f"xferbench: {meta_note}", file=sys.stderr)
    print(format_summary(_final_rows(run_dir, meta["run_id"], status, write=failed_write is None)))
    return code
