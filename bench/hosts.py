"""Which host a run came from: a stable identity that names no secret.

The lent machines are virtual (every one's hostname reads "vm"), so the hostname tells hosts
apart no better than the instance does. A GPU's UUID is its own and stays with it from one
machine started on it to the next, so a GPU machine's host is the set of its GPUs' UUIDs; a
machine without GPUs is its /etc/machine-id. Either is hashed (SHA-256, first 12 hex digits):
the identity joins runs of one host without printing the UUIDs or the machine id it comes from.
Runs recorded before the identity was written get it from their recorded GPUs; a CPU run of that
age has none ("").
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

MACHINE_ID = Path("/etc/machine-id")
DIGITS = 12


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGITS]


def _machine_id() -> str:
    try:
        return MACHINE_ID.read_text().strip()
    except OSError:
        return ""


def host_of_gpus(gpus: list[Mapping[str, Any]]) -> str:
    """The identity of the host holding these GPUs (meta.json's system.gpus), '' without UUIDs."""
    uuids = sorted(str(g["uuid"]) for g in gpus if g.get("uuid"))
    return _digest("\n".join(uuids)) if uuids else ""


def this_host(gpus: list[Mapping[str, Any]]) -> str:
    """This machine's identity, for meta.json: its GPUs', else its machine id's, else ''."""
    if found := host_of_gpus(gpus):
        return found
    machine = _machine_id()
    return _digest(machine) if machine else ""


def host_id(system: Mapping[str, Any]) -> str:
    """A recorded run's host (meta.json's `system`): the identity it recorded, else its GPUs'."""
    return str(system.get("host_id") or host_of_gpus(system.get("gpus") or []))
