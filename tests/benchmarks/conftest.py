"""Write the benchmarks' rounds as an xferbench run, so scripts/compare.py judges them against a
baseline store like any run: `pytest tests/benchmarks --benchmark-enable --xferbench-run DIR`."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

import bench
from bench.results import SCHEMA_VERSION, RunWriter, Sample, write_json


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--xferbench-run", metavar="DIR", default=None,
                     help="write the benchmarks' rounds (one trial each) as an xferbench run folder DIR")


def _meta(run_id: str) -> dict:
    from bench.system import describe, instance_label

    label = instance_label()
    return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "complete",
            "start_time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "instance": {"name": label, "label": label}, "system": describe(),
            "tool": {"name": "xferbench", "version": bench.__version__, "harness": "pytest-benchmark"}}


@pytest.fixture(scope="session")
def xferbench_samples(request: pytest.FixtureRequest):
    """A list the benchmarks append their Samples to; written as one run when the session ends."""
    samples: list[Sample] = []
    yield samples
    out = request.config.getoption("--xferbench-run")
    if out and samples:
        run = Path(out)
        RunWriter(run, run.name).add_point(samples)
        write_json(run / "meta.json", _meta(run.name))
