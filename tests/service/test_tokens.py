"""Tokens: created by admins (shown once), stored only hashed, listed, revoked; bootstrap."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
import redis
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from backend import Settings, create_app
from contract import Keys
from contract.tokens import Role, TokenStore, token_id
from penumbra.cli.processes import RedisServer

from .conftest import ADMIN_TOKEN, bearer


def test_create_use_list_revoke(client, as_role, store, keys):
    answer = client.post("/api/tokens", json={"role": "viewer", "label": "wall screen"}, headers=as_role("admin"))
    assert answer.status_code == 201
    created = answer.json()
    token = created["token"]
    assert created["id"] == token_id(token) and created["role"] == "viewer"
    # Redis holds no token in plain
    dump = b"".join(store.hvals(keys.tokens)) + b"".join(store.hkeys(keys.tokens))
    assert token.encode() not in dump and ADMIN_TOKEN.encode() not in dump
    me = client.get("/api/me", headers=bearer(token)).json()
    assert me == {k: created[k] for k in ("id", "role", "label", "created")}
    listed = client.get("/api/tokens", headers=as_role("admin")).json()["items"]
    assert me in listed and all("token" not in t and "hash" not in t for t in listed)
    assert client.delete(f"/api/tokens/{created['id']}", headers=as_role("admin")).status_code == 204
    assert client.get("/api/me", headers=bearer(token)).status_code == 401
    assert client.delete(f"/api/tokens/{created['id']}", headers=as_role("admin")).status_code == 404


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer"}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
    {"Authorization": f"Bearer {ADMIN_TOKEN}x"}, {"Authorization": f"Bearer {ADMIN_TOKEN[:-1]}"},
])
def test_refused_tokens(client, headers):
    answer = client.get("/api/me", headers=headers)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"


def test_a_forged_record_with_the_right_id_is_refused(store, keys):
    tokens = TokenStore(store, keys)
    token, record = tokens.create(Role.viewer, "forged")
    assert tokens.check(token).role is Role.viewer
    # same id (a token whose hash starts the same would find this record) but another token
    store.hset(keys.tokens, record["id"], store.hget(keys.tokens, record["id"]).replace(
        record["hash"].encode(), b"0" * 64))
    assert tokens.check(token) is None
    tokens.revoke(record["id"])


def test_bad_bodies(client, as_role):
    for body in ({"role": "root", "label": "x"}, {"role": "viewer"}, {"role": "viewer", "label": ""},
                 {"role": "viewer", "label": "x", "extra": 1}):
        assert client.post("/api/tokens", json=body, headers=as_role("admin")).status_code == 422


def test_last_admin_cannot_be_revoked():
    with RedisServer() as server:
        with TestClient(create_app(Settings(redis_url=server.url, admin_token="first-admin-" + "z" * 20))) as client:
            first = bearer("first-admin-" + "z" * 20)
            (admin,) = client.get("/api/tokens", headers=first).json()["items"]
            assert client.delete(f"/api/tokens/{admin['id']}", headers=first).status_code == 409
            second = client.post("/api/tokens", json={"role": "admin", "label": "second"}, headers=first).json()
            assert client.delete(f"/api/tokens/{admin['id']}", headers=bearer(second["token"])).status_code == 204
            assert client.get("/api/me", headers=first).status_code == 401


def test_bootstrap_generates_and_prints_once(capfd):
    with RedisServer() as server:
        app = create_app(Settings(redis_url=server.url))
        with TestClient(app) as client:
            generated = app.state.service.generated_admin_token
            assert generated and generated in capfd.readouterr().err
            assert client.get("/api/me", headers=bearer(generated)).json()["role"] == "admin"
        # a second start finds the admin and prints nothing
        again = create_app(Settings(redis_url=server.url))
        with TestClient(again):
            assert again.state.service.generated_admin_token is None
            assert "admin token" not in capfd.readouterr().err
        stored = TokenStore(redis.Redis.from_url(server.url), Keys()).records()
        assert [r["role"] for r in stored] == ["admin"]


@pytest.fixture
def throttled(redis_server):
    """An app of its own (own key prefix) that allows 3 failed authentications per address a minute."""
    settings = Settings(redis_url=redis_server.url, redis_prefix=f"pn-auth-{uuid.uuid4().hex[:8]}",
                        admin_token=ADMIN_TOKEN, auth_failure_limit=3, auth_failure_window=60)
    with TestClient(create_app(settings)) as client:
        yield client
    store = redis.Redis.from_url(redis_server.url)
    found = store.keys(f"{settings.redis_prefix}:*")
    if found:
        store.delete(*found)
    store.close()


def test_failed_authentications_are_throttled_per_address_and_logged_without_the_token(throttled, caplog):
    guesses = [f"pn_guess-{n}-" + "y" * 30 for n in range(4)]
    with caplog.at_level(logging.WARNING, logger="penumbra.api"):
        assert [throttled.get("/api/me", headers=bearer(g)).status_code for g in guesses[:3]] == [401] * 3
        refused = throttled.get("/api/me", headers=bearer(guesses[3]))
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "failed authentications" in refused.json()["error"]["message"]
    # the address waits, whatever token it shows; a missing token is no guess and counts for nothing
    assert throttled.get("/api/me", headers=bearer(ADMIN_TOKEN)).status_code == 429
    logged = [r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(logged) == 3 and all("testclient" in line for line in logged)
    assert not any(g in caplog.text for g in guesses)
    # another address is not held back
    with TestClient(throttled.app, client=("10.1.2.3", 5000)) as other:
        assert other.get("/api/me", headers=bearer(ADMIN_TOKEN)).status_code == 200


def test_failed_websocket_authentications_count_and_close_4429(throttled):
    for n in range(3):
        with throttled.websocket_connect("/ws") as ws:
            ws.send_text(json.dumps({"token": f"pn_wrong-{n}-" + "z" * 30}))
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
            assert closed.value.code == 4401
    with throttled.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps({"token": ADMIN_TOKEN}))
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 4429 and "try again in" in closed.value.reason
