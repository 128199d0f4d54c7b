"""Every route for every role: 401 without a valid token, 403 below the route's role,
neither at or above it. The table must name every route the app has."""

from __future__ import annotations

import time

import pytest

from contract import Registry

from .conftest import JOIN, JOIN_PI, bearer, register_streams, unique, write_batch

#: (method, path) -> the least role allowed (None: no token needed)
ROUTES = {
    ("GET", "/api/health"): None,
    ("GET", "/api/queries"): "viewer",
    ("POST", "/api/queries"): "analyst",
    ("GET", "/api/queries/{query_id}"): "viewer",
    ("PATCH", "/api/queries/{query_id}"): "analyst",
    ("DELETE", "/api/queries/{query_id}"): "analyst",
    ("POST", "/api/events"): "analyst",
    ("GET", "/api/streams"): "analyst",
    ("GET", "/api/streams/{name}"): "analyst",
    ("PUT", "/api/streams/{name}"): "admin",
    ("GET", "/api/queries/{query_id}/matches"): "viewer",
    ("GET", "/api/queries/{query_id}/observations"): "viewer",
    ("GET", "/api/queries/{query_id}/partitions"): "viewer",
    ("GET", "/api/queries/{query_id}/buffers"): "viewer",
    ("GET", "/api/queries/{query_id}/near-misses"): "viewer",
    ("POST", "/api/queries/{query_id}/curve"): "viewer",
    ("GET", "/api/queries/{query_id}/matches/{match_id}/explanation"): "viewer",
    ("GET", "/api/queries/{query_id}/what-if"): "viewer",
    ("GET", "/api/queries/{query_id}/history"): "viewer",
    ("GET", "/api/queries/{query_id}/history/summary"): "viewer",
    ("GET", "/api/queries/{query_id}/history/export"): "viewer",
    ("GET", "/api/queries/{query_id}/backtest"): "viewer",
    ("GET", "/api/rates"): "viewer",
    ("GET", "/api/metrics"): "viewer",
    ("GET", "/api/alarms"): "viewer",
    ("GET", "/api/alarms/{alarm_id}"): "viewer",
    ("POST", "/api/alarms/{alarm_id}/acknowledge"): "analyst",
    ("POST", "/api/alarms/{alarm_id}/silence"): "analyst",
    ("POST", "/api/alarms/{alarm_id}/resolve"): "analyst",
    ("GET", "/api/silences"): "viewer",
    ("POST", "/api/silences"): "analyst",
    ("DELETE", "/api/silences/{silence_id}"): "analyst",
    ("GET", "/api/contact-points"): "admin",
    ("POST", "/api/contact-points"): "admin",
    ("DELETE", "/api/contact-points/{contact_id}"): "admin",
    ("POST", "/api/contact-points/{contact_id}/test"): "admin",
    ("GET", "/api/routing-rules"): "admin",
    ("POST", "/api/routing-rules"): "admin",
    ("DELETE", "/api/routing-rules/{rule_id}"): "admin",
    ("GET", "/api/deliveries"): "analyst",
    ("POST", "/api/queries/{query_id}/verdicts"): "analyst",
    ("POST", "/api/queries/{query_id}/verdicts/batch"): "analyst",
    ("GET", "/api/queries/{query_id}/verdicts"): "viewer",
    ("GET", "/api/queries/{query_id}/calibration"): "viewer",
    ("GET", "/api/audit"): "analyst",
    ("GET", "/api/tokens"): "admin",
    ("POST", "/api/tokens"): "admin",
    ("GET", "/api/me"): "viewer",
    ("POST", "/api/validate"): "viewer",
    ("DELETE", "/api/tokens/{token_id}"): "admin",
}
LEVEL = {None: 0, "viewer": 1, "analyst": 2, "admin": 3}
CALLERS = ("nobody", "bad token", "viewer", "analyst", "admin")


def body_for(method: str, path: str, stream: str, partner: str, query: str | None = None,
             contact: str | None = None):
    if path in ("/api/queries", "/api/validate") and method == "POST":
        return {"text": JOIN.format(a=stream, b=partner)}
    if method == "PATCH":
        return {"threshold": 0.7}
    if path == "/api/events":
        return [{"stream": stream, "id": "r1", "ts": {"lo": 0, "hi": 1}}]
    if path.startswith("/api/streams/"):
        return {"max_delay": 1}
    if path.endswith("/curve"):
        return {"event": {"stream": stream, "id": "r1", "ts": {"lo": 0, "hi": 1}}}
    if path.endswith("/silence"):
        return {"until": time.time() + 60}
    if path == "/api/silences" and method == "POST":
        return {"query": query, "end": time.time() + 60}
    if path == "/api/contact-points" and method == "POST":
        return {"name": "matrix", "url": "http://127.0.0.1:9/hook"}
    if path == "/api/routing-rules" and method == "POST":
        return {"queries": [query], "contacts": [contact]}
    if path.endswith("/verdicts") and method == "POST":
        return {"alarm": query, "verdict": "real"}
    if path.endswith("/verdicts/batch"):
        return [{"alarm": query, "verdict": "real"}]
    if path == "/api/tokens":
        return {"role": "viewer", "label": "matrix"}
    return None


def test_the_table_names_every_route(app):
    routes = {(method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item}
    assert routes == set(ROUTES)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("method, path", sorted(ROUTES))
def test_route_for_caller(client, tokens, store, keys, method, path, caller):
    needed = ROUTES[(method, path)]
    # fresh resources per call, so what one call changes does not decide another's answer
    stream, partner, query, token, silence, match = unique("R"), unique("R"), None, None, None, None
    register_streams(client, stream, partner, pi=JOIN_PI)
    if "{query_id}" in path or "{alarm_id}" in path or "silences" in path or "routing-rules" in path:
        query = client.post("/api/queries", json={"text": JOIN.format(a=stream, b=partner)},
                            headers=bearer(tokens["analyst"])).json()["id"]
        records = {"A": {"stream": stream, "id": "a", "ts": {"lo": 0, "hi": 1}, "attrs": {}},
                   "B": {"stream": partner, "id": "b", "ts": {"lo": 0, "hi": 1}, "attrs": {}}}
        (match,) = write_batch(store, keys, 0, {query: [{"events": {"A": "a", "B": "b"}, "prob": 0.9,
                                                         "records": records}]})[query]
    contact = rule = None
    if "contact" in path or "routing-rules" in path:
        contact = client.post("/api/contact-points", json={"name": "victim", "url": "http://127.0.0.1:9/hook"},
                              headers=bearer(tokens["admin"])).json()["id"]
    if "{rule_id}" in path:
        rule = client.post("/api/routing-rules", json={"queries": [query], "contacts": [contact]},
                           headers=bearer(tokens["admin"])).json()["id"]
    if "{silence_id}" in path:
        silence = client.post("/api/silences", json={"query": query, "end": time.time() + 60},
                              headers=bearer(tokens["analyst"])).json()["id"]
    if "{name}" in path:
        Registry(store, keys).put_streams({stream: {"max_delay": 2}})
    if "{token_id}" in path:
        token = client.post("/api/tokens", json={"role": "viewer", "label": "victim"},
                            headers=bearer(tokens["admin"])).json()["id"]
    url = path.format(query_id=query, alarm_id=query, name=stream, token_id=token, silence_id=silence,
                      contact_id=contact, rule_id=rule, match_id=match)
    headers = {"nobody": {}, "bad token": bearer("pn_not-a-token")}[caller] if caller not in tokens \
        else bearer(tokens[caller])
    answer = client.request(method, url, json=body_for(method, path, stream, partner, query, contact),
                            headers=headers)
    level = LEVEL.get(caller, 0)
    if needed is None:
        assert answer.status_code == 200
    elif caller in ("nobody", "bad token"):
        assert answer.status_code == 401 and answer.json()["error"]["message"]
    elif level < LEVEL[needed]:
        assert answer.status_code == 403 and answer.json()["error"]["required"] == needed
    else:
        assert answer.status_code < 300, (answer.status_code, answer.text)
