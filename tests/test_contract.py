"""The suite contract: a suite is one file, and the registry checks it.

A suite written in one file outside the package (tests/data/fill_suite.py, named in
XFERBENCH_SUITES) goes through the plan, a run, the summary, the figures, the comparison and the
report with nothing else added; a file that breaks the contract is refused in one line.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from bench.results import load
from bench import contract
from conftest import env, xferbench_cmd

FILL = Path(__file__).resolve().parent / "data" / "fill_suite.py"
QUICK = ("suite=fill", "timing.trials=2")


def _env(*files: Path) -> dict:
    return {**env(), "XFERBENCH_SUITES": ":".join(map(str, files))}


def _run(cmd: list[str], cwd: Path, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=_env(*files), timeout=300)


def test_a_suite_of_one_file_goes_through_plan_run_summary_plot_compare_and_report(tmp_path):
    out = tmp_path / "results"
    plan = _run(xferbench_cmd(out, *QUICK, "plan=true"), tmp_path, FILL)
    assert plan.returncode == 0, plan.stderr
    assert "fill" in plan.stdout and not out.exists()

    runs = []
    for run_id in ("one", "two"):
        proc = _run(xferbench_cmd(out, *QUICK, f"run_id={run_id}", "fill.values=[3,5]"), tmp_path, FILL)
        assert proc.returncode == 0, proc.stderr
        assert "fill: median GB/s per size" in proc.stdout   # its table in the summary
        runs.append(next(out.rglob(f"{run_id}/meta.json")).parent)
    rows = load(runs[0])
    assert set(rows.suite) == {"fill"} and rows.verified.all()
    assert set(rows.size_bytes) == {4096, 16384, 65536} and set(rows["mode"]) == {"byte 3", "byte 5"}
    assert set(rows["params"]) == {'{"byte": 3}', '{"byte": 5}'}

    plots = tmp_path / "plots"
    plot = _run([sys.executable, "-m", "bench.cli.plot", str(runs[0]), "--out", str(plots)], tmp_path, FILL)
    assert plot.returncode == 0, plot.stderr
    assert {"bandwidth_fill.png", "fill_rates.png"} <= {p.name for p in plots.iterdir()}

    compare = _run([sys.executable, "-m", "bench.cli.compare", str(runs[0]), str(runs[1])], tmp_path, FILL)
    assert compare.returncode in (0, 1), compare.stderr
    assert "fill fill host byte 3" in compare.stdout   # its families, judged with its own noise

    page = tmp_path / "report.html"
    report = _run([sys.executable, "-m", "bench.cli.report", str(runs[0]), "--out", str(page)], tmp_path, FILL)
    assert report.returncode == 0, report.stderr
    html = page.read_text()
    assert "Host fill" in html and 'id="fig-fill_rates"' in html


BROKEN = '''
from dataclasses import dataclass
from bench.contract import Suite

@dataclass
class Settings:
    n: int = 1

class Broken(Suite):
    name = "broken"
    Settings = Settings

    def check(self, s, ctx):
        return None
'''


def test_a_file_that_breaks_the_contract_is_one_line(tmp_path):
    broken = tmp_path / "broken_suite.py"
    broken.write_text(BROKEN)
    proc = _run(xferbench_cmd(tmp_path / "results", "suite=copy"), tmp_path, broken)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "broken_suite.py: Broken does not implement points, measure" in lines[0]


@pytest.mark.parametrize("body, message", [
    ("class A(Suite):\n    name = 'timing'\n    Settings = S\n" + "\n".join(
        f"    def {m}(self, *a): pass" for m in ("check", "points", "measure")), "is taken by the root config"),
    ("class A(Suite):\n    name = 'Fill'\n    Settings = S\n", "must be a lower-case identifier"),
    ("class A(Suite):\n    name = 'ok'\n    Settings = dict\n", "Settings must be a dataclass"),
])
def test_the_registry_checks_the_contract(tmp_path, body, message):
    module = type(sys)("candidate")
    exec("from dataclasses import dataclass\nfrom bench.contract import Suite\n@dataclass\nclass S:\n    n: int = 1\n"
         + body, module.__dict__)
    module.__name__ = "candidate"
    for value in module.__dict__.values():
        if isinstance(value, type):
            value.__module__ = "candidate"
    with pytest.raises(contract.SuiteError, match=message):
        contract.check_suite(module)
