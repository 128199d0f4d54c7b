"""The supervisor behind ``penumbra up``: the whole of Penumbra on this machine.

Three children, each in its own process group, each with its log under
``$PENUMBRA_HOME/var/log/``, all listening on 127.0.0.1 only:

- ``redis-server`` with Penumbra's own configuration (``var/redis/redis.conf``, written at
  each start: loopback, a password every child gets in its Redis URL, AOF on, data in
  ``var/redis``) on ``PENUMBRA_REDIS_PORT``, unless ``PENUMBRA_REDIS_URL`` names a Redis to use;
- the Spark job (``python -m spark_jobs``: local mode unless ``PENUMBRA_SPARK_MASTER``
  names a cluster), its checkpoint in ``var/checkpoint``;
- the API (uvicorn serving ``backend.create_app``) on ``PENUMBRA_PORT``.

While they start, it prints what it waits for (Redis answering PING, the job's heartbeat
in ``pn:job`` saying its streaming query runs, ``/api/health`` answering), then the URL and
the admin token. A child that dies is reported and started again after a back-off, and
the restart, with its cause, is kept in ``pn:restarts`` for the Health view. While
the system starts, ``PENUMBRA_UP_RESTARTS`` failures of one child in a row (or one not
ready within ``PENUMBRA_UP_START_TIMEOUT``) make it give up, stop the rest and exit with
status 1: a set-up problem. Once everything was up, it never gives up on the whole system
for one child: the rest stays up and that child is tried again at the longest back-off.
SIGINT (Ctrl-C), SIGTERM or SIGHUP stop the API, then the job (SIGTERM:
it stops between micro-batches and keeps its checkpoint), then Redis (``SHUTDOWN SAVE``);
the next ``penumbra up`` on the same home resumes from the same checkpoint and data.

``penumbra up --demo`` adds the demo once everything is up (:class:`~penumbra.cli.demo.Demo`).
A :class:`Supervisor` runs whatever :class:`~penumbra.cli.processes.Child` processes its
``children`` hold, and calls each of its ``on_ready`` callables once everything is up.
docs/up.md and docs/demo.md have the whole story.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Literal, TextIO

import redis
from pydantic import Field, PrivateAttr, model_validator

from contract.entries import restart_entry
from contract.settings import DEFAULT_REDIS_URL, SharedSettings, masked_url

from .processes import LOOPBACK, PROJECT_ROOT, Child, api_answers, describe_exit

__all__ = ["Supervisor", "UpSettings", "port_in_use", "redis_config", "redis_password"]

#: seconds between two looks at the children
POLL_SECONDS = 0.25
#: seconds between two progress lines while something is still starting
PROGRESS_SECONDS = 10.0
#: a child ready for this long has its failures forgotten: the next death is a first one
STABLE_SECONDS = 60.0
#: seconds before the n-th restart in a row (the last one repeats)
BACKOFF_SECONDS = (1, 2, 4, 8, 16, 30)
#: restarts kept in Redis (``Keys.restarts``, MAXLEN ~), the newest
RESTARTS_KEPT = 1000
#: seconds the API and Redis have to stop before SIGKILL
API_STOP_SECONDS = 15.0
REDIS_STOP_SECONDS = 60.0


class UpSettings(SharedSettings):
    """What ``penumbra up`` starts and where: the shared settings (Redis, prefix, home) and
    up's own, environment variables with the ``PENUMBRA_`` prefix. Without
    ``PENUMBRA_REDIS_URL``, up starts its own redis-server on ``redis_port`` and every child
    gets that one's URL.

    >>> UpSettings(home="/srv/penumbra", redis_port=6390).redis_url
    'redis://127.0.0.1:6390/0'
    """

    redis_url: str = Field(DEFAULT_REDIS_URL, description=(
        "a running Redis to use instead of starting one (unset: up starts redis-server on PENUMBRA_REDIS_PORT)"))
    port: int = Field(8000, ge=1, le=65535, description="port of the API on 127.0.0.1")
    redis_port: int = Field(6380, ge=1, le=65535, description="port of the redis-server that up starts, on 127.0.0.1")
    spark_master: str | None = Field(None, description="spark://host:port of a standalone cluster (unset: local[2])")
    up_start_timeout: float = Field(600.0, gt=0, description="seconds a child has to get ready before up gives up")
    up_stop_timeout: float = Field(120.0, gt=0,
                                   description="seconds the job has to finish its micro-batch and stop before SIGKILL")
    up_restarts: int = Field(5, ge=1, description="failures of one child in a row before up gives up")
    demo_rate: float = Field(20.0, gt=0, le=10_000, description="events per second of each demo scenario (--demo)")
    redis_fsync: Literal["always", "everysec"] = Field("always", description=(
        "when up's Redis fsyncs its append-only file: before it answers a write (always: a 2xx is on disk) "
        "or once a second (everysec: a crash of redis-server may lose the last second's acknowledged writes)"))
    redis_max_memory_mb: int = Field(4096, ge=64, description=(
        "memory of up's own Redis (maxmemory): past it, writes are refused (noeviction), nothing is dropped"))
    _starts_redis: bool = PrivateAttr(False)

    @model_validator(mode="after")
    def _redis_of_up(self) -> UpSettings:
        if "redis_url" not in self.model_fields_set:
            self._starts_redis = True
            self.redis_url = f"redis://{LOOPBACK}:{self.redis_port}/0"
        return self

    @property
    def starts_redis(self) -> bool:
        """No ``PENUMBRA_REDIS_URL`` was given: up runs a redis-server of its own."""
        return self._starts_redis

    @property
    def var(self) -> Path:
        return self.home.absolute() / "var"

    @property
    def logs(self) -> Path:
        return self.var / "log"

    @property
    def redis_data(self) -> Path:
        return self.var / "redis"

    @property
    def api_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


def redis_config(settings: UpSettings, password: str) -> str:
    """Penumbra's redis.conf: loopback only, a password, AOF on with RDB snapshots besides.
    The AOF is fsynced before Redis answers a write (``appendfsync always``; Redis writes
    and fsyncs once for every command of an event-loop turn, a group commit), so what the
    API acknowledged and what the job's sink committed survive a crash of redis-server the
    moment after (PENUMBRA_REDIS_FSYNC=everysec trades that for write rate)."""
    def quoted(path: Path) -> str:
        return json.dumps(str(path), ensure_ascii=False)

    return "\n".join([
        "# Penumbra's Redis: written by `penumbra up` at each start (PENUMBRA_REDIS_PORT, PENUMBRA_HOME)",
        f"bind {LOOPBACK}", "protected-mode yes", f"port {settings.redis_port}", f"requirepass {password}",
        f"dir {quoted(settings.redis_data)}", f"logfile {quoted(settings.logs / 'redis.log')}",
        f"maxmemory {settings.redis_max_memory_mb}mb", "maxmemory-policy noeviction",
        "daemonize no", "appendonly yes", f"appendfsync {settings.redis_fsync}", "save 3600 1 300 100 60 10000", ""])


def redis_password(settings: UpSettings) -> str:
    """The password of up's own Redis: made at the first start, kept in ``var/redis/password``
    (readable by its owner only) for the next starts and for whoever administers it."""
    path = settings.redis_data / "password"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def _redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


def port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
            return False
        except OSError:
            return True


class Supervisor:
    """Starts the children, watches them, restarts the ones that die, stops them in order."""

    def __init__(self, settings: UpSettings, out: TextIO | None = None):
        from backend.config import Settings

        self.settings = settings
        self.out = out or sys.stdout
        # up's own Redis asks for a password, which every child gets in the URL of the shared settings
        self.redis_password = redis_password(settings) if settings.starts_redis else None
        self.redis_url = (f"redis://:{self.redis_password}@{LOOPBACK}:{settings.redis_port}/0"
                          if self.redis_password else settings.redis_url)
        self.service_settings = Settings(redis_url=self.redis_url, redis_prefix=settings.redis_prefix,
                                         port=settings.port, host=LOOPBACK)
        self.keys = settings.keys
        self.client = _redis_client(self.redis_url)
        self.redis: Child | None = self._redis_child() if settings.starts_redis else None
        self.children: list[Child] = [c for c in (self.redis, self._job_child(), self._api_child()) if c is not None]
        #: called once, when every child is first ready
        self.on_ready: list[Callable[[], None]] = []
        #: every child was ready once: from then on up never gives up on the whole system
        self.announced = False
        #: restarts not yet written to Redis (it may be the child that died)
        self.unrecorded: list[dict] = []
        self.admin_note: str | None = None
        #: set by a signal (``stop_signal`` names it), or by a hook; a second signal sets ``hurry``
        self.stopping = False
        self.stop_signal: str | None = None
        self.hurry = False

    # ---- the children

    def _env(self) -> dict[str, str]:
        path = os.environ.get("PYTHONPATH")
        return {**os.environ, "PENUMBRA_HOME": str(self.settings.home.absolute()), "PENUMBRA_REDIS_URL": self.redis_url,
                "PENUMBRA_REDIS_PREFIX": self.settings.redis_prefix,
                "PENUMBRA_PORT": str(self.settings.port), "PENUMBRA_HOST": LOOPBACK, "SPARK_LOCAL_IP": LOOPBACK,
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(PROJECT_ROOT) + (os.pathsep + path if path else "")}

    def _redis_child(self) -> Child:
        binary = shutil.which("redis-server") or "redis-server"
        conf = self.settings.redis_data / "redis.conf"

        def shutdown_save(child: Child) -> None:
            with redis.Redis.from_url(self.redis_url, socket_timeout=REDIS_STOP_SECONDS,
                                      socket_connect_timeout=2) as client:
                client.shutdown(save=True)

        return Child("redis", f"redis-server on {LOOPBACK}:{self.settings.redis_port}", [binary, str(conf)],
                     self.settings.logs / "redis.log", self._env(), self.settings.redis_data,
                     probe=lambda child: self._ping(), waiting_for="Redis to answer PING",
                     stop_seconds=REDIS_STOP_SECONDS, terminate=shutdown_save)

    def _job_child(self) -> Child:
        master = self.settings.spark_master or "local[2]"
        # a log file is no console: no progress bars in it
        env = {"PYSPARK_SUBMIT_ARGS": "--conf spark.ui.showConsoleProgress=false pyspark-shell", **self._env()}
        return Child("job", f"the Spark job ({master})", [sys.executable, "-m", "spark_jobs"],
                     self.settings.logs / "job.log", env, self.settings.var,
                     probe=self._job_running, waiting_for=f"the Spark job's heartbeat in {self.keys.heartbeat}",
                     stop_seconds=self.settings.up_stop_timeout)

    def _api_child(self) -> Child:
        argv = [sys.executable, "-m", "backend"]  # its settings, PENUMBRA_HOST and _PORT among them, from _env()
        return Child("api", f"the API on {self.settings.api_url}", argv, self.settings.logs / "api.log", self._env(),
                     self.settings.var, probe=self._api_answers, waiting_for="the API to answer /api/health",
                     stop_seconds=API_STOP_SECONDS)

    # ---- readiness

    def _ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def _job_running(self, child: Child) -> bool:
        """The heartbeat of this child's job says its streaming query is active."""
        try:
            beat = self.client.hgetall(self.keys.heartbeat)
        except redis.RedisError:
            return False
        return beat.get(b"pid") == str(child.pid).encode() and beat.get(b"active") == b"1"

    def _api_answers(self, child: Child) -> bool:
        return api_answers(self.settings.api_url)

    def _bootstrap_admin(self) -> bool:
        """The first admin token, made here (not by the API) so that up can print it."""
        from contract.tokens import Role, TokenStore

        token = self.service_settings.admin_token
        store = TokenStore(self.client, self.keys)
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # the store announces it; up prints it itself
                generated = store.bootstrap(token.get_secret_value() if token else None)
            has_admin = any(r["role"] == Role.admin.name for r in store.records())
        except redis.RedisError:
            return False
        if token:
            self.admin_note = "the value of PENUMBRA_ADMIN_TOKEN"
        elif generated:
            self.admin_note = f"{generated}\n               (generated now and shown only this once: keep it)"
        elif has_admin:
            self.admin_note = ("the one printed at the first start (Redis keeps only its hash); to add "
                               "another, start with PENUMBRA_ADMIN_TOKEN=<a new secret>")
        else:
            self.admin_note = f"being generated by another process; see {self.settings.logs / 'api.log'}"
        return True

    # ---- running

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _signal(self, signum, frame) -> None:
        # flags only: printing from a handler could re-enter a print it interrupted
        self.hurry = self.stopping
        self.stopping = True
        self.stop_signal = self.stop_signal or signal.Signals(signum).name

    def _check_ports(self) -> str | None:
        if port_in_use(self.settings.port):
            return f"port {self.settings.port} on {LOOPBACK} is in use: set PENUMBRA_PORT to a free port"
        if self.redis is not None and port_in_use(self.settings.redis_port):
            return (f"port {self.settings.redis_port} on {LOOPBACK} is in use: set PENUMBRA_REDIS_PORT to a free "
                    f"port, or PENUMBRA_REDIS_URL to use the Redis there")
        return None

    def run(self) -> int:
        """Everything until a signal (0), a usage problem (2) or a child up gave up on (1)."""
        # what up and its children write (data, checkpoint, logs, the password) is the owner's alone
        os.umask(0o077)
        self.settings.var.mkdir(parents=True, exist_ok=True)
        self.settings.var.chmod(0o700)
        self.settings.logs.mkdir(parents=True, exist_ok=True)
        lock = open(self.settings.var / "up.lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            self.say(f"penumbra up: error: another penumbra up runs on {self.settings.home} "
                     f"(pid {lock.read().strip() or '?'})")
            lock.close()
            return 2
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        handlers = {s: signal.signal(s, self._signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            problem = self._check_ports()
            if problem:
                self.say(f"penumbra up: error: {problem}")
                return 2
            if self.redis is not None:
                self.settings.redis_data.mkdir(parents=True, exist_ok=True)
                (self.settings.redis_data / "redis.conf").write_text(redis_config(self.settings, self.redis_password))
            self.say(f"penumbra up: home {self.settings.home.absolute()}, logs in {self.settings.logs}")
            code = self._supervise()
            if self.stop_signal:
                self.say(f"up: {self.stop_signal}: stopping (a second signal kills at once)")
            self._stop_all()
            self.say("penumbra up: stopped" if code == 0 else "penumbra up: stopped after a failure")
            return code
        finally:
            if any(c.alive for c in self.children):
                self.hurry = True
                self._stop_all()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            self.client.close()
            lock.close()

    def _supervise(self) -> int:
        began = time.monotonic()
        next_progress = began + PROGRESS_SECONDS
        self.announced = announced = False
        if self.redis is None:
            self.say(f"redis: using {masked_url(self.redis_url)}")
        while not self.stopping:
            now = time.monotonic()
            # the job and the API start once Redis answers and the admin token is settled
            if self.admin_note is None and (self.redis is None or self.redis.ready_at is not None):
                if not self._bootstrap_admin() and self.redis is None and now - began > self.settings.up_start_timeout:
                    self.say(f"penumbra up: error: no Redis answers at {masked_url(self.redis_url)}")
                    return 1
            for child in self.children:
                if child.process is None:
                    if now >= child.restart_at and (child is self.redis or self.admin_note is not None):
                        child.start()
                        self.say(f"{child.name}: starting {child.title}, pid {child.pid}, log {child.log}")
                    continue
                code = child.process.poll()
                if code is not None:
                    if not self._died(child, code, now):
                        return 1
                elif child.ready_at is None:
                    if child.probe(child):
                        child.ready_at = now
                        self.say(f"{child.name}: ready in {now - child.started:.1f} s")
                    elif now - child.started > self.settings.up_start_timeout:
                        if self.announced:  # the system was up: that child is tried again, the rest stays
                            self.say(f"{child.name}: not ready after {self.settings.up_start_timeout:g} s; "
                                     f"stopping it to start it again")
                            pid = child.pid
                            child.stop(lambda: self.hurry)
                            child.failures += 1
                            child.restart_at = now + BACKOFF_SECONDS[-1]
                            self._note_restart(child, pid, f"not ready after {self.settings.up_start_timeout:g} s",
                                               now - child.started, now, BACKOFF_SECONDS[-1])
                            continue
                        self.say(f"{child.name}: not ready after {self.settings.up_start_timeout:g} s; giving up; "
                                 f"last lines of {child.log}:")
                        self._say_tail(child)
                        return 1
                elif child.failures and now - child.ready_at >= STABLE_SECONDS:
                    child.failures = 0
            if self.unrecorded and (self.redis is None or self.redis.ready_at is not None):
                self._record_restarts()
            if not announced and all(c.ready_at is not None for c in self.children):
                self.announced = announced = True
                self._announce(now - began)
                for hook in self.on_ready:
                    hook()
            elif not announced and now >= next_progress:
                next_progress = now + PROGRESS_SECONDS
                waiting = [c.waiting_for for c in self.children if c.process is not None and c.ready_at is None]
                if self.admin_note is None and self.redis is None:
                    waiting.append(f"Redis at {masked_url(self.redis_url)}")
                if waiting:
                    self.say(f"up: waiting for {', '.join(waiting)} ({now - began:.0f} s)")
            time.sleep(POLL_SECONDS)
        return 0

    def _say_tail(self, child: Child) -> None:
        for line in child.tail():
            self.say(f"    | {line}")

    def _died(self, child: Child, code: int, now: float) -> bool:
        """Report a child that died and plan its restart; False when up gives up on it.

        Before the system was first up, a child that keeps failing is a set-up problem: up
        gives up after ``PENUMBRA_UP_RESTARTS`` failures in a row and stops everything. Once
        it was up, it never gives up on the whole system for one child: the others stay up
        (the API, so that people can see and repair what fails) and the child is tried again
        at the longest back-off."""
        pid, uptime = child.pid, now - child.started
        child.reap()
        child.failures += 1
        self.say(f"{child.name}: {child.title} (pid {pid}) {describe_exit(code)} after {uptime:.1f} s; "
                 f"last lines of {child.log}:")
        self._say_tail(child)
        if child.failures >= self.settings.up_restarts and not self.announced:
            self.say(f"{child.name}: failed {child.failures} times in a row (each within {STABLE_SECONDS:g} s of "
                     f"getting ready, or before): giving up; see {child.log}")
            return False
        delay = BACKOFF_SECONDS[min(child.failures, len(BACKOFF_SECONDS)) - 1]
        child.restart_at = now + delay
        self._note_restart(child, pid, describe_exit(code), uptime, now, delay)
        if child.failures >= self.settings.up_restarts:
            self.say(f"{child.name}: failed {child.failures} times in a row; the rest stays up; restarting in "
                     f"{delay} s (see {child.log})")
        else:
            self.say(f"{child.name}: restarting in {delay} s (failure {child.failures} of "
                     f"{self.settings.up_restarts} in a row)")
        return True

    def _note_restart(self, child: Child, pid: int | None, cause: str, uptime: float, now: float,
                      delay: float) -> None:
        """Keep a restart for the Health view (``Keys.restarts``); written once Redis answers."""
        at = time.time() - (time.monotonic() - now)
        self.unrecorded.append(restart_entry(child.name, pid, cause, at, uptime, child.failures, delay))
        del self.unrecorded[:-RESTARTS_KEPT]

    def _record_restarts(self) -> None:
        try:
            pipe = self.client.pipeline()  # all or none: a retry writes none twice
            for entry in self.unrecorded:
                pipe.xadd(self.keys.restarts, entry, maxlen=RESTARTS_KEPT, approximate=True)
            pipe.execute()
        except redis.RedisError:
            return  # kept for the next look: Redis may be restarting
        self.unrecorded.clear()

    def _announce(self, seconds: float) -> None:
        url = self.settings.api_url
        self.say("")
        self.say(f"Penumbra is up (in {seconds:.0f} s).")
        self.say(f"  url          {url}/docs   (the API and its documentation; health at {url}/api/health)")
        self.say(f"  admin token  {self.admin_note}")
        self.say(f"  data         {self.settings.var} (checkpoint/, redis/, log/)")
        self.say("Ctrl-C stops everything; the next `penumbra up` resumes where this one stopped.")
        self.say("")

    def _stop_all(self) -> None:
        """The API first (no new requests), then the job, then Redis: each keeps what it must."""
        for child in reversed(self.children):
            if child.process is None:
                continue
            pid = child.pid
            how = child.stop(lambda: self.hurry)
            self.say(f"{child.name}: {child.title} (pid {pid}) {how}")
