"""What the API shows of the job's entries: the records of REST pages and of the live feed alike.

The routes and the live hub (:mod:`backend.live`) both build their records here, from the
entries' decoders in :mod:`contract.entries`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Iterable, Mapping

import redis

from contract.alarms import instance_view, read_instance, read_silence, read_state
from contract.entries import read_match, read_metrics, read_observation

from .deps import Service

__all__ = ["PARTS", "alarm_views", "finite", "match_record", "matches_info", "metrics_record", "observation_record",
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


def alarm_views(service: Service, entries: Mapping[str, dict], named: Mapping[str, Iterable[str]] | None = None,
                now: float | None = None) -> list[dict]:
    """The alarm instances of these queries (``entries``, id -> registry entry) as the API
    shows them: every instance, or for each query in ``named`` only those instances (one
    read of records, states and silences; contract/alarms.py puts them together)."""
    now = time.time() if now is None else now
    keys = service.keys
    order = list(entries)
    pipe = service.redis.pipeline(transaction=False)
    for query in order:
        wanted = None if named is None else list(named.get(query, ()))
        if wanted is None:
            pipe.hgetall(keys.instances(query))
            pipe.hgetall(keys.alarm_states(query))
        elif wanted:
            pipe.hmget(keys.instances(query), wanted)
            pipe.hmget(keys.alarm_states(query), wanted)
    pipe.hgetall(keys.silences)
    answers = pipe.execute()
    silences = [read_silence(i.decode(), raw) for i, raw in answers.pop().items()]
    views = []
    for query in order:
        wanted = None if named is None else list(named.get(query, ()))
        if wanted is not None and not wanted:
            continue
        records, states = answers.pop(0), answers.pop(0)
        if wanted is not None:
            records = {i: r for i, r in zip(wanted, records) if r is not None}
            states = {i: r for i, r in zip(wanted, states) if r is not None}
        else:
            records = {i.decode(): r for i, r in records.items()}
            states = {i.decode(): r for i, r in states.items()}
        for instance in sorted(set(records) | set(states)):
            raw = records.get(instance)
            views.append(instance_view(entries[query], instance, read_instance(raw) if raw else None,
                                       read_state(states.get(instance)), silences, now))
    return views
