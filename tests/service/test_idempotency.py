"""``Idempotency-Key`` on the routes that change something: a retry with the same key gets
the first answer and nothing is done again; the same key with another request is a 422;
another token's key is its own; two requests with one key at once do the work once."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from .conftest import JOIN, JOIN_PI, bearer, fresh_streams, unique


def key() -> dict[str, str]:
    return {"Idempotency-Key": f"k-{uuid.uuid4()}"}


def test_a_retried_registration_gets_the_first_answer_and_registers_once(client, as_role, store, keys):
    a, b = fresh_streams(client, "IA", "IB", pi=JOIN_PI)
    headers = {**as_role("analyst"), **key()}
    body = {"text": JOIN.format(a=a, b=b), "name": "once"}
    audit = store.xlen(keys.audit)
    first = client.post("/api/queries", json=body, headers=headers)
    again = client.post("/api/queries", json=body, headers=headers)
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    assert "idempotent-replayed" not in first.headers and again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == "application/json"
    assert [q["name"] for q in client.get("/api/queries", headers=as_role("viewer")).json()["items"]].count("once") == 1
    assert store.xlen(keys.audit) == audit + 1
    # the same key with another body, path or method is refused, and does nothing
    other = client.post("/api/queries", json={**body, "name": "twice"}, headers=headers)
    assert other.status_code == 422 and "another request" in other.json()["error"]["message"]
    assert client.patch(f"/api/queries/{first.json()['id']}", json={"threshold": 0.7},
                        headers=headers).status_code == 422
    # another token's identical key is its own
    admin = client.post("/api/queries", json={**body, "name": "admin's"}, headers={**as_role("admin"), **key()})
    assert admin.status_code == 201


def test_a_retried_delete_and_alarm_action_answer_as_the_first_time(client, as_role, join_query):
    query_id, _, _ = join_query
    headers = {**as_role("analyst"), **key()}
    assert client.delete(f"/api/queries/{query_id}", headers=headers).status_code == 204
    assert client.delete(f"/api/queries/{query_id}", headers=headers).status_code == 204     # not 404
    assert client.delete(f"/api/queries/{query_id}", headers=as_role("analyst")).status_code == 404  # no key


def test_a_retried_event_batch_gets_its_first_answer(client, as_role):
    (stream,) = fresh_streams(client, "IE")
    batch = [{"stream": stream, "id": f"e{n}", "ts": {"lo": n, "hi": n + 1}} for n in range(5)]
    headers = {**as_role("analyst"), **key()}
    first = client.post("/api/events", json=batch, headers=headers).json()
    again = client.post("/api/events", json=batch, headers=headers).json()
    assert first == again and (first["accepted"], first["duplicates"]) == (5, 0)
    # without the key, the events' identity still takes them once
    assert client.post("/api/events", json=batch, headers=as_role("analyst")).json()["duplicates"] == 5


def test_answers_that_say_nothing_of_the_work_are_not_kept(client, as_role, store, keys):
    headers = {**bearer("pn_not-a-token"), **key()}
    assert client.post("/api/queries", json={"text": "x"}, headers=headers).status_code == 401
    assert client.post("/api/queries", content=b"{oops", headers=headers).status_code == 401
    assert not list(store.scan_iter(match=f"{keys.prefix}:idem:*{headers['Idempotency-Key']}"))
    # a refused token's key is not spent: with a good token it does the work
    (stream,) = fresh_streams(client, "IK")
    good = {**as_role("analyst"), "Idempotency-Key": headers["Idempotency-Key"]}
    answer = client.post("/api/events", json=[{"stream": stream, "id": "a", "ts": {"lo": 0, "hi": 1}}], headers=good)
    assert answer.status_code == 202 and answer.json()["accepted"] == 1


def test_a_new_tokens_secret_is_never_kept(client, as_role, store, keys):
    headers = {**as_role("admin"), **key()}
    first = client.post("/api/tokens", json={"role": "viewer", "label": "kept?"}, headers=headers)
    again = client.post("/api/tokens", json={"role": "viewer", "label": "kept?"}, headers=headers)
    assert first.status_code == again.status_code == 201 and first.json()["token"] != again.json()["token"]
    assert not list(store.scan_iter(match=f"{keys.prefix}:idem:*:{headers['Idempotency-Key']}"))


@pytest.mark.parametrize("bad", [b"", b"x" * 256, "caf\u00e9".encode()])
def test_a_malformed_key_is_refused(client, as_role, bad):
    answer = client.post("/api/validate", json={"text": "SELECT"}, headers={**as_role("viewer"), "Idempotency-Key": bad})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "Idempotency-Key"


def test_requests_with_one_key_at_once_do_the_work_once(api_server, client, tokens):
    a, b = fresh_streams(client, "CA", "CB", pi=JOIN_PI)
    name = unique("concurrent-")
    headers = {**bearer(tokens["analyst"]), **key()}
    answers: list[httpx.Response] = []
    start = threading.Barrier(4)

    def register() -> None:
        with httpx.Client(base_url=api_server.url, timeout=30) as http:
            start.wait()
            answers.append(http.post("/api/queries", json={"text": JOIN.format(a=a, b=b), "name": name},
                                     headers=headers))

    threads = [threading.Thread(target=register) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [r.status_code for r in answers] == [201] * 4
    assert len({r.json()["id"] for r in answers}) == 1
    listed = client.get("/api/queries", headers=bearer(tokens["viewer"])).json()["items"]
    assert [q["name"] for q in listed].count(name) == 1
