"""What the API shows of the job's entries: the records of REST pages and of the live feed alike.

The routes and the live hub (:mod:`backend.live`) both build their records here, from the
entries' decoders in :mod:`contract.entries`.
"""

from __future__ import annotations

import math
import time
from typing import Any

import redis

from contract.entries import read_alarm_state, read_match, read_metrics, read_observation

from .deps import Service

__all__ = ["PARTS", "alarm", "finite", "match_record", "matches_info", "metrics_record", "observation_record",
           "projection"]


def finite(value: Any) -> Any:
    """``value`` with every infinite or NaN float as None (JSON has no infinity; the job's
    observations hold -inf for "no bound yet")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def match_record(entry_id: bytes, fields: dict) -> dict:
    """One match entry as the API shows it (REST pages and the live feed)."""
    return read_match(entry_id, fields)


def observation_record(entry_id: bytes, fields: dict) -> dict:
    """One observation entry, unbounded values as null."""
    return finite(read_observation(entry_id, fields))


def metrics_record(fields: dict) -> dict:
    """One progress report of the job, non-finite figures as null."""
    return finite(read_metrics(fields))


#: The parts of an observation record each projection shows (REST and the live feed).
PARTS = {"partitions": ("partitions", "newly_buffered", "watermark", "threshold", "floor"),
         "buffers": ("buffers", "buffer_bounds", "watermark", "groups", "snapshot_bytes"),
         "near_misses": ("near_misses", "threshold", "floor")}


def projection(entry_id: bytes, fields: dict, parts: tuple[str, ...]) -> dict:
    """Those parts of one observation entry, with its cursor, batch and time."""
    latest = observation_record(entry_id, fields)
    observed = latest.pop("observations")
    return {**latest, "value": {part: observed.get(part) for part in parts}}


def matches_info(service: Service, query_id: str) -> tuple[int, str | None, float | None]:
    """Matches ever added to the query's stream, and its latest match's cursor and probability."""
    try:
        info = service.redis.xinfo_stream(service.keys.matches(query_id))
    except redis.ResponseError:  # no match yet: no stream
        return 0, None, None
    last = info.get("last-entry")
    if not last:
        return int(info["entries-added"]), None, None
    return int(info["entries-added"]), last[0].decode(), read_match(*last)["prob"]


def alarm(service: Service, entry: dict, now: float | None = None) -> dict | None:
    """The query's alarm as it stands (None: never matched, never acted on)."""
    now = time.time() if now is None else now
    query_id = entry["id"]
    added, last, last_prob = matches_info(service, query_id)
    record = read_alarm_state(service.redis.hgetall(service.keys.alarms(query_id)))
    if not record and not added:
        return None
    count = max(0, added - record.get("added", 0))
    stored = record.get("state", "new")
    until = record.get("until")
    if stored == "resolved":
        state = "new" if count else "resolved"
    elif stored == "silenced" and until is not None and now >= until:
        state = "new" if added > record.get("acted_added", 0) else "acknowledged"
    else:
        state = stored
    first = None
    if count:
        after = record.get("cursor")
        found = service.redis.xrange(service.keys.matches(query_id), f"({after}" if after else "-", "+", count=1)
        first = found[0][0].decode() if found else None
    return {"query": query_id, "name": entry.get("name", query_id), "state": state, "matches": count,
            "first": first, "last": last, "last_prob": last_prob,
            "silenced_until": until if state == "silenced" else None,
            "updated_by": record.get("by"), "updated_at": record.get("at")}
