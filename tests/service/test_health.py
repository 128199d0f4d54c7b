"""Health: no token; Redis, the job's heartbeat, lag and last batch."""

from __future__ import annotations

import json
import time

import pytest
import redis
from fastapi.testclient import TestClient

from backend import Settings, create_app
from contract import Keys
from penumbra.cli.processes import RedisServer


def test_health_reads_the_heartbeat_and_metrics():
    keys = Keys()
    with RedisServer() as server:
        store = redis.Redis.from_url(server.url)
        with TestClient(create_app(Settings(redis_url=server.url, admin_token="t" * 20))) as client:
            answer = client.get("/api/health")
            assert answer.status_code == 200
            assert answer.json()["status"] == "degraded" and answer.json()["job"] is None
            now = time.time()
            store.hset(keys.heartbeat, mapping={"job": "j", "pid": 1, "started": now - 60, "at": now - 1,
                                                "master": "local[2]", "active": 1, "last_batch": 41,
                                                "last_batch_at": now - 3})
            store.xadd(keys.metrics, {"metrics": json.dumps({"batch": 41, "lag_entries": 7, "lag_seconds": 0.25})})
            store.xadd(keys.ingest, {"e": "{}"})
            health = client.get("/api/health").json()
            assert health["status"] == "ok" and health["redis"] is True
            assert health["job"]["alive"] and health["job"]["last_batch"] == 41 and health["job"]["active"]
            assert 0.5 < health["job"]["heartbeat_age"] < 30 and 2 < health["job"]["last_batch_age"] < 30
            assert (health["lag_entries"], health["lag_seconds"], health["ingest_length"]) == (7, 0.25, 1)
            store.hset(keys.heartbeat, "at", now - 60)
            assert client.get("/api/health").json()["status"] == "degraded"
        store.close()


def test_health_warns_before_redis_reaches_its_memory_limit():
    with RedisServer() as server:
        store = redis.Redis.from_url(server.url)
        with TestClient(create_app(Settings(redis_url=server.url, admin_token="t" * 20))) as client:
            assert (client.get("/api/health").json()["redis_memory"], store.config_get("maxmemory")) == \
                (None, {"maxmemory": "0"})  # no limit, no share
            used = int(store.info("memory")["used_memory"])
            store.config_set("maxmemory", str(int(used * 4)))
            calm = client.get("/api/health").json()
            assert 0.15 < calm["redis_memory"] < 0.4 and calm["memory_warning"] is False
            store.config_set("maxmemory", str(int(used * 1.1)))
            close = client.get("/api/health").json()
            assert 0.8 < close["redis_memory"] < 1.0 and close["memory_warning"] is True
            # at the limit Redis refuses writes, and the answer says so: 503, nothing half written
            store.config_set("maxmemory-policy", "noeviction")
            store.config_set("maxmemory", str(used // 2))
            event = {"stream": "m", "id": "e1", "ts": {"lo": 1, "hi": 2}}
            refused = client.post("/api/events", json=[event], headers={"Authorization": "Bearer " + "t" * 20})
            assert refused.status_code == 503 and "memory limit" in refused.json()["error"]["message"]
            assert refused.headers["Retry-After"] == "30" and store.xlen(Keys().ingest) == 0
        store.close()


def test_health_lists_the_latest_restarts_newest_first_with_their_causes():
    from backend.routes.health import RESTARTS_SHOWN
    from contract.entries import restart_entry

    keys = Keys()
    with RedisServer() as server:
        store = redis.Redis.from_url(server.url)
        with TestClient(create_app(Settings(redis_url=server.url, admin_token="t" * 20))) as client:
            assert client.get("/api/health").json()["restarts"] == []
            now = time.time()
            for n in range(RESTARTS_SHOWN + 5):
                store.xadd(keys.restarts, restart_entry("job", 1000 + n, "was killed by SIGKILL", now - 100 + n, 42.5 + n,
                                                        1 + n % 3, (1, 2, 4)[n % 3]))
            store.xadd(keys.restarts, restart_entry("redis", None, "not ready after 600 s", now, 600.0, 1, 30))
            restarts = client.get("/api/health").json()["restarts"]
            assert len(restarts) == RESTARTS_SHOWN
            newest, previous = restarts[0], restarts[1]
            assert {k: newest[k] for k in ("part", "pid", "cause", "failures", "restart_in")} == \
                {"part": "redis", "pid": None, "cause": "not ready after 600 s", "failures": 1, "restart_in": 30}
            n = RESTARTS_SHOWN + 4  # the last job restart written
            assert {k: previous[k] for k in ("part", "pid", "cause", "uptime", "failures", "restart_in")} == \
                {"part": "job", "pid": 1000 + n, "cause": "was killed by SIGKILL", "uptime": 42.5 + n,
                 "failures": 1 + n % 3, "restart_in": (1, 2, 4)[n % 3]}
            assert previous["at"] == pytest.approx(now - 100 + n)
            assert [r["pid"] for r in restarts[1:]] == [1000 + k for k in range(n, n - RESTARTS_SHOWN + 1, -1)]
        store.close()
