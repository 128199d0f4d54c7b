"""Alarms: a query's matches grouped into one alarm at a time, with a state.

An alarm opens with the first match after the query's last resolution and is ``new``
until someone acknowledges it (``acknowledged``), silences it until a time
(``silenced``; afterwards ``new`` again if matches came meanwhile, else
``acknowledged``) or resolves it (``resolved``; the next match opens a new alarm). The
state lives in ``pn:alarms:<qid>``; counts come from the match stream's ``entries-added``
(exact, also when the capped stream was trimmed). Every action is audited, and noted in
``pn:alarm-actions`` with a PUBLISH on ``pn:live``, so live feeds send the new state at once.
"""

from __future__ import annotations

import json
import time

import redis
from fastapi import APIRouter

from ..deps import AnalystDep, QueryDep, Service, ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import AlarmList, AlarmOut, SilenceIn
from . import errors

router = APIRouter(prefix="/alarms", tags=["alarms"])

#: Alarm actions kept in ``pn:alarm-actions`` for the live feeds to read (MAXLEN ~).
ACTIONS_MAXLEN = 10_000


def _matches_info(service: Service, query_id: str) -> tuple[int, str | None, float | None]:
    """Matches ever added to the query's stream, and its latest match's cursor and probability."""
    try:
        info = service.redis.xinfo_stream(service.keys.matches(query_id))
    except redis.ResponseError:  # no match yet: no stream
        return 0, None, None
    last = info.get("last-entry")
    if not last:
        return int(info["entries-added"]), None, None
    return int(info["entries-added"]), last[0].decode(), json.loads(last[1][b"m"])["prob"]


def _record(service: Service, query_id: str) -> dict:
    return {k.decode(): v.decode() for k, v in service.redis.hgetall(service.keys.alarms(query_id)).items()}


def alarm(service: Service, entry: dict, now: float | None = None) -> dict | None:
    """The query's alarm as it stands (None: never matched, never acted on)."""
    now = time.time() if now is None else now
    query_id = entry["id"]
    added, last, last_prob = _matches_info(service, query_id)
    record = _record(service, query_id)
    if not record and not added:
        return None
    opened_at = int(record.get("added", 0))
    count = max(0, added - opened_at)
    stored = record.get("state", "new")
    until = float(record["until"]) if "until" in record else None
    if stored == "resolved":
        state = "new" if count else "resolved"
    elif stored == "silenced" and until is not None and now >= until:
        state = "new" if added > int(record.get("acted_added", 0)) else "acknowledged"
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
            "updated_by": record.get("by"), "updated_at": float(record["at"]) if "at" in record else None}


def _act(service: Service, entry: dict, who: str, action: str, **fields) -> dict:
    added, last, _ = _matches_info(service, entry["id"])
    now = time.time()
    mapping = {"state": action, "by": who, "at": now, "acted_added": added, **fields}
    if action == "resolved":
        mapping.update(added=added, cursor=last or "0-0")
    # the state and its notice together: every API process's live feed sends the new state
    pipe = service.redis.pipeline(transaction=True)
    pipe.hset(service.keys.alarms(entry["id"]), mapping=mapping)
    pipe.xadd(service.keys.alarm_actions, {"q": entry["id"], "action": action}, maxlen=ACTIONS_MAXLEN,
              approximate=True)
    pipe.publish(service.keys.live, json.dumps({"alarm": entry["id"]}))
    pipe.execute()
    service.audit(who, f"alarm.{action}", entry["id"], {k: v for k, v in fields.items()} or None)
    return alarm(service, entry, now)


@router.get("", response_model=AlarmList, responses=errors(401, 403), summary="Alarms of every query")
def list_alarms(who: ViewerDep, service: ServiceDep) -> dict:
    """One alarm per query that has matched or been acted on, new ones first, then by latest match."""
    _, queries, _ = service.snapshot()
    found = [a for a in (alarm(service, e) for e in queries.values()) if a is not None]
    order = {"new": 0, "silenced": 1, "acknowledged": 2, "resolved": 3}
    found.sort(key=lambda a: (order[a["state"]], a["query"]))
    return {"items": found}


@router.get("/{query_id}", response_model=AlarmOut, responses=errors(401, 403, 404), summary="A query's alarm")
def get_alarm(who: ViewerDep, entry: QueryDep, service: ServiceDep) -> dict:
    found = alarm(service, entry)
    if found is None:
        raise ApiError(404, f"query {entry['id']!r} has no alarm (no match yet)", field="query_id")
    return found


@router.post("/{query_id}/acknowledge", response_model=AlarmOut, responses=errors(401, 403, 404, 409),
             summary="Acknowledge a query's alarm")
def acknowledge(who: AnalystDep, entry: QueryDep, service: ServiceDep) -> dict:
    current = alarm(service, entry)
    if current is None or not current["matches"]:
        raise ApiError(409, f"query {entry['id']!r} has no open alarm", field="query_id")
    return _act(service, entry, who.label, "acknowledged")


@router.post("/{query_id}/silence", response_model=AlarmOut, responses=errors(401, 403, 404),
             summary="Silence a query's alarm until a time")
def silence(who: AnalystDep, body: SilenceIn, entry: QueryDep, service: ServiceDep) -> dict:
    """Also before any match (a maintenance window)."""
    if body.until <= time.time():
        raise ApiError(422, "until must be in the future (seconds since the epoch)", field="until")
    return _act(service, entry, who.label, "silenced", until=body.until)


@router.post("/{query_id}/resolve", response_model=AlarmOut, responses=errors(401, 403, 404),
             summary="Resolve a query's alarm")
def resolve(who: AnalystDep, entry: QueryDep, service: ServiceDep) -> dict:
    """The next match opens a new alarm."""
    return _act(service, entry, who.label, "resolved")
