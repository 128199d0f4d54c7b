"""The explanation of one match: how its probability came about, recomputed from the
events the match carries with the core's kernels (:func:`penumbra.explain.explain`).

The match is looked up by its id in the live stream, then in the archive, so any match
the history pages can be explained as long as its query is registered.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import AfterValidator

from contract.entries import read_match
from penumbra.errors import ValidationError
from penumbra.events import parse_streams
from penumbra.explain import explain

from ..deps import QueryDep, ServiceDep, ViewerDep
from ..errors import ApiError
from ..models import ExplanationOut, entry_id
from ..records import finite
from . import errors

router = APIRouter(tags=["results"])

MatchId = Annotated[str, Path(pattern=r"^\d{1,15}-\d{1,15}$", description="the match's id (its cursor)",
                              examples=["1795554017604-3"]), AfterValidator(entry_id)]


@router.get("/queries/{query_id}/matches/{match_id}/explanation", response_model=ExplanationOut,
            responses=errors(401, 403, 404, 422), summary="How a match's probability came about")
def explain_match(who: ViewerDep, query_id: str, match_id: MatchId, entry: QueryDep, service: ServiceDep) -> dict:
    """The match's events (stream, attributes, timestamp and its distribution) and, by
    the query's kind: a join's probability as ``P(X_A + d >= X_B) - P(X_A - d > X_B)``,
    the satisfaction time and the probing ranges with the one the partner falls in, and
    the probability curve; a pattern's orderings with their weights and the window's
    share; a lossy sequence's factors, one per run of unobserved components. Recomputed
    here from the match's own events; ``prob`` is what the job gave it."""
    found = service.redis.xrange(service.keys.matches(query_id), match_id, match_id)
    match = read_match(*found[0]) if found else service.history.find(query_id, match_id)
    if match is None:
        raise ApiError(404, f"no match {match_id!r} of query {query_id!r}, live or archived", field="match_id")
    try:
        explained = explain(entry["text"], parse_streams(entry["streams"]), match, entry.get("threshold"))
    except ValidationError as error:
        raise ApiError(422, f"match {match_id!r} cannot be explained: {error}", field=error.field) from None
    item = {k: v for k, v in match.items() if k != "factors"}
    return finite({"query": query_id, "match": item, **explained})
