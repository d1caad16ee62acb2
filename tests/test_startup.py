"""Start-up: `xferbench plan=true` imports no torch (so starts no CUDA) and reads the GPUs from
NVML, as CUDA_VISIBLE_DEVICES picks them. Run as the command runs, in a fresh interpreter in
which `import torch` fails; GPUs come from a stand-in NVML (tests/data/nvml: pynvml, nvidia-smi,
an NCCL library file and a Triton package a plan finds but never loads). How long start-up
takes is scripts/bench_startup.py's to measure, not a test's."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.gpus import visible
from conftest import ROOT, env

STAND_IN = ROOT / "tests" / "data" / "nvml"
# The command's own entry, in an interpreter where importing these modules fails.
WITHOUT = "import sys; sys.modules.update(dict.fromkeys({!r})); from bench.cli.run import main; main()"


def _plan(tmp_path, *args: str, gpus: bool = False, without: tuple[str, ...] = ("torch",),
          **extra: str) -> subprocess.CompletedProcess:
    e = env()
    e.pop("CUDA_VISIBLE_DEVICES", None)
    if gpus:
        e["PYTHONPATH"] = f"{e['PYTHONPATH']}{os.pathsep}{STAND_IN}"
        e["PATH"] = f"{STAND_IN}{os.pathsep}{e['PATH']}"
    e.update(extra)
    return subprocess.run([sys.executable, "-c", WITHOUT.format(without), "plan=true", f"out_dir={tmp_path}", *args],
                          capture_output=True, text=True, cwd=tmp_path, env=e, timeout=120)


def test_plan_imports_no_torch(tmp_path):
    # Without a GPU nor a reference run of its kind, it reads no rows either: no pandas, numpy or pyarrow.
    proc = _plan(tmp_path, without=("torch", "pandas", "numpy", "pyarrow", "matplotlib", "seaborn"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("xferbench plan for cpu: no GPU (cpu); nothing measured")
    assert "copy" in proc.stdout and "total" in proc.stdout
    assert not list(tmp_path.iterdir())   # a plan makes no run folder


def test_plan_of_gpus_reads_nvml_and_imports_no_torch(tmp_path):
    proc = _plan(tmp_path, gpus=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("xferbench plan for h100-x2: 2 GPU(s) (NV18); nothing measured")
    rows = {line.split()[0] for line in proc.stdout.splitlines()[2:]}
    assert {"copy", "p2p", "collectives"} <= rows


@pytest.mark.parametrize("devices, label", [("1", "h100-x1"), ("GPU-5d1c9a7e-1", "h100-x1"), ("", "cpu")])
def test_plan_sees_the_gpus_cuda_visible_devices_names(tmp_path, devices, label):
    proc = _plan(tmp_path, gpus=True, CUDA_VISIBLE_DEVICES=devices)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"xferbench plan for {label}:")


def test_plan_checks_free_gpu_memory_with_nvml(tmp_path):
    proc = _plan(tmp_path, "suite=copy", "sizes.max=64GiB", gpus=True)   # the stand-in has 79 GiB free
    assert proc.returncode == 2
    assert "needs 128.0 GiB on cuda:0 but only 79.0 GiB is free" in proc.stderr


UUIDS = ["GPU-aa01", "GPU-ab02", "GPU-cc03", "MIG-dd04"]   # NVML's: the GPUs, then a MIG instance


@pytest.mark.parametrize("value, indices", [
    (None, [0, 1, 2]),              # every GPU; a MIG instance only when named
    ("2,0", [2, 0]),                # CUDA's order is the variable's
    ("1gpu,0", [1, 0]),             # read as strtoul reads a number
    ("0,-1,2", [0]),                # up to the first that names none
    ("0,7", [0]),
    ("0,0", []),                    # a repeat: none at all
    ("", []),
    ("GPU-cc,GPU-aa", [2, 0]),      # UUIDs and their prefixes
    ("GPU-a", []),                  # a prefix of two names none
    ("MIG-dd", [3]),
])
def test_visible_devices_read_as_cuda_reads_them(value, indices):
    assert visible(UUIDS, {} if value is None else {"CUDA_VISIBLE_DEVICES": value}) == indices
