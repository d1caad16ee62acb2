"""One xferbench run: check the config, make the run folder, describe the machine, run the
suites, write, summarize. SIGINT, SIGTERM and SIGHUP end a run the same way, whenever they come
(bench/interrupts.py: the command's handlers, installed before anything else): before the run
folder, one line and nothing written; after it, finished points stay on disk, meta.json says
interrupted; in the summary of a complete run, it stays complete. Exit 128 + the signal's number."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

import bench
from bench import interrupts, suites
from bench.config.files import INSTANCES
from bench.driver.schema import config_dict
from bench.driver import plan as planning
from bench.driver import rank_group, telemetry
from bench.driver.warm import AnalysisWarmer
from bench.driver.folders import explicit_keys, hold_run, make_run_dir
from bench.driver.launcher import external_rank
from bench.driver.machine import Machine, instance_machine, cuda_gpus, detect_device, instance_mismatch, this_machine
from bench.driver.runner import run_suite
from bench.driver.sweep import Planned, plan_suites, suite_ops
from bench.methods import METHOD
from bench.driver.inventory import Topology, describe, host
from bench.gpus import Gpu, nvml_gpus
from bench.journal import ResultsWriteError, RunWriter, write_json, write_meta
from bench.results import SCHEMA_VERSION, ResultsError, load, point_key, read_meta, run_samples


def _git_commit() -> str:
    # "-dirty" when the tree differs from the commit: a run from uncommitted code must not pass
    # for that commit's (make_expected.py groups reference runs by it).
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _meta(cfg, argv: list[str], machine: Machine, run_dir: Path, system: dict, mismatch: str) -> dict:
    instance = config_dict(cfg)["instance"]
    label = machine.label
    listed = INSTANCES / f"{label}.yaml"
    if cfg.instance.name == "local" and listed.exists():  # detected as a kind conf/instance lists: its specs
        instance = {**OmegaConf.to_container(OmegaConf.load(listed)), "detected": True}
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
        "device": machine.device,
        "instance": instance,
        "system": system,
        "tool": {"name": "xferbench", "version": bench.__version__, "git_commit": _git_commit(), "method": METHOD},
        "argv": list(argv),
        "config": {**config_dict(cfg), "run_id": run_dir.name},
    }


def _open_run(cfg, argv: list[str], machine: Machine, resumed: tuple[str, dict] | None, job: int | None,
              system: dict, mismatch: str) -> tuple[Path, dict]:
    if resumed:
        folder, meta = resumed
        meta.update(status="running", pid=os.getpid(), end_time=None)
        meta["resumed"] = meta.get("resumed", []) + [_now()]
        return Path(folder), meta
    run_dir = make_run_dir(cfg.out_dir, machine.label, cfg.run_id, job)
    hold_run(run_dir)
    return run_dir, _meta(cfg, argv, machine, run_dir, system, mismatch)


def _finished_points(resumed: tuple[str, dict] | None, planned: list[Planned]) -> set:
    """The points a resumed run holds whole (of a point measured in rounds: all its rounds)."""
    if not resumed:
        return set()
    rounds: dict[tuple, set[int]] = {}
    for row in run_samples(resumed[0]).to_dict("records"):
        rounds.setdefault(point_key(row), set()).add(int(row["round"]))
    return {key for p in planned for point in p.points() if (key := point_key(point)) in rounds
            and p.suite.complete(point, p.settings, frozenset(rounds[key]))}


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


def _measure(planned: Planned, run_dir: Path, run_id: str, writer: RunWriter, progress: bool,
             ready: rank_group.World | None = None, ahead: rank_group.Ahead | None = None) -> RunWriter:
    """One suite's sweep into the run: in this process, or in its ranks (rank 0 writes, into the
    same folder: the writer is opened anew after them; `ready`: its ranks, started already;
    `ahead`: the next suite's, which this one starts when it reaches its large points)."""
    if planned.distribution() is not None:
        rank_group.run_distributed(planned, run_dir, run_id, progress, ready)
        return RunWriter(run_dir, run_id)
    state = planned.start()
    try:
        run_suite(planned, state, writer, progress=progress, stopped=interrupts.check,
                  before=ahead.before if ahead is not None else None)
    finally:
        planned.suite.finish(state)
    return writer


@dataclass
class _Here:
    """This machine as the run reads it, and the suites planned on it."""
    device: str
    visible: list[Gpu]
    system: dict
    machine: Machine
    planned: list[Planned]
    skipped: list[str]


def _plan_elsewhere(cfg) -> int:
    """A machine of conf/instance that is not this one: plan for it, from its entry."""
    machine = instance_machine(cfg.instance)
    planned, skipped = plan_suites(cfg, machine)
    print(planning.format_plan(planning.estimate(cfg, planned, machine, skipped)))
    return 0


def _this_machine(cfg, argv: list[str], resumed: tuple[str, dict] | None, visible: list[Gpu] | None) -> _Here:
    """The device, the machine's description, and the suites of the config it runs."""
    with Topology() as topology:   # nvidia-smi runs meanwhile: while torch loads and CUDA starts
        if visible is None:
            visible = cuda_gpus()
        device = detect_device(cfg.device, visible)
        system = host(bool(visible), topology) if cfg.plan else describe(topology)
    # The settings the user named: on resume, those of the command that started the run.
    explicit = explicit_keys(resumed[1].get("argv", []) if resumed else argv)
    machine = this_machine(cfg.instance, device, system, visible)
    planned, skipped = plan_suites(cfg, machine, explicit)
    if device == "cuda" and any(p.distribution() is not None for p in planned):
        # NCCL's support for mixing graph and eager launches slows graph replays of collectives
        # (a 16 MiB all_reduce 96 µs against 73 µs on 2x H200). Without it NCCL asks that no eager
        # op meet a replay still running: the timing core waits for every replay before the next
        # barrier or check. Set before any communicator exists; a user's own value wins.
        os.environ.setdefault("NCCL_GRAPH_MIXING_SUPPORT", "0")
    return _Here(device, visible, system, machine, planned, skipped)


def _still_open(resumed: tuple[str, dict]) -> tuple[str, dict] | None:
    """One writer per run: the lock first, then the run as it is now (another resume may have
    measured, or finished, it since its meta.json was read); None, said, when it is finished."""
    hold_run(Path(resumed[0]))
    resumed = (resumed[0], read_meta(resumed[0]))
    if resumed[1].get("status") == "complete":
        print(f"xferbench: {resumed[0]} was finished by another xferbench meanwhile: nothing left to measure",
              file=sys.stderr)
        return None
    return resumed


def _mismatch(cfg, here: _Here, resumed: tuple[str, dict] | None) -> str:
    """How the GPUs seen differ from the instance's entry ('' on resume: said at the start), warned."""
    names = [g.name for g in here.visible] if here.device == "cuda" else []
    mismatch = "" if resumed else instance_mismatch(cfg.instance, names)
    if mismatch:
        print(f"xferbench: warning: {mismatch}", file=sys.stderr)
    return mismatch


def _start_folder(run_dir: Path, meta: dict, here: _Here, estimate: planning.Plan, finished: int,
                  resumed: bool) -> bool:
    """What is skipped and what will run, said; meta.json written: False, said why, when it cannot be."""
    for line in here.skipped:
        print(f"xferbench: {line}", file=sys.stderr)
    print(planning.start_line(estimate), file=sys.stderr)
    try:
        write_json(run_dir / "meta.json", meta)
    except OSError as exc:
        failed = ResultsWriteError(run_dir, exc, finished)
        print(f"xferbench: error: {failed if resumed else failed.sentence(fresh=True)}", file=sys.stderr)
        return False
    print(f"xferbench: {here.device}, writing {run_dir}", file=sys.stderr)
    return True


def _run_suites(here: _Here, run_dir: Path, meta: dict, progress: bool,
                warmer: AnalysisWarmer) -> tuple[str, int, ResultsWriteError | None]:
    """The planned suites measured into the run, a signal ending it at any moment, then meta.json
    settled and what became of it said: the run's status, exit code and failed write; `warmer`
    loads the summary's analysis while a distributed suite's ranks measure."""
    status, code, failed_write = "complete", 0, None
    wall = meta.setdefault("suite_wall_s", {})
    sampler = telemetry.Sampler()   # what else ran on the GPUs, their links and clocks, meanwhile
    try:
        sampler.start()
        with interrupts.interruptible():   # at once: each point is written whole (deferred) or not at all
            writer = RunWriter(run_dir, meta["run_id"])
            ahead = None   # the next suite's ranks, started while this one measures
            try:
                for p, later in zip(here.planned, [*here.planned[1:], None]):
                    started = time.perf_counter()
                    ready = ahead.take() if ahead is not None else None
                    ahead = rank_group.Ahead(later, run_dir, progress) if later and p.distribution() is None else None
                    warmer.start_for(p.distribution())
                    writer = _measure(p, run_dir, meta["run_id"], writer, progress, ready, ahead)
                    wall[p.suite.name] = round(wall.get(p.suite.name, 0) + time.perf_counter() - started, 1)
                    interrupts.check()   # one swallowed where it landed (a DataLoader iterator's __del__ ignores any)
            finally:
                if ahead is not None:
                    ahead.stop()
    except KeyboardInterrupt:
        stop = interrupts.handled()
        status, code = "interrupted", stop.code
        print(f"\nxferbench: interrupted ({stop.name}); finished points are in {run_dir} (resume={run_dir})",
              file=sys.stderr)
    except ResultsWriteError as exc:  # said once meta.json is settled: the line tells what became of it
        status, code, failed_write = "failed", 1, exc
    except Exception as exc:
        # What failed, failed because the signal stopped it: Ctrl-C reaches DataLoader workers and
        # ranks too, and one that exits first can fail the run before this process raises.
        if interrupts.received() is not None:
            stop = interrupts.handled()
            status, code = "interrupted", stop.code
            print(f"\nxferbench: interrupted ({stop.name}: {exc}); finished points are in {run_dir} "
                  f"(resume={run_dir})", file=sys.stderr)
        else:
            status, code = "failed", 1
            print(f"xferbench: error: {exc}\nxferbench: finished points are in {run_dir} (resume={run_dir})",
                  file=sys.stderr)
    finally:   # outside the interruptible block: meta.json settled whatever comes meanwhile
        meta.update(end_time=_now(), status=status, skipped_suites=here.skipped,
                    telemetry=telemetry.summarize(sampler.stop()))
        meta_note = _save_meta(run_dir, meta)
    if failed_write is not None:
        print(f"xferbench: error: {failed_write.sentence(meta_note)}", file=sys.stderr)
    elif meta_note:
        print(f"xferbench: {meta_note}", file=sys.stderr)
    return status, code, failed_write


def _summarize(run_dir: Path, meta: dict, status: str, written: bool, planned: list[Planned],
               warmer: AnalysisWarmer) -> None:
    """The run's summary and verdicts; `written`: whether samples.parquet can be made whole."""
    warmer.join()
    from bench.analysis.tables import format_summary   # loaded once measuring is over (or while ranks measure: warm.py)

    catalog = {suite.name: suite for suite in suites.all()}
    print(format_summary(_final_rows(run_dir, meta["run_id"], status, write=written), catalog))
    interrupts.check()
    _verdicts(run_dir, meta, catalog, suite_ops(planned))


def run(cfg, argv: list[str], resumed: tuple[str, dict] | None = None, job: int | None = None) -> int:
    """The whole run; returns the process exit code. `argv`: the user's arguments (recorded, and
    the settings they name are the ones a suite says it cannot honour)."""
    try:
        interrupts.check()   # one that came while the config was composed: before torch's seconds of import
        visible = nvml_gpus() if cfg.plan else None   # a plan imports no torch and starts no CUDA
        if visible is not None and cfg.instance.gpu_count not in (None, len(visible)):
            return _plan_elsewhere(cfg)
        here = _this_machine(cfg, argv, resumed, visible)
        # Under torchrun/Slurm only rank 0 makes the folder, writes and reports; the others measure.
        if external_rank() not in (None, 0):
            for p in here.planned:
                rank_group.run_distributed(p, None, "", False)
            return 0
        if resumed and not cfg.plan:
            resumed = _still_open(resumed)
            if resumed is None:
                return 0
        mismatch = _mismatch(cfg, here, resumed)
        finished = _finished_points(resumed, here.planned)
        estimate = planning.estimate(cfg, here.planned, here.machine, here.skipped, finished)
        if cfg.plan:
            print(planning.format_plan(estimate))
            return 0
        interrupts.check()   # the last before the folder: none comes between it and its meta.json
        run_dir, meta = _open_run(cfg, argv, here.machine, resumed, job, here.system, mismatch)
        if not _start_folder(run_dir, meta, here, estimate, len(finished), bool(resumed)):
            return 1
    except KeyboardInterrupt:
        return _stopped_before(resumed)
    warmer = AnalysisWarmer()
    status, code, failed_write = _run_suites(here, run_dir, meta, cfg.progress, warmer)
    return _close(run_dir, meta, (status, code, failed_write), here.planned, warmer)


def _stopped_before(resumed: tuple[str, dict] | None) -> int:
    """An interrupt before the run's folder was made (or, resuming, before it was touched): said, its exit code."""
    stop = interrupts.handled()
    where = f"{resumed[0]} is as it was (resume={resumed[0]} finishes it)" if resumed else "no run folder was made"
    print(f"xferbench: interrupted ({stop.name}); {where}", file=sys.stderr)
    return stop.code


def _close(run_dir: Path, meta: dict, ended: tuple[str, int, ResultsWriteError | None], planned: list[Planned],
           warmer: AnalysisWarmer) -> int:
    """The summary and verdicts of a run that `ended` (status, exit code, failed write), an
    interrupt cutting them short; the exit code."""
    status, code, failed_write = ended
    try:
        _summarize(run_dir, meta, status, failed_write is None, planned, warmer)
        interrupts.check()   # one that came while the verdicts were made
    except KeyboardInterrupt:
        stop = interrupts.handled()
        if code == 0:   # every point measured, and meta.json says so: only the summary is cut short
            print(f"\nxferbench: interrupted ({stop.name}) in the summary; the run is complete: "
                  f"xferbench-summary {run_dir} shows it", file=sys.stderr)
            return stop.code
    return code


def _verdicts(run_dir: Path, meta: dict, catalog: dict, planned: set[tuple[str, str]]) -> None:
    """Is this normal? The run judged as xferbench-doctor judges it, printed and kept in
    verdicts.json; the run's exit status stays the measurement's (the doctor's is the verdict's).
    A run that ended early has said why in one line: verdicts.json not written is not another.
    A complete run also keeps its point levels (levels.parquet), which xferbench-doctor --fleet
    reads in place of its thousands of rows."""
    from bench.analysis import fleet_levels
    from bench.analysis.judge import judge   # loaded once measuring is over (or while ranks measure: warm.py)

    try:
        rows = load(run_dir, warn=lambda line: None)
    except ResultsError:
        return  # nothing measured: the summary has said so
    judgement = judge(rows, meta, catalog, run_dir=run_dir, planned=planned)
    print("\n".join(judgement.lines()))
    try:
        write_json(run_dir / "verdicts.json", judgement.to_json())
    except OSError as exc:
        if meta["status"] == "complete":
            print(f"xferbench: verdicts.json not written ({_reason(exc)})", file=sys.stderr)
    if meta["status"] == "complete":
        fleet_levels.keep(run_dir, rows, catalog)
