"""The sink's writes in a real Redis, without Spark: a batch's matches in its query's result
stream, in order, with their batch and key group, however many calls they take, and the
committed-batch marker with them."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import redis

import contract.results
from contract.results import match_payload
from contract.alarms import instance_id, key_json, read_instance
from contract.registry import Registry
from spark_jobs.processor import OUTPUT
from spark_jobs.sink import Sink


COLUMNS = [part.split()[0] for part in OUTPUT.split(", ")]


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
    sink.write(pd.DataFrame(first, columns=COLUMNS), 3)
    sink.write(pd.DataFrame(match_rows("q1", 9, "c"), columns=COLUMNS), 4)
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
        sink.write(pd.DataFrame(match_rows("q1", 400, f"x{batch}"), columns=COLUMNS), batch)
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
        sink.write(pd.DataFrame(rows, columns=COLUMNS), batch)
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
    sink.write(pd.DataFrame(rows, columns=COLUMNS), 7)
    marked = registry.query("q1")["failed"]
    assert (marked["error"], marked["batch"]) == ("ValueError: boom", 7)
    assert "failed" not in registry.query("q2") and client.xlen(keys.matches("q2")) == 3
    # a failure seen on a version the query no longer has marks nothing; a change clears the mark
    registry.update("q1", threshold=0.6)
    assert "failed" not in registry.query("q1")
    version = registry.version()
    sink.write(pd.DataFrame([("q1", 0, "f", -1, failure, None)], columns=COLUMNS), 8)
    assert "failed" not in registry.query("q1") and registry.version() == version
    client.close()
