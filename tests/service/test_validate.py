"""POST /api/validate: the editor's check, by role, against the core's own parser,
and it writes nothing."""

from __future__ import annotations

import time

import pytest

from penumbra.query import QueryError, parse

from .conftest import JOIN, bearer, fresh_join, fresh_streams, unique

ROUTE = "/api/validate"


@pytest.mark.parametrize("role", ["viewer", "analyst", "admin"])
def test_every_role_may_validate(client, as_role, role):
    answer = client.post(ROUTE, json={"text": fresh_join(client)}, headers=as_role(role))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["valid"], body["kind"], body["threshold"], body["line"]) == (True, "join", 0.6, None)
    assert len(body["streams"]) == 2


@pytest.mark.parametrize("headers", [{}, bearer("pn_unknown-token")])
def test_without_a_valid_token_401(client, headers):
    answer = client.post(ROUTE, json={"text": "SELECT"}, headers=headers)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("text", [
    "SELECT * FROM A X, B Y\nWHERE WINDW(X, Y) = 100",
    "PATTERN SEQ(a x, b y) WITHIN 10 RETURN x, y WITH CONFIDENCE 2",
    "SEQUENCE(Shelf x, !Counter y, Exit z)\nWHERE x.tag = z.tag\n  AND\nWITHIN 600 THRESHOLD 0.5",
    "SELECT * FROM",
])
def test_line_and_column_are_the_parsers(client, as_role, text):
    with pytest.raises(QueryError) as expected:
        parse(text)
    answer = client.post(ROUTE, json={"text": text}, headers=as_role("viewer"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["valid"] is False
    assert (body["message"], body["line"], body["column"]) == \
        (expected.value.message, expected.value.line, expected.value.column)


def test_the_threshold_is_checked_like_registering(client, as_role):
    text = fresh_join(client)
    answer = client.post(ROUTE, json={"text": text, "threshold": 0.75}, headers=as_role("analyst")).json()
    assert (answer["valid"], answer["threshold"]) == (True, 0.75)
    refused = client.post(ROUTE, json={"text": text, "threshold": 1.5}, headers=as_role("analyst"))
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "threshold"


def test_a_stream_not_registered_is_invalid_at_its_name_with_the_closest_registered_one(client, as_role):
    a, b = fresh_streams(client, "Seismic", "Acoustic")
    typo = b[:-1] + ("k" if b[-1] != "k" else "q")
    text = f"SELECT * FROM {a} A,\n  {typo} B WHERE WINDOW(A, B) = 100 WITH THRESHOLD 0.6"
    body = client.post(ROUTE, json={"text": text}, headers=as_role("viewer")).json()
    assert (body["valid"], body["line"], body["column"]) == (False, 2, 3)
    assert f"stream {typo!r} is not registered" in body["message"] and f"did you mean {b!r}" in body["message"]
    refused = client.post("/api/queries", json={"text": text}, headers=as_role("analyst"))
    assert refused.status_code == 422 and (refused.json()["error"]["line"], refused.json()["error"]["column"]) == (2, 3)


def test_nothing_is_written(client, as_role, store, keys):
    before = (store.get(keys.version), store.xlen(keys.audit), store.hlen(keys.queries))
    for text in (JOIN.format(a=unique("V"), b=unique("V")), "SELECT * FROM"):
        assert client.post(ROUTE, json={"text": text}, headers=as_role("admin")).status_code == 200
    assert (store.get(keys.version), store.xlen(keys.audit), store.hlen(keys.queries)) == before


def test_unknown_fields_and_empty_text_are_422(client, as_role):
    for body in ({"text": "SELECT", "id": "x"}, {"text": ""}, {}):
        answer = client.post(ROUTE, json=body, headers=as_role("viewer"))
        assert answer.status_code == 422, (body, answer.text)


def test_an_attribute_no_event_has_carried_is_a_warning_at_its_line_and_column(client, as_role):
    a, b = fresh_streams(client, "Wa", "Wb", pi=20)
    events = [{"stream": a, "id": "w1", "ts": {"lo": 0, "hi": 5}, "attrs": {"region": 1, "value": 3.5}},
              {"stream": b, "id": "w2", "ts": {"lo": 2, "hi": 6}, "attrs": {"region": 1}}]
    before = time.time()
    assert client.post("/api/events", json=events, headers=as_role("analyst")).status_code == 202
    text = (f"SELECT * FROM {a} A, {b} B\nWHERE WINDOW(A, B) = 10 AND A.region = B.regoin\n  AND A.value > 1 -- B.nope\n"
            "WITH THRESHOLD 0.5")
    answer = client.post("/api/validate", json={"text": text}, headers=as_role("viewer")).json()
    assert answer["valid"] is True
    assert answer["warnings"] == [{"message": f"no event of {b!r} has carried an attribute 'regoin' so far; "
                                              "did you mean 'region'?", "line": 2, "column": 40}]
    assert all(before - 1 <= answer["idle"][s.casefold()] <= time.time() + 1 for s in (a, b))
    # a stream nothing was sent on is not judged, and says it has not been heard from
    c, d = fresh_streams(client, "Wc", "Wd", pi=20)
    quiet = client.post("/api/validate", json={"text": f"SELECT * FROM {c} A, {d} B WHERE WINDOW(A, B) = 10 "
                                                       "AND A.x = B.y WITH THRESHOLD 0.5"},
                        headers=as_role("viewer")).json()
    assert quiet["warnings"] == [] and quiet["idle"] == {c.casefold(): None, d.casefold(): None}
