"""The layout's rules, read off the code: the floors of docs/ARCHITECTURE.md (no module importing
from a floor above its own, lazy imports included), no import circle, no suite importing another,
and the analysis side importing no suite, driver, measurement or torch (also when it draws)."""
import ast
import re
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


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def _floors(doc: str) -> tuple[list[list[list[str]]], set[tuple[str, str]]]:
    """The floors table of docs/ARCHITECTURE.md, bottom floor first: each floor's rooms, each room's
    module names; and the declared exceptions (`module -> module` pairs on the Exceptions line)."""
    table = doc.split("<!-- floors:", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines()[1:] if line.startswith("|") and not line.startswith("|---")][1:]
    floors = []
    for row in rows:
        modules = re.split(r"(?<!\\)\|", row)[2]
        floors.append([re.findall(r"`([\w.]+)`", room) for room in modules.split("\\|")])
    line = next(line for line in doc.splitlines() if line.startswith("Exceptions, where a module may reach above"))
    exceptions = set(re.findall(r"`([\w.]+)` -> `([\w.]+)`", line))
    return floors[::-1], exceptions


def _place(module: str, floors: list[list[list[str]]]) -> tuple[int, int] | None:
    """(floor, room) of `module`: the longest name declared that is it or a package holding it
    (`bench` holds only the package's own __init__: a new top-level module must be placed)."""
    best, where = "", None
    for level, rooms in enumerate(floors):
        for room, names in enumerate(rooms):
            for name in names:
                if (module == name or (name != "bench" and module.startswith(name + "."))) and len(name) > len(best):
                    best, where = name, (level, room)
    return where


def _violations(graph: dict[str, set[str]], floors, exceptions=frozenset()) -> list[str]:
    out = []
    for module, deps in sorted(graph.items()):
        here = _place(module, floors)
        for dep in sorted(deps):
            there = _place(dep, floors)
            if (module, dep) in exceptions or dep.startswith(module + "."):
                continue
            if there[0] > here[0] or (there[0] == here[0] and there[1] != here[1]):
                out.append(f"{module} imports {dep}, a floor {'above' if there[0] > here[0] else 'beside'} it")
    return out


def test_every_module_stands_on_a_declared_floor():
    floors, exceptions = _floors(ARCHITECTURE.read_text())
    assert [len(rooms) for rooms in floors] == [1, 2, 1, 1, 1, 1]   # base, measure | analysis, ..., cli
    modules = _modules()
    assert not [m for m in modules if _place(m, floors) is None], "place new modules in ARCHITECTURE.md's floors"
    declared = {name for rooms in floors for names in rooms for name in names}
    assert declared <= set(modules), declared - set(modules)
    assert {a for pair in exceptions for a in pair} <= set(modules)


def test_no_module_imports_from_a_floor_above_its_own():
    floors, exceptions = _floors(ARCHITECTURE.read_text())
    assert not _violations(_graph(), floors, exceptions)


def test_the_floor_check_sees_lazy_imports_and_rooms_side_by_side(tmp_path):
    """The check itself: an import inside a function counts, as does one into the other room."""
    floors, _ = _floors(ARCHITECTURE.read_text())
    lazy = tmp_path / "results.py"
    lazy.write_text("def load():\n    from bench.cli.common import catalog\n    return catalog\n")
    deps = _imports("bench.results", lazy, {"bench.cli.common", "bench.results"})
    assert deps == {"bench.cli.common"}
    graph = {"bench.results": deps, "bench.measure.timing": {"bench.analysis.tables"},
             "bench.suites.copy": {"bench.analysis.tables", "bench.measure.timing"}}
    assert _violations(graph, floors) == ["bench.measure.timing imports bench.analysis.tables, a floor beside it",
                                          "bench.results imports bench.cli.common, a floor above it"]
    assert not _violations(graph, floors, {("bench.results", "bench.cli.common"),
                                           ("bench.measure.timing", "bench.analysis.tables")})


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


MEASURING = ("bench.contract", "bench.measure", "bench.driver", "torch", "triton")


def _reached(graph: dict[str, set[str]], start: str, inside: str) -> set[str]:
    """The modules `start` imports, and those that imports of `inside` (its own package) import in turn."""
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for d in graph.get(m, set()):
            if d not in seen:
                seen.add(d)
                if d.startswith(inside + "."):
                    todo.append(d)
    return seen


def _third_party(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "module" and node.args \
                and isinstance(node.args[0], ast.Constant):   # bench.lazy.module("torch")
            names.add(str(node.args[0].value).split(".")[0])
    return names


def test_each_suite_is_a_folder_with_a_reading_face_free_of_measurement():
    """Each suite of the package: a folder whose reading.py declares what its rows mean, and
    neither it nor the suite's modules it imports reach the contract, measurement, the driver or
    torch (statically: importing a submodule runs the package's __init__, the measuring face)."""
    graph, modules = _graph(), _modules()
    suites = sorted({m.split(".")[2] for m in modules if m.startswith("bench.suites.")})
    for name in suites:
        package = f"bench.suites.{name}"
        assert modules[package].name == "__init__.py", f"{package} is not a folder"
        face = f"{package}.reading"
        assert face in modules, f"{package} has no reading.py"
        reached = _reached(graph, face, package) | {face}
        bad = sorted(d for d in reached if d.startswith(MEASURING))
        assert not bad, f"{face} reaches {bad}"
        own = [modules[m] for m in reached if m.startswith(package + ".")]
        assert not {n for p in own for n in _third_party(p)} & {"torch", "triton"}, face


def test_no_module_over_500_lines_and_no_function_over_60():
    long_files = {str(p.relative_to(ROOT)): n for p in BENCH.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert not long_files
    long_functions = [f"{p.relative_to(ROOT)}:{node.name} {node.end_lineno - node.lineno + 1}"
                      for p in BENCH.rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.end_lineno - node.lineno + 1 > 60]
    assert not long_functions


# Words an op or suite shares with another vocabulary, allowed where that vocabulary is declared
# (module, word): the size class (suite_view.LATENCY_BOUND); the host-memory traffic kinds
# (measure/hostmem.py: copy, read, write); NCCL's own log fields (analysis/ncclog.py: p2p
# channels); a p2p mode the figures order (style.VALUE_ORDER: peer); the mode nvbandwidth's
# imported peer reads and writes stand for, and the mode a peer copy is judged in (analysis/expected.py,
# point_expectations.py: peer).
OTHER_MEANINGS = {("bench/suite_view.py", "latency"), ("bench/measure/hostmem.py", "copy"),
                  ("bench/analysis/ncclog.py", "p2p"), ("bench/analysis/figures/style.py", "peer"),
                  ("bench/analysis/expected.py", "peer"),
                  ("bench/analysis/point_expectations.py", "peer")}


def _declared_names() -> set[str]:
    """Every registered suite's name and op names (its declarations, and its settings' ops)."""
    from bench import suites

    names = set()
    for suite in suites.all():
        names.add(suite.name)
        names |= {op.name for op in suite.ops}
        field = getattr(suite.Settings, "__dataclass_fields__", {}).get("ops")
        names |= {str(o) for o in (field.default_factory() if field is not None else ())}
    return names


def _literals(words: set[str], root: Path, skip: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        where = str(path.relative_to(root.parent if root == BENCH else root))
        if where.startswith(skip):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in words and (where, node.value) not in OTHER_MEANINGS:
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    return found


def test_only_the_suites_name_a_suite_or_an_op():
    """Outside bench/suites/ (and the importers' tables of other tools' names), no string literal
    is a suite's or an op's name: the rest reads the suites' declarations (bench/ops.py)."""
    words = _declared_names()
    assert {"collectives", "copy", "all_reduce", "d2d", "uni"} <= words
    assert not _literals(words, BENCH, ("bench/suites/", "bench/importers/"))


def test_the_name_check_sees_a_literal(tmp_path):
    (tmp_path / "x.py").write_text("def f(row):\n    return row['op'] == 'd2d' or row['suite'] == 'p2p'\n")
    found = _literals({"d2d", "p2p"}, tmp_path, ())
    assert len(found) == 2 and found[0].endswith("'d2d'") and found[1].endswith("'p2p'")
