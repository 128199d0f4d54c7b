"""Queries: register, list, read, change, remove; validated by the core; versioned and audited."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from backend import Settings, create_app
from contract.registry import validated_query
from penumbra.events import parse_streams
from penumbra.query import QueryError, parse
from tests.strategies import QUERY_STREAMS, queries

from .conftest import ADMIN_TOKEN, JOIN, JOIN_PI, fresh_streams

BAD_QUERIES = [
    "SELECT * FROM\nA X WHERE",
    "SELECT * FROM A X, B Y WHERE WINDOW(X, Y) = 10 WITH THRESHOLD 1.6",
    "PATTERN SEQ(A a, B b)\n  WHERE a.x = b.x\n  WITHIN",
    "SELEKT everything",
]


def audit_after(store, keys, last_id):
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _, fields in store.xrange(keys.audit, f"({last_id}", "+")]


def last_audit_id(store, keys) -> str:
    found = store.xrevrange(keys.audit, count=1)
    return found[0][0].decode() if found else "0-0"


def test_register_list_get(client, as_role, store, keys):
    a, b = fresh_streams(client, "SA", "SB", pi=JOIN_PI)
    text = JOIN.format(a=a, b=b)
    mark = last_audit_id(store, keys)
    answer = client.post("/api/queries", json={"text": text, "name": "quakes", "threshold": 0.7},
                         headers=as_role("analyst"))
    assert answer.status_code == 201, answer.text
    entry = answer.json()
    assert entry["kind"] == "join" and entry["name"] == "quakes" and entry["threshold"] == 0.7
    # what the registry stored is what was answered (a query running as it should has no failure)
    assert {"failed": None, **json.loads(store.hget(keys.queries, entry["id"]))} == entry
    assert client.get(f"/api/queries/{entry['id']}", headers=as_role("viewer")).json() == entry
    listed = client.get("/api/queries", headers=as_role("viewer")).json()
    assert entry["id"] in [q["id"] for q in listed["items"]]
    assert listed["version"] >= entry["version"] == int(store.get(keys.version))
    (audit,) = audit_after(store, keys, mark)
    assert (audit["action"], audit["who"], audit["subject"]) == ("register", "test-analyst", entry["id"])


@pytest.mark.parametrize("text", BAD_QUERIES)
def test_bad_query_answers_line_and_column(client, as_role, text):
    with pytest.raises(QueryError) as expected:
        parse(text)
    answer = client.post("/api/queries", json={"text": text}, headers=as_role("analyst"))
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert (error["line"], error["column"]) == (expected.value.line, expected.value.column)
    assert error["message"] == expected.value.message


def test_patch_versions_and_audits(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    before = client.get(f"/api/queries/{query_id}", headers=as_role("viewer")).json()
    mark = last_audit_id(store, keys)
    answer = client.patch(f"/api/queries/{query_id}", json={"threshold": 0.8, "paused": True},
                          headers=as_role("analyst"))
    assert answer.status_code == 200, answer.text
    after = answer.json()
    assert after["threshold"] == 0.8 and after["paused"] is True and after["version"] > before["version"]
    # the whole registry at the new version holds the change (what the job reads)
    snapshot = json.loads(store.get(keys.registry_at(after["version"])))
    assert snapshot["queries"][query_id]["threshold"] == 0.8
    (audit,) = audit_after(store, keys, mark)
    assert audit["action"] == "update" and audit["who"] == "test-analyst"
    assert json.loads(audit["details"]) == {"threshold": 0.8, "paused": True}


@pytest.mark.parametrize("body, field", [
    ({"threshold": 0.01}, "threshold"),          # below the join's floor (the core refuses)
    ({"threshold": 1.5}, "threshold"),
    ({"threshold": True}, "threshold"),
    ({"threshold": "0.7"}, "threshold"),
    ({"name": ""}, "name"),
    ({"paused": "yes"}, "paused"),
    ({"colour": "red"}, "colour"),
    ({}, "body"),
    ({"threshold": None}, "body"),
])
def test_patch_rejects_bad_values(client, as_role, join_query, body, field):
    query_id, _, _ = join_query
    answer = client.patch(f"/api/queries/{query_id}", json=body, headers=as_role("analyst"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


def test_duplicate_id_conflicts(client, as_role, join_query):
    query_id, a, b = join_query
    answer = client.post("/api/queries", json={"text": JOIN.format(a=a, b=b), "id": query_id},
                         headers=as_role("analyst"))
    assert answer.status_code == 409


def test_delete(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    mark = last_audit_id(store, keys)
    assert client.delete(f"/api/queries/{query_id}", headers=as_role("analyst")).status_code == 204
    assert store.hget(keys.queries, query_id) is None
    assert client.get(f"/api/queries/{query_id}", headers=as_role("viewer")).status_code == 404
    assert client.delete(f"/api/queries/{query_id}", headers=as_role("analyst")).status_code == 404
    (audit,) = audit_after(store, keys, mark)
    assert audit["action"] == "remove" and audit["subject"] == query_id


@pytest.fixture(scope="module")
def query_streams(client, as_role):
    """The streams the generated queries read, registered once."""
    for name, params in QUERY_STREAMS.items():
        answer = client.put(f"/api/streams/{name}", json=params, headers=as_role("admin"))
        assert answer.status_code == 200, answer.text
    return parse_streams(QUERY_STREAMS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=queries())
def test_the_api_registers_what_the_validator_accepts_and_refuses_the_rest_in_place(client, as_role,
                                                                                     query_streams, text):
    try:
        validated_query(text, None, query_streams)
        expected = None
    except QueryError as error:
        expected = error
    answer = client.post("/api/queries", json={"text": text}, headers=as_role("analyst"))
    if expected is None:
        assert answer.status_code == 201, (text, answer.text)
        assert client.delete(f"/api/queries/{answer.json()['id']}", headers=as_role("analyst")).status_code == 204
    else:
        assert answer.status_code == 422, (text, answer.text)
        error = answer.json()["error"]
        assert (error["message"], error["line"], error["column"]) == (expected.message, expected.line,
                                                                       expected.column)
        check = client.post("/api/validate", json={"text": text}, headers=as_role("viewer")).json()
        assert (check["valid"], check["line"], check["column"]) == (False, expected.line, expected.column)


@pytest.mark.parametrize("text", [
    "SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND f(A.x) = 1 WITH THRESHOLD 0.5",
    "SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND " + "NOT " * 2000 + "A.x = 1 WITH THRESHOLD 0.5",
    "SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND A.x = " + "(1 + " * 900 + "1" + ")" * 900
    + " WITH THRESHOLD 0.5",
    "SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = " + "9" * 400 + " WITH THRESHOLD 0.5",
    "PATTERN SEQ(SA a, SB b) WITHIN " + "9" * 400,
    "SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND A.x = " + "9" * 19_000 + " WITH THRESHOLD 0.5",
])
def test_the_probed_poison_queries_answer_422_on_a_kept_connection(api_server, tokens, query_streams, text):
    """Against the API server itself: each answers 422 with line and column, and the
    keep-alive connection serves the next request."""
    with httpx.Client(base_url=api_server.url, headers={"Authorization": f"Bearer {tokens['analyst']}"},
                      timeout=30) as http:
        for route in ("/api/queries", "/api/validate"):
            answer = http.post(route, json={"text": text})
            body = answer.json()
            found = body["error"] if route == "/api/queries" else body
            assert answer.status_code == (422 if route == "/api/queries" else 200), answer.text[:300]
            assert found["line"] == 1 and found["column"] >= 1 and len(answer.content) < 2000
        assert http.get("/api/health").status_code == 200
        assert answer.headers.get("connection") != "close"


def test_the_registry_holds_at_most_its_limit_of_queries_and_streams(redis_server):
    settings = Settings(redis_url=redis_server.url, redis_prefix=f"pn-full-{uuid.uuid4().hex[:8]}",
                        admin_token=ADMIN_TOKEN, max_queries=2, max_streams=2)
    with TestClient(create_app(settings)) as client:
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        for name in ("fa", "fb"):
            assert client.put(f"/api/streams/{name}", json={"max_delay": 1, "pi": 10}, headers=admin).status_code == 200
        third = client.put("/api/streams/fc", json={"max_delay": 1}, headers=admin)
        assert third.status_code == 409 and "at most 2 streams" in third.json()["error"]["message"]
        assert client.put("/api/streams/fa", json={"max_delay": 2, "pi": 10}, headers=admin).status_code == 200  # a change
        text = "SELECT * FROM fa A, fb B WHERE WINDOW(A, B) = 1 WITH THRESHOLD 0.5"
        assert [client.post("/api/queries", json={"text": text}, headers=admin).status_code for _ in range(3)] == \
            [201, 201, 409]
    clean(redis_server, settings.redis_prefix)


def test_every_change_counts_against_its_tokens_write_limit(redis_server):
    settings = Settings(redis_url=redis_server.url, redis_prefix=f"pn-writes-{uuid.uuid4().hex[:8]}",
                        admin_token=ADMIN_TOKEN, write_rate_limit=3, write_rate_window=60)
    with TestClient(create_app(settings)) as client:
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert client.put("/api/streams/wa", json={"max_delay": 1, "pi": 10}, headers=admin).status_code == 200
        text = "SELECT * FROM wa A, wa B WHERE WINDOW(A, B) = 1 WITH THRESHOLD 0.5"
        created = client.post("/api/queries", json={"text": text, "id": "w1"}, headers=admin)
        assert created.status_code == 201
        assert client.patch("/api/queries/w1", json={"threshold": 0.6}, headers=admin).status_code == 200
        refused = client.delete("/api/queries/w1", headers=admin)
        assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
        assert "write rate limit" in refused.json()["error"]["message"]
        # reading and validating are no changes; another token has its own count
        assert client.get("/api/queries/w1", headers=admin).status_code == 200
        assert client.post("/api/validate", json={"text": text}, headers=admin).json()["valid"] is True
        assert client.get("/api/queries/w1", headers=admin).json()["threshold"] == 0.6
    clean(redis_server, settings.redis_prefix)


def clean(redis_server, prefix: str) -> None:
    store = redis.Redis.from_url(redis_server.url)
    found = store.keys(f"{prefix}:*")
    if found:
        store.delete(*found)
    store.close()
