"""Health: no token; Redis, the job's heartbeat, lag and last batch."""

from __future__ import annotations

import json
import time

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
