"""Shared helpers: run the real `xferbench` command in a temporary folder."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def xferbench_cmd(out_dir: Path, *args: str) -> list[str]:
    flags = [a for a in args if a.startswith("-")]  # Hydra takes its flags before the overrides
    return [sys.executable, "-m", "bench", *flags, f"out_dir={out_dir}", "progress=false",
            *(a for a in args if not a.startswith("-"))]


def env() -> dict:
    e = dict(os.environ, PYTHONUNBUFFERED="1")
    e["PYTHONPATH"] = f"{ROOT}{os.pathsep}{e['PYTHONPATH']}" if e.get("PYTHONPATH") else str(ROOT)
    return e


@pytest.fixture
def xferbench(tmp_path):
    """Run xferbench with its results under tmp_path; returns (CompletedProcess, run folders)."""

    def run(*args: str, timeout: float = 300):
        proc = subprocess.run(xferbench_cmd(tmp_path / "results", *args), capture_output=True, text=True,
                              timeout=timeout, cwd=tmp_path, env=env())
        runs = sorted(p.parent for p in (tmp_path / "results").rglob("meta.json"))
        return proc, runs

    return run
