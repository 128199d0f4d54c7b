"""The benchmark scripts still run (a quick pass each; their figures are not asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: scripts a system test runs already, in a shortened form of its own
RUN_ELSEWHERE = {"chaos.py": "tests/system/test_chaos.py"}


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")
                                           if 'if __name__ == "__main__":' in p.read_text()
                                           and p.name not in RUN_ELSEWHERE))
def test_benchmark_runs_quick(script):
    done = subprocess.run([sys.executable, str(BENCH / script), "--quick"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()
