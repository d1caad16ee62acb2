"""scripts/h2d_load.py on a GPU (`pytest tests/gpu`): it copies until told to stop, then says
what it moved and exits 0; skipped without CUDA."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import env

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / "h2d_load.py"


def test_h2d_load_copies_until_stopped():
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--size", "64MiB"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env())
    first = proc.stdout.readline()
    assert first.startswith("h2d_load: copying 64MiB pinned host -> cuda:0"), first
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    gbps = float(out.split("copies, ")[1].split(" GB/s")[0])
    assert gbps > 1     # any PCIe link moves more than this
