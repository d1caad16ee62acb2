"""`pip install .` as a wheel, not only editable: the configs travel inside the package.

The wheel goes into a fresh virtual environment that sees the packages of the interpreter
running the tests (torch, hydra, pandas are installed already, and fetching them again would
take minutes) but not this repository: every command runs from an empty folder elsewhere.
"Sees the packages" means the running interpreter's own, wherever they are: when the tests run
inside a venv (the README's command in one), torch is in that venv, which a venv made with
system_site_packages would not see (it sees the base interpreter's).
"""
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> list[str]:
    """The folders this interpreter imports installed packages from, in its sys.path order: its
    site-packages (a venv's, the base's where that venv sees them, the user's) and what their
    .pth files added; never this repository (an editable install's path)."""
    site_dirs = {*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    if site.ENABLE_USER_SITE:
        site_dirs.add(site.getusersitepackages())
    site_dirs = {os.path.realpath(d) for d in site_dirs}
    real = [os.path.realpath(p) for p in sys.path if p]
    first = next((i for i, p in enumerate(real) if p in site_dirs), len(real))
    repo = str(ROOT)

    def of_repo(path: str) -> bool:   # a venv made in the repository (./.venv): its packages are no part of it
        inside = path == repo or path.startswith(repo + os.sep)
        return inside and not any(part in ("site-packages", "dist-packages") for part in Path(path).parts)

    return list(dict.fromkeys(p for p in real[first:] if os.path.isdir(p) and not of_repo(p)))


def make_venv(where: Path) -> Path:
    """A venv at `where` that sees package_dirs() of this interpreter through a .pth file (plain
    paths: their own .pth files, such as an editable install's finder, stay inactive); its bin/."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "_outer_packages.pth").write_text("".join(f"{d}\n" for d in package_dirs()))
    return where / "bin"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, Path]:
    """The wheel built offline (no build isolation: nothing is downloaded) from a copy of the
    repository's package, its conf/ link kept; (the wheel, the copy's root)."""
    base = tmp_path_factory.mktemp("wheel")
    # built from a copy: a build in place leaves build/ and *.egg-info in the repository, and a
    # stale build/lib (a module since removed) would ride along into the wheel
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("bench", "conf"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(base / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    return next((base / "dist").glob("xferbench-*.whl")), source


@pytest.fixture(scope="module")
def installed(wheel):
    """The wheel in a fresh venv; (its bin/, an empty folder outside the repository)."""
    base = wheel[0].parent.parent
    bin_dir = make_venv(base / "venv")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install",
                              "--no-deps", "-q", str(wheel[0])], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return bin_dir, elsewhere


def _run(bin_dir: Path, cwd: Path, *cmd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd), "PYTHONNOUSERSITE": "1"}
    return subprocess.run([str(bin_dir / cmd[0]), *cmd[1:]], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def test_a_venv_made_inside_a_venv_sees_that_venvs_packages(tmp_path):
    # The README's test command run inside a venv: the wheel's venv is made from within it. A
    # module only the outer venv holds stands for torch installed there, not in the base.
    outer = make_venv(tmp_path / "outer")
    purelib = _run(outer, tmp_path, "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib.stdout.strip()) / "only_in_the_outer_venv.py").write_text("")
    made = _run(outer, tmp_path, "python", "-c", f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
                f"import test_wheel; print(test_wheel.make_venv(__import__('pathlib').Path({str(tmp_path)!r}) / 'inner'))")
    assert made.returncode == 0, made.stderr
    inner = Path(made.stdout.strip())
    seen = _run(inner, tmp_path, "python", "-c", "import only_in_the_outer_venv, yaml, sys; print(sys.prefix)")
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.strip() == str(tmp_path / "inner")
    repo = _run(inner, tmp_path, "python", "-c", "import bench")   # the repository is not among them
    assert "No module named 'bench'" in repo.stderr


def test_the_wheel_carries_every_file_of_the_package(wheel):
    # every module and every file read at run time (configs, tables), packages found, not listed
    built, source = wheel
    package = {str(Path(folder, name).relative_to(source))
               for folder, _, names in os.walk(source / "bench", followlinks=True) for name in names}
    with zipfile.ZipFile(built) as archive:
        carried = {name for name in archive.namelist() if name.startswith("bench/")}
    assert package == carried, f"left out: {sorted(package - carried)}; extra: {sorted(carried - package)}"
    assert {"bench/importers/nccl_tests.py", "bench/config/conf/config.yaml", "bench/analysis/expected.csv",
            "bench/driver/reference_times.json"} <= carried


def test_the_wheel_holds_its_configs_and_runs_from_anywhere(installed):
    bin_dir, cwd = installed
    where = _run(bin_dir, cwd, "python", "-c", "import bench.config.files as c; print(c.__file__); print(c.CONF_DIR)")
    module, conf = where.stdout.split()
    assert str(bin_dir.parent) in module and conf.startswith(str(bin_dir.parent)), where.stdout
    assert (Path(conf) / "config.yaml").exists() and (Path(conf) / "instance" / "h200-x2.yaml").exists()
    assert (Path(conf) / "suite" / "scaling.yaml").exists()
    tables = _run(bin_dir, cwd, "python", "-c", "from bench.analysis import expected, causes; "
                  "print(expected.SHIPPED.exists(), expected.NOISE.exists(), causes.CLOCKS.exists())")
    assert tables.stdout.split() == ["True", "True", "True"], tables.stdout   # the doctor's tables ship
    plan = _run(bin_dir, cwd, "xferbench", "suite=scaling", "plan=true", "instance=h200-x4")
    assert plan.returncode == 0 and "collectives" in plan.stdout, plan.stderr

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
    compare = _run(bin_dir, cwd, "xferbench-compare", str(runs[0]), str(runs[1]))
    assert compare.returncode in (0, 1), compare.stderr
    assert "xferbench comparison" in compare.stdout
    summary = _run(bin_dir, cwd, "xferbench-summary", str(runs[0]))
    assert summary.returncode == 0 and "h2h" in summary.stdout, summary.stderr
    doctor = _run(bin_dir, cwd, "xferbench-doctor", str(runs[0]))
    assert doctor.returncode in (0, 1, 3) and "verdict:" in doctor.stdout, doctor.stderr
    report = _run(bin_dir, cwd, "xferbench-report", str(out), "--out", str(cwd / "report.html"))
    assert report.returncode == 0 and "xferbench report" in (cwd / "report.html").read_text(), report.stderr


def test_every_console_script_answers_help(installed):
    bin_dir, cwd = installed
    listed = _run(bin_dir, cwd, "python", "-c", "from importlib.metadata import entry_points; "
                  "print(*sorted(e.name for e in entry_points(group='console_scripts') if e.value.startswith('bench.')))")
    scripts = listed.stdout.split()
    assert {"xferbench", "xferbench-compare", "xferbench-doctor", "xferbench-plot", "xferbench-report",
            "xferbench-summary"} <= set(scripts), listed.stderr
    for script in scripts:
        answer = _run(bin_dir, cwd, script, "--help")
        assert answer.returncode == 0 and answer.stdout.strip() and not answer.stderr.strip(), (script, answer.stderr)


# What the README's `python scripts/...` commands are run with here: the smallest real input, or
# --help where the real command needs the repository's results.
README_SCRIPTS = {"import_nccl_tests.py", "make_reference_times.py"}


def test_every_script_the_readme_names_runs_with_the_wheel(installed):
    bin_dir, cwd = installed
    readme = (ROOT / "README.md").read_text()
    # rows of tables name commands removed, not ones to run
    named = {m for line in readme.splitlines() if not line.startswith("|")
             for m in re.findall(r"python scripts/(\w+\.py)", line)}
    assert named == README_SCRIPTS

    def script(name: str, *args: str) -> subprocess.CompletedProcess:   # its folder first on sys.path, not the repository
        return _run(bin_dir, cwd, "python", str(ROOT / "scripts" / name), *args)

    imported = script("import_nccl_tests.py", str(ROOT / "tests" / "data" / "nccl_tests_h200x8.log"),
                      "--out", str(cwd / "imported"))
    assert imported.returncode == 0, imported.stderr
    summary = _run(bin_dir, cwd, "xferbench-summary", str(cwd / "imported"))
    assert summary.returncode == 0 and "collectives all_reduce" in summary.stdout, summary.stderr

    assert script("make_reference_times.py", "--help").returncode == 0
    table = _run(bin_dir, cwd, "python", "-c", "from bench.driver.reference_times import TABLE; print(TABLE)")
    shipped = Path(table.stdout.strip()).read_bytes()
    remade = script("make_reference_times.py")   # no results/ beside an installed package: it keeps its table
    assert remade.returncode == 2 and "no reference runs" in remade.stderr, remade.stderr
    assert Path(table.stdout.strip()).read_bytes() == shipped
