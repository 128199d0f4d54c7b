"""Events: one event or a list, validated by the core, appended to the ingest stream.

The valid events of a request go to ``pn:in`` in request order and each rejected one to
the dead-letter stream ``pn:dead`` (the job's shape: ``kind`` = ``rejected``,
``entry``, ``reason``, ``raw``, ``at``; plus ``source`` = ``api``, ``who`` and
``index``). The valid events are appended by one script call (all or none: the ingest's
identities, contract/ingest.py), then the dead letters and counts in one MULTI/EXEC; the
letters are made before either, so nothing a client sends can fail between the two. A
Redis that fails answers 503.
"""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from contract.dead import queue_dead, trim_dead
from contract.entries import encode, rejected_letter
from contract.identity import CONFLICT_REASON, identified
from contract.ingest import CONFLICT, DUPLICATE, note_sources
from contract.ingest import ingest as append_once
from contract.tokens import Principal
from penumbra.errors import ValidationError
from penumbra.events import admit_contents, collector_paused, loads_events

from ..deps import AnalystDep, Service, ServiceDep
from ..errors import ApiError
from ..models import IngestOut
from . import errors

log = logging.getLogger("penumbra.api.events")
router = APIRouter(prefix="/events", tags=["events"])

_EVENT = {"$ref": "#/components/schemas/EventIn"}
#: The request body as OpenAPI shows it (``create_app`` adds ``EventIn`` to the
#: components and the deployment's ``maxItems``). A list's items are taken as they come:
#: each one that is not a valid event is rejected alone, and the rest are kept.
EVENTS_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "oneOf": [_EVENT, {"type": "array", "items": {
        "description": "an event (EventIn); one that is not valid is rejected alone, with its index and reason",
        "example": {"stream": "seismic", "id": "s-17", "ts": {"lo": 100.0, "hi": 120.0}}}}]}}}}}


def _raw(item) -> bytes:
    """What a dead letter keeps of a rejected item: its JSON, or, for one nested deeper than
    the JSON writers go (some hundreds of levels), a note of it."""
    try:
        return encode(item)
    except RecursionError:
        return b'"(not kept: nested too deeply)"'


def decode_body(body: bytes):
    """The request's JSON, strictly (NaN and Infinity are errors; integers stay exact), or
    400 naming the problem."""
    try:
        return loads_events(body)
    except ValidationError as error:
        raise ApiError(400, str(error), field="body") from None


def _registered_problem(admitted, streams) -> ValidationError | None:
    """Why an event the core found valid is refused here: its stream is not registered, or
    its timestamp is longer than the stream's pi."""
    params = streams.get(admitted.stream)
    if params is None:
        return ValidationError("stream", f"stream {admitted.stream!r} is not registered "
                                         f"(an admin registers it with PUT /api/streams/{{name}})")
    too_wide = params.too_wide(admitted.length) if params.pi is not None else None
    return ValidationError("ts", too_wide) if too_wide else None


def ingest(service: Service, who: Principal, body: bytes, request_id: str | None = None) -> dict:
    # a request's objects hold no cycles and are freed with it: the collector, which would
    # scan them every few hundred allocations, costs as much as the checks (collector_paused)
    with collector_paused():
        return _ingest(service, who, body, request_id)


def _ingest(service: Service, who: Principal, body: bytes, request_id: str | None) -> dict:
    limit = service.settings.ingest_max_events
    decoded = decode_body(body)
    single = isinstance(decoded, dict)
    items = [decoded] if single else decoded
    if not isinstance(items, list):
        raise ApiError(422, "the body must be an event object or a list of events", field="body")
    if len(items) > limit:
        raise ApiError(422, f"too many events: {len(items)}, at most {limit} per request", field="body",
                       limit=limit)
    streams = service.streams()
    # each item's fate: an event (the first of its identity), the index of the first (a
    # repeat with the same content), or why it is refused (invalid, a conflict, a stream not
    # registered, too wide); a repeat shares its first's fate
    fates = admit_contents(items, streams)
    for index, fate in enumerate(fates):
        if isinstance(fate, int):
            first = fates[fate]
            fates[index] = first if isinstance(first, ValidationError) else fate
        elif not isinstance(fate, ValidationError):
            fates[index] = _registered_problem(fate, streams) or fate
    rejected = [(index, fate) for index, fate in enumerate(fates) if isinstance(fate, ValidationError)]
    repeated = sum(1 for fate in fates if isinstance(fate, int))
    valid = [index for index, fate in enumerate(fates) if not isinstance(fate, (int, ValidationError))]
    keys, now = service.keys, time.time()
    def letter(index: int, error: ValidationError) -> dict:
        return rejected_letter(str(error), _raw(items[index]), now, source="api", who=who.label, index=index)

    # the rejected items' letters are made before anything is written: what cannot be
    # written as it came fails nothing
    letters = {index: letter(index, error) for index, error in rejected}
    # each identity once across requests, atomically: a duplicate is skipped, a conflict refused
    found = append_once(service.redis, keys, [identified(fates[i], encode(items[i])) for i in valid],
                        service.settings.identity_horizon)
    ids = [entry for entry in found if isinstance(entry, bytes)]
    note_sources(service.redis, keys, (fates[i] for i, entry in zip(valid, found) if isinstance(entry, bytes)), now)
    duplicates = repeated + found.count(DUPLICATE)
    conflicts = [(index, ValidationError("id", CONFLICT_REASON)) for index, entry in zip(valid, found)
                 if entry == CONFLICT]
    if conflicts:
        letters.update((index, letter(index, error)) for index, error in conflicts)
        rejected = sorted(rejected + conflicts, key=lambda pair: pair[0])
    if rejected or duplicates:
        pipe = service.redis.pipeline(transaction=True)
        queue_dead(pipe, keys, (letters[index] for index, _ in rejected), service.settings.dead_maxlen)
        if rejected:
            pipe.hincrby(keys.counts, "rejected", len(rejected))
        if duplicates:
            pipe.hincrby(keys.counts, "duplicates", duplicates)
        pipe.execute()
    if rejected:
        trim_dead(service.redis, keys, service.settings.dead_max_bytes)
    log.info("events: %d appended, %d duplicates, %d rejected", len(ids), duplicates, len(rejected),
             extra={"request": request_id, "who": who.label, "accepted": len(ids), "duplicates": duplicates,
                    "rejected": len(rejected), "first_id": ids[0].decode() if ids else None,
                    "last_id": ids[-1].decode() if ids else None})
    errors_out = [{"index": index, "field": error.field or None, "reason": str(error)} for index, error in rejected]
    if single and rejected:
        error = rejected[0][1]
        status = 409 if conflicts else 422
        raise ApiError(status, str(error), field=error.field or None, index=0, dead_letter=True)
    return {"accepted": len(ids), "duplicates": duplicates, "rejected": len(rejected),
            "first_id": ids[0].decode() if ids else None, "last_id": ids[-1].decode() if ids else None,
            "errors": errors_out}


@router.post("", status_code=202, response_model=IngestOut, responses=errors(401, 403, 409, 429),
             openapi_extra=EVENTS_BODY, summary="Post one event or a list of events")
async def post_events(request: Request, who: AnalystDep, service: ServiceDep) -> dict:
    """One event object or a list of them (DESIGN.md's event shape), at most
    PENUMBRA_INGEST_MAX_EVENTS (the schema's ``maxItems``; more answers 422). Valid events are appended to
    the ingest stream in order; each invalid one is answered with its index and reason
    and kept in the dead-letter stream. A list answers 202 with the counts; a single
    invalid event answers 422 naming the field. Per-token rate limit: 429 with Retry-After."""
    await run_in_threadpool(service.ingest_limiter.hit, who.id)
    body = await request.body()
    return await run_in_threadpool(ingest, service, who, body, getattr(request.state, "request_id", None))
