"""Several nodes through the launchers people use, on the CPU: two torchrun agents joined by c10d
rendezvous, srun's tasks (their SLURM_* variables set by hand), and a Slurm batch script that
runs xferbench without srun. Real processes over gloo; only global rank 0 writes. And several
world sizes in one run, drawn against the GPU count."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench import ConfigError
from bench.analysis.figures.style import Canvas, with_bandwidth
from bench.analysis.runs import palette, with_series
from bench.cli.common import catalog
from bench.driver.launcher import Layout, device_index, launcher_layout
from bench.driver.rank_group import _free_port
from bench.results import load, usable_rows
from bench.suites.collectives.points import transport_env
from bench.suites.collectives.reading import _per_world, scaling_figure
from conftest import env, xferbench_cmd

TINY = ("suite=collectives", "collectives.ops=[all_reduce]", "sizes.max=64B", "timing.trials=2")


def _start_all(commands: list[list[str]], envs: list[dict], cwd) -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen(c, env=e, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c, e in zip(commands, envs)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def _one_run_by_rank_0(tmp_path, procs) -> pd.DataFrame:
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    runs = sorted(p.parent for p in (tmp_path / "results").rglob("meta.json"))
    assert len(runs) == 1
    writers = [p for p in procs if "writing" in p.stderr]
    assert len(writers) == 1   # the process holding global rank 0 made the folder and reported
    assert "xferbench: 2 points (collectives 2), about" in writers[0].stderr
    return load(runs)


def test_two_torchrun_agents_are_two_nodes(tmp_path):
    port = _free_port()
    commands = [[sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                 "--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{port}", "-m",
                 *xferbench_cmd(tmp_path / "results", *TINY)[2:]] for _ in range(2)]
    df = _one_run_by_rank_0(tmp_path, _start_all(commands, [env(), env()], tmp_path))
    assert set(df.nnodes) == {2} and set(df.world_size) == {2} and df.verified.all()


def test_srun_tasks_are_ranks_and_slurm_says_how_many_nodes(tmp_path):
    port = _free_port()
    tasks = [{**env(), "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(r), "SLURM_LOCALID": "0",
              "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_NODEID": str(r), "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": str(port)} for r in range(2)]
    df = _one_run_by_rank_0(tmp_path, _start_all([xferbench_cmd(tmp_path / "results", *TINY)] * 2, tasks, tmp_path))
    assert set(df.nnodes) == {2} and set(df.world_size) == {2} and df.verified.all()


def test_a_batch_script_without_srun_runs_on_its_own(tmp_path):
    # sbatch's own shell has SLURM_PROCID=0 and SLURM_NTASKS but no step: no ranks are coming.
    batch = {**env(), "SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NNODES": "2"}
    proc = subprocess.run(xferbench_cmd(tmp_path / "results", *TINY), env=batch, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    df = load(tmp_path / "results")
    assert set(df.nnodes) == {1} and set(df.world_size) == {2}   # its own two gloo ranks


@pytest.mark.parametrize("variables, layout", [
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "4"},
     Layout(3, 8, 1, 4)),
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"}, Layout(3, 8, 3, 2)),
    ({"SLURM_PROCID": "9", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "16", "SLURM_NNODES": "2", "SLURM_LOCALID": "1"},
     Layout(9, 16, 1, 2)),
    # a step narrower than the job: the step's own counts
    ({"SLURM_PROCID": "1", "SLURM_STEP_ID": "2", "SLURM_NTASKS": "16", "SLURM_NNODES": "4",
      "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_LOCALID": "0"}, Layout(1, 2, 0, 2)),
    # torchrun started by srun, one agent a node: torchrun's ranks, not srun's tasks
    ({"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "RANK": "9",
      "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "GROUP_WORLD_SIZE": "2"}, Layout(9, 16, 1, 2)),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, None),   # the batch script itself
    ({}, None),
])
def test_launcher_layout(variables, layout):
    assert launcher_layout(variables) == layout


def test_each_rank_takes_its_gpu_or_the_only_one_it_sees():
    assert device_index(3, 8) == 3
    assert device_index(3, 1) == 0   # srun --gpus-per-task=1, or one torchrun agent per GPU
    with pytest.raises(ConfigError, match="local rank 2 but only 2 GPU"):
        device_index(2, 2)


def test_sockets_between_hosts_leave_the_interface_to_nccl():
    assert transport_env("socket", nnodes=1)["NCCL_SOCKET_IFNAME"] == "lo"
    remote = transport_env("socket", nnodes=2)
    assert "NCCL_SOCKET_IFNAME" not in remote and remote["NCCL_NET"] == "Socket"
    assert transport_env("default", nnodes=1) == {}


def test_world_sizes_of_one_run_are_drawn_against_gpu_count(xferbench, tmp_path):
    proc, runs = xferbench("suite=collectives", "collectives.nproc=[1,2]", "collectives.ops=[all_reduce,sendrecv]",
                           "sizes.max=4KiB", "timing.trials=2", "timing.min_trial_s=0.002")
    assert proc.returncode == 0, proc.stderr
    frame = with_series(load(runs))
    curves = with_bandwidth(usable_rows(frame), catalog())
    all_reduce = curves[(curves.op == "all_reduce") & (curves.launch == "eager")]
    busbw = _per_world(all_reduce, "max", "bandwidth_gbps")
    assert busbw.index.tolist() == [1, 2] and busbw[1] == 0 and busbw[2] > 0   # one rank moves nothing
    assert _per_world(all_reduce, "min", "time_s").index.tolist() == [1, 2]
    canvas = Canvas(tmp_path / "fig", ["png"], palette(frame), catalog())
    assert [p.name for p in scaling_figure(frame, canvas)] == ["scaling_collectives.png"]
    one_world = frame[frame.world_size == 2]
    none = Canvas(tmp_path / "none", ["png"], palette(one_world), catalog())
    assert scaling_figure(one_world, none) == []


FAKE_SRUN = """#!/bin/bash
# srun's part in a test: SLURM_NTASKS tasks, one a node, with the variables srun gives each task
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((i = 0; i < SLURM_NTASKS; i++)); do
  SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_NODEID=$i SLURM_STEP_ID=0 "$@" & pids+=($!)
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; exit $rc
"""


def test_the_example_sbatch_script_runs_its_tasks_as_one_run(tmp_path):
    # The script as sbatch would run it, with srun and scontrol played by two small scripts.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", "#!/bin/sh\necho localhost\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = Path(__file__).resolve().parent.parent / "scripts" / "slurm" / "xferbench.sbatch"
    job = {**env(), "PATH": f"{bin_dir}:{env()['PATH']}", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-2]",
           "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "MASTER_PORT": str(_free_port()),
           "XFERBENCH_OUT": str(tmp_path / "results")}
    proc = subprocess.run(["bash", str(script), *TINY[1:]], env=job, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    df = _one_run_by_rank_0(tmp_path, [proc])
    assert proc.stderr.count(", writing ") == 1   # both tasks' output is here: one of them wrote
    assert set(df.nnodes) == {2} and set(df.world_size) == {2} and set(df.suite) == {"collectives"}
