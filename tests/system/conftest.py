"""Fixtures of the system tests: ``penumbra up`` as a real subprocess.

Every process a run starts carries the run's ``PENUMBRA_HOME`` in its environment (the
supervisor passes its own on) or works in a folder under it, so :func:`processes_of` finds
all of them from ``/proc``, the JVM included, without asking ``penumbra up``; cleanup
stops each one by its pid, also when a test fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

from penumbra.cli.processes import Child

ROOT = Path(__file__).resolve().parents[2]


def processes_of(home: Path) -> set[int]:
    """Pids of the live processes whose environment holds ``PENUMBRA_HOME=home`` or whose
    working folder is inside ``home`` (redis-server writes its title over its environment)."""
    marker = f"PENUMBRA_HOME={home}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ours = (marker in (entry / "environ").read_bytes().split(b"\0")
                    or Path(os.readlink(entry / "cwd")).is_relative_to(home))
        except OSError:
            continue
        if ours and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


class Up:
    """One ``penumbra up`` (``python -m penumbra up``, or ``argv``) as a :class:`Child`, its
    output collected line by line (from ``<home>/up.log``, where each run appends its own)."""

    def __init__(self, home: Path, env: dict[str, str], argv: list[str] | None = None):
        self.home = home
        self.lines: list[str] = []
        self.finished = False
        self._changed = threading.Condition()
        log = home / "up.log"
        self._offset = log.stat().st_size if log.exists() else 0
        self.child = Child("up", "penumbra up", argv or [sys.executable, "-m", "penumbra", "up"], log, env,
                           ROOT).start()
        self.process = self.child.process
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        """Follows the log until up has exited and every line of it is read."""
        with open(self.child.log, encoding="utf-8", errors="replace") as log:
            log.seek(self._offset)  # where this run's output begins
            log.readline()  # the helper's own "--- starting" line
            pending = ""
            while True:
                exited = self.process.poll() is not None
                pending += log.read()
                *complete, pending = pending.split("\n")
                if complete:
                    with self._changed:
                        self.lines += complete
                        self._changed.notify_all()
                if exited:
                    break
                time.sleep(0.05)
        with self._changed:
            self.lines += [pending] if pending else []
            self.finished = True
            self._changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float, start: int = 0) -> re.Match:
        """The first line from ``start`` on matching ``pattern``; fails after ``timeout`` or if up exits first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[start:]:
                    found = re.search(pattern, line)
                    if found:
                        return found
                if self.finished:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 1.0))
        pytest.fail(f"no line matching {pattern!r} within {timeout:g} s (up exit code {self.process.poll()}); "
                    f"output:\n{self.output}\n{self.logs()}")

    def logs(self, lines: int = 15) -> str:
        out = []
        for log in sorted((self.home / "var" / "log").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def terminate(self, timeout: float) -> int:
        """SIGTERM to up itself; its exit code (fails if it does not exit in time)."""
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"penumbra up did not exit within {timeout:g} s of SIGTERM:\n{self.output}")

    def kill_everything(self) -> None:
        """Cleanup: SIGTERM to up, then SIGKILL to every process of this home, by pid."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(150)
            except subprocess.TimeoutExpired:
                pass
        for pid in processes_of(self.home):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.process.poll() is None:
            self.process.wait(10)


@pytest.fixture(scope="module")
def start_up():
    """``start_up(home, env)`` starts ``penumbra up``; everything it started is stopped
    when the module's tests are done (they may share one run), also after a failure."""
    started: list[Up] = []

    def start(home: Path, env: dict[str, str], argv: list[str] | None = None) -> Up:
        up = Up(home, env, argv)
        started.append(up)
        return up

    yield start
    for up in started:
        up.kill_everything()


@dataclass
class UpRun:
    """A ``penumbra up`` of a test module, run in steps: its home, ports and environment,
    the steps done (a step that needs a failed one is skipped), a client of its Redis."""

    home: Path
    port: int
    redis_port: int
    env: dict[str, str]
    done: set[str] = field(default_factory=set)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def needs(self, *steps: str) -> None:
        missing = [s for s in steps if s not in self.done]
        if missing:
            pytest.skip(f"needs the step(s) before: {', '.join(missing)}")

    def redis(self) -> redis.Redis:
        """A client of the run's Redis, with the password up made for it."""
        password = (self.home / "var" / "redis" / "password").read_text().strip()
        return redis.Redis(host="127.0.0.1", port=self.redis_port, password=password, socket_timeout=10)


def up_environment(home: Path, **settings: str) -> tuple[int, int, dict[str, str]]:
    """Two free loopback ports (the API's, Redis's) and the environment of a ``penumbra up``
    on ``home`` with them: the caller's Redis, token, master and checkpoint settings left out."""
    from penumbra.cli.processes import free_port

    port = free_port()
    redis_port = free_port()
    while redis_port == port:
        redis_port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PENUMBRA_REDIS_URL", "PENUMBRA_ADMIN_TOKEN", "PENUMBRA_SPARK_MASTER", "PENUMBRA_CHECKPOINT")}
    env.update({"PENUMBRA_HOME": str(home), "PENUMBRA_PORT": str(port), "PENUMBRA_REDIS_PORT": str(redis_port),
                "PYTHONPATH": str(ROOT), **{f"PENUMBRA_{k.upper()}": v for k, v in settings.items()}})
    return port, redis_port, env


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def http(base: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=30.0)


def stand_in(name: str, code: str, folder: Path, ready: str | None = None) -> Child:
    """A small Python child running ``code`` in ``folder``; ready once ``folder / ready`` exists."""
    return Child(name, f"the {name} stand-in", [sys.executable, "-c", code], folder / f"{name}.log",
                 dict(os.environ), folder, probe=lambda child: ready is not None and (folder / ready).exists(),
                 waiting_for=f"the {name} stand-in", stop_seconds=10.0)
