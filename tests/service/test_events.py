"""Events: valid ones reach the ingest stream in order, invalid ones are answered and dead-lettered."""

from __future__ import annotations

import json
import threading
import time

import httpx

import pytest
from fastapi.testclient import TestClient

from backend import create_app
from contract.entries import read_ingest
from penumbra.errors import ValidationError
from penumbra.events import parse_event, parse_streams

from .conftest import ADMIN_TOKEN, bearer, fresh_streams, unique


def event(stream, n, lo=0.0, hi=1.0, **attrs):
    return {"stream": stream, "id": f"e-{n}", "ts": {"lo": lo, "hi": hi}, "attrs": attrs}


def ingested_after(store, keys, entry_id: str | None) -> list[dict]:
    start = f"({entry_id}" if entry_id else "-"
    return [json.loads(line) for _, _, line in read_ingest(store.xrange(keys.ingest, start, "+"))]


def last_id(store, key) -> str:
    found = store.xrevrange(key, count=1)
    return found[0][0].decode() if found else "0-0"


def test_partial_batch_keeps_every_valid_event_in_order(client, as_role, store, keys):
    (stream,) = fresh_streams(client, "S")
    batch = [
        event(stream, 0),
        {"stream": stream, "id": "bad-lo", "ts": {"lo": 5, "hi": 1}},
        event(stream, 1, 2, 3, region="north"),
        {"stream": stream, "id": "e-0", "ts": {"lo": 1, "hi": 2}},          # duplicate id in the batch
        "not an object",
        event(stream, 2, 3, 4),
        {"stream": stream, "id": "t", "ts": {"detected": 5, "template": "nope"}},
        {"stream": stream, "ts": {"lo": 1, "hi": 2}},
        {"stream": stream, "id": "h", "ts": {"edges": [0, 1, 2], "probs": [0.5, 0.6]}},
        event(stream, 3, 10, 20, value=1.5),
    ]
    ingest_mark, dead_mark = last_id(store, keys.ingest), last_id(store, keys.dead)
    rejected_before = int(store.hget(keys.counts, "rejected") or 0)
    answer = client.post("/api/events", json=batch, headers=as_role("analyst"))
    assert answer.status_code == 202, answer.text
    out = answer.json()
    # what the core says of each event on its own (the duplicate is the block's rule)
    expected_bad = set()
    for index, item in enumerate(batch):
        try:
            parse_event(item)
        except ValidationError:
            expected_bad.add(index)
    expected_bad.add(3)
    assert [e["index"] for e in out["errors"]] == sorted(expected_bad)
    assert out["accepted"] == len(batch) - len(expected_bad) and out["rejected"] == len(expected_bad)
    stored = ingested_after(store, keys, ingest_mark)
    assert stored == [item for index, item in enumerate(batch) if index not in expected_bad]
    assert out["first_id"] == store.xrange(keys.ingest, f"({ingest_mark}", "+", count=1)[0][0].decode()
    # the request's valid events are appended together: one entry, a block
    assert out["last_id"] == out["first_id"] == last_id(store, keys.ingest)
    dead = [{k.decode(): v.decode() for k, v in f.items()} for _, f in store.xrange(keys.dead, f"({dead_mark}", "+")]
    assert [int(d["index"]) for d in dead] == sorted(expected_bad)
    assert all(d["kind"] == "rejected" and d["who"] == "test-analyst" and d["reason"] for d in dead)
    assert [json.loads(d["raw"]) for d in dead] == [batch[i] for i in sorted(expected_bad)]
    assert {e["index"]: e["reason"] for e in out["errors"]} == {int(d["index"]): d["reason"] for d in dead}
    assert int(store.hget(keys.counts, "rejected")) == rejected_before + len(expected_bad)


def test_template_events_resolve_against_registered_streams(client, as_role, store, keys):
    stream = unique("T")
    params = {"templates": {"s1": {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]}}, "max_delay": 5}
    assert client.put(f"/api/streams/{stream}", json=params, headers=as_role("admin")).status_code == 200
    good = {"stream": stream, "id": "a", "ts": {"detected": 60, "template": "s1"}}
    bad = {"stream": stream, "id": "b", "ts": {"detected": 60, "template": "s2"}}
    parse_event(good, parse_streams({stream: params}))
    answer = client.post("/api/events", json=[good, bad], headers=as_role("analyst")).json()
    assert answer["accepted"] == 1 and answer["errors"][0]["field"] == "ts.template"


def test_what_orjson_would_not_write(client, as_role, store, keys):
    (stream,) = fresh_streams(client, "S")
    body = ('[{"stream": "%s", "id": "a", "ts": {"lo": 1, "hi": 2}, "attrs": {"big": %d, "note": "\\ud800"}}]'
            % (stream, 2 ** 70)).encode()
    mark = last_id(store, keys.ingest)
    answer = client.post("/api/events", content=body, headers={**as_role("analyst"), "Content-Type": "application/json"})
    assert answer.status_code == 202 and answer.json()["accepted"] == 1
    assert ingested_after(store, keys, mark) == json.loads(body)          # the integer exact, the text as sent


def test_single_event(client, as_role, store, keys):
    (stream,) = fresh_streams(client, "S")
    mark = last_id(store, keys.ingest)
    answer = client.post("/api/events", json=event(stream, 7), headers=as_role("analyst"))
    assert answer.status_code == 202 and answer.json()["accepted"] == 1
    assert ingested_after(store, keys, mark) == [event(stream, 7)]


def test_single_invalid_event_is_422_and_dead_lettered(client, as_role, store, keys):
    dead_mark = last_id(store, keys.dead)
    bad = {"stream": unique("S"), "id": "x", "ts": {"lo": 1, "hi": 0}}
    answer = client.post("/api/events", json=bad, headers=as_role("analyst"))
    assert answer.status_code == 422
    assert answer.json()["error"]["field"].startswith("ts")
    (dead,) = store.xrange(keys.dead, f"({dead_mark}", "+")
    assert json.loads(dead[1][b"raw"]) == bad


def test_a_huge_invalid_event_keeps_its_first_bytes_and_length_in_the_dead_letter(client, as_role, store, keys):
    """A dead letter holds the reason and the event's first DEAD_RAW_BYTES (with its whole
    length): a flood of large rejects cannot fill Redis; the valid event beside it goes in."""
    from contract.entries import DEAD_RAW_BYTES

    (stream,) = fresh_streams(client, "S")
    dead_mark, mark = last_id(store, keys.dead), last_id(store, keys.ingest)
    huge = event(stream, 1, note="n" * 50_000)
    answer = client.post("/api/events", json=[huge, event(stream, 2)], headers=as_role("analyst"))
    assert answer.status_code == 202 and answer.json()["accepted"] == 1
    (dead,) = store.xrange(keys.dead, f"({dead_mark}", "+")
    fields = dead[1]
    sent = json.dumps(huge, separators=(",", ":")).encode()
    assert b"attrs.note" in fields[b"reason"] and b"too long" in fields[b"reason"]
    assert fields[b"raw"] == sent[:DEAD_RAW_BYTES] and int(fields[b"raw_bytes"]) == len(sent)
    assert ingested_after(store, keys, mark) == [event(stream, 2)]


def test_a_huge_attribute_name_gets_a_short_answer_and_a_short_dead_letter(client, as_role, store, keys):
    """A 7 MB attribute name once answered 21 MB and left a 14 MB dead letter: what an error
    quotes is cut, so both stay small, and the valid event beside it goes in (200 KB here,
    within the test service's body limit)."""
    (stream,) = fresh_streams(client, "S")
    dead_mark, mark = last_id(store, keys.dead), last_id(store, keys.ingest)
    huge = {"stream": stream, "id": "big", "ts": {"lo": 1, "hi": 2}, "attrs": {"k" * 200_000: 1}}
    single = client.post("/api/events", json=huge, headers=as_role("analyst"))
    assert single.status_code == 422 and len(single.content) < 4096
    assert single.json()["error"]["field"].startswith("attrs.kkk") and "characters in all" in single.text
    batch = client.post("/api/events", json=[huge, event(stream, 2)], headers=as_role("analyst"))
    assert batch.status_code == 202 and batch.json()["accepted"] == 1 and len(batch.content) < 4096
    letters = store.xrange(keys.dead, f"({dead_mark}", "+")
    assert len(letters) == 2
    for _, fields in letters:
        assert sum(len(k) + len(v) for k, v in fields.items()) < 12_000
    assert ingested_after(store, keys, mark) == [event(stream, 2)]


def test_a_retried_batch_is_taken_once_and_other_content_under_a_known_id_is_a_conflict(client, as_role, store,
                                                                                         keys):
    (stream,) = fresh_streams(client, "S")
    batch = [event(stream, n, lo=float(n), hi=n + 1.0) for n in range(5)]
    mark, dead_mark = last_id(store, keys.ingest), last_id(store, keys.dead)
    first = client.post("/api/events", json=batch, headers=as_role("analyst")).json()
    assert (first["accepted"], first["duplicates"], first["rejected"]) == (5, 0, 0)
    again = client.post("/api/events", json=batch, headers=as_role("analyst")).json()
    assert (again["accepted"], again["duplicates"], again["rejected"], again["first_id"]) == (0, 5, 0, None)
    # a retry from a client that orders its keys otherwise is the same event
    reordered = [{"attrs": {}, "ts": {"hi": 1.0, "lo": 0.0}, "id": "e-0", "stream": stream.upper()}]
    assert client.post("/api/events", json=reordered, headers=as_role("analyst")).json()["duplicates"] == 1
    # one known id with another timestamp, one new event, one known event
    mixed = [event(stream, 1, lo=50.0, hi=51.0), event(stream, 9), batch[2]]
    answer = client.post("/api/events", json=mixed, headers=as_role("analyst")).json()
    assert (answer["accepted"], answer["duplicates"], answer["rejected"]) == (1, 1, 1)
    assert [(e["index"], e["field"]) for e in answer["errors"]] == [(0, "id")]
    assert "conflict" in answer["errors"][0]["reason"]
    assert ingested_after(store, keys, mark) == batch + [mixed[1]]
    (dead,) = store.xrange(keys.dead, f"({dead_mark}", "+")
    assert b"conflict" in dead[1][b"reason"] and json.loads(dead[1][b"raw"]) == mixed[0]
    # a single event: a conflict is 409, a duplicate is taken once
    single = client.post("/api/events", json=event(stream, 2, lo=7.0, hi=8.0), headers=as_role("analyst"))
    assert single.status_code == 409 and single.json()["error"]["field"] == "id"
    single = client.post("/api/events", json=batch[3], headers=as_role("analyst"))
    assert single.status_code == 202 and (single.json()["accepted"], single.json()["duplicates"]) == (0, 1)
    assert ingested_after(store, keys, mark) == batch + [mixed[1]]


def test_an_event_twice_in_one_request_is_taken_once_and_other_content_in_it_is_a_conflict(client, as_role, store,
                                                                                             keys):
    (stream,) = fresh_streams(client, "S")
    items = [event(stream, 0), event(stream, 1), event(stream, 0), event(stream, 1, lo=0.5), event(stream, 2)]
    mark = last_id(store, keys.ingest)
    answer = client.post("/api/events", json=items, headers=as_role("analyst")).json()
    assert (answer["accepted"], answer["duplicates"], answer["rejected"]) == (3, 1, 1)
    assert [(e["index"], e["field"]) for e in answer["errors"]] == [(3, "id")]
    assert "conflict" in answer["errors"][0]["reason"]
    assert ingested_after(store, keys, mark) == [items[0], items[1], items[4]]
    # a repeat shares its first's fate, and every index stays its own: an unregistered
    # stream's event after a repeat, and a repeat of a refused event, are refused at theirs
    unknown = event(stream + "x", 5)
    items = [event(stream, 7), event(stream, 7), unknown, unknown, event(stream, 8)]
    answer = client.post("/api/events", json=items, headers=as_role("analyst")).json()
    assert (answer["accepted"], answer["duplicates"], answer["rejected"]) == (2, 1, 2)
    assert [(e["index"], e["field"]) for e in answer["errors"]] == [(2, "stream"), (3, "stream")]
    assert ingested_after(store, keys, mark)[-2:] == [items[0], items[4]]


def test_two_clients_posting_the_same_batch_at_once_append_it_once(api_server, client, tokens, store, keys):
    (stream,) = fresh_streams(client, "S")
    batches = [[event(stream, 100 * b + n, lo=float(n), hi=n + 1.0) for n in range(100)] for b in range(8)]
    mark = last_id(store, keys.ingest)
    answers: list[dict] = []

    def post_all() -> None:
        with httpx.Client(base_url=api_server.url, headers=bearer(tokens["analyst"]), timeout=30) as http:
            for batch in batches:
                answers.append(http.post("/api/events", json=batch).json())

    threads = [threading.Thread(target=post_all) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(e["id"] for e in ingested_after(store, keys, mark)) == sorted(e["id"] for b in batches for e in b)
    assert sum(a["accepted"] for a in answers) == 800 and sum(a["duplicates"] for a in answers) == 1600


def test_the_dead_letter_stream_stays_within_its_memory_budget(settings, store):
    """A client sending invalid events quoting 8 KB each (4 MB in all) against a budget of
    1 MB: what Redis reports for the stream stays about the budget, the newest kept."""
    prefix = unique("pn-dead-")
    app = create_app(settings.model_copy(update={"redis_prefix": prefix, "dead_max_mb": 1.0}))
    with TestClient(app) as client:
        headers = bearer(ADMIN_TOKEN)   # the bootstrap admin of the app's own prefix
        for request in range(20):     # 25 a request: under the session's body limit
            bad = [{"stream": "S", "id": f"{request}-{n}", "ts": "x" * 8000} for n in range(25)]
            answer = client.post("/api/events", json=bad, headers=headers)
            assert answer.status_code == 202 and answer.json()["rejected"] == 25
        dead = app.state.service.keys.dead
        assert store.memory_usage(dead, samples=0) <= 1.2 * 1024 * 1024
        assert 50 <= store.xlen(dead) < 500
        assert json.loads(store.xrevrange(dead, count=1)[0][1][b"raw"])["id"] == "19-24"
    for key in store.scan_iter(f"{prefix}:*"):
        store.delete(key)


@pytest.mark.parametrize("event_id", ["a\x00b", "red \x1b[31m", "abc\u202edcba", "line\nbreak", "tab\there"])
def test_ids_with_control_or_invisible_characters_are_refused_and_the_rest_kept(client, as_role, store, keys,
                                                                                 event_id):
    (stream,) = fresh_streams(client, "S")
    mark = last_id(store, keys.ingest)
    bad = {"stream": stream, "id": event_id, "ts": {"lo": 1, "hi": 2}}
    answer = client.post("/api/events", json=[bad, event(stream, 2)], headers=as_role("analyst"))
    assert answer.status_code == 202, answer.text
    assert answer.json()["accepted"] == 1 and answer.json()["errors"][0]["field"] == "id"
    assert "printable" in answer.json()["errors"][0]["reason"]
    assert ingested_after(store, keys, mark) == [event(stream, 2)]


def test_a_timestamp_longer_than_its_streams_pi_is_refused_with_its_index(client, as_role, store, keys):
    (stream,) = fresh_streams(client, "S")
    assert client.put(f"/api/streams/{stream}", json={"pi": 10, "max_delay": 5},
                      headers=as_role("admin")).status_code == 200
    dead_mark, mark = last_id(store, keys.dead), last_id(store, keys.ingest)
    items = [{"stream": stream, "id": "a", "ts": {"lo": 0, "hi": 5}}, {"stream": stream, "id": "b", "ts": "bad"},
             {"stream": stream, "id": "c", "ts": {"lo": 0, "hi": 20}},
             {"stream": stream, "id": "d", "ts": {"lo": 3, "hi": 13}}]
    answer = client.post("/api/events", json=items, headers=as_role("analyst")).json()
    assert (answer["accepted"], answer["rejected"]) == (2, 2)
    assert [(e["index"], e["field"]) for e in answer["errors"]] == [(1, "ts"), (2, "ts")]
    assert "exceeds the stream's pi 10" in answer["errors"][1]["reason"]
    assert ingested_after(store, keys, mark) == [items[0], items[3]]
    assert len(store.xrange(keys.dead, f"({dead_mark}", "+")) == 2


def test_an_event_of_an_unregistered_stream_is_refused_with_its_index_and_the_rest_kept(client, as_role, store,
                                                                                         keys):
    (stream,) = fresh_streams(client, "S")
    typo = stream[:-1] + ("x" if stream[-1] != "x" else "y")
    dead_mark, mark = last_id(store, keys.dead), last_id(store, keys.ingest)
    items = [event(stream, 0), event(typo, 1), event(stream.upper(), 2)]   # names compare case-insensitively
    answer = client.post("/api/events", json=items, headers=as_role("analyst")).json()
    assert (answer["accepted"], answer["rejected"]) == (2, 1)
    assert [(e["index"], e["field"]) for e in answer["errors"]] == [(1, "stream")]
    assert f"stream {typo!r} is not registered" in answer["errors"][0]["reason"]
    assert ingested_after(store, keys, mark) == [items[0], items[2]]
    (dead,) = store.xrange(keys.dead, f"({dead_mark}", "+")
    assert b"not registered" in dead[1][b"reason"]
    single = client.post("/api/events", json=event(typo, 3), headers=as_role("analyst"))
    assert single.status_code == 422 and single.json()["error"]["field"] == "stream"


@pytest.mark.parametrize("body, status", [
    (b'[{"stream": "A", "id": "a", "ts": {"lo": 1, "hi": 2}}', 400),     # cut short
    (b'{"stream": "A", "id": "a", "ts": {"lo": NaN, "hi": 2}}', 400),
    (b'{"stream": "A", "id": "\xff\xfe", "ts": {"lo": 1, "hi": 2}}', 400),
    (b'"just a string"', 422),
    (b'42', 422),
    (b'', 400),
])
def test_unreadable_bodies(client, as_role, store, keys, body, status):
    mark = last_id(store, keys.ingest)
    answer = client.post("/api/events", content=body, headers={**as_role("analyst"), "Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["message"]
    assert last_id(store, keys.ingest) == mark


def test_too_many_events(client, as_role, settings, store, keys):
    (stream,) = fresh_streams(client, "S")
    mark = last_id(store, keys.ingest)
    batch = [event(stream, n) for n in range(settings.ingest_max_events + 1)]
    answer = client.post("/api/events", json=batch, headers=as_role("analyst"))
    assert answer.status_code == 422 and answer.json()["error"]["limit"] == settings.ingest_max_events
    assert last_id(store, keys.ingest) == mark
    answer = client.post("/api/events", json=batch[:-1], headers=as_role("analyst"))
    assert answer.status_code == 202 and answer.json()["accepted"] == settings.ingest_max_events


def test_rate_limit_per_token(settings, tokens):
    limited = create_app(settings.model_copy(update={"ingest_rate_limit": 3, "ingest_rate_window": 60}))
    with TestClient(limited) as client:
        if 60 - time.time() % 60 < 2:     # all four requests in one window
            time.sleep(60 - time.time() % 60)
        codes = [client.post("/api/events", json=[], headers={"Authorization": f"Bearer {tokens['analyst']}"})
                 for _ in range(4)]
        assert [c.status_code for c in codes] == [202, 202, 202, 429]
        retry = int(codes[-1].headers["Retry-After"])
        assert 1 <= retry <= 60
        # another token has its own budget
        other = client.post("/api/events", json=[], headers={"Authorization": f"Bearer {tokens['admin']}"})
        assert other.status_code == 202


@pytest.mark.parametrize("bad", [
    '{"stream": "%s", "id": "s1", "ts": {"lo": 0, "hi": 1}, "attrs": {"\\ud800x": 1}}',
    '{"stream": "%s", "id": "s2", "ts": {"lo": 0, "hi": 1}, "\\ud800": 1}',
    '{"stream": "%s", "id": "s3", "ts": {"lo": 0, "hi": 1}, "attrs": {"a": ' + "[" * 600 + "1" + "]" * 600 + "}}",
])
def test_what_cannot_be_written_as_it_came_is_refused_alone(client, as_role, store, keys, bad):
    """A lone surrogate in a name, an attribute nested some hundreds deep: the event is
    rejected with its index and reason (a dead letter), and the valid one before it kept,
    in the same request; never a 500."""
    (stream,) = fresh_streams(client, "S")
    body = "[" + json.dumps(event(stream, 0)) + ", " + bad % stream + "]"
    ingest_mark, dead_mark = last_id(store, keys.ingest), last_id(store, keys.dead)
    answer = client.post("/api/events", content=body.encode(),
                         headers={**as_role("analyst"), "Content-Type": "application/json"})
    assert answer.status_code == 202, answer.text
    out = answer.json()
    assert (out["accepted"], out["rejected"]) == (1, 1)
    assert out["errors"][0]["index"] == 1
    assert [e["id"] for e in ingested_after(store, keys, ingest_mark)] == ["e-0"]
    assert len(store.xrange(keys.dead, f"({dead_mark}", "+")) == 1
    single = client.post("/api/events", content=(bad % stream).encode(),
                         headers={**as_role("analyst"), "Content-Type": "application/json"})
    assert single.status_code in (400, 422), single.text
