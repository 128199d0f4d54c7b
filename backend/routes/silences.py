"""Silences by matcher: a query and, optionally, attributes of its key, from a start to an
end, with an author and a comment. While in force a silence covers every new or
acknowledged alarm instance it matches, also instances that do not exist yet (a
maintenance window), and a silenced instance notifies nobody. Kept in ``pn:silences``
until removed; listing says which are in force.
"""

from __future__ import annotations

import json
import secrets
import time

from fastapi import APIRouter, Response

from contract.entries import live_alarm

from ..deps import AnalystDep, ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import MatcherIn, MatcherList, MatcherOut
from . import errors

router = APIRouter(prefix="/silences", tags=["alarms"])

#: Silences kept at most (each is read on every alarm listing).
MAX_SILENCES = 10_000


def _out(silence_id: str, raw: bytes | str, now: float) -> dict:
    silence = json.loads(raw)
    return {"id": silence_id, **silence, "active": silence["start"] <= now < silence["end"]}


@router.get("", response_model=MatcherList, responses=errors(401, 403), summary="Silences by matcher")
def list_silences(who: ViewerDep, service: ServiceDep) -> dict:
    """In force first, then those to come, then the ended; by end."""
    now = time.time()
    found = [_out(i.decode(), raw, now) for i, raw in service.redis.hgetall(service.keys.silences).items()]
    found.sort(key=lambda s: (not s["active"], s["end"] <= now, s["end"], s["id"]))
    return {"items": found}


@router.post("", status_code=201, response_model=MatcherOut, responses=errors(401, 403, 404, 409),
             summary="Silence a query's alarm instances, or those of some keys, for a while")
def create_silence(who: AnalystDep, body: MatcherIn, service: ServiceDep) -> dict:
    now = time.time()
    if service.registry.query(body.query) is None:
        raise ApiError(404, f"no query {body.query!r}", field="query")
    start = now if body.start is None else body.start
    if body.end <= max(start, now):
        raise ApiError(422, "end must be after start and in the future (seconds since the epoch)", field="end")
    if service.redis.hlen(service.keys.silences) >= MAX_SILENCES:
        raise ApiError(409, f"at most {MAX_SILENCES} silences are kept: remove ended ones first")
    silence_id = f"s-{secrets.token_hex(6)}"
    silence = {"query": body.query, "key": body.key or None, "start": start, "end": body.end, "author": who.label,
               "comment": body.comment, "created": now}
    pipe = service.redis.pipeline(transaction=True)
    pipe.hset(service.keys.silences, silence_id, json.dumps(silence))
    pipe.zadd(service.keys.silence_ends, {f"m:{silence_id}": body.end})   # for the notifier, when it ends
    pipe.publish(service.keys.live, live_alarm(body.query))
    pipe.execute()
    service.audit(who.label, "silence.create", silence_id, silence)
    return _out(silence_id, json.dumps(silence), now)


@router.delete("/{silence_id}", status_code=204, response_class=Response, responses=errors(401, 403, 404),
               summary="Remove a silence")
def delete_silence(who: AnalystDep, silence_id: str, service: ServiceDep) -> Response:
    raw = service.redis.hget(service.keys.silences, silence_id)
    if raw is None or not service.redis.hdel(service.keys.silences, silence_id):
        raise ApiError(404, f"no silence {silence_id!r}", field="silence_id")
    service.redis.zrem(service.keys.silence_ends, f"m:{silence_id}")
    service.audit(who.label, "silence.remove", silence_id, json.loads(raw))
    return Response(status_code=204)
