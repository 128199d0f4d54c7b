"""A query's results: matches (cursor pages, newest first), the job's observations
(partitions, buffers, near misses, counters), the probability curve of an event, a
what-if over thresholds; and the job's metrics.

Everything here reads what the job wrote (docs/redis.md); the curve alone is computed
here, by the core's ``JoinOperator.probability_curve``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse

from contract.entries import read_match, read_observation
from contract.registry import entry_operator
from penumbra.engine import build_operator
from penumbra.errors import ValidationError
from penumbra.events import parse_event, parse_streams
from penumbra.query import parse
from penumbra.tuning import what_if as candidates_at, window_floor

from ..deps import QueryDep, ServiceDep, ViewerDep
from ..errors import ApiError
from ..prometheus import CONTENT_TYPE, exposition
from ..models import (Cursor, CurveIn, CurveOut, MatchPage, MetricsOut, ObservationList, Projection,
                      WhatIfOut)
from ..records import PARTS, finite, match_record, metrics_record, observation_record, projection
from . import errors

router = APIRouter(tags=["results"])

#: Matches read at most for one what-if (the result streams keep 100,000 by default).
WHAT_IF_MAX_MATCHES = 200_000
_READ_CHUNK = 2000


@router.get("/queries/{query_id}/matches", response_model=MatchPage, responses=errors(401, 403, 404),
            summary="A query's matches, newest first")
def list_matches(who: ViewerDep, query_id: str, entry: QueryDep, service: ServiceDep,
                 limit: Annotated[int, Query(ge=1, le=1000, description="matches per page")] = 100,
                 before: Annotated[Cursor | None, Query(description="only older than this cursor (paging)")] = None,
                 since: Annotated[Cursor | None, Query(description="only newer than this cursor (polling)")] = None
                 ) -> dict:
    """Pages go back in time: pass the answer's ``next`` as ``before``. To poll for what
    is new, pass the newest cursor seen as ``since``."""
    if before == "0-0":
        return {"items": [], "next": None}      # nothing is older (and Redis has no id before it)
    top = f"({before}" if before else "+"
    bottom = f"({since}" if since else "-"
    found = service.redis.xrevrange(service.keys.matches(query_id), top, bottom, count=limit + 1)
    items = [match_record(i, f) for i, f in found[:limit]]
    return {"items": items, "next": items[-1]["id"] if len(found) > limit else None}


@router.get("/queries/{query_id}/observations", response_model=ObservationList,
            responses=errors(401, 403, 404), summary="A query's latest observations")
def list_observations(who: ViewerDep, query_id: str, entry: QueryDep, service: ServiceDep,
                      limit: Annotated[int, Query(ge=1, le=100, description="micro-batches")] = 1) -> dict:
    """One record per micro-batch in which the query ran, newest first (infinite bounds as null)."""
    found = service.redis.xrevrange(service.keys.observations(query_id), count=limit)
    return {"items": [observation_record(i, f) for i, f in found]}


def _projection(service, query_id: str, parts: tuple[str, ...]) -> dict:
    found = service.redis.xrevrange(service.keys.observations(query_id), count=1)
    if not found:
        return {"id": None, "batch": None, "at": None, "value": None}
    return projection(*found[0], parts)


@router.get("/queries/{query_id}/partitions", response_model=Projection, responses=errors(401, 403, 404),
            summary="Probing-range partitions (LPR / SR / RPR) of recent events")
def get_partitions(who: ViewerDep, query_id: str, entry: QueryDep, service: ServiceDep) -> dict:
    return _projection(service, query_id, PARTS["partitions"])


@router.get("/queries/{query_id}/buffers", response_model=Projection, responses=errors(401, 403, 404),
            summary="Buffer sizes and their bounds")
def get_buffers(who: ViewerDep, query_id: str, entry: QueryDep, service: ServiceDep) -> dict:
    return _projection(service, query_id, PARTS["buffers"])


@router.get("/queries/{query_id}/near-misses", response_model=Projection, responses=errors(401, 403, 404),
            summary="Candidates just below the threshold")
def get_near_misses(who: ViewerDep, query_id: str, entry: QueryDep, service: ServiceDep) -> dict:
    return _projection(service, query_id, PARTS["near_misses"])


@router.post("/queries/{query_id}/curve", response_model=CurveOut, responses=errors(401, 403, 404),
             summary="Probability curve of an event against a join's partner stream")
def probability_curve(who: ViewerDep, query_id: str, body: CurveIn, entry: QueryDep) -> dict:
    """P(|X_event - X_partner| <= d) as the partner's max time moves (the PTJoin paper's
    Figure 3), with the threshold and the probing ranges (null: unbounded)."""
    if entry["kind"] != "join":
        raise ApiError(422, f"a probability curve needs a join query; {query_id!r} is a {entry['kind']}",
                       field="query_id")
    streams = parse_streams(entry["streams"])
    operator = build_operator(parse(entry["text"]), streams)
    if entry.get("threshold") is not None:
        operator.set_threshold(entry["threshold"])
    try:
        event = parse_event(body.event, streams)
    except ValidationError as error:
        raise ApiError(422, str(error.within("event")), field=error.within("event").field) from None
    partners = []
    for index, item in enumerate(body.partners):
        try:
            partners.append(parse_event(item, streams))
        except ValidationError as error:
            where = error.within(f"partners.{index}")
            raise ApiError(422, str(where), field=where.field) from None
    try:
        curve = operator.probability_curve(event, points=body.points, partners=partners)
    except ValidationError as error:
        where = error if error.field == "partners" else error.within("event")
        raise ApiError(422, str(where), field=where.field) from None
    return finite(curve)


def _window_matches(service, query_id: str, first_batch: int) -> list[float]:
    """Probabilities of the matches written in micro-batches from ``first_batch`` on."""
    probs: list[float] = []
    top = "+"
    while len(probs) < WHAT_IF_MAX_MATCHES:
        found = service.redis.xrevrange(service.keys.matches(query_id), top, "-", count=_READ_CHUNK)
        for entry_id, fields in found:
            match = read_match(entry_id, fields)
            if match["batch"] is not None and match["batch"] < first_batch:
                return probs
            probs.append(match["prob"])
        if len(found) < _READ_CHUNK:
            return probs
        top = f"({found[-1][0].decode()}"
    return probs


@router.get("/queries/{query_id}/what-if", response_model=WhatIfOut, responses=errors(401, 403, 404),
            summary="Matches at each threshold over the recent window")
def what_if(who: ViewerDep, query_id: str, entry: QueryDep, service: ServiceDep,
            batches: Annotated[int, Query(ge=1, le=1000, description="micro-batches in the window")] = 50,
            steps: Annotated[int, Query(ge=2, le=200, description="thresholds from the floor to 1")] = 21) -> dict:
    """Counts, at thresholds from the floor to 1, the window's candidates that would
    match: its matches (each with its probability) plus its near misses (candidates
    between the floor and the threshold). A join's job records its near misses binned by
    hundredths of probability (``near_miss_histogram``): the thresholds are then taken on
    that grid and the counts are exact. Where a batch recorded only a sample of its near
    misses' probabilities (20 per group and batch), they are scaled from the sample
    (``exact`` false). Pattern and lossy queries record no candidates below their
    threshold: their floor is it (:mod:`penumbra.tuning`)."""
    observed = service.redis.xrevrange(service.keys.observations(query_id), count=batches)
    read = [read_observation(i, f) for i, f in observed]
    observations = [o["observations"] for o in read]
    times = [o["at"] for o in read]
    threshold = entry.get("threshold")
    floor = window_floor(observations, lambda: entry_operator(entry), threshold)
    batch_ids = [o["batch"] for o in read if o["batch"] is not None]
    match_probs = _window_matches(service, query_id, min(batch_ids)) if batch_ids else []
    counted = candidates_at(match_probs, observations, floor, steps)
    return {"query": query_id, "threshold": threshold, "floor": floor, "batches": len(read),
            "since": min(times) if times else None, "until": max(times) if times else None,
            "matches": len(match_probs), **counted}


@router.get("/metrics", response_model=MetricsOut, responses={**errors(401, 403), 200: {"content": {
    CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}}}}, summary="The job's metrics")
def metrics(request: Request, who: ViewerDep, service: ServiceDep,
            limit: Annotated[int, Query(ge=1, le=500, description="progress reports")] = 20,
            format: Annotated[Literal["json", "prometheus"] | None, Query(description=(
                "json, or prometheus (the text format; also chosen by an Accept asking for text/plain and not "
                "JSON)"))] = None):
    counts = {k.decode(): int(v) for k, v in service.redis.hgetall(service.keys.counts).items()}
    accept = request.headers.get("accept", "")
    if format == "prometheus" or (format is None and "text/plain" in accept and "json" not in accept):
        latest = service.redis.xrevrange(service.keys.metrics, count=1)
        _, queries, _ = service.snapshot()
        pipe = service.redis.pipeline(transaction=False)
        for query_id in queries:
            pipe.xinfo_stream(service.keys.matches(query_id))
        infos = pipe.execute(raise_on_error=False)
        added = [int(info["entries-added"]) if isinstance(info, dict) else 0 for info in infos]
        text = exposition(counts, metrics_record(latest[0][1]) if latest else None,
                          [(q, n, bool(entry.get("failed"))) for (q, entry), n in zip(queries.items(), added)])
        return PlainTextResponse(text, media_type=CONTENT_TYPE)
    found = service.redis.xrevrange(service.keys.metrics, count=limit)
    return {"counts": counts, "items": [metrics_record(f) for _, f in found]}
