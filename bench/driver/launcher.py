"""Ranks someone else started: where this process sits when torchrun or srun launched it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from bench import ConfigError


@dataclass(frozen=True)
class Layout:
    """Where this process sits among ranks an external launcher started."""

    rank: int
    world_size: int
    local_rank: int
    nnodes: int


def launcher_layout(env: Mapping[str, str]) -> Layout | None:
    """This process's place under torchrun or srun, from their variables; None without a launcher.

    torchrun's variables win where both are set (torchrun started by srun, one agent a node). A
    Slurm batch script itself has SLURM_PROCID=0 and SLURM_NTASKS but is no task of a step: only
    srun sets SLURM_STEP_ID, so a plain `xferbench` in the script runs on its own instead of
    waiting for ranks that never come.
    """
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        per_node = int(env.get("LOCAL_WORLD_SIZE", world))
        nnodes = int(env.get("GROUP_WORLD_SIZE", 0)) or max(1, world // max(1, per_node))  # torchrun: one group a node
        return Layout(int(env["RANK"]), world, int(env.get("LOCAL_RANK", 0)), nnodes)
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        world = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", 1)))
        nnodes = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", 1)))
        return Layout(int(env["SLURM_PROCID"]), world, int(env.get("SLURM_LOCALID", 0)), nnodes)
    return None


def device_index(local_rank: int, visible: int) -> int:
    """The GPU a rank uses: its local rank, or the only GPU it sees (srun --gpus-per-task=1 and
    one torchrun agent per GPU hide the others through CUDA_VISIBLE_DEVICES)."""
    if visible == 1:
        return 0
    if local_rank >= visible:
        raise ConfigError(f"local rank {local_rank} but only {visible} GPU(s) visible to it; "
                          "start one rank per GPU, or give each rank one GPU")
    return local_rank


def external_rank() -> int | None:
    """This process's global rank when torchrun or srun started it, else None."""
    layout = launcher_layout(os.environ)
    return layout.rank if layout else None
