"""A 2xx is a promise: what the API answered 202 for and what the job's sink committed are in
Redis after a kill -9 of redis-server the moment after (its append-only file fsynced before
it answers: ``appendfsync always``). Each test runs its own redis-server on a folder that
outlives the kill, and brings it back on the same port; a writer keeps Redis's disk busy
meanwhile, as other clients would."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pandas as pd
import pyarrow as pa
import pytest
import redis

from contract import Keys
from contract.entries import read_ingest
from contract.results import match_payload
from penumbra.cli.processes import ApiServer, RedisServer
from spark_jobs.processor import OUTPUT
from spark_jobs.sink import Sink

from .conftest import ADMIN_TOKEN, bearer

ROUNDS = 8
KEYS = Keys()


@pytest.fixture
def crashing_redis(tmp_path):
    """A redis-server with the AOF on (as ``penumbra up`` runs it), on a folder of the test's."""
    server = RedisServer(folder=tmp_path / "redis", append_only=True).start()
    try:
        yield server
    finally:
        server.stop()


class BusyDisk:
    """Another client appending 64 KB entries to a stream of its own as fast as it can,
    so that fsyncs of the AOF are under way when the kill comes."""

    def __init__(self, url: str):
        self.url, self.stop = url, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        payload = b"x" * 65536
        while not self.stop.is_set():
            try:
                with redis.Redis.from_url(self.url, socket_timeout=2) as client:
                    while not self.stop.is_set():
                        client.xadd("busy", {"x": payload}, maxlen=64)
            except redis.RedisError:
                time.sleep(0.05)   # killed: wait for it to come back

    def __enter__(self) -> BusyDisk:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)


def restart(server: RedisServer) -> redis.Redis:
    server.kill()
    server.start(timeout=30)
    return redis.Redis.from_url(server.url)


def test_events_the_api_acknowledged_survive_a_kill_of_redis_right_after(crashing_redis, tmp_path):
    with redis.Redis.from_url(crashing_redis.url) as client:
        assert client.config_get("appendfsync")["appendfsync"] == "always"
    with ApiServer(crashing_redis.url, log=tmp_path / "api.log", admin_token=ADMIN_TOKEN, redis_timeout=5) as api, \
            httpx.Client(base_url=api.url, headers=bearer(ADMIN_TOKEN), timeout=30) as http, \
            BusyDisk(crashing_redis.url):
        assert http.put("/api/streams/durable", json={"pi": 10}).status_code == 200
        acknowledged = []
        for round_ in range(ROUNDS):
            batch = [{"stream": "durable", "id": f"r{round_}-{n}", "ts": {"lo": n, "hi": n + 1}} for n in range(60)]
            for attempt in range(100):   # the API answers 503 until Redis is back
                answer = http.post("/api/events", json=batch)
                if answer.status_code != 503:
                    break
                time.sleep(0.1)
            assert answer.status_code == 202 and answer.json()["accepted"] == 60, answer.text
            restart(crashing_redis).close()      # SIGKILL the moment after the answer
            acknowledged += [event["id"] for event in batch]
        with redis.Redis.from_url(crashing_redis.url) as client:
            kept = [json.loads(line)["id"] for _, _, line in read_ingest(client.xrange(KEYS.ingest))]
    assert kept == acknowledged


def test_a_batch_the_sink_committed_survives_a_kill_of_redis_right_after(crashing_redis):
    columns = [part.split()[0] for part in OUTPUT.split(", ")]
    sink = Sink(crashing_redis.url, KEYS, "job-durable", result_maxlen=10_000, dead_maxlen=100, obs_maxlen=100)
    with BusyDisk(crashing_redis.url):
        for batch in range(ROUNDS):
            rows = [("q1", n % 4, "m", -1, json.dumps({"events": {"A": f"a{batch}-{n}"}, "prob": 0.9}).encode(),
                     match_payload({"k": n % 5}, 0.9, None, None, None, None)) for n in range(40)]
            sink.write(pa.Table.from_pandas(pd.DataFrame(rows, columns=columns), preserve_index=False), batch)
            restart(crashing_redis).close()
            sink._client = None          # the sink's connection died with the server
            with redis.Redis.from_url(crashing_redis.url) as client:
                assert int(client.hget(KEYS.batches, "job-durable")) == batch
                assert client.xlen(KEYS.matches("q1")) == 40 * (batch + 1)
                # ... and so are the alarm instances' counts
                counts = [json.loads(r)["added"] for r in client.hvals(KEYS.instances("q1"))]
                assert sorted(counts) == [8 * (batch + 1)] * 5
