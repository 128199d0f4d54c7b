"""The parts import one another in one direction only (docs/architecture.md).

Every import statement of every module is read (also the ones inside functions) and
resolved to the top-level part it reaches: the service and the job never import each
other, the Redis contract imports the core alone, the core imports none of them, and
neither the shells nor the contract import the command layer. Starting the ``penumbra``
command imports none of the shells (they are imported lazily, when a command needs them).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: third-party packages that belong to one side only
SERVICE_ONLY = {"fastapi", "starlette", "uvicorn", "websockets"}
JOB_ONLY = {"pyspark", "pandas"}
#: the archive's (contract/archive.py, contract/history.py): the job writes it, the service reads it
STORAGE = {"pyarrow", "duckdb"}
SERVICES = {"redis", "pydantic", "pydantic_settings"} | SERVICE_ONLY | JOB_ONLY | STORAGE


def part_of(module: str) -> str:
    """The part a dotted module name belongs to: core, cli, contract, backend, spark_jobs, or the top package."""
    top = module.split(".")[0]
    if top == "penumbra":
        return "cli" if module == "penumbra.__main__" or module.startswith("penumbra.cli") else "core"
    return top


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) of every import in a file, relative ones resolved."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.append((target, node.lineno, id(node) in top_level))
    return found


def modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


#: part -> the parts and third-party packages it may never import (at any level)
FORBIDDEN = {
    "core": {"cli", "contract", "backend", "spark_jobs"} | SERVICES,
    "contract": {"cli", "backend", "spark_jobs"} | SERVICE_ONLY | JOB_ONLY,
    "backend": {"cli", "spark_jobs"} | JOB_ONLY,
    "spark_jobs": {"cli", "backend"} | SERVICE_ONLY,
}


def violations(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        own = part_of(module)
        for target, line, _ in imports(path):
            reached = part_of(target)
            if reached != own and (reached in FORBIDDEN.get(own, ()) or target.split(".")[0] in FORBIDDEN.get(own, ())):
                out.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {target}")
    return out


def test_the_parts_import_in_one_direction():
    assert violations(modules("penumbra", "contract", "backend", "spark_jobs")) == []


def test_the_walk_sees_a_crossing(tmp_path, monkeypatch):
    """The check itself: a service module importing the job, or the core importing Redis, is found."""
    fake = ROOT / "backend" / "_crossing_probe.py"
    core = ROOT / "penumbra" / "_crossing_probe.py"
    try:
        fake.write_text("def f():\n    from spark_jobs.sink import Sink\n")
        core.write_text("from contract import Keys\n")
        found = violations([fake, core])
    finally:
        fake.unlink(missing_ok=True)
        core.unlink(missing_ok=True)
    assert found == ["backend/_crossing_probe.py:2: backend imports spark_jobs.sink",
                     "penumbra/_crossing_probe.py:1: core imports contract"]


@pytest.mark.parametrize("module", ["penumbra.cli", "penumbra.engine", "contract"])
def test_starting_a_part_imports_no_shell(module):
    """``penumbra`` starts without the shells; the contract without Spark or the web."""
    code = (f"import sys, {module}; print(sorted({{m.split('.')[0] for m in sys.modules}} & "
            "{'backend', 'spark_jobs', 'pyspark', 'fastapi', 'uvicorn', 'starlette', 'pandas'}))")
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_the_command_layer_reaches_the_shells_only_lazily():
    """No module of the command layer imports the service or the job when it is imported
    itself (``penumbra up``'s supervisor reads the service's settings when it runs)."""
    eager = [(p, target, line) for p in modules("penumbra/cli")
             for target, line, top in imports(p) if top and part_of(target) in ("backend", "spark_jobs")]
    assert eager == []


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``paths`` its import statements run (those inside
    functions too): ``import a.b.c`` runs the packages ``a`` and ``a.b`` before ``a.b.c``,
    and ``from a.b import c`` runs ``a.b`` and the module ``a.b.c`` when there is one. The
    packages a module is inside are left out when an import reaches them on the way to
    another module (they are being imported already when it runs), not when it names one
    (``from . import x``)."""
    known = {module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        named, passed = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                named.add(target)
                passed |= {".".join(parts[:k]) for k in range(1, len(parts))}
        inside = {t for t in passed if name.startswith(t + ".")}
        graph[name] = (named | (passed - inside)) & set(known) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_imports_itself_through_others():
    assert cycles(import_graph(modules("penumbra", "contract", "spark_jobs", "backend"))) == []


def test_the_walk_sees_a_loop_through_a_function_and_a_package(tmp_path, monkeypatch):
    """The check itself: a loop closed by an import inside a function, or by a package's
    ``__init__``, is found."""
    package = tmp_path / "loop"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("class A:\n    def f(self):\n        from .b import B\n")
    (package / "b.py").write_text("import loop.c\n")
    (package / "c.py").write_text("from . import a\n")
    (package / "d.py").write_text("from loop import c\n")
    (package / "e.py").write_text("from . import d\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert cycles(import_graph(sorted(package.glob("*.py")))) == [["loop", "loop.a", "loop.b", "loop.c"]]
    (package / "c.py").write_text("")
    assert cycles(import_graph(sorted(package.glob("*.py")))) == []
    other = tmp_path / "other"
    other.mkdir()
    (other / "__init__.py").write_text("")
    (other / "x.py").write_text("import loop.e\n")       # runs loop/__init__, which imports a
    (package / "c.py").write_text("def late():\n    from other.x import y\n")
    assert cycles(import_graph(sorted([*package.glob("*.py"), *other.glob("*.py")]))) == [
        ["loop", "loop.a", "loop.b", "loop.c", "loop.d", "loop.e", "other.x"]]
    named = tmp_path / "named"      # a module naming its own package, whose __init__ imports it
    named.mkdir()
    (named / "__init__.py").write_text("from .m import M\n")
    (named / "m.py").write_text("from . import n\n")
    (named / "n.py").write_text("")
    assert cycles(import_graph(sorted(named.glob("*.py")))) == [["named", "named.m"]]


def test_the_core_runs_without_orjson():
    """orjson comes with the service and the job; the core only prefers it (a block's
    columns then travel pickled)."""
    code = ("import sys; sys.modules['orjson'] = None\n"
            "from penumbra.events import EventColumns, events_from_bytes, parse_event\n"
            "event = parse_event({'stream': 'S', 'id': 'e1', 'ts': {'lo': 1, 'hi': 3}, 'attrs': {'k': 2**70}})\n"
            "again = events_from_bytes(EventColumns.from_events([event]).events_to_bytes(), None)\n"
            "print(again == [event], 'orjson' in sys.modules and sys.modules['orjson'] is not None)")
    found = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["True", "False"]
