"""The CUDA GPUs this process sees, read from NVML: no torch and no CUDA context.

A plan reads the machine from here, so `xferbench plan=true` costs neither torch's import nor
CUDA's start. NVML numbers every GPU of the host; CUDA_VISIBLE_DEVICES picks and orders those a
CUDA process sees, and is read here as CUDA reads it (torch.cuda._parse_visible_devices: ordinals
or GPU-/MIG- UUIDs, their prefixes too, up to the first that names none; a repeat means none).
CUDA's default order (fastest first) is NVML's (PCI bus order) on a host of one GPU model.
A run asks CUDA itself once it has started CUDA (`cuda_started`): its probes then start nothing.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class Gpu:
    """One GPU as this process's CUDA numbers it."""

    name: str
    bus_id: str = ""                # PCI bus id ('' where not read): finds its NUMA node in sysfs
    free_bytes: int | None = None   # free memory when read (NVML's); None where not read


def _ordinal(text: str) -> int:
    """The number `text` starts with, as strtoul reads it ('1gpu' -> 1); -1 for none."""
    m = re.match(r"[+-]?\d+", text)
    return int(m.group()) if m else -1


def visible(uuids: list[str], env: Mapping[str, str] = os.environ) -> list[int]:
    """Indices into `uuids` (every GPU's or MIG instance's UUID, NVML's) of those CUDA sees, in
    CUDA's order: CUDA_VISIBLE_DEVICES's; without it, every GPU (MIG instances only when named)."""
    var = env.get("CUDA_VISIBLE_DEVICES")
    if var is None:
        return [i for i, u in enumerate(uuids) if not u.startswith("MIG-")]
    gpus = sum(not u.startswith("MIG-") for u in uuids)   # the GPUs come first, then MIG instances
    out: list[int] = []
    for item in var.split(","):
        item = item.strip()
        if item.startswith(("GPU-", "MIG-")):
            matches = [i for i, u in enumerate(uuids) if u.startswith(item)]
            index = matches[0] if len(matches) == 1 else -1
        else:
            index = _ordinal(item)
        if not 0 <= index < (len(uuids) if item.startswith("MIG-") else gpus):
            break
        if index in out:
            return []
        out.append(index)
    return out


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@functools.cache
def nvml_gpus() -> list[Gpu]:
    """The GPUs CUDA would see here, from NVML; [] without NVML, its driver or a GPU. Read once:
    a plan asks for them at its start and again for each check of free memory."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception:   # no NVML library or driver: no GPU to plan for
        return []
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        handles += _mig_instances(nv, handles)
        out = []
        for i in visible([_text(nv.nvmlDeviceGetUUID(h)) for h in handles]):
            h = handles[i]
            try:
                bus = _text(nv.nvmlDeviceGetPciInfo(h).busId)
            except Exception:
                bus = ""
            out.append(Gpu(_text(nv.nvmlDeviceGetName(h)), bus, nv.nvmlDeviceGetMemoryInfo(h).free))
        return out
    finally:
        nv.nvmlShutdown()


def _mig_instances(nv, gpus: list) -> list:
    """The MIG instances of GPUs in MIG mode (CUDA_VISIBLE_DEVICES may name them)."""
    out = []
    for h in gpus:
        try:
            count = nv.nvmlDeviceGetMaxMigDeviceCount(h) if nv.nvmlDeviceGetMigMode(h)[0] else 0
        except Exception:   # no MIG on this GPU or this driver
            continue
        for k in range(count):
            try:
                out.append(nv.nvmlDeviceGetMigDeviceHandleByIndex(h, k))
            except Exception:   # a slot with no instance
                pass
    return out


def cuda_started() -> bool:
    """Whether this process has started CUDA (through torch): asking CUDA then starts nothing."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()
