"""Verdicts: what people found of a match or an alarm, and what they say of the probabilities.

A verdict (real, false, unknown) is given to one match (by its cursor) or to one alarm
instance's current episode (also when resolving it: ``POST /alarms/{id}/resolve`` with
``verdict``), with its author and an optional comment, and audited; giving another
replaces it. Each keeps the probability reported: the match's, or the episode's highest.
``GET /queries/{id}/calibration`` puts the real and false ones together
(:mod:`penumbra.calibration`): the reliability diagram, the expected calibration error,
the precision at each threshold and the threshold that reaches a precision asked for.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

from fastapi import APIRouter, Body, Query

from contract.alarms import query_of
from contract.entries import read_match
from penumbra.calibration import precision_curve, reliability, threshold_for

from ..deps import AnalystDep, QueryDep, Service, ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import CalibrationOut, VerdictIn, VerdictList, VerdictOut
from ..records import alarm_views
from . import errors

router = APIRouter(prefix="/queries/{query_id}", tags=["verdicts"])

#: the thresholds the precision curve is given at
GRID = [k / 100 for k in range(101)]


def record_verdict(service: Service, entry: dict, who: str, verdict: str, comment: str | None = None, *,
                   match: str | None = None, alarm: str | None = None) -> dict:
    """Store one verdict of a match (its cursor) or of an alarm instance's current episode."""
    query_id = entry["id"]
    if match is not None:
        found = service.redis.xrange(service.keys.matches(query_id), match, match)
        record = read_match(*found[0]) if found else service.history.find(query_id, match)
        if record is None:
            raise ApiError(404, f"no match {match!r} of query {query_id!r}, live or archived", field="match")
        subject, prob, alarm, episode = f"m:{match}", record["prob"], record.get("alarm"), None
    else:
        if query_of(alarm) != query_id:
            raise ApiError(404, f"alarm {alarm!r} is not one of query {query_id!r}", field="alarm")
        views = alarm_views(service, {query_id: entry}, {query_id: [alarm]})
        if not views or views[0]["high_prob"] is None:
            raise ApiError(404, f"alarm {alarm!r} has no match to judge", field="alarm")
        episode, prob = views[0]["episode"], views[0]["high_prob"]
        subject = f"a:{alarm}:{episode}"
    stored = {"subject": subject, "verdict": verdict, "prob": prob, "match": match, "alarm": alarm,
              "episode": episode, "by": who, "at": time.time(), "comment": comment}
    service.redis.hset(service.keys.verdicts(query_id), subject, json.dumps(stored))
    service.audit(who, f"verdict.{verdict}", subject, {"query": query_id, "prob": prob, "comment": comment})
    return stored


def _verdicts(service: Service, query_id: str) -> list[dict]:
    return [json.loads(raw) for raw in service.redis.hvals(service.keys.verdicts(query_id))]


@router.post("/verdicts", status_code=201, response_model=VerdictOut, responses=errors(401, 403, 404),
             summary="Judge a match or an alarm: real, false or unknown")
def give_verdict(who: AnalystDep, body: VerdictIn, entry: QueryDep, service: ServiceDep) -> dict:
    _one_subject(body, "match")
    return record_verdict(service, entry, who.label, body.verdict, body.comment, match=body.match, alarm=body.alarm)


@router.post("/verdicts/batch", status_code=201, response_model=VerdictList, responses=errors(401, 403, 404),
             summary="Judge up to 1,000 matches or alarms at once")
def give_verdicts(who: AnalystDep, body: Annotated[list[VerdictIn], Body(min_length=1, max_length=1000)],
                  entry: QueryDep, service: ServiceDep) -> dict:
    """What a simulator knows, or a review: every verdict is checked before any is stored."""
    for n, one in enumerate(body):
        _one_subject(one, f"{n}.match")
    return {"items": [record_verdict(service, entry, who.label, one.verdict, one.comment, match=one.match,
                                     alarm=one.alarm) for one in body]}


def _one_subject(body: VerdictIn, field: str) -> None:
    if (body.match is None) == (body.alarm is None):
        raise ApiError(422, "give one of match (a match's cursor) and alarm (an alarm's id)", field=field)


@router.get("/verdicts", response_model=VerdictList, responses=errors(401, 403, 404), summary="A query's verdicts")
def list_verdicts(who: ViewerDep, entry: QueryDep, service: ServiceDep,
                  limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> dict:
    found = sorted(_verdicts(service, entry["id"]), key=lambda v: (-v["at"], v["subject"]))
    return {"items": found[:limit]}


@router.get("/calibration", response_model=CalibrationOut, responses=errors(401, 403, 404),
            summary="Reliability diagram and precision by threshold, from the verdicts")
def calibration(who: ViewerDep, entry: QueryDep, service: ServiceDep,
                bins: Annotated[int, Query(ge=1, le=100)] = 10,
                precision: Annotated[float | None, Query(gt=0, le=1, description="a precision to reach")] = None,
                ) -> dict:
    found = _verdicts(service, entry["id"])
    judged = [v for v in found if v["verdict"] in ("real", "false")]
    probs = [min(1.0, max(0.0, float(v["prob"]))) for v in judged]
    real = [v["verdict"] == "real" for v in judged]
    counts = {name: sum(1 for v in found if v["verdict"] == name) for name in ("real", "false", "unknown")}
    return {"verdicts": counts, "reliability": reliability(probs, real, bins),
            "precision": precision_curve(probs, real, GRID),
            "threshold_for": threshold_for(probs, real, precision) if precision is not None else None}
