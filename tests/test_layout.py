"""The layout's rules, read off the code: no import circle, no suite importing another, and the
analysis side importing no suite, driver, measurement or torch (also when it draws)."""
import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, env

BENCH = ROOT / "bench"


def _modules() -> dict[str, Path]:
    out = {}
    for path in BENCH.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def test_no_import_circle():
    graph = _graph()
    # A package's __init__ importing its own modules is how a package is read, not a circle.
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in edges[m]:
            assert state.get(d) != 1, " -> ".join(path + [m, d])
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in edges:
        if m not in state:
            visit(m, [])


def test_no_suite_imports_another():
    graph = _graph()
    suites = {m for m in graph if m.startswith("bench.suites.")}
    assert suites >= {f"bench.suites.{s}" for s in ("copy", "p2p", "collectives", "overlap", "pipeline")}

    def suite(module: str) -> str:   # a suite may be a package of modules: bench.suites.pipeline.feed
        return module.split(".")[2]

    assert not {(a, b) for a in suites for b in graph[a] if b in suites and suite(a) != suite(b)}


def test_analysis_imports_no_suite_driver_or_measurement():
    graph = _graph()
    measurement = ("bench.suites", "bench.driver", "bench.measure", "bench.contract", "bench.cli")
    for module, deps in graph.items():
        if module.startswith("bench.analysis"):
            assert not [d for d in deps if d.startswith(measurement)], module


def test_drawing_figures_and_reading_suites_imports_no_torch(tmp_path):
    """The registry, every suite's declarations and the analysis commands run without torch."""
    run = ROOT / "results" / "reference" / "h200-x1" / "20261123-044246"
    code = (f"import sys; from bench.cli import plot, report, compare, summary; "
            f"assert plot.main([{str(run)!r}, '--out', {str(tmp_path / 'p')!r}]) == 0; "
            f"assert report.main([{str(run)!r}, '--out', {str(tmp_path / 'r.html')!r}]) == 0; "
            f"assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
