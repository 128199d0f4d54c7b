"""Fixtures of the integration tests: one real redis-server and one running Spark job per session.

The job (``python -m spark_jobs``, local[2], small micro-batches so every test spans
several) is started once and shared; each test registers its own queries over its own
stream names and removes them when done. Both processes are stopped by their process
ids when the session ends, also when a test fails.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from contract import Keys, Registry, append_events, end_of_input
from penumbra.cli.pipeline import JobProcess, wait_for_mark
from penumbra.cli.processes import RedisServer
from penumbra.events import Event, event_to_json

#: Events an ingest entry of the tests holds at most: far fewer than a batch's cap, so a
#: workload spans many micro-batches, as it did with an entry per event.
FEED_BLOCK = 25
JOB_SETTINGS = {"trigger_seconds": 0.1, "max_rows_per_batch": 300, "shuffle_partitions": 2, "key_groups": 4,
                "read_partitions": 2,
                "result_maxlen": 1_000_000}
START_TIMEOUT = 240.0
RUN_TIMEOUT = 300.0


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def keys(redis_server):
    """Redis keys under a prefix of their own; they go when the test ends, also when it fails."""
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys(f"pn-test-{uuid.uuid4().hex[:8]}")
    try:
        yield keys
    finally:
        found = client.keys(f"{keys.prefix}:*")
        if found:
            client.delete(*found)
        client.close()


def lines_of(events) -> list:
    """Events (objects, JSON-ready dicts, or entries as they are: str or bytes) as ingest entries."""
    return [e if isinstance(e, (str, bytes)) else json.dumps(event_to_json(e) if isinstance(e, Event) else e)
            for e in events]


def command_lines() -> dict[int, list[bytes]]:
    """The arguments of every process on the machine, by pid."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found[int(cmdline.parent.name)] = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
    return found


@dataclass
class Pipeline:
    """The shared job, with what the tests do through Redis."""

    home: Path
    url: str
    job: JobProcess
    client: redis.Redis
    keys: Keys = field(default_factory=Keys)

    @property
    def registry(self) -> Registry:
        return Registry(self.client, self.keys)

    def start(self) -> None:
        self.job.start()
        self.wait_ready()

    def wait_ready(self) -> None:
        """Until the job's heartbeat says its streaming query runs."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            beat = self.client.hgetall(self.keys.heartbeat)
            if beat.get(b"active") == b"1" and self._ours(int(beat.get(b"pid", 0))):
                return
            if not self.job.alive:
                pytest.fail(f"the Spark job stopped while starting: {self.job.tail(20)}")
            if time.monotonic() > deadline:
                pytest.fail(f"the Spark job did not start within {START_TIMEOUT:g} s: {self.job.tail(20)}")
            time.sleep(0.2)

    def _ours(self, pid: int) -> bool:
        """The job's process, or (through spark-submit, which runs the Python driver as its
        child) one in its process group."""
        if pid == self.job.process.pid:
            return True
        try:
            return os.getpgid(pid) == self.job.process.pid
        except (ProcessLookupError, PermissionError):
            return False

    def jvm(self) -> tuple[int, list[bytes]]:
        """The JVM of the job's process group (the job starts a session of its own): pid, argv."""
        found = next(((pid, argv) for pid, argv in command_lines().items()
                      if argv[0].endswith(b"java") and _group(pid) == self.job.process.pid), None)
        assert found is not None, "no JVM in the job's process group"
        return found

    def scratch(self) -> Path:
        """The folder the job's JVM keeps its temporary files in (its java.io.tmpdir)."""
        _, argv = self.jvm()
        option = next(arg for arg in argv if arg.startswith(b"-Djava.io.tmpdir="))
        return Path(option.split(b"=", 1)[1].decode())

    def restart(self) -> None:
        self.job.stop()
        self.start()

    def query_id(self) -> str:
        return f"t-{uuid.uuid4().hex[:8]}"

    def end(self, *queries: str, timeout: float = RUN_TIMEOUT) -> None:
        """Mark the end of these queries' input and wait until the job has flushed them."""
        mark = end_of_input(self.client, queries, self.keys)
        wait_for_mark(self.client, mark, self.job, timeout, self.keys)

    def sync(self, timeout: float = RUN_TIMEOUT) -> None:
        """Wait until the job has processed everything appended so far."""
        self.end(timeout=timeout)

    def matches(self, query: str) -> list[dict]:
        return [json.loads(fields[b"m"]) for _, fields in self.client.xrange(self.keys.matches(query))]

    def feed(self, events) -> None:
        append_events(self.client, lines_of(events), self.keys, block=FEED_BLOCK)

    def run(self, streams: dict, queries: dict[str, str], events, *, remove: bool = True) -> dict[str, list[dict]]:
        """Register ``streams`` and ``queries`` (id -> text), feed ``events``, end the
        input, and return each query's matches."""
        if streams:
            self.registry.put_streams(streams)
        for query_id, text in queries.items():
            self.registry.register(text, query_id=query_id)
        self.feed(events)
        self.end(*queries)
        found = {query_id: self.matches(query_id) for query_id in queries}
        if remove:
            for query_id in queries:
                self.registry.remove(query_id)
        return found


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.fixture(scope="package")
def running_pipeline(redis_server, tmp_path_factory):
    """One job for the integration tests, stopped once they are done (idle, it keeps a fifth
    of a core busy polling its source, which the tests after them would pay for)."""
    home = tmp_path_factory.mktemp("job")
    job = JobProcess(home, redis_server.url, **JOB_SETTINGS)
    client = redis.Redis.from_url(redis_server.url)
    running = Pipeline(home, redis_server.url, job, client)
    try:
        running.start()
        yield running
    finally:
        job.stop()
        client.close()


@pytest.fixture
def pipeline(running_pipeline):
    """The session's job, for a test that starts its scenario afresh: the ingest forgets the
    identities earlier tests sent (their events reuse ids), as a new deployment would."""
    client = running_pipeline.client
    for key in client.scan_iter(match=f"{running_pipeline.keys.prefix}:ids:*", count=10_000):
        client.delete(key)
    return running_pipeline
