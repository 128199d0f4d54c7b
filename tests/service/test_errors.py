"""Errors: JSON ``{"error": {...}}``, 4xx for bad input (never a 500), 413 for big bodies,
503 while Redis is down and recovery, with queries and tokens intact, once it is back."""

from __future__ import annotations

import time

import pytest
import redis

from .conftest import JOIN, JOIN_PI, bearer, fresh_streams


@pytest.mark.parametrize("body, status", [
    (b'{"text": "SELECT"', 400),                                    # cut short
    (b'{"text": "x"} trailing', 400),
    (b'\xff\xfe{"text": 1}', 400),                                  # not UTF-8
    (b'{"text": "\xc3\x28"}', 400),                                 # an invalid UTF-8 sequence inside
    (b'{"text": NaN}', 422),
    (b'{"text": 12}', 422),
    (b'{"text": "SELECT * FROM A X, B Y WHERE WINDOW(X, Y) = 1", "threshold": NaN}', 422),
    (b'{"text": "SELECT * FROM A X, B Y WHERE WINDOW(X, Y) = 1", "threshold": Infinity}', 422),
    (b'{"text": "SELECT * FROM A X, B Y WHERE WINDOW(X, Y) = 1", "threshold": 1e999}', 422),
    (b'[]', 422),
    (b'null', 422),
    (b'', 422),
])
def test_bad_bodies_are_4xx_json(client, as_role, body, status):
    answer = client.post("/api/queries", content=body,
                         headers={**as_role("analyst"), "Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error"} and answer.json()["error"]["message"]


def test_wrong_content_type(client, as_role):
    answer = client.post("/api/queries", content=b"text=x", headers={**as_role("analyst"),
                                                                    "Content-Type": "application/x-www-form-urlencoded"})
    assert 400 <= answer.status_code < 500


def test_huge_body_is_413(client, as_role, settings, store, keys):
    before = store.xlen(keys.ingest)
    huge = b"[" + b",".join([b'{"stream": "S", "id": "x", "ts": {"lo": 0, "hi": 1}}'] * 10_000) + b"]"
    assert len(huge) > settings.max_body_bytes
    answer = client.post("/api/events", content=huge, headers={**as_role("analyst"), "Content-Type": "application/json"})
    assert answer.status_code == 413 and answer.json()["error"]["limit"] == settings.max_body_bytes

    def chunks():      # no Content-Length: counted as it arrives
        for start in range(0, len(huge), 65536):
            yield huge[start:start + 65536]

    answer = client.post("/api/events", content=chunks(), headers={**as_role("analyst"),
                                                                   "Content-Type": "application/json"})
    assert answer.status_code == 413
    assert store.xlen(keys.ingest) == before


def test_unknown_route_and_method(client, as_role):
    assert client.get("/api/nothing", headers=as_role("viewer")).json()["error"]["message"]
    answer = client.put("/api/queries", headers=as_role("admin"))
    assert answer.status_code == 405 and answer.json()["error"]["message"]


def test_redis_down_is_503_then_recovers(client, as_role, tokens, redis_server):
    stream, partner = fresh_streams(client, "S", "S", pi=JOIN_PI)
    text = JOIN.format(a=stream, b=partner)
    query = client.post("/api/queries", json={"text": text, "threshold": 0.75}, headers=as_role("analyst")).json()
    fresh = client.post("/api/tokens", json={"role": "viewer", "label": "survivor"}, headers=as_role("admin")).json()
    redis_server.stop()
    try:
        for method, path, body in [("GET", "/api/queries", None), ("GET", f"/api/alarms/{query['id']}", None),
                                   ("POST", "/api/events", [{"stream": stream, "id": "a", "ts": {"lo": 0, "hi": 1}}]),
                                   ("PATCH", f"/api/queries/{query['id']}", {"threshold": 0.8})]:
            answer = client.request(method, path, json=body, headers=as_role("analyst"))
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["Retry-After"] and answer.json()["error"]["message"]
        health = client.get("/api/health")
        assert health.status_code == 503 and health.json()["status"] == "down"
    finally:
        redis_server.start()
    # the same client (and connection pool) works again; the AOF kept queries and tokens
    deadline = time.monotonic() + 10
    while client.get("/api/health").status_code != 200:
        assert time.monotonic() < deadline, "the service did not recover"
        time.sleep(0.1)
    got = client.get(f"/api/queries/{query['id']}", headers=as_role("viewer"))
    assert got.status_code == 200 and got.json() == query
    assert client.get("/api/me", headers=bearer(fresh["token"])).json()["label"] == "survivor"
    assert client.get("/api/me", headers=bearer(tokens["analyst"])).status_code == 200
    patched = client.patch(f"/api/queries/{query['id']}", json={"threshold": 0.8}, headers=as_role("analyst"))
    assert patched.status_code == 200 and patched.json()["threshold"] == 0.8
    assert isinstance(redis.Redis.from_url(redis_server.url).ping(), bool)


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/api/queries/{q}/matches?before=18446744073709551616-0", None),
    ("GET", "/api/queries/{q}/matches?before=1-18446744073709551616", None),
    ("GET", "/api/queries/{q}/matches?since=18446744073709551615-18446744073709551615", None),
    ("GET", "/api/queries/{q}/history?next=18446744073709551616-0", None),
    ("GET", "/api/queries/{q}/matches/253402300800000-0/explanation", None),
    ("POST", "/api/queries/{q}/verdicts", {"match": "253402300800000-0", "verdict": "real"}),
])
def test_cursors_no_entry_could_have_are_422(client, as_role, join_query, method, path, body):
    """A cursor beyond the year 9999 or beyond what Redis takes names nothing the system
    wrote: 422 naming it, not a 500."""
    answer = client.request(method, path.format(q=join_query[0]), json=body, headers=as_role("analyst"))
    assert answer.status_code == 422, answer.text
    assert "not an entry id" in answer.text


def test_nothing_is_older_than_the_first_cursor(client, as_role, join_query):
    answer = client.get(f"/api/queries/{join_query[0]}/matches?before=0-0", headers=as_role("viewer"))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"items": [], "next": None}


@pytest.mark.parametrize("key", ['{"a":NaN}', '{"a":Infinity}', '{"a":1e400}'])
def test_a_key_filter_with_a_value_json_cannot_carry_is_422(client, as_role, join_query, key):
    for path in ("/api/alarms", f"/api/queries/{join_query[0]}/history"):
        answer = client.get(path, params={"key": key}, headers=as_role("viewer"))
        assert answer.status_code == 422, (path, answer.text)


def test_a_stream_is_read_under_any_case_of_its_name(client, as_role):
    (name,) = fresh_streams(client, "Case")
    answer = client.get(f"/api/streams/{name.upper()}", headers=as_role("analyst"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["name"] == name


def test_a_template_wider_than_a_float_is_refused(client, as_role):
    answer = client.put("/api/streams/wide", json={"templates": {"t": {"edges": [-1e308, 1e308], "probs": [1]}}},
                        headers=as_role("admin"))
    assert answer.status_code == 422, answer.text
    assert "spans more than a float holds" in answer.text
