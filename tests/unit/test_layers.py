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
    itself, except the ones ``penumbra up`` imports when it runs (up, demo)."""
    lazy = {"up.py", "demo.py"}
    eager = [(p, target, line) for p in modules("penumbra/cli") if p.name not in lazy
             for target, line, top in imports(p) if top and part_of(target) in ("backend", "spark_jobs")]
    assert eager == []
