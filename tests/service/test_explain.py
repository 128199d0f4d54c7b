"""GET /api/queries/{id}/matches/{match}/explanation: a real match (found by the core on
events posted here, written as the sink writes it) explained, its numbers against exact
integration (tests/oracle.py) and the core's kernels; from the live stream and from the
archive; and every way it can fail, with a clear error."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from backend.main import create_app
from contract.archive import ArchiveWriter
from penumbra.engine import build_operator
from penumbra.events import parse_event, parse_streams
from penumbra.probability import p_geq
from penumbra.query import parse
from penumbra.timestamps import Histogram
from tests.oracle import p_within_exact

from .conftest import ADMIN_TOKEN, own_app_settings, unique, write_batch

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

TEMPLATE = {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]}
OTHER = {"edges": [0, 10, 20, 30, 40], "probs": [0.15, 0.3, 0.4, 0.15]}


@pytest.fixture
def explained_join(client, as_role, store, keys):
    """A keyed join over two fresh template streams, its match found by the core and written
    as the sink writes it; (query id, match id, the match, the streams)."""
    a, b = unique("XA"), unique("XB")
    params = {a: {"templates": {"s1": TEMPLATE}, "max_delay": 50}, b: {"templates": {"s2": OTHER}, "max_delay": 50}}
    for name, body in params.items():
        assert client.put(f"/api/streams/{name}", json=body, headers=as_role("admin")).status_code in (200, 201)
    text = f"SELECT * FROM {a} A, {b} B WHERE WINDOW(A, B) = 40 AND A.sector = B.sector WITH THRESHOLD 0.6"
    query_id = client.post("/api/queries", json={"text": text}, headers=as_role("analyst")).json()["id"]
    streams = parse_streams(params)
    events = [parse_event({"stream": a, "id": "a1", "ts": {"detected": 60, "template": "s1"},
                           "attrs": {"sector": 17, "site": "north"}}, streams),
              parse_event({"stream": b, "id": "b1", "ts": {"detected": 100, "template": "s2"},
                           "attrs": {"sector": 17, "gain": 2.5}}, streams)]
    operator = build_operator(parse(text), streams)
    (match,) = list(operator.feed(events).matches) + list(operator.flush().matches)
    row = {"events": match.events, "prob": match.prob, "key": match.key, "times": match.times,
           "partition": match.partition, "records": match.records}
    (match_id,) = write_batch(store, keys, 1, {query_id: [row]})[query_id]
    return query_id, match_id, match, streams


def test_a_join_match_is_explained_with_its_events_and_numbers(client, as_role, explained_join):
    query_id, match_id, match, _ = explained_join
    answer = client.get(f"/api/queries/{query_id}/matches/{match_id}/explanation", headers=as_role("viewer"))
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["kind"] == "join" and got["query"] == query_id and got["match"]["id"] == match_id
    assert [(e["var"], e["id"], e["attrs"]) for e in got["events"]] == [
        ("A", "a1", {"sector": 17, "site": "north"}), ("B", "b1", {"sector": 17, "gain": 2.5})]
    h_a = Histogram.from_template(Histogram(**TEMPLATE), 60)
    h_b = Histogram.from_template(Histogram(**OTHER), 100)
    exact = float(p_within_exact(h_a.edges, h_a.probs, h_b.edges, h_b.probs, 40))
    assert got["prob"] == pytest.approx(exact, abs=1e-9)
    assert got["probability"]["within"] == pytest.approx(exact, abs=1e-9)
    assert got["probability"]["no_later"] == pytest.approx(p_geq(h_a, h_b, 40), abs=1e-12)
    assert got["events"][0]["density"] == {"edges": h_a.edges.tolist(), "probs": h_a.probs.tolist()}
    assert got["satisfaction"]["later"] == "B" and got["satisfaction"]["later_max_time"] == 100
    assert got["satisfaction"]["meets"] is True and got["satisfaction"]["latest_max_time"] >= 100
    assert got["partition"]["range"] == match.partition and got["partition"]["partner_max_time"] == 100
    assert got["threshold"] == 0.6 and got["window"] == 40
    assert got["match"]["records"]["A"]["attrs"]["site"] == "north"


def test_an_archived_match_is_explained_too(redis_server, tmp_path):
    """An app of its own with an archive of its own: the match only archived (its live
    entry trimmed away), written by the job's own archive writer."""
    keys, settings = own_app_settings(redis_server, "expl", archive=tmp_path)
    a, b = unique("YA"), unique("YB")
    params = {a: {"templates": {"s1": TEMPLATE}, "max_delay": 50}, b: {"templates": {"s2": OTHER}, "max_delay": 50}}
    text = f"SELECT * FROM {a} A, {b} B WHERE WINDOW(A, B) = 40 WITH THRESHOLD 0.6"
    streams = parse_streams(params)
    events = [parse_event({"stream": a, "id": "a1", "ts": {"detected": 60, "template": "s1"}}, streams),
              parse_event({"stream": b, "id": "b1", "ts": {"detected": 100, "template": "s2"}}, streams)]
    operator = build_operator(parse(text), streams)
    (match,) = list(operator.feed(events).matches) + list(operator.flush().matches)
    with TestClient(create_app(settings)) as client:
        for name, body in params.items():
            assert client.put(f"/api/streams/{name}", json=body, headers=ADMIN).status_code in (200, 201)
        query_id = client.post("/api/queries", json={"text": text}, headers=ADMIN).json()["id"]
        at = 1_795_000_000_000
        ArchiveWriter(tmp_path, "job1").write(7, at, {query_id: [(
            json.dumps(match.to_json()).encode(), 0, None, match.prob, match.times, match.partition, match.records)]}, {})
        answer = client.get(f"/api/queries/{query_id}/matches/{at}-0/explanation", headers=ADMIN)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert got["match"]["id"] == f"{at}-0" and got["prob"] == match.prob
        assert got["probability"]["within"] == pytest.approx(match.prob, abs=1e-12)
        assert client.get(f"/api/queries/{query_id}/matches/{at}-1/explanation", headers=ADMIN).status_code == 404


def test_what_cannot_be_explained_says_why(client, as_role, store, keys, explained_join):
    query_id, match_id, _, _ = explained_join
    base = f"/api/queries/{query_id}/matches"
    missing = client.get(f"{base}/1-999/explanation", headers=as_role("viewer"))
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "match_id"
    malformed = client.get(f"{base}/yesterday/explanation", headers=as_role("viewer"))
    assert malformed.status_code == 422
    unknown = client.get(f"/api/queries/nope/matches/{match_id}/explanation", headers=as_role("viewer"))
    assert unknown.status_code == 404
    # a match written without its events (an older job) cannot be explained, and says so
    (bare,) = write_batch(store, keys, 2, {query_id: [{"events": {"A": "a9", "B": "b9"}, "prob": 0.7}]})[query_id]
    answer = client.get(f"{base}/{bare}/explanation", headers=as_role("viewer"))
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "records", answer.text
    assert client.get(f"{base}/{match_id}/explanation").status_code == 401
