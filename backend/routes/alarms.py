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

import time

from fastapi import APIRouter

from contract.entries import alarm_action_entry, alarm_state_entry, live_alarm

from ..deps import AnalystDep, QueryDep, Service, ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import AlarmList, AlarmOut, SilenceIn
from ..records import alarm, matches_info
from . import errors

router = APIRouter(prefix="/alarms", tags=["alarms"])

#: Alarm actions kept in ``pn:alarm-actions`` for the live feeds to read (MAXLEN ~).
ACTIONS_MAXLEN = 10_000


def _act(service: Service, entry: dict, who: str, action: str, **fields) -> dict:
    added, last, _ = matches_info(service, entry["id"])
    now = time.time()
    state = dict(fields, added=added, cursor=last or "0-0") if action == "resolved" else fields
    # the state and its notice together: every API process's live feed sends the new state
    pipe = service.redis.pipeline(transaction=True)
    pipe.hset(service.keys.alarms(entry["id"]), mapping=alarm_state_entry(action, who, now, added, **state))
    pipe.xadd(service.keys.alarm_actions, alarm_action_entry(entry["id"], action), maxlen=ACTIONS_MAXLEN,
              approximate=True)
    pipe.publish(service.keys.live, live_alarm(entry["id"]))
    pipe.execute()
    service.audit(who, f"alarm.{action}", entry["id"], fields or None)
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
