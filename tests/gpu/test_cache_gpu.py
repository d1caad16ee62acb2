"""The L2 size reaches meta.json and the copy suite marks d2d rows that fit in it
(`pytest tests/gpu`); skipped without CUDA."""
import pytest
import torch

from bench.cli.common import catalog
from bench.results import load

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


def test_l2_recorded_and_cache_resident_d2d_noted(xferbench):
    from bench.analysis.cache import cache_resident
    from bench.driver.inventory import describe

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert describe()["gpus"][0]["l2_bytes"] == l2 > 0
    proc, runs = xferbench("suite=copy", "copy.ops=[d2d]", "sizes.min=4KiB", "sizes.max=64MiB", "sizes.factor=4",
                           "timing.trials=2")
    assert proc.returncode == 0, proc.stderr
    rows = load(runs)
    assert (rows["l2_bytes"] == l2).all()
    fits = rows[2 * rows["size_bytes"] <= l2]
    assert len(fits) and fits["note"].str.startswith("cache-resident: 2 x ").all()
    assert not rows.loc[2 * rows["size_bytes"] > l2, "note"].str.contains("cache-resident").any()
    assert (cache_resident(rows, catalog()) == (2 * rows["size_bytes"] <= l2).to_numpy()).all()
