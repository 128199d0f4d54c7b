"""Child processes, started, watched and stopped by their process ids: one helper for all.

:class:`Child` runs one command in its own process group (so a terminal's Ctrl-C reaches
only its parent, and a SIGKILL reaches everything it started, a JVM included), its output
appended to a log, and dies with its parent. ``penumbra up`` supervises its Redis, job,
API and simulators as children; :class:`RedisServer`, :class:`ApiServer` and the
pipeline's :class:`~penumbra.cli.pipeline.JobProcess` are children too, for the one-shot
``eval --engine spark``, the tests and the benchmarks.

>>> ApiServer("redis://127.0.0.1:6379/0", port=8123).url
'http://127.0.0.1:8123'
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

__all__ = ["ApiServer", "Child", "ChildError", "RedisServer", "api_answers", "describe_exit", "free_port"]

LOOPBACK = "127.0.0.1"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ChildError(RuntimeError):
    """A child that stopped, or was not ready in time."""


#: where :func:`free_port` looks first: below the kernel's ephemeral range, above the usual services
PORTS_FROM = 20000
_PICK = random.SystemRandom()  # not the module's generator: a seeded test would pick alike in every process


def _ephemeral_start() -> int:
    """The first of the ports the kernel gives outgoing connections and ``bind(0)``."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nothing is bound to, for a server started a moment later.

    Outside the kernel's ephemeral range when it can be: a port from that range may be taken by
    any outgoing connection between this call and the server's bind (as the port ``bind(0)``
    gives is). Picked at random, so two callers are unlikely to pick alike."""
    ephemeral = _ephemeral_start()
    if ephemeral - PORTS_FROM >= 1000:
        for _ in range(50):
            port = _PICK.randrange(PORTS_FROM, ephemeral)
            with socket.socket() as probe:
                try:
                    probe.bind((LOOPBACK, port))
                    return port
                except OSError:
                    continue
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


#: prctl, looked up here in the parent: a child between fork and exec must not dlopen (the
#: loader's lock may be held by a thread of the parent's, e.g. DuckDB's or Arrow's, at the fork)
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM when its parent dies, even by SIGKILL."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _always(child: Child) -> bool:
    return True


@dataclass
class Child:
    """One child process: started in its own process group, its output appended to ``log``
    (None: discarded); ``probe`` says whether it is ready; ``terminate`` asks it to stop
    (default SIGTERM), and :meth:`stop` SIGKILLs its group after ``stop_seconds``."""

    name: str
    title: str
    argv: list[str]
    log: Path | None = None
    env: dict[str, str] | None = None
    cwd: Path | None = None
    probe: Callable[[Child], bool] = _always
    waiting_for: str = ""
    stop_seconds: float = 10.0
    terminate: Callable[[Child], None] | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)
    started: float = 0.0
    ready_at: float | None = None
    failures: int = 0
    restart_at: float = 0.0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Child:
        if self.cwd is not None:
            self.cwd.mkdir(parents=True, exist_ok=True)
        if self.log is None:
            self._spawn(subprocess.DEVNULL)
        else:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log, "ab") as log:
                log.write(f"--- starting {self.title} at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode())
                log.flush()
                self._spawn(log)
        self.started = time.monotonic()
        self.ready_at = None
        return self

    def _spawn(self, out) -> None:
        self.process = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=_die_with_parent)

    def wait_ready(self, timeout: float) -> Child:
        """Until ``probe`` says ready; :class:`ChildError` (after stopping it) if it exits
        or is not ready within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.probe(self):
            if not self.alive or time.monotonic() > deadline:
                problem = (f"{describe_exit(self.process.poll())}" if not self.alive
                           else f"was not ready within {timeout:g} s")
                self.stop()
                raise ChildError(f"{self.title} {problem}" + (f": {' | '.join(self.tail())}" if self.log else ""))
            time.sleep(0.05)
        self.ready_at = time.monotonic()
        return self

    def reap(self) -> None:
        """After its leader exited: SIGKILL to what is left of its group (a job's JVM)."""
        if self.process is None:
            return
        pgid = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.process = None

    def stop(self, hurry: Callable[[], bool] = lambda: False) -> str:
        """Ask it to stop; SIGKILL its group after ``stop_seconds`` or when ``hurry()``.
        Returns how it went, for a report."""
        if not self.alive:
            self.reap()
            return "not running"
        started = time.monotonic()
        try:
            (self.terminate or Child.sigterm)(self)
        except Exception:  # noqa: BLE001 - a polite stop that fails (Redis gone) falls back to SIGTERM
            Child.sigterm(self)
        deadline = started + self.stop_seconds
        while self.process.poll() is None and time.monotonic() < deadline and not hurry():
            time.sleep(0.05)
        if self.process.poll() is None:
            self.kill()
            how = f"killed (SIGKILL) after {time.monotonic() - started:.1f} s"
        else:
            how = f"stopped in {time.monotonic() - started:.1f} s"
        self.reap()
        return how

    def kill(self) -> None:
        """kill -9 of the child and of everything it started."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.reap()

    @staticmethod
    def sigterm(child: Child) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.process.pid, signal.SIGTERM)

    def tail(self, lines: int = 3) -> list[str]:
        if self.log is None:
            return []
        try:
            with open(self.log, "rb") as handle:
                handle.seek(max(0, os.fstat(handle.fileno()).st_size - 8192))
                text = handle.read().decode(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]


class RedisServer:
    """A private redis-server on a free loopback port: ``with RedisServer() as server:
    server.url``. Data lives in ``folder`` (a fresh temporary folder, removed at the end,
    unless given); ``append_only`` turns the AOF on, fsynced as ``fsync`` says (``always``,
    the default: a reply means the write is on disk; ``everysec``; ``no``)."""

    def __init__(self, folder: Path | None = None, port: int | None = None, append_only: bool = False,
                 fsync: str = "always"):
        self.owns_folder = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="penumbra-redis-"))
        self.port = port or free_port()
        self.append_only = append_only
        self.fsync = fsync
        self.child: Child | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def process(self) -> subprocess.Popen | None:
        return self.child.process if self.child is not None else None

    def _answers(self, child: Child) -> bool:
        import redis

        with redis.Redis.from_url(self.url, socket_connect_timeout=1) as client:
            try:
                return bool(client.ping())
            except (redis.ConnectionError, redis.TimeoutError):
                return False

    def start(self, timeout: float = 10.0) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (make setup installs it)")
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [binary, "--bind", LOOPBACK, "--port", str(self.port), "--dir", str(self.folder), "--save", "",
                "--appendonly", "yes" if self.append_only else "no", "--appendfsync", self.fsync,
                "--protected-mode", "yes",
                "--logfile", str(self.folder / "redis.log")]
        self.child = Child("redis", f"redis-server on port {self.port}", argv, probe=self._answers)
        try:
            self.child.start().wait_ready(timeout)
        except ChildError as error:
            self.stop()
            raise RuntimeError(f"redis-server did not start on port {self.port}: {error}") from None
        return self

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
        self.child = None
        if self.owns_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL, as a crash would: the folder stays, and :meth:`start` recovers from it."""
        if self.child is not None and self.child.process is not None:
            self.child.process.kill()
            self.child.process.wait()
        self.child = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def api_answers(url: str) -> bool:
    """The API at ``url`` answers ``/api/health`` (whatever the status: 503 means Redis is away)."""
    try:
        with urllib.request.urlopen(f"{url}/api/health", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # 503 while Redis is away: the API itself is up
    except OSError:
        return False


class ApiServer:
    """The API (``python -m backend``) on a free loopback port: ``with ApiServer(redis_url,
    admin_token="...", ws_queue=40) as api: api.ws_url``. Keyword settings become
    ``PENUMBRA_<NAME>`` variables; its output goes to ``log`` (a path) or nowhere; it runs in
    ``cwd`` (default: the project's folder)."""

    def __init__(self, redis_url: str, *, port: int | None = None, log: Path | None = None,
                 cwd: Path | None = None, **settings):
        self.port = port or free_port()
        env = {**os.environ, "PENUMBRA_REDIS_URL": redis_url, "PENUMBRA_HOST": LOOPBACK,
               "PENUMBRA_PORT": str(self.port),
               **{f"PENUMBRA_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
                  for k, v in settings.items()}}
        self.child = Child("api", f"the API on port {self.port}", [sys.executable, "-m", "backend"], log, env,
                           cwd or PROJECT_ROOT, probe=lambda child: api_answers(self.url), stop_seconds=15.0)

    @property
    def env(self) -> dict[str, str]:
        return self.child.env

    @property
    def process(self) -> subprocess.Popen | None:
        return self.child.process

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{LOOPBACK}:{self.port}/ws"

    def start(self, timeout: float = 30.0) -> ApiServer:
        try:
            self.child.start().wait_ready(timeout)
        except ChildError as error:
            raise RuntimeError(f"the API did not start on port {self.port}: {error}") from None
        return self

    def stop(self) -> None:
        self.child.stop()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
