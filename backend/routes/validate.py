"""Checking a query without registering it (the dashboard's editor validates as you type).

``POST /api/validate``: the query is parsed and built against the registered stream
parameters exactly as ``POST /api/queries`` does, and nothing is written. (Not under
``/api/queries/``, where the segment would read as a query id.) A query that does not hold answers
200 with ``valid: false`` and the message, line and column: a mistake being typed is the
normal case here, not an error of the request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, Field

from contract.ingest import seen_sources
from contract.registry import validated_query
from penumbra.errors import PenumbraError, ValidationError
from penumbra.query import QueryError, unseen_attributes

from ..deps import ServiceDep, ViewerDep
from ..models import Body, Probability
from . import errors

router = APIRouter(tags=["queries"])


class ValidateIn(Body):
    """A query's text (and the threshold it would be registered with)."""

    text: str = Field(min_length=1, max_length=20_000, description="the query",
                      examples=["SELECT * FROM SEISMIC A, ACOUSTIC B WHERE WINDOW(A, B) = 2000 WITH THRESHOLD 0.6"])
    threshold: Probability | None = Field(None, description="overrides the threshold written in the query")


class WarningOut(BaseModel):
    message: str
    line: int
    column: int


class ValidateOut(BaseModel):
    """What registering the query would say: valid with its form and the streams it reads,
    or the first problem with its line and column (null when it has no position)."""

    valid: bool
    kind: Annotated[str, Field(description="join, pattern or sequence")] | None = None
    threshold: float | None = Field(None, description="the threshold it would match at")
    streams: list[str] = Field(default_factory=list, description="the streams it reads (case-folded)")
    message: str | None = Field(None, description="what is wrong, in words")
    field: str | None = Field(None, description="the offending field, when one is to blame")
    line: int | None = Field(None, description="1-based line of the problem")
    column: int | None = Field(None, description="1-based column of the problem")
    warnings: list[WarningOut] = Field(default_factory=list, description=(
        "what may be a mistake though the query holds: an attribute no event of its stream has carried so far"))
    idle: dict[str, float | None] = Field(default_factory=dict, description=(
        "per stream read, when an event of it was last appended (seconds since the epoch; null: none yet)"))


@router.post("/validate", response_model=ValidateOut, responses=errors(401, 403),
             summary="Check a query without registering it")
def validate_query(body: ValidateIn, who: ViewerDep, service: ServiceDep) -> dict:
    """Parse and build the query against the registered streams, as registering would;
    nothing is stored. ``valid: false`` comes with the message and, for a query that
    does not parse, its line and column."""
    try:
        parsed, operator = validated_query(body.text, body.threshold, service.streams())
        threshold = body.threshold if body.threshold is not None else parsed.threshold
    except QueryError as error:
        return {"valid": False, "message": error.message, "line": error.line, "column": error.column}
    except ValidationError as error:
        return {"valid": False, "message": str(error), "field": error.field or None}
    except PenumbraError as error:
        return {"valid": False, "message": str(error)}
    read = sorted(operator.partition_keys())
    seen = seen_sources(service.redis, service.keys, read)
    warnings = unseen_attributes(body.text, parsed, {stream: info["attrs"] for stream, info in seen.items()})
    return {"valid": True, "kind": parsed.kind, "threshold": threshold, "streams": read,
            "warnings": [w._asdict() for w in warnings], "idle": {s: info["seen"] for s, info in seen.items()}}
