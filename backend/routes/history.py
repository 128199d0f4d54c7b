"""A query's history over any period, read from the archive (:mod:`contract.history`):
pages of matches in time order, counts per hour or day and per key, exports as CSV or
Parquet, and the backtest of thresholds.

Periods are ``since`` (inclusive) and ``until`` (exclusive), each an ISO 8601 time (UTC
unless it says its zone) or milliseconds since the epoch; or ``last`` (``90m``, ``24h``,
``7d``) up to now. A query removed from the registry keeps its archived history.
"""

from __future__ import annotations

import json
import math
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from contract.history import Filters, period_of
from contract.ingest import seen_sources
from contract.registry import entry_operator
from penumbra.calibration import precision_curve
from penumbra.tuning import backtest_grid

from ..deps import ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import BacktestOut, Cursor, HistoryPage, HistorySummary, RatesOut
from . import errors

router = APIRouter(tags=["history"])

_HOUR, _DAY = 3_600_000, 86_400_000

SinceQ = Annotated[str | None, Query(max_length=64, description=(
    "from this time on: ISO 8601 (UTC unless it names its zone) or milliseconds since the epoch"))]
UntilQ = Annotated[str | None, Query(max_length=64, description="before this time (same forms; default: now)")]
LastQ = Annotated[str | None, Query(max_length=16, pattern=r"^\d+(\.\d+)?\s*[mhd]$", description=(
    "instead of since: the last minutes, hours or days up to until, e.g. 90m, 24h, 7d"))]
KeyQ = Annotated[str | None, Query(max_length=2000, description=(
    'only matches whose key has these attributes: a JSON object, e.g. {"region": 17}'))]
MinProbQ = Annotated[float | None, Query(ge=0, le=1, description="only matches at least this probable")]


def history_query(service: ServiceDep, query_id: str) -> dict:
    """The registry entry of the query, or for a removed one what the archive knows, or 404."""
    entry = service.registry.query(query_id)
    if entry is not None:
        return entry
    if service.history.knows(query_id):
        return {"id": query_id, "kind": None, "threshold": None, "created": None}
    raise ApiError(404, f"no query {query_id!r}, registered or archived", field="query_id")


HistoryQueryDep = Annotated[dict, Depends(history_query)]


def key_value(raw: str):
    """A ``key`` filter's JSON, strictly: NaN, infinities and numbers too large for a
    float are errors (ValueError), as in every body."""
    def refuse(name):
        raise ValueError(f"{name} is not allowed")

    value = json.loads(raw, parse_constant=refuse)
    if isinstance(value, dict) and any(isinstance(v, float) and not math.isfinite(v) for v in value.values()):
        raise ValueError("numbers must be finite")
    return value


def filters_of(since: str | None, until: str | None, last: str | None, key: str | None,
               min_prob: float | None) -> tuple[Filters, int]:
    """The request's filters, and now in milliseconds."""
    now = int(time.time() * 1000)
    try:
        period = period_of(since, until, last, now)
    except ValueError as error:
        message = str(error)
        raise ApiError(422, message, field=message.split(" ", 1)[0].rstrip(":")) from None
    wanted = None
    if key is not None:
        try:
            wanted = key_value(key)
        except ValueError:
            wanted = None
        if not isinstance(wanted, dict):
            raise ApiError(422, 'key must be a JSON object of attributes, e.g. {"region": 17}', field="key")
    return Filters(period, wanted, min_prob), now


@router.get("/queries/{query_id}/history", response_model=HistoryPage, responses=errors(401, 403, 404),
            summary="A query's matches over any period, in time order")
def history(who: ViewerDep, query_id: str, entry: HistoryQueryDep, service: ServiceDep,
            since: SinceQ = None, until: UntilQ = None, last: LastQ = None, key: KeyQ = None,
            min_prob: MinProbQ = None,
            limit: Annotated[int, Query(ge=1, le=5000, description="matches per page")] = 100,
            next: Annotated[Cursor | None, Query(description="the previous page's next: the page after it")] = None
            ) -> dict:
    """Every match of the period once, oldest first, from the archive and the live tail:
    pass ``next`` until it is null. A page's cursor stays valid while new matches arrive
    (they come after it)."""
    filters, now = filters_of(since, until, last, key, min_prob)
    items, after = service.history.page(query_id, filters, limit, next)
    return {"items": items, "next": after,
            "unavailable": service.history.unavailable(query_id, filters, entry.get("created"), now)}


@router.get("/queries/{query_id}/history/summary", response_model=HistorySummary,
            responses=errors(401, 403, 404), summary="Matches per hour or day and per key over a period")
def summary(who: ViewerDep, query_id: str, entry: HistoryQueryDep, service: ServiceDep,
            since: SinceQ = None, until: UntilQ = None, last: LastQ = None, key: KeyQ = None,
            min_prob: MinProbQ = None,
            bucket: Annotated[Literal["hour", "day"] | None, Query(description=(
                "hour or day (UTC); default: hours up to three days, days beyond"))] = None) -> dict:
    filters, now = filters_of(since, until, last, key, min_prob)
    if bucket is None:
        span = (filters.period.until or now) - (filters.period.since or 0)
        bucket = "hour" if span <= 3 * _DAY else "day"
    counted = service.history.summary(query_id, filters, _HOUR if bucket == "hour" else _DAY)
    return {"query": query_id, "since": filters.period.since, "until": filters.period.until or now,
            "bucket": bucket, **counted,
            "unavailable": service.history.unavailable(query_id, filters, entry.get("created"), now)}


@router.get("/queries/{query_id}/history/export", responses={**errors(401, 403, 404), 200: {"content": {
    "text/csv": {"schema": {"type": "string"}},
    "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}}}}},
    summary="A period's matches as CSV or Parquet, streamed")
def export(who: ViewerDep, query_id: str, entry: HistoryQueryDep, service: ServiceDep,
           since: SinceQ = None, until: UntilQ = None, last: LastQ = None, key: KeyQ = None,
           min_prob: MinProbQ = None,
           format: Annotated[Literal["csv", "parquet"], Query(description="csv or parquet")] = "csv"):
    """Columns: id, at (ms), time (UTC, ISO 8601), batch, events (JSON), prob, range_lo,
    range_hi (patterns), key (JSON), alarm; in time order."""
    filters, _ = filters_of(since, until, last, key, min_prob)
    media = "text/csv" if format == "csv" else "application/vnd.apache.parquet"
    name = f"{query_id}-history.{format}"
    return StreamingResponse(service.history.export(query_id, filters, format), media_type=media,
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/rates", response_model=RatesOut, responses=errors(401, 403), summary="Every query's matches per minute")
def rates(who: ViewerDep, service: ServiceDep,
          last: Annotated[str, Query(max_length=16, pattern=r"^\d+(\.\d+)?\s*[mhd]$", description=(
              "the window up to now: 15m, 1h, ..."))] = "15m") -> dict:
    """Each registered query's matches over the last ``last``, counted by the server from
    the archive and the live tail, and as a rate per minute; and when each stream it reads
    was last heard from (null: no event since the notes began)."""
    filters, now = filters_of(None, None, last, None, None)
    minutes = (now - filters.period.since) / 60_000
    _, queries, _ = service.snapshot()
    read = {query_id: sorted({s.casefold() for s in (entry.get("streams") or {})}) for query_id, entry in queries.items()}
    seen = seen_sources(service.redis, service.keys, {s for streams in read.values() for s in streams})
    items = []
    for query_id in queries:
        counted = service.history.count(query_id, filters)
        items.append({"query": query_id, "matches": counted, "per_minute": counted / minutes if minutes else 0.0,
                      "sources": {s: seen[s]["seen"] for s in read[query_id] if s in seen}})
    return {"since": filters.period.since, "until": now, "items": items}


@router.get("/queries/{query_id}/backtest", response_model=BacktestOut, responses=errors(401, 403, 404),
            summary="Matches, alarms, precision and recall at each threshold over a period")
def backtest(who: ViewerDep, query_id: str, entry: HistoryQueryDep, service: ServiceDep,
             since: SinceQ = None, until: UntilQ = None, last: LastQ = None, key: KeyQ = None,
             steps: Annotated[int, Query(ge=2, le=200, description="thresholds from the floor to 1")] = 21) -> dict:
    """The live what-if over a period of the archive. A join's thresholds are taken on the
    hundredths its near misses are archived by, so its match counts are exact from its floor
    up; alarm counts are exact where every candidate at or above the threshold was a match
    (``exact``). Precision and recall come from the verdicts given on the period's matches."""
    filters, now = filters_of(since, until, last, key, None)
    thresholds = backtest_grid(entry_operator(entry), steps, archive_floor=service.settings.archive_floor,
                               threshold=entry.get("threshold"))
    auto = entry.get("auto_resolve_minutes")
    answer = service.history.backtest(query_id, filters, thresholds,
                                      int(auto * 60_000) if isinstance(auto, (int, float)) else None)
    probs, real, reals = _judged(service, query_id, filters)
    curve = precision_curve(probs, real, thresholds)
    points = []
    for t, matches, alarms, near, judged in zip(thresholds, answer["matches"], answer["alarms"],
                                                answer["near_at_least"], curve):
        points.append({"threshold": float(t), "matches": int(matches), "alarms": int(alarms), "exact": near == 0,
                       "judged": judged["judged"], "precision": judged["precision"],
                       "recall": judged["real"] / reals if reals else None})
    return {"query": query_id, "threshold": entry.get("threshold"), "floor": float(thresholds[0]),
            "since": filters.period.since, "until": filters.period.until or now,
            "matches": int(answer["archived"]), "near_misses": int(answer["near_misses"]), "points": points,
            "unavailable": service.history.unavailable(query_id, filters, entry.get("created"), now)}


def _judged(service, query_id: str, filters: Filters) -> tuple[list[float], list[bool], int]:
    """The period's match verdicts (real or false): probabilities, whether real, real ones."""
    probs, real = [], []
    for raw in service.redis.hvals(service.keys.verdicts(query_id)):
        stored = json.loads(raw)
        if stored.get("verdict") not in ("real", "false") or not str(stored.get("subject", "")).startswith("m:"):
            continue
        cursor = stored.get("match") or stored["subject"][2:]
        try:
            at = int(str(cursor).split("-", 1)[0])
        except ValueError:
            continue
        if not filters.period.holds(at) or not isinstance(stored.get("prob"), (int, float)):
            continue
        probs.append(float(stored["prob"]))
        real.append(stored["verdict"] == "real")
    return probs, real, sum(real)
