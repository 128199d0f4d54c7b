"""The sink's writes in a real Redis, without Spark: a batch's matches in its query's result
stream, in order, with their batch and key group, however many calls they take, and the
committed-batch marker with them."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import redis

import contract.results
from contract.connection import riding_out
from contract.results import match_payload
from contract.alarms import instance_id, key_json, read_instance
from contract.registry import Registry
from spark_jobs.processor import OUTPUT
from spark_jobs.sink import Sink


COLUMNS = [part.split()[0] for part in OUTPUT.split(", ")]


def collected(rows: list[tuple]) -> pa.Table:
    """A batch's rows as the job collects them (Arrow)."""
    return pa.Table.from_pandas(pd.DataFrame(rows, columns=COLUMNS), preserve_index=False)


def match_values(n: int, count: int, salt: str) -> tuple:
    """The n-th match's key, probability, times, partition, records (every other match) and
    factors (every fifth)."""
    return ({"k": n % 3}, n / count, {"A": [n, n + 1]}, ["lpr", "sr", "rpr"][n % 3],
            {"A": {"stream": "s", "id": f"{salt}{n}", "ts": {"lo": n, "hi": n + 1}, "attrs": {"k": n % 3}}}
            if n % 2 else None,
            [{"after": "A", "before": "B", "components": [], "gap": n, "score": 0.5}] if n % 5 == 0 else None)


def match_rows(query: str, count: int, salt: str) -> list[tuple]:
    """Match rows as the processor makes them: the match, and its payload
    (:func:`~contract.results.match_payload` of :func:`match_values`)."""
    return [(query, n % 4, "m", -1, json.dumps({"left": f"{salt}{n}", "p": n / count, "n": n, "count": count,
                                                "salt": salt}).encode(),
             match_payload(*match_values(n, count, salt))) for n in range(count)]


def expected_entry(query: str, row: tuple, batch: int) -> dict:
    match = json.loads(row[4])
    key, _, times, partition, records, factors = match_values(match["n"], match["count"], match["salt"])
    entry = {b"m": row[4], b"b": str(batch).encode(), b"g": str(row[1]).encode(),
             b"i": instance_id(query, key).encode(), b"k": key_json(key).encode(),
             b"t": json.dumps(times, separators=(",", ":")).encode(), b"p": partition.encode()}
    if records:
        entry[b"r"] = json.dumps(records, separators=(",", ":")).encode()
    if factors:
        entry[b"f"] = json.dumps(factors, separators=(",", ":")).encode()
    return entry


@pytest.mark.parametrize("per_call", [1, 7, 10_000])
def test_matches_reach_their_stream_in_order_whatever_the_calls(redis_server, keys, monkeypatch, per_call):
    monkeypatch.setattr(contract.results, "MATCHES_PER_CALL", per_call)
    client = redis.Redis.from_url(redis_server.url)
    sink = Sink(redis_server.url, keys, "job-1", result_maxlen=1_000, dead_maxlen=100, obs_maxlen=100)
    first = match_rows("q1", 23, "a") + match_rows("q2", 5, "b")
    sink.write(collected(first), 3)
    sink.write(collected(match_rows("q1", 9, "c")), 4)
    for query, expected in (("q1", [(row, 3) for row in first[:23]] + [(row, 4) for row in match_rows("q1", 9, "c")]),
                            ("q2", [(row, 3) for row in first[23:]])):
        entries = [fields for _, fields in client.xrange(keys.matches(query))]
        assert entries == [expected_entry(query, row, batch) for row, batch in expected]
        # each key's instance counts its matches, whatever the calls
        records = {i.decode(): read_instance(r) for i, r in client.hgetall(keys.instances(query)).items()}
        assert {i: r["added"] for i, r in records.items()} == dict(Counter(
            instance_id(query, match_values(*(json.loads(row[4])[f] for f in ("n", "count", "salt")))[0])
            for row, _ in expected))
    assert int(client.hget(keys.batches, "job-1")) == 4
    assert int(client.hget(keys.counts, "matches")) == 23 + 5 + 9
    client.close()


def test_result_streams_stay_capped(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    sink = Sink(redis_server.url, keys, "job-1", result_maxlen=100, dead_maxlen=100, obs_maxlen=100)
    for batch in range(5):
        sink.write(collected(match_rows("q1", 400, f"x{batch}")), batch)
    # MAXLEN ~ trims whole nodes of the stream: about the cap, never the 2,000 written
    assert 100 <= client.xlen(keys.matches("q1")) < 400
    last = client.xrevrange(keys.matches("q1"), count=1)[0][1]
    assert json.loads(last[b"m"])["left"] == "x4399"
    client.close()


def test_the_dead_letter_stream_stays_within_its_memory_budget_and_keeps_the_newest(redis_server, keys):
    """Rejected entries quoting 8 KB each, 4 MB in all, against a budget of 1 MB (and a count
    cap far above): what Redis reports for the stream stays about the budget, and the
    newest letters are kept."""
    client = redis.Redis.from_url(redis_server.url)
    client.delete(keys.dead)
    budget = 1024 * 1024
    sink = Sink(redis_server.url, keys, "job-dead", result_maxlen=100, dead_maxlen=100_000, obs_maxlen=100,
                dead_max_bytes=budget)
    for batch in range(10):
        rows = [("", 0, "r", -1, json.dumps({"reason": "ts: must be an object", "entry": f"{batch}-{n}"}).encode(),
                 (b"%d-%d:" % (batch, n)) + b"x" * 8000) for n in range(50)]
        sink.write(collected(rows), batch)
    used = client.memory_usage(keys.dead, samples=0)   # every node counted
    assert used <= 1.2 * budget, used
    assert 50 <= client.xlen(keys.dead) < 500
    newest = client.xrevrange(keys.dead, count=1)[0][1]
    assert newest[b"entry"] == b"9-49" and newest[b"raw"].startswith(b"9-49:")
    client.close()


def test_results_are_encoded_as_plain_json():
    from contract.entries import encode

    value = {"p": np.float64(0.25), "n": np.int64(3), "edges": np.array([1.0, np.inf]), "none": float("nan"),
             "by_group": {0: 1, 2: (True, None)}, "late": -float("inf")}
    plain = {"p": 0.25, "n": 3, "edges": [1.0, None], "none": None, "by_group": {"0": 1, "2": [True, None]},
             "late": None}
    assert json.loads(encode(value)) == plain
    # an integer wider than 64 bits is written exactly too (by the json module)
    assert json.loads(encode({**value, "wide": 2 ** 70})) == {**plain, "wide": 2 ** 70}
    assert b" " not in encode({"a": [1, 2], "b": {"c": 0.5}})


def test_a_failed_query_is_quarantined_once_its_batch_is_written(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    registry = Registry(client, keys)
    registry.put_streams({"fa": {"max_delay": 1, "pi": 5}, "fb": {"max_delay": 1, "pi": 5}})
    entry = registry.register("SELECT * FROM fa A, fb B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.5", query_id="q1")
    registry.register("SELECT * FROM fa A, fb B WHERE WINDOW(A, B) = 2 WITH THRESHOLD 0.5", query_id="q2")
    sink = Sink(redis_server.url, keys, "job-1", result_maxlen=100, dead_maxlen=100, obs_maxlen=100)
    failure = json.dumps({"query": "q1", "error": "ValueError: boom", "version": entry["version"]}).encode()
    rows = [("q1", 0, "f", -1, failure, None), ("", 0, "f", -1, failure, None)] + match_rows("q2", 3, "m")
    sink.write(collected(rows), 7)
    marked = registry.query("q1")["failed"]
    assert (marked["error"], marked["batch"]) == ("ValueError: boom", 7)
    assert "failed" not in registry.query("q2") and client.xlen(keys.matches("q2")) == 3
    # a failure seen on a version the query no longer has marks nothing; a change clears the mark
    registry.update("q1", threshold=0.6)
    assert "failed" not in registry.query("q1")
    version = registry.version()
    sink.write(collected([("q1", 0, "f", -1, failure, None)]), 8)
    assert "failed" not in registry.query("q1") and registry.version() == version
    client.close()


def test_a_batch_stored_before_a_crash_is_written_once_by_the_next_start(redis_server, keys):
    """The sink writes behind: ``foreachBatch`` stores the rows and returns, so Spark may commit
    the batch before it is written. A crash in between leaves the rows stored; the next start
    writes them, exactly as the running sink would have, and only once."""
    client = redis.Redis.from_url(redis_server.url)
    rows = collected(match_rows("q-stored", 30, "s") + [
        ("", 0, "r", -1, json.dumps({"reason": "ts: missing", "entry": "5-0"}).encode(), None),
        ("", 0, "x", -1, json.dumps({"entry": "5-1"}).encode(), None)])
    crashed = Sink(redis_server.url, keys, "job-stored", result_maxlen=1_000, dead_maxlen=100, obs_maxlen=100)
    crashed.write(collected(match_rows("q-stored", 4, "w")), 4)
    crashed.store(rows, 5)
    assert client.exists(keys.pending("job-stored")) and int(client.hget(keys.batches, "job-stored")) == 4
    assert client.xlen(keys.matches("q-stored")) == 4
    restarted = Sink(redis_server.url, keys, "job-stored", result_maxlen=1_000, dead_maxlen=100, obs_maxlen=100)
    assert restarted.recover() == 5
    entries = [fields for _, fields in client.xrange(keys.matches("q-stored"))]
    assert entries[4:] == [expected_entry("q-stored", row, 5) for row in match_rows("q-stored", 30, "s")]
    assert int(client.hget(keys.batches, "job-stored")) == 5 and not client.exists(keys.pending("job-stored"))
    assert client.hget(keys.ended, "5-1") == b"5"
    assert [f[b"entry"] for _, f in client.xrange(keys.dead) if f.get(b"entry") == b"5-0"] == [b"5-0"]
    # a second start finds nothing stored, and a store the marker already covers is dropped unwritten
    assert Sink(redis_server.url, keys, "job-stored", 1_000, 100, 100).recover() is None
    crashed.store(rows, 5)
    assert Sink(redis_server.url, keys, "job-stored", 1_000, 100, 100).recover() is None
    assert client.xlen(keys.matches("q-stored")) == 34 and not client.exists(keys.pending("job-stored"))
    client.close()


def test_a_write_behind_is_reported_with_the_batch_during_which_it_ran(redis_server, keys):
    sink = Sink(redis_server.url, keys, "job-timed", result_maxlen=100, dead_maxlen=100, obs_maxlen=100)
    sink.timings[3] = {"sink_plan": 10.0, "sink_wait": 0.0, "sink_store": 1.0}
    sink.write(collected(match_rows("q-timed", 3, "t")), 3)
    written = {name: sink.timings[3][name] for name in ("sink_archive", "sink_redis") if name in sink.timings[3]}
    assert written["sink_redis"] > 0
    # batch 3's report came before its write ended: the write goes with batch 4's report
    sink.timings[3] = {"sink_plan": 10.0, "sink_wait": 0.0, "sink_store": 1.0}
    assert sink.pop_timings(3) == {"sink_plan": 10.0, "sink_wait": 0.0, "sink_store": 1.0}
    sink.timings[3] = dict(written)
    sink.timings[4] = {"sink_plan": 12.0}
    assert sink.pop_timings(4) == {"sink_plan": 12.0, **written}
    assert sink.pop_timings(5) == {} and sink.timings == {}


class DroppingProxy:
    """A loopback TCP proxy to Redis that, once armed, drops the client's connection at the
    next EXEC: after relaying it to Redis, before Redis's answer reaches the client (a
    transaction Redis ran whose caller cannot know it), or, with ``relay`` off, before Redis
    gets it (a transaction that never ran)."""

    def __init__(self, port: int):
        self.port = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self.armed = threading.Event()
        self.relay = True
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.port))
            dropping = threading.Event()
            threading.Thread(target=self._up, args=(client, upstream, dropping), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, dropping), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, dropping: threading.Event) -> None:
        with client, upstream:
            while data := _received(client):
                if self.armed.is_set() and b"EXEC\r\n" in data:
                    self.armed.clear()
                    dropping.set()              # Redis's answer is not relayed
                    if self.relay:
                        upstream.sendall(data)
                        time.sleep(0.3)         # Redis runs the transaction
                    self.dropped += 1
                    return
                upstream.sendall(data)

    @staticmethod
    def _down(upstream: socket.socket, client: socket.socket, dropping: threading.Event) -> None:
        while (data := _received(upstream)) and not dropping.is_set():
            try:
                client.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


def _received(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 16)
    except OSError:
        return b""


def test_a_transaction_redis_ran_before_the_connection_broke_is_not_written_again(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    proxy = DroppingProxy(client.connection_pool.connection_kwargs["port"])
    try:
        # the hazard: a client that sends calls again (the one the job reads with) sends the
        # broken transaction again, and Redis runs it twice
        hasty = riding_out(proxy.url)
        proxy.armed.set()
        hasty.pipeline(transaction=True).incr(f"{keys.prefix}:n").execute()
        assert proxy.dropped == 1 and int(client.get(f"{keys.prefix}:n")) == 2
        hasty.close()
        # the sink's transaction, broken the same way: found written, not written again
        sink = Sink(proxy.url, keys, "job-broken", result_maxlen=1_000, dead_maxlen=100, obs_maxlen=100)
        rows = match_rows("q-broken", 20, "x")
        proxy.armed.set()
        sink.write_once(collected(rows), 7)
        assert proxy.dropped == 2
        entries = [fields for _, fields in client.xrange(keys.matches("q-broken"))]
        assert entries == [expected_entry("q-broken", row, 7) for row in rows]
        assert int(client.hget(keys.batches, "job-broken")) == 7 and int(client.hget(keys.counts, "matches")) == 20
        added = sum(read_instance(r)["added"] for r in client.hgetall(keys.instances("q-broken")).values())
        assert added == 20
        # and a batch the marker covers is not written again either
        sink.write_once(collected(rows), 7)
        assert client.xlen(keys.matches("q-broken")) == 20
        # a transaction the broken connection never delivered: written by the next try
        proxy.relay = False
        proxy.armed.set()
        sink.write_once(collected(match_rows("q-broken", 5, "y")), 8)
        assert proxy.dropped == 3
        assert client.xlen(keys.matches("q-broken")) == 25 and int(client.hget(keys.batches, "job-broken")) == 8
        sink.client.close()
    finally:
        proxy.close()
        client.close()
