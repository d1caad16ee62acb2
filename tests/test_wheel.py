"""`pip install .` as a wheel, not only editable: the configs travel inside the package.

The wheel goes into a fresh virtual environment that sees the system's packages (torch, hydra,
pandas are installed already, and fetching them again would take minutes) but not this
repository: every command runs from an empty folder elsewhere.
"""
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(base / "dist"), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    wheel = next((base / "dist").glob("xferbench-*.whl"))
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(base / "venv")
    python = base / "venv" / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return base / "venv" / "bin", elsewhere


def _run(bin_dir: Path, cwd: Path, *cmd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd), "PYTHONNOUSERSITE": "1"}
    return subprocess.run([str(bin_dir / cmd[0]), *cmd[1:]], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def test_the_wheel_holds_its_configs_and_runs_from_anywhere(installed):
    bin_dir, cwd = installed
    where = _run(bin_dir, cwd, "python", "-c", "import bench.config as c; print(c.__file__); print(c.CONF_DIR)")
    module, conf = where.stdout.split()
    assert str(bin_dir.parent) in module and conf.startswith(str(bin_dir.parent)), where.stdout
    assert (Path(conf) / "config.yaml").exists() and (Path(conf) / "instance" / "h200-x2.yaml").exists()

    help_text = _run(bin_dir, cwd, "xferbench", "--help")
    assert help_text.returncode == 0 and "suite: all, collectives, copy" in help_text.stdout

    out = cwd / "results"
    for run_id in ("a", "b"):
        proc = _run(bin_dir, cwd, "xferbench", f"out_dir={out}", f"run_id={run_id}", "progress=false",
                    "suite=copy", "sizes.max=16KiB", "timing.trials=3")
        assert proc.returncode == 0, proc.stderr
    runs = sorted(p.parent for p in out.rglob("meta.json"))
    assert [r.name for r in runs] == ["a", "b"]

    plot = _run(bin_dir, cwd, "xferbench-plot", str(out), "--out", str(cwd / "plots"))
    assert plot.returncode == 0, plot.stderr
    assert any(p.suffix == ".png" for p in (cwd / "plots").iterdir())
    compare = _run(bin_dir, cwd, "python", "-m", "bench.compare", str(runs[0]), str(runs[1]))
    assert compare.returncode in (0, 1), compare.stderr
    assert "xferbench comparison" in compare.stdout
