"""The benchmark scripts still run (a quick pass each; their figures are not asserted).

Most of a quick pass is waiting (a Spark job or a ``penumbra up`` starting, events posted at
a fixed rate), so the passes run behind the session's other tests (tests/background.py),
the slow ones first; each test waits for its own script's outcome."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.background import Command

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: scripts a system test runs already, in a shortened form of its own
RUN_ELSEWHERE = {"chaos.py": "tests/system/test_chaos.py"}
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py")
                 if 'if __name__ == "__main__":' in p.read_text() and p.name not in RUN_ELSEWHERE)
#: the slow ones first (each starts a Spark job or a ``penumbra up``)
FIRST = ["pipeline.py", "alarms.py", "e2e.py", "soak.py", "queries.py", "patterns_dense.py", "ws_fanout.py"]


def background_runs(folder: Path) -> dict[str, Command]:
    ordered = sorted(SCRIPTS, key=lambda name: (FIRST.index(name) if name in FIRST else len(FIRST), name))
    return {name: Command([sys.executable, str(BENCH / name), "--quick"], timeout=300) for name in ordered}


@pytest.mark.slow
@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.background(s)) for s in SCRIPTS])
def test_benchmark_runs_quick(script, background):
    outcome = background.outcome(script)
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert outcome.stdout.strip()
