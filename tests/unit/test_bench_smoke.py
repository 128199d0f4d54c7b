"""The benchmark scripts still run (a quick pass each; their figures are not asserted).

Most of a quick pass is waiting (a Spark job or a ``penumbra up`` starting, events posted at
a fixed rate), so the scripts run two at a time, started when the first of these tests
asks; each test waits for its own script's outcome."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: scripts a system test runs already, in a shortened form of its own
RUN_ELSEWHERE = {"chaos.py": "tests/system/test_chaos.py"}
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py")
                 if 'if __name__ == "__main__":' in p.read_text() and p.name not in RUN_ELSEWHERE)
AT_ONCE = 2
TIMEOUT_SECONDS = 300


class Runs:
    """The scripts' quick passes, ``AT_ONCE`` at a time, longest known first so the two
    lanes end together; every process is stopped by its pid at the end."""

    def __init__(self, scripts: list[str]):
        self.pending = list(scripts)
        self.outcomes: dict[str, tuple[int, str, str]] = {}
        self.running: dict[str, subprocess.Popen] = {}
        self.done = threading.Condition()
        self.stopping = False
        self.lanes = [threading.Thread(target=self._lane, daemon=True) for _ in range(AT_ONCE)]
        for lane in self.lanes:
            lane.start()

    def _lane(self) -> None:
        while True:
            with self.done:
                if self.stopping or not self.pending:
                    return
                script = self.pending.pop(0)
                process = self.running[script] = subprocess.Popen(
                    [sys.executable, str(BENCH / script), "--quick"], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                out, err = process.communicate(timeout=TIMEOUT_SECONDS)
                outcome = (process.returncode, out, err)
            except subprocess.TimeoutExpired:
                _kill(process)
                out, err = process.communicate()
                outcome = (-1, out, f"timed out after {TIMEOUT_SECONDS} s\n{err}")
            with self.done:
                self.running.pop(script, None)
                self.outcomes[script] = outcome
                self.done.notify_all()

    def outcome(self, script: str) -> tuple[int, str, str]:
        with self.done:
            deadline = time.monotonic() + TIMEOUT_SECONDS * (len(SCRIPTS) + 1)
            while script not in self.outcomes:
                assert time.monotonic() < deadline, f"{script} never ran"
                self.done.wait(1.0)
            return self.outcomes[script]

    def stop(self) -> None:
        with self.done:
            self.stopping = True
            for process in self.running.values():
                _kill(process)
        for lane in self.lanes:
            lane.join(30)


def _kill(process: subprocess.Popen) -> None:
    """The script and whatever it started (its own session: a Spark job, a ``penumbra up``)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


#: the slow ones first (each starts a Spark job or a ``penumbra up``)
FIRST = ["pipeline.py", "alarms.py", "e2e.py", "soak.py", "queries.py", "patterns_dense.py", "ws_fanout.py"]


@pytest.fixture(scope="module")
def runs():
    runs = Runs(sorted(SCRIPTS, key=lambda name: (FIRST.index(name) if name in FIRST else len(FIRST), name)))
    try:
        yield runs
    finally:
        runs.stop()


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_quick(script, runs):
    code, out, err = runs.outcome(script)
    assert code == 0, err[-2000:]
    assert out.strip()
