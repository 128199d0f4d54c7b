"""The core's public names, pinned (as httpx pins its own): every module of the core says
what it exports in a sorted ``__all__``; the packages and the top-level modules are the
core's surface, listed here name by name; and the shells (the contract, the service, the
job, the command layer) import from the core only names of that surface.

A change here is a change of what outside code may rely on: say so in the docs.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SURFACE = {
    "penumbra": ["Histogram", "Match", "Operator", "PenumbraError", "QueryError", "ValidationError", "compile_query",
                 "p_geq", "p_within", "parse_event", "parse_streams", "stime"],
    "penumbra.calibration": ["precision_curve", "reliability", "threshold_for"],
    "penumbra.engine": ["build_operator", "compile_query", "operator_class"],
    "penumbra.errors": ["MAX_FIELD_CHARS", "MAX_MESSAGE_CHARS", "PenumbraError", "ValidationError", "cut"],
    "penumbra.events": ["Admitted", "Event", "EventColumns", "GAP_FAMILIES", "MAX_ATTRS", "Rejected", "StreamParams",
                        "Streams", "admit_contents", "admit_events", "collector_paused", "content_of", "event_to_json",
                        "events_from_bytes", "gap_problem", "load_events", "load_streams", "loads", "loads_events",
                        "parse_event", "parse_event_line", "parse_event_lines", "parse_events", "parse_streams",
                        "read_events"],
    "penumbra.explain": ["MAX_ORDERED", "explain"],
    "penumbra.joins": ["DEFAULT_FLOOR", "JoinMatches", "JoinOperator", "STRATEGIES", "build_operator"],
    "penumbra.keyed": ["GroupState", "PER_BLOCK", "SHARED", "combine", "state_part", "step"],
    "penumbra.keygroups": ["KeyGroup", "Routing", "key_hash"],
    "penumbra.lossy": ["GapHistogram", "LossyOperator", "RunComponent", "build_operator", "run_score", "s_negative",
                       "s_negatives", "s_positive"],
    "penumbra.operator": ["BlockResult", "Clock", "Late", "Match", "Operator", "check_threshold", "is_due",
                          "merge_clocks"],
    "penumbra.patterns": ["PatternOperator", "build_operator"],
    "penumbra.plans": ["Member", "Plan", "is_plan", "members_plan", "plan_key"],
    "penumbra.probability": ["ROUNDING", "adjusted_histograms", "ge", "meets", "offset", "p_deadline", "p_delay",
                             "p_geq", "p_geq_block", "p_within", "p_within_block", "stime", "stime_block",
                             "stime_table"],
    "penumbra.query": ["AttributeWarning", "GapSpec", "JOIN_STRATEGIES", "JoinQuery", "PATTERN_METHODS",
                       "PATTERN_STRATEGIES", "PatternComponent", "PatternQuery", "QueryError", "SequenceComponent",
                       "SequenceQuery", "Source", "check_registered", "parse", "parse_expression", "unseen_attributes"],
    "penumbra.state": ["FORMAT", "MAGIC", "Migration", "RENAMED", "StateError", "dump", "load", "read_only",
                       "unpickle"],
    "penumbra.timestamps": ["Histogram", "HistogramBlock", "Interval", "MAX_BUCKETS", "PROB_TOLERANCE"],
    "penumbra.tuning": ["NEAR_MISS_BIN", "NearMisses", "backtest_grid", "candidates_floor", "snap_to_bins",
                        "threshold_grid", "what_if", "window_floor"],
}

#: the parts outside the core that use it
SHELLS = ("contract", "backend", "spark_jobs", "penumbra/cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def core_modules() -> list[str]:
    return sorted(module_name(p) for p in (ROOT / "penumbra").rglob("*.py")
                  if "cli" not in p.relative_to(ROOT).parts and p.name != "__main__.py")


@pytest.mark.parametrize("name", core_modules())
def test_every_core_module_exports_a_sorted_list_of_names_it_has(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert list(exported) == sorted(exported), f"{name}.__all__ is not sorted"
    assert [n for n in exported if not hasattr(module, n)] == []


def test_the_surface_is_every_package_and_top_level_module():
    top = {module_name(p) for p in (ROOT / "penumbra").glob("*.py") if p.name != "__main__.py"}
    packages = {module_name(p.parent) for p in (ROOT / "penumbra").glob("*/__init__.py") if p.parent.name != "cli"}
    assert set(SURFACE) == top | packages


@pytest.mark.parametrize("name", list(SURFACE))
def test_the_surface_is_pinned(name):
    assert sorted(importlib.import_module(name).__all__) == SURFACE[name], \
        f"{name} exports other names than the ones pinned here: a change of the core's public surface"


def shell_imports() -> list[tuple[str, int, str, list[str]]]:
    """(file, line, core module, names) of every import of the core by a shell, functions' included."""
    found = []
    for folder in SHELLS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                where = str(path.relative_to(ROOT))
                if isinstance(node, ast.ImportFrom) and not node.level and \
                        (node.module or "").split(".")[0] == "penumbra":
                    found.append((where, node.lineno, node.module, [alias.name for alias in node.names]))
                elif isinstance(node, ast.Import):
                    found += [(where, node.lineno, alias.name, []) for alias in node.names
                              if alias.name.split(".")[0] == "penumbra"]
    return [item for item in found if not item[2].startswith("penumbra.cli")]


def outside_the_surface(imports: list[tuple[str, int, str, list[str]]]) -> list[str]:
    return [f"{where}:{line}: {module} {names}" for where, line, module, names in imports
            if module not in SURFACE or any(n not in SURFACE[module] for n in names)]


def test_the_shells_import_only_the_core_surface():
    assert outside_the_surface(shell_imports()) == []


def test_the_shell_check_sees_an_import_from_inside_the_core():
    """The check itself: the walk finds the shells' imports, in functions too, and an
    import of a module or a name outside the surface is named."""
    found = shell_imports()
    assert ("penumbra/cli/up.py", "penumbra.engine") not in {(w, m) for w, _, m, _ in found}
    assert any(where.startswith("backend/") and module == "penumbra.engine" for where, _, module, _ in found)
    assert outside_the_surface([("x.py", 1, "penumbra.joins.sides", ["Side"]), ("y.py", 2, "penumbra.events", ["_x"]),
                                ("z.py", 3, "penumbra.events", ["Event"])]) == \
        ["x.py:1: penumbra.joins.sides ['Side']", "y.py:2: penumbra.events ['_x']"]
