"""Fixtures of the service tests: one real redis-server (AOF on) per session and the app
over it through TestClient, with a token of each role.

Each test uses its own query ids and stream names, so tests share the server. The
server is stopped by its process id when the session ends, also when a test fails.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis
from fastapi.testclient import TestClient

from backend import Settings, create_app
from contract import Keys
from contract.results import queue_matches
from penumbra.cli.processes import ApiServer, RedisServer

ADMIN_TOKEN = "pn_test-admin-" + "x" * 32
ROLES = ("viewer", "analyst", "admin")
#: The settings of the session's app (besides its Redis). Every test client comes from one
#: address with a few tokens, so the failed-authentication throttle and the write limit
#: are set out of the way (test_tokens.py and test_queries.py check them on apps of their own).
SETTINGS = {"admin_token": ADMIN_TOKEN, "redis_timeout": 1.0, "ingest_max_events": 500,
            "max_body_bytes": 256 * 1024, "ingest_rate_limit": 10_000, "auth_failure_limit": 100_000,
            "write_rate_limit": 100_000}
JOIN = "SELECT * FROM {a} A, {b} B WHERE WINDOW(A, B) = 100 WITH THRESHOLD 0.6"
#: The pi of the streams a test's join reads (a join needs its streams' longest timestamp).
JOIN_PI = 1000
#: The live feed's queue per client on the session's API server: small, so a slow client overflows it quickly.
LIVE_QUEUE = 40


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(folder=tmp_path_factory.mktemp("redis"), append_only=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def api_server(redis_server, tokens, tmp_path_factory):
    """A ``python -m backend`` on a free loopback port over the session's Redis (real HTTP
    and websockets), stopped by its pid at the end of the session."""
    log = tmp_path_factory.mktemp("api") / "server.log"
    with ApiServer(redis_server.url, log=log, admin_token=ADMIN_TOKEN, ws_queue=LIVE_QUEUE, ws_auth_timeout=1.5,
                   ingest_rate_limit=10_000, auth_failure_limit=100_000, write_rate_limit=100_000) as api:
        yield api


def own_app_settings(redis_server, prefix: str, **overrides) -> tuple[Keys, Settings]:
    """The settings of an app of a test's own, on the session's Redis under a fresh prefix:
    the session app's, with ``overrides``."""
    keys = Keys(unique(prefix))
    return keys, Settings(redis_url=redis_server.url, redis_prefix=keys.prefix, **{**SETTINGS, **overrides})


@pytest.fixture(scope="session")
def settings(redis_server) -> Settings:
    return Settings(redis_url=redis_server.url, **SETTINGS)


@pytest.fixture(scope="session")
def app(settings):
    return create_app(settings)


@pytest.fixture(scope="session")
def client(app):
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def store(redis_server) -> redis.Redis:
    """A plain Redis client on the same server, to check what the service wrote."""
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def keys() -> Keys:
    return Keys()


@pytest.fixture(scope="session")
def tokens(client) -> dict[str, str]:
    """A token per role, created through the API by the bootstrap admin."""
    out = {"admin": ADMIN_TOKEN}
    for role in ("viewer", "analyst"):
        answer = client.post("/api/tokens", json={"role": role, "label": f"test-{role}"}, headers=bearer(ADMIN_TOKEN))
        assert answer.status_code == 201, answer.text
        out[role] = answer.json()["token"]
    return out


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="session")
def as_role(tokens):
    """``as_role("analyst")``: the headers of a token of that role."""
    return lambda role: bearer(tokens[role])


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def register_streams(client, *names: str, **params) -> None:
    """Register the named streams (the service refuses queries and events of others), each
    with ``params`` (none: the defaults)."""
    for name in names:
        answer = client.put(f"/api/streams/{name}", json=params, headers=bearer(ADMIN_TOKEN))
        assert answer.status_code == 200, answer.text


def fresh_streams(client, *prefixes: str, **params) -> tuple[str, ...]:
    """Fresh stream names, one per prefix, registered with ``params`` (none: the defaults)."""
    names = tuple(unique(prefix) for prefix in prefixes)
    register_streams(client, *names, **params)
    return names


def fresh_join(client) -> str:
    """JOIN over two fresh registered streams (a join needs their pi)."""
    a, b = fresh_streams(client, "A", "B", pi=JOIN_PI)
    return JOIN.format(a=a, b=b)


@pytest.fixture
def join_query(client, as_role):
    """A registered join over two fresh registered streams: (id, stream A, stream B)."""
    a, b = fresh_streams(client, "SA", "SB", pi=JOIN_PI)
    query_id = unique("q-")
    answer = client.post("/api/queries", json={"text": JOIN.format(a=a, b=b), "id": query_id},
                         headers=as_role("analyst"))
    assert answer.status_code == 201, answer.text
    return query_id, a, b


def write_batch(store, keys, batch: int, matches: dict[str, list[dict]] = {}, observations: dict[str, dict] = {}):
    """A micro-batch as the sink writes it (the matches with their alarm instances by the
    sink's own script, a match's optional ``key``, ``times``, ``partition``, ``records`` and
    ``factors`` taken out of it as the sink's rows carry them; the
    observations; the pn:live PUBLISH; in one MULTI/EXEC); returns the match ids per query."""
    pipe = store.pipeline(transaction=True)
    for query, found in matches.items():
        rows = []
        for match in found:
            match = dict(match)
            key = match.pop("key", None)
            known = [match.pop(name, None) for name in ("times", "partition", "records", "factors")]
            rows.append((json.dumps(match).encode(), 0, key, match["prob"], *known))
        queue_matches(pipe, keys, query, batch, rows, maxlen=100_000, at=round(time.time() * 1000))
    for query, record in observations.items():
        pipe.xadd(keys.observations(query), {"o": json.dumps(record), "b": batch})
    pipe.publish(keys.live, json.dumps({"batch": batch, "at": time.time(),
                                        "matches": {q: len(m) for q, m in matches.items()},
                                        "observations": sorted(observations), "dead": 0}))
    pipe.execute()
    return {query: [i.decode() for i, _ in reversed(store.xrevrange(keys.matches(query), count=len(found)))]
            if found else [] for query, found in matches.items()}
