"""Alarm instances in a real Redis: the records the job's match script keeps per (query,
key), the episodes that resolutions and quiet open, and the view the API shows of them with
the stored states and the silences. Counts, cursors and probabilities are checked
against the matches written, computed here.
"""

from __future__ import annotations

import json
import time

import pytest
import redis

from contract import Keys
from contract.alarms import act, instance_id, instance_view, read_instance, read_state
from contract.entries import encode, read_match
from contract.results import queue_matches


@pytest.fixture
def client(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def keys():
    return Keys(f"inst{time.monotonic_ns()}")


def write(client, keys, query: str, batch: int, found: list[tuple[dict | None, float]], now: float) -> list:
    """One batch's matches of ``query`` (key, probability each), as the sink writes them."""
    matches = [(encode({"events": {"A": f"a{batch}-{n}", "B": "b"}, "prob": prob}), 0, key, prob)
               for n, (key, prob) in enumerate(found)]
    pipe = client.pipeline(transaction=True)
    queue_matches(pipe, keys, query, batch, matches, maxlen=10_000, at=round(now * 1000))
    pipe.execute()


def records(client, keys, query: str) -> dict[str, dict]:
    return {i.decode(): read_instance(raw) for i, raw in client.hgetall(keys.instances(query)).items()}


def view(client, keys, query: dict, instance: str, now: float, silences=()) -> dict:
    record = client.hget(keys.instances(query["id"]), instance)
    stored = read_state(client.hget(keys.alarm_states(query["id"]), instance))
    return instance_view(query, instance, read_instance(record) if record else None, stored, silences, now)


def test_keys_the_operators_tell_apart_are_instances_apart_within_one_call(client, keys):
    # 1 and 1.0 (and 0 and -0.0) are one key value, true is not 1, attribute order is no matter
    found = [({"k": 1}, 0.6), ({"k": True}, 0.7), ({"k": 1.0}, 0.8), ({"k": -0.0}, 0.9), ({"k": 0}, 0.65),
             ({"a": 1, "b": "x"}, 0.7), ({"b": "x", "a": 1.0}, 0.75), ({"k": "1"}, 0.5), (None, 0.55)]
    write(client, keys, "q", 1, found, now=100.0)
    stored = records(client, keys, "q")
    added = {}
    for key, _ in found:
        spelled = None if key is None else json.dumps(
            {n: int(v) if type(v) is float and v.is_integer() else v for n, v in key.items()}, sort_keys=True)
        added[spelled] = added.get(spelled, 0) + 1
    assert len(stored) == len(added) == 6
    assert sorted(r["added"] for r in stored.values()) == sorted(added.values()) == [1, 1, 1, 2, 2, 2]
    assert stored[instance_id("q", {"k": True})]["added"] == 1
    assert stored[instance_id("q", {"k": 1})]["added"] == 2


def test_each_key_is_an_instance_with_exact_counts_cursors_and_probabilities(client, keys):
    probs = [0.61, 0.9000000000000001, 0.7, 0.123456789012345678, 0.95, 0.62]
    found = [({"region": n % 3}, p) for n, p in enumerate(probs)] + [(None, 0.5), ({"region": 1.0}, 0.99)]
    write(client, keys, "q", 1, found[:4], now=100.0)
    write(client, keys, "q", 2, found[4:], now=101.5)
    entries = client.xrange(keys.matches("q"))
    stored = records(client, keys, "q")
    expected = {}
    for (entry_id, fields), (key, prob) in zip(entries, found):
        iid = instance_id("q", key)
        assert read_match(entry_id, fields)["alarm"] == iid
        e = expected.setdefault(iid, {"added": 0, "first": entry_id.decode(), "high": prob, "key": key})
        e.update(added=e["added"] + 1, last=entry_id.decode(), last_prob=prob, high=max(e["high"], prob))
    assert set(stored) == set(expected) == {"q", instance_id("q", {"region": 0}), instance_id("q", {"region": 1}),
                                            instance_id("q", {"region": 2})}
    for iid, e in expected.items():
        r = stored[iid]
        assert (r["added"], r["first"], r["last"], r["episode"], r["opened_added"]) == \
            (e["added"], e["first"], e["last"], 1, 0)
        assert r["high"] == e["high"] and r["last_prob"] == e["last_prob"]   # to the last bit
        assert r["key"] == (None if e["key"] is None else {"region": int(e["key"]["region"])})
    assert stored[instance_id("q", {"region": 1})]["last_at"] == 101.5
    opened = [(f[b"i"].decode(), f[b"event"]) for _, f in client.xrange(keys.alarm_events)]
    assert sorted(opened) == sorted((iid, b"opened") for iid in expected)


def test_a_resolved_instance_reopens_with_the_next_match_and_old_actions_no_longer_apply(client, keys):
    query = {"id": "r", "name": "r"}
    iid = instance_id("r", {"k": "x"})
    write(client, keys, "r", 1, [({"k": "x"}, 0.8), ({"k": "x"}, 0.9)], now=10.0)
    act(client, keys, iid, "acknowledged", "ann", 11.0)
    assert view(client, keys, query, iid, 12.0)["state"] == "acknowledged"
    act(client, keys, iid, "resolved", "bob", 13.0, comment="sensor swapped")
    shown = view(client, keys, query, iid, 14.0)
    assert (shown["state"], shown["updated_by"], shown["comment"], shown["matches"]) == \
        ("resolved", "bob", "sensor swapped", 2)
    write(client, keys, "r", 2, [({"k": "x"}, 0.6)], now=20.0)
    shown = view(client, keys, query, iid, 21.0)
    assert (shown["state"], shown["matches"], shown["episode"], shown["high_prob"], shown["updated_by"]) == \
        ("new", 1, 2, 0.6, None)
    assert shown["first"] == shown["last"] == client.xrange(keys.matches("r"))[-1][0].decode()
    assert [f[b"event"] for _, f in client.xrange(keys.alarm_events)] == [b"opened", b"reopened"]
    # a match while it is not resolved opens nothing
    write(client, keys, "r", 3, [({"k": "x"}, 0.7)], now=22.0)
    assert view(client, keys, query, iid, 23.0)["matches"] == 2 and client.xlen(keys.alarm_events) == 2


def test_quiet_resolves_an_instance_by_itself_and_the_next_match_reopens_it(client, keys):
    query = {"id": "a", "name": "a", "auto_resolve_minutes": 1}
    client.hset(keys.queries, "a", json.dumps(query))
    write(client, keys, "a", 1, [(None, 0.7)], now=1000.0)
    assert view(client, keys, query, "a", 1059.0)["state"] == "new"
    shown = view(client, keys, query, "a", 1060.0)
    assert (shown["state"], shown["updated_by"], shown["updated_at"]) == ("resolved", "auto", 1060.0)
    write(client, keys, "a", 2, [(None, 0.8)], now=1059.0 + 61)
    shown = view(client, keys, query, "a", 1121.0)
    assert (shown["state"], shown["episode"], shown["matches"]) == ("new", 2, 1)
    # without auto-resolve the same quiet changes nothing
    client.hset(keys.queries, "a", json.dumps({"id": "a"}))
    write(client, keys, "a", 3, [(None, 0.8)], now=5000.0)
    assert view(client, keys, {"id": "a"}, "a", 9000.0)["episode"] == 2


def test_silences_cover_instances_by_query_and_key_while_in_force(client, keys):
    query = {"id": "s", "name": "s", "priority": "critical"}
    north, south = instance_id("s", {"region": "n", "floor": 2}), instance_id("s", {"region": "s", "floor": 2})
    write(client, keys, "s", 1, [({"region": "n", "floor": 2}, 0.9), ({"region": "s", "floor": 2}, 0.9)], now=50.0)
    window = {"id": "w1", "query": "s", "key": {"region": "n"}, "start": 40.0, "end": 60.0}
    shown = view(client, keys, query, north, 55.0, [window])
    assert (shown["state"], shown["silence"], shown["silenced_until"]) == ("silenced", "w1", 60.0)
    assert view(client, keys, query, south, 55.0, [window])["state"] == "new"
    assert view(client, keys, query, north, 60.0, [window])["state"] == "new"          # ended
    assert view(client, keys, query, north, 39.0, [window])["state"] == "new"          # not begun
    every = {"id": "w2", "query": "s", "key": None, "start": 0.0, "end": 100.0}
    assert {view(client, keys, query, i, 55.0, [every])["state"] for i in (north, south)} == {"silenced"}
    other = {"id": "w3", "query": "t", "key": None, "start": 0.0, "end": 100.0}
    assert view(client, keys, query, north, 55.0, [other])["state"] == "new"
    # silenced by someone until a time: acknowledged after it when nothing matched, new when something did
    act(client, keys, north, "silenced", "ann", 56.0, until=70.0)
    assert view(client, keys, query, north, 65.0)["state"] == "silenced"
    assert view(client, keys, query, north, 71.0)["state"] == "acknowledged"
    write(client, keys, "s", 2, [({"region": "n", "floor": 2.0}, 0.95)], now=66.0)
    assert view(client, keys, query, north, 71.0)["state"] == "new"
    assert view(client, keys, query, north, 71.0)["priority"] == "critical"
