"""Long runs of commands beside the tests: the benchmarks' quick passes, ``penumbra eval
--engine spark``. Most of such a run is waiting (a JVM starting, events posted at a fixed
rate), so the session starts them at its first test, one at a time behind the tests that
run meanwhile, and a test waits only for its own run's outcome.

A test asks for runs with the ``background`` marker (their names); its module says what
each name runs with ``background_runs(folder) -> {name: Command}`` (``folder``: a fresh
temporary folder of its own). The session starts the runs its tests ask for, module by
module in the session's order and in each module's order, in one lane; once a test waits
for a run not yet ended, a second lane opens. Every process a run starts is stopped by its
process group at the end of the session, also after a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: lanes once a test waits (two cores: one for the tests, one for the runs, until then)
AT_ONCE = 2


@dataclass(frozen=True)
class Command:
    argv: list[str]
    #: variables added to the session's environment
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 600.0


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str


class Lanes:
    """``commands`` run in their order, one lane at first, up to :data:`AT_ONCE` once a
    test waits; each one's outcome by name."""

    def __init__(self, commands: dict[str, Command]):
        self.commands = commands
        self.pending = list(commands)
        self.outcomes: dict[str, Outcome] = {}
        self.running: dict[str, subprocess.Popen] = {}
        #: the process groups of ended runs that left processes behind: they go at the stop
        #: (a test may look for them first: ``penumbra eval`` must leave none)
        self.left: list[int] = []
        self.done = threading.Condition()
        self.stopping = False
        self.lanes: list[threading.Thread] = []
        self._open_lane()

    def _open_lane(self) -> None:
        # called with the condition held, or before any lane runs
        if len(self.lanes) < AT_ONCE and self.pending and not self.stopping:
            lane = threading.Thread(target=self._lane, name=f"background-{len(self.lanes)}", daemon=True)
            self.lanes.append(lane)
            lane.start()

    def _lane(self) -> None:
        while True:
            with self.done:
                if self.stopping or not self.pending:
                    return
                name = self.pending.pop(0)
                command = self.commands[name]
                process = self.running[name] = subprocess.Popen(
                    command.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                    env={**os.environ, **command.env}, start_new_session=True)
            try:
                out, err = process.communicate(timeout=command.timeout)
                outcome = Outcome(process.returncode, out, err)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid)
                out, err = process.communicate()
                outcome = Outcome(-1, out, f"timed out after {command.timeout:g} s\n{err}")
            with self.done:
                self.running.pop(name, None)
                if _group_alive(process.pid):
                    self.left.append(process.pid)
                self.outcomes[name] = outcome
                self.done.notify_all()

    def outcome(self, name: str) -> Outcome:
        """The run's outcome, once it has ended (a second lane opens while a test waits)."""
        with self.done:
            assert name in self.commands, f"no background run is named {name!r} (mark the test with it)"
            deadline = time.monotonic() + sum(c.timeout for c in self.commands.values()) + 60
            while name not in self.outcomes:
                self._open_lane()
                assert time.monotonic() < deadline, f"{name} never ran"
                self.done.wait(1.0)
            return self.outcomes[name]

    def stop(self) -> None:
        with self.done:
            self.stopping = True
            for group in [process.pid for process in self.running.values()] + self.left:
                _kill_group(group)
        for lane in self.lanes:
            lane.join(30)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def _kill_group(group: int) -> None:
    """A run's command and whatever it started (its own session: a Spark job, a ``penumbra up``)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wanted(items) -> dict[object, list[str]]:
    """The runs the session's tests ask for, by module, in the session's order."""
    found: dict[object, list[str]] = {}
    for item in items:
        for mark in item.iter_markers("background"):
            names = found.setdefault(item.module, [])
            names.extend(name for name in mark.args if name not in names)
    return found


def start(items, make_folder) -> Lanes | None:
    """The lanes of the runs ``items`` ask for (None: no test asks); ``make_folder(name)``
    gives a module its fresh folder."""
    commands: dict[str, Command] = {}
    for module, names in wanted(items).items():
        assert hasattr(module, "background_runs"), f"{module.__name__} asks for background runs it does not declare"
        declared = module.background_runs(make_folder(module.__name__.rsplit(".", 1)[-1]))
        unknown = sorted(set(names) - set(declared))
        assert not unknown, f"{module.__name__} declares no background run named {unknown}"
        taken = sorted(set(names) & set(commands))
        assert not taken, f"{module.__name__}: another module's background run is named {taken}"
        commands.update((name, command) for name, command in declared.items() if name in names)
    return Lanes(commands) if commands else None
