"""Stream parameters: set, read, list (admins only); the core's validation names the field."""

from __future__ import annotations

import json

import pytest

from penumbra.errors import ValidationError
from penumbra.events import parse_streams

from .conftest import unique

GOOD = {"templates": {"s1": {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]}}, "max_delay": 500}


def test_put_get_list(client, as_role, store, keys):
    name = unique("seismic")
    answer = client.put(f"/api/streams/{name}", json=GOOD, headers=as_role("admin"))
    assert answer.status_code == 200, answer.text
    stored = json.loads(store.hget(keys.streams, name))
    # the stored parameters decode, through the core, to what was sent
    assert parse_streams({name: stored}).to_json() == parse_streams({name: GOOD}).to_json()
    fresh = {"name": name, "params": stored, "attrs": [], "seen": None}
    assert client.get(f"/api/streams/{name}", headers=as_role("analyst")).json() == fresh
    listed = client.get("/api/streams", headers=as_role("analyst")).json()["items"]
    assert fresh in listed
    # once its events came, the stream says which attributes they carried, and when
    event = {"stream": name, "id": "e1", "ts": {"detected": 1000, "template": list(GOOD["templates"])[0]},
             "attrs": {"sector": 3, "gain": 1.5}}
    assert client.post("/api/events", json=[event], headers=as_role("analyst")).status_code in (200, 202)
    seen = client.get(f"/api/streams/{name}", headers=as_role("analyst")).json()
    assert seen["attrs"] == ["gain", "sector"] and seen["seen"] is not None
    audit = store.xrevrange(keys.audit, count=1)[0][1]
    assert (audit[b"action"], audit[b"who"], audit[b"subject"]) == (b"streams", b"admin", name.encode())


def test_unknown_stream(client, as_role):
    assert client.get(f"/api/streams/{unique('none')}", headers=as_role("admin")).status_code == 404


@pytest.mark.parametrize("params", [
    {"templates": {"s1": {"edges": [0, 20, 10], "probs": [0.5, 0.5]}}},           # edges not increasing
    {"templates": {"s1": {"edges": [0, 1, 2], "probs": [0.5, 0.6]}}},             # probs do not sum to 1
    {"templates": {"s1": {"edges": [0, 1, 2], "probs": [0.5]}}},                  # lengths disagree
    {"pi": 1, "rho": 2},                                                          # rho > pi
    {"gap": {"uniform": [3, 1]}},
    {"gap": {"histogram": {"width": 1.5, "weights": [1]}}},
    {"gap": {"uniform": [1, 2], "exponential": 3}},
])
def test_core_validation_names_the_field(client, as_role, params):
    name = unique("S")
    with pytest.raises(ValidationError) as expected:
        parse_streams({name: params})
    answer = client.put(f"/api/streams/{name}", json=params, headers=as_role("admin"))
    assert answer.status_code == 422, answer.text
    field = expected.value.field
    assert answer.json()["error"]["field"] == (field[len(name) + 1:] if field.startswith(name + ".") else field)


@pytest.mark.parametrize("params, field", [
    ({"max_delay": -1}, "max_delay"),
    ({"max_delay": True}, "max_delay"),
    ({"miss_prob": 1}, "miss_prob"),
    ({"colour": 1}, "colour"),
    ({"templates": {"s1": {"edges": [0, 1]}}}, "templates.s1.probs"),
    ({"templates": {"1bad": {"edges": [0, 1], "probs": [1]}}}, "templates.1bad.[key]"),
])
def test_shape_errors_name_the_field(client, as_role, params, field):
    answer = client.put(f"/api/streams/{unique('S')}", json=params, headers=as_role("admin"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


def test_bad_name(client, as_role):
    assert client.put("/api/streams/1abc", json=GOOD, headers=as_role("admin")).status_code == 422


def test_max_delay_may_not_outlast_the_identity_horizon(client, as_role, store, keys, settings):
    horizon_ms = settings.identity_horizon * 1000.0
    assert horizon_ms == 24 * 3600 * 1000.0   # the default, as event-time milliseconds
    name = unique("S")
    assert client.put(f"/api/streams/{name}", json={"max_delay": horizon_ms}, headers=as_role("admin")).status_code == 200
    longer = client.put(f"/api/streams/{name}", json={"max_delay": horizon_ms + 1}, headers=as_role("admin"))
    assert longer.status_code == 422 and longer.json()["error"]["field"] == "max_delay"
    assert "identity horizon" in longer.json()["error"]["message"]
    assert "PENUMBRA_IDENTITY_HORIZON_HOURS" in longer.json()["error"]["message"]
    assert json.loads(store.hget(keys.streams, name))["max_delay"] == horizon_ms   # the refused one changed nothing
