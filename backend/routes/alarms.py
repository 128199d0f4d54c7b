"""Alarms: one instance per query and key, each with a state.

A query's matches about one key (its equality key's values, or none) are one alarm
*instance* (contract/alarms.py). An instance opens with its first match, and again with
the first match after someone resolved it (or after the query's ``auto_resolve_minutes``
of quiet); it is ``new`` until someone acknowledges it (``acknowledged``), silences it
until a time (``silenced``; afterwards ``new`` again if matches came meanwhile, else
``acknowledged``) or resolves it (``resolved``). A silence by matcher (/api/silences)
covers the new and acknowledged instances of its query and key while in force. The job
keeps each instance's record with the matches, exactly once; what people did is stamped
with the instance's episode. Every action is audited, and noted in ``pn:alarm-actions``
with a PUBLISH on ``pn:live``, so live feeds send the new state at once.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query

from contract.alarms import PRIORITIES, STATES, act, query_of, sort_key
from contract.entries import alarm_action_entry, live_alarm

from ..deps import AnalystDep, Service, ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import AlarmList, AlarmOut, ResolveIn, SilenceIn
from ..records import alarm_views
from . import errors
from .history import key_value
from .verdicts import record_verdict

router = APIRouter(prefix="/alarms", tags=["alarms"])

#: Alarm actions kept in ``pn:alarm-actions`` for the live feeds to read (MAXLEN ~).
ACTIONS_MAXLEN = 10_000


def _key_filter(raw: str | None) -> dict | None | str:
    """The ``key`` filter: a JSON object of attributes, or ``null`` (instances without key)."""
    if raw is None:
        return "any"
    try:
        wanted = key_value(raw)
    except ValueError:
        wanted = raw
    if wanted is not None and not isinstance(wanted, dict):
        raise ApiError(422, 'key must be a JSON object of attributes, e.g. {"region": 17}, or null', field="key")
    return wanted


def _has_key(view: dict, wanted) -> bool:
    if wanted == "any":
        return True
    if wanted is None or view["key"] is None:
        return wanted is None and view["key"] is None
    return all(name in view["key"] and view["key"][name] == value for name, value in wanted.items())


@router.get("", response_model=AlarmList, responses=errors(401, 403, 404), summary="Alarm instances")
def list_alarms(who: ViewerDep, service: ServiceDep,
                query: Annotated[str | None, Query(max_length=64, description="only this query's instances")] = None,
                state: Annotated[list[str] | None, Query(description="only these states")] = None,
                priority: Annotated[list[str] | None, Query(description="only these priorities")] = None,
                key: Annotated[str | None, Query(max_length=2000, description=(
                    'only instances whose key has these attributes: a JSON object, e.g. {"region": 17}; '
                    'null: instances without key'))] = None,
                limit: Annotated[int, Query(ge=1, le=1000)] = 200,
                next: Annotated[str | None, Query(pattern=r"^[0-9]{1,9}$", description="from the previous page")] = None,
                ) -> dict:
    """Every instance that matched or was acted on, by priority (critical, warning, info),
    state (new, acknowledged, silenced, resolved), then latest match first; paged."""
    _, queries, _ = service.snapshot()
    if query is not None and query not in queries:
        raise ApiError(404, f"no query {query!r}", field="query")
    for name, values, allowed in (("state", state, STATES), ("priority", priority, PRIORITIES)):
        unknown = sorted(set(values or ()) - set(allowed))
        if unknown:
            raise ApiError(422, f"{name} {unknown[0]!r} is none of {', '.join(allowed)}", field=name)
    wanted = _key_filter(key)
    entries = {query: queries[query]} if query is not None else queries
    views = [v for v in alarm_views(service, entries)
             if (not state or v["state"] in state) and (not priority or v["priority"] in priority)
             and _has_key(v, wanted)]
    views.sort(key=sort_key)
    start = int(next or 0)
    page = views[start:start + limit]
    return {"items": page, "next": str(start + limit) if start + limit < len(views) else None}


def _instance(service: Service, alarm_id: str) -> tuple[dict, dict]:
    """The query entry and the view of an instance (404 when neither matched nor acted on)."""
    query_id = query_of(alarm_id)
    entry = service.registry.query(query_id)
    if entry is None:
        raise ApiError(404, f"no query {query_id!r}", field="alarm_id")
    found = alarm_views(service, {query_id: entry}, {query_id: [alarm_id]})
    if not found:
        if alarm_id == query_id:
            raise ApiError(404, f"query {query_id!r} has no alarm without key (no match yet, or its alarms are per "
                                f"key: GET /api/alarms?query={query_id})", field="alarm_id")
        raise ApiError(404, f"no alarm {alarm_id!r}", field="alarm_id")
    return entry, found[0]


def _act(service: Service, entry: dict, alarm_id: str, who: str, action: str, **fields) -> dict:
    now = time.time()
    details = {k: v for k, v in fields.items() if v is not None}
    # the state and its notice together: every API process's live feed sends the new state
    pipe = service.redis.pipeline(transaction=True)
    act(pipe, service.keys, alarm_id, action, who, now, **details)
    pipe.xadd(service.keys.alarm_actions, alarm_action_entry(entry["id"], action, alarm_id), maxlen=ACTIONS_MAXLEN,
              approximate=True)
    pipe.publish(service.keys.live, live_alarm(entry["id"]))
    pipe.execute()
    service.audit(who, f"alarm.{action}", alarm_id, details or None)
    return alarm_views(service, {entry["id"]: entry}, {entry["id"]: [alarm_id]})[0]


@router.get("/{alarm_id}", response_model=AlarmOut, responses=errors(401, 403, 404), summary="An alarm instance")
def get_alarm(who: ViewerDep, alarm_id: str, service: ServiceDep) -> dict:
    return _instance(service, alarm_id)[1]


@router.post("/{alarm_id}/acknowledge", response_model=AlarmOut, responses=errors(401, 403, 404, 409),
             summary="Acknowledge an alarm instance")
def acknowledge(who: AnalystDep, alarm_id: str, service: ServiceDep) -> dict:
    entry, view = _instance(service, alarm_id)
    if not view["matches"] or view["state"] == "resolved":
        raise ApiError(409, f"alarm {alarm_id!r} is not open", field="alarm_id")
    return _act(service, entry, alarm_id, who.label, "acknowledged")


@router.post("/{alarm_id}/silence", response_model=AlarmOut, responses=errors(401, 403, 404),
             summary="Silence an alarm instance until a time")
def silence(who: AnalystDep, alarm_id: str, body: SilenceIn, service: ServiceDep) -> dict:
    """Also before its first match, for a query without key (a maintenance window of a
    keyed query's instances is a silence by matcher: /api/silences)."""
    if body.until <= time.time():
        raise ApiError(422, "until must be in the future (seconds since the epoch)", field="until")
    query_id = query_of(alarm_id)
    entry = service.registry.query(query_id)
    if entry is None:
        raise ApiError(404, f"no query {query_id!r}", field="alarm_id")
    if alarm_id != query_id:
        _instance(service, alarm_id)
    # the notifier looks at it when it ends: an instance that matched meanwhile notifies again
    service.redis.zadd(service.keys.silence_ends, {f"i:{alarm_id}": body.until})
    return _act(service, entry, alarm_id, who.label, "silenced", until=body.until, comment=body.comment)


@router.post("/{alarm_id}/resolve", response_model=AlarmOut, responses=errors(401, 403, 404),
             summary="Resolve an alarm instance")
def resolve(who: AnalystDep, alarm_id: str, service: ServiceDep, body: ResolveIn | None = None) -> dict:
    """The next match about its key opens it again. A ``verdict`` (real, false, unknown)
    judges the episode it closes (/api/queries/{id}/verdicts)."""
    entry, _ = _instance(service, alarm_id)
    if body is not None and body.verdict is not None:
        record_verdict(service, entry, who.label, body.verdict, body.comment, alarm=alarm_id)
    return _act(service, entry, alarm_id, who.label, "resolved", comment=body.comment if body else None,
                verdict=body.verdict if body else None)
