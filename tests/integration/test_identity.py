"""Event identity at the ingest (contract/identity.py, contract/ingest.py), in a real Redis:
each (stream, id) is appended once; the same event again is a duplicate, other content a
conflict; within one call, across calls, from many clients at once; remembered for a horizon
and forgotten after two. The expectations are written out here, event by event."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from contract.entries import read_ingest
from contract.identity import BUCKETS, content_digest, identified, identity
from contract.ingest import CONFLICT, DUPLICATE, append_events, ingest
from penumbra.events import parse_event, parse_streams


def event(stream: str, event_id: str, lo: float = 0.0, **attrs) -> dict:
    return {"stream": stream, "id": event_id, "ts": {"lo": lo, "hi": lo + 1}, "attrs": attrs}


def encoded(item: dict) -> bytes:
    return json.dumps(item).encode()


def ingested(client, keys) -> list[dict]:
    return [json.loads(line) for _, _, line in read_ingest(client.xrange(keys.ingest))]


def test_identity_and_content_digest_are_what_the_contract_says():
    # the stream's case does not matter, the id's does; the order of a client's keys does not
    assert identity("Seismic", "s-1") == identity("seismic", "s-1") != identity("seismic", "S-1")
    assert identity("a", "b\x00c") != identity("a\x00b", "c")
    first = {"stream": "Seismic", "id": "s-1", "ts": {"lo": 1, "hi": 2}, "attrs": {"a": 1, "b": 2}}
    reordered = {"attrs": {"b": 2, "a": 1}, "ts": {"hi": 2.0, "lo": 1.0}, "id": "s-1", "stream": "seismic"}
    assert content_digest(parse_event(first)) == content_digest(parse_event(reordered))
    assert content_digest(parse_event(first)) != content_digest(parse_event({**first, "attrs": {"a": 1, "b": 3}}))
    assert content_digest(parse_event(first)) != content_digest(parse_event({**first, "attrs": {"a": True, "b": 2}}))
    assert content_digest(parse_event({**first, "attrs": {"big": 2 ** 70}})) != content_digest(parse_event(first))
    assert 0 <= identified(parse_event(first), b"").bucket < BUCKETS
    # the values Redis remembers across versions (an identity kept over an upgrade still matches)
    assert identity("Seismic", "s-1").hex() == "b434ddfcf0e7a173937188c1"
    plain = {"stream": "S", "id": "a", "ts": {"lo": 1, "hi": 2.5}, "attrs": {"z": True, "a": 1.0}}
    assert content_digest(parse_event(plain)).hex() == "cdd71b549b7f5b21"
    big = {**plain, "attrs": {"z": True, "a": 1.0, "big": 2 ** 70}}
    assert content_digest(parse_event(big)).hex() == "fa05ab762bc4d4ac"
    assert identified(None, b"x").identity is None


def test_each_identity_is_appended_once_within_a_call_and_across_calls(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    items = [event("S", "a"), event("S", "b"), event("S", "a"), event("s", "a"), event("T", "a"),
             event("S", "b", lo=5.0)]
    found = ingest(client, keys, [identified(parse_event(item), encoded(item)) for item in items], horizon=3600)
    assert [type(f).__name__ if isinstance(f, bytes) else f for f in found] == \
        ["bytes", "bytes", DUPLICATE, DUPLICATE, "bytes", CONFLICT]
    assert ingested(client, keys) == [items[0], items[1], items[4]]
    # a run of events appended is one entry, a block; a single event an entry of its own
    assert [list(fields) for _, fields in client.xrange(keys.ingest)] == [[b"b", b"n"], [b"e"]]
    assert found[0] == found[1] != found[4]
    # the same batch again: nothing appended; what is new in it is
    again = items[:2] + [event("S", "c")]
    found = ingest(client, keys, [identified(parse_event(item), encoded(item)) for item in again], horizon=3600)
    assert found[:2] == [DUPLICATE, DUPLICATE] and isinstance(found[2], bytes)
    assert ingested(client, keys) == [items[0], items[1], items[4], again[2]]
    client.close()


def test_append_events_gives_invalid_entries_no_identity_and_dead_letters_conflicts(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    streams = parse_streams({"S": {}})
    bad = {"stream": "S", "id": "x", "ts": {"lo": 2, "hi": 1}}
    lines = [b"{not json", b"[1]", b"{not json", encoded(bad), encoded(event("S", "x")), encoded(event("S", "x")),
             encoded(event("S", "x", lo=9.0))]
    dead_before = client.xlen(keys.dead)
    ids = append_events(client, lines, keys, streams=streams)
    # the unreadable and the invalid go as they are (the job rejects them); the corrected x once
    assert len(ids) == 5 and [f[b"e"] for _, f in client.xrange(keys.ingest)] == lines[:5]
    assert ids.conflicts == 1   # and one duplicate: 7 given
    (letter,) = client.xrange(keys.dead)[dead_before:]
    assert b"conflict" in letter[1][b"reason"] and letter[1][b"raw"] == lines[6] and letter[1][b"source"] == b"ingest"
    client.close()


def test_identities_are_remembered_for_a_horizon_and_forgotten_after_two(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    horizon = 2.0
    item = identified(parse_event(event("S", "a")), encoded(event("S", "a")))

    def redis_now() -> float:
        seconds, micros = client.time()
        return seconds + micros / 1e6

    def wait_until(moment: float) -> None:
        while redis_now() < moment:
            time.sleep(0.02)

    assert isinstance(ingest(client, keys, [item], horizon)[0], bytes)
    (bucket,) = client.keys(f"{keys.identities}*:{item.bucket}")
    generation = int(bucket.decode().split(":")[-2])       # the generation Redis's clock chose
    assert client.expiretime(bucket) == int((generation + 2) * horizon) + 60
    assert ingest(client, keys, [item], horizon) == [DUPLICATE]
    wait_until((generation + 1) * horizon + 0.05)          # the next generation: still remembered
    other = identified(parse_event(event("S", "a", lo=7.0)), encoded(event("S", "a", lo=7.0)))
    if redis_now() < (generation + 2) * horizon - 0.3:
        assert ingest(client, keys, [item, other], horizon) == [DUPLICATE, CONFLICT]
        # remembered in its own generation, not again in the next (it is forgotten on time)
        assert client.hget(f"{keys.identities}{generation + 1}:{item.bucket}", item.identity) is None
    wait_until((generation + 2) * horizon + 0.05)          # two generations on: forgotten
    assert isinstance(ingest(client, keys, [item], horizon)[0], bytes)
    client.close()


def test_many_clients_sending_the_same_events_at_once_append_each_once(redis_server, keys):
    items = [encoded(event("S", f"e{n}", lo=float(n))) for n in range(400)]
    appended: list[int] = []

    def client_sends() -> None:
        with redis.Redis.from_url(redis_server.url) as client:
            appended.append(len(append_events(client, items, keys, streams=parse_streams({"S": {}}))))

    threads = [threading.Thread(target=client_sends) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with redis.Redis.from_url(redis_server.url) as client:
        assert [e["id"] for e in ingested(client, keys)] == [f"e{n}" for n in range(400)]
    assert sum(appended) == 400


def test_runs_of_new_events_go_in_blocks_in_order_and_each_answer_names_its_entry(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    rng = __import__("random").Random(7)
    sent: list[tuple[bytes, bool]] = []   # what was appended: (the payload, it has an identity)
    for call in range(30):
        items = []
        for n in range(rng.randint(1, 12)):
            pick = rng.random()
            if pick < 0.15:
                items.append(identified(None, f"not an event {call}.{n}".encode()))
            else:
                # a new identity, or one of the last calls' again (a duplicate, or a conflict)
                key = f"e{call}.{n}" if pick < 0.7 or call == 0 else f"e{rng.randint(max(0, call - 2), call - 1)}.0"
                item = event("S", key, lo=float(rng.choice([1, 1, 2])))
                payload = json.dumps(item, indent=rng.choice([None, 1])).encode()   # some with line breaks
                items.append(identified(parse_event(item), payload))
        known = {json.loads(line)["id"]: json.loads(line) for line, valid in sent if valid}
        found = ingest(client, keys, items, horizon=3600, block=4)
        for item, answer in zip(items, found):
            if item.identity is None or json.loads(item.payload)["id"] not in known:
                assert isinstance(answer, bytes)
                if item.identity is not None:
                    known[json.loads(item.payload)["id"]] = json.loads(item.payload)
                sent.append((item.payload, item.identity is not None))
            else:
                same = known[json.loads(item.payload)["id"]] == json.loads(item.payload)
                assert answer == (DUPLICATE if same else CONFLICT)
        stored = client.xrange(keys.ingest)
        by_id = {entry_id: fields for entry_id, fields in stored}
        # each answer names the entry holding the event; a block holds two to four (the most)
        for item, answer in zip(items, found):
            if isinstance(answer, bytes):
                fields = by_id[answer]
                if b"b" in fields:
                    assert 2 <= int(fields[b"n"]) <= 4
                    assert item.payload.replace(b"\n", b" ") in fields[b"b"].split(b"\n")
                else:
                    assert fields == {b"e": item.payload.replace(b"\n", b" ") if item.identity else item.payload}
    with pytest.raises(ValueError, match="one event or more"):
        ingest(client, keys, items, horizon=3600, block=0)
    shapes = [list(fields)[0] for _, fields in client.xrange(keys.ingest)]
    assert shapes.count(b"b") > 5 and shapes.count(b"e") > 5
    # in order, each line as sent (a valid event's line breaks as spaces: the same JSON)
    assert [line for _, _, line in read_ingest(client.xrange(keys.ingest))] == \
        [payload.replace(b"\n", b" ") if valid else payload for payload, valid in sent]
    client.close()
