"""Health for load balancers and people: no token needed.

200 while Redis answers (``status`` "ok" with a live job, "degraded" without one), 503
("down") while it does not; the latest restarts ``penumbra up`` made, with their causes.
Nothing secret is shown.
"""

from __future__ import annotations

import json
import time

import redis
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from contract.entries import read_metrics, read_restart

from ..deps import ServiceDep
from ..models import HealthOut

router = APIRouter(tags=["health"])

#: Share of Redis's maxmemory past which health warns (Redis refuses writes at the limit).
MEMORY_WARNING = 0.8
#: The job refreshes its heartbeat every second; older than this, it counts as gone.
HEARTBEAT_STALE_SECONDS = 10.0
#: The latest restarts health shows.
RESTARTS_SHOWN = 20


def _number(raw: bytes | None, kind=float):
    try:
        return kind(raw) if raw is not None else None
    except ValueError:
        return None


def _job(beat: dict, now: float) -> dict | None:
    if not beat:
        return None
    at = _number(beat.get(b"at"))
    last_batch = _number(beat.get(b"last_batch"), int)
    last_at = _number(beat.get(b"last_batch_at"))
    heartbeat_age = max(0.0, now - at) if at is not None else None
    return {"alive": heartbeat_age is not None and heartbeat_age < HEARTBEAT_STALE_SECONDS,
            "heartbeat_age": heartbeat_age, "active": beat.get(b"active") == b"1" if b"active" in beat else None,
            "last_batch": last_batch if last_batch is not None and last_batch >= 0 else None,
            "last_batch_age": max(0.0, now - last_at) if last_at else None,
            "master": beat[b"master"].decode() if b"master" in beat else None}


@router.get("/health", response_model=HealthOut, responses={503: {"model": HealthOut, "description": "no Redis"}},
            summary="Health: Redis, the Spark job's heartbeat, lag, last batch")
def health(service: ServiceDep):
    keys = service.keys
    try:
        started = time.perf_counter()
        service.redis.ping()
        redis_ms = (time.perf_counter() - started) * 1000
        pipe = service.redis.pipeline(transaction=False)
        pipe.hgetall(keys.heartbeat)
        pipe.xrevrange(keys.metrics, count=1)
        pipe.xlen(keys.ingest)
        pipe.hvals(keys.queries)
        pipe.info("memory")
        pipe.xrevrange(keys.restarts, count=RESTARTS_SHOWN)
        beat, latest, length, queries, memory, restarts = pipe.execute()
    except (redis.ConnectionError, redis.TimeoutError):
        down = {"status": "down", "redis": False, "redis_ms": None, "job": None, "lag_entries": None,
                "lag_seconds": None, "ingest_length": None, "failed_queries": None, "redis_memory": None, "memory_warning": False, "restarts": []}
        return JSONResponse(down, status_code=503, headers={"Retry-After": "2"})
    job = _job(beat, time.time())
    limit = int(memory.get("maxmemory") or 0)
    share = round(int(memory.get("used_memory", 0)) / limit, 4) if limit else None
    progress = read_metrics(latest[0][1]) if latest else {}
    return {"status": "ok" if job and job["alive"] else "degraded", "redis": True, "redis_ms": redis_ms,
            "job": job, "lag_entries": progress.get("lag_entries"), "lag_seconds": progress.get("lag_seconds"),
            "ingest_length": length, "failed_queries": sum(1 for raw in queries if json.loads(raw).get("failed")),
            "redis_memory": share, "memory_warning": share is not None and share > MEMORY_WARNING,
            "restarts": [read_restart(entry_id, fields) for entry_id, fields in restarts]}
