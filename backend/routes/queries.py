"""Queries: register (validated by the core's parser), list, read, change, remove.

Every change goes through the versioned registry (``contract.registry.Registry``), which
appends it to the audit stream with the caller's token label and the time.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from contract.registry import RegistryError, RegistryFull

from ..deps import AnalystDep, QueryDep, ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import QueryIn, QueryList, QueryOut, QueryPatch
from . import errors

router = APIRouter(prefix="/queries", tags=["queries"])


@router.post("", status_code=201, response_model=QueryOut, responses=errors(401, 403, 409),
             summary="Register a query")
def register_query(body: QueryIn, who: AnalystDep, service: ServiceDep) -> dict:
    """Parse, build against the registered streams and register a query. The running job
    starts it at its next micro-batch. A query that does not parse answers 422 with the
    message, line and column."""
    try:
        return service.registry.register(body.text, query_id=body.id, threshold=body.threshold, name=body.name,
                                         paused=body.paused, priority=body.priority,
                                         auto_resolve_minutes=body.auto_resolve_minutes, who=who.label)
    except RegistryFull as error:
        raise ApiError(409, str(error), limit=service.settings.max_queries) from None
    except RegistryError as error:
        raise ApiError(409, str(error), field="id") from None


@router.get("", response_model=QueryList, responses=errors(401, 403), summary="List queries")
def list_queries(who: ViewerDep, service: ServiceDep) -> dict:
    version, queries, _ = service.snapshot()
    return {"version": version, "items": sorted(queries.values(), key=lambda e: (e["created"], e["id"]))}


@router.get("/{query_id}", response_model=QueryOut, responses=errors(401, 403, 404), summary="Read a query")
def get_query(who: ViewerDep, entry: QueryDep) -> dict:
    return entry


@router.patch("/{query_id}", response_model=QueryOut, responses=errors(401, 403, 404),
              summary="Change a query's threshold, name, paused flag, priority or auto-resolve")
def patch_query(who: AnalystDep, query_id: str, body: QueryPatch, entry: QueryDep, service: ServiceDep) -> dict:
    """``{"threshold": 0.7}`` moves a threshold live: the job applies it at its next
    micro-batch to the state it has (a join's down to its floor). Any change of a query the
    job quarantined (``failed``) brings it back: the job runs it again from its next
    micro-batch, with the state it had."""
    changes = body.model_dump(exclude_unset=True)
    if not changes or any(value is None for value in changes.values()):
        raise ApiError(422, "give at least one of threshold, name, paused, priority, auto_resolve_minutes "
                            "(none may be null)", field="body")
    try:
        return service.registry.update(query_id, who=who.label, **changes)
    except RegistryError as error:
        raise ApiError(404, str(error), field="query_id") from None


@router.delete("/{query_id}", status_code=204, response_class=Response, responses=errors(401, 403, 404),
               summary="Remove a query")
def delete_query(who: AnalystDep, query_id: str, entry: QueryDep, service: ServiceDep) -> Response:
    """The job drops the query's state at its next micro-batch; its results stay in
    their capped streams, its alarm instances go."""
    try:
        service.registry.remove(query_id, who=who.label)
    except RegistryError as error:
        raise ApiError(404, str(error), field="query_id") from None
    service.redis.delete(service.keys.instances(query_id), service.keys.alarm_states(query_id),
                         service.keys.verdicts(query_id))
    return Response(status_code=204)
