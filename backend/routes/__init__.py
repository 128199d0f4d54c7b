"""One router per resource, all under ``/api``; ``create_app`` includes ``ROUTERS``."""

from __future__ import annotations

from typing import Any

from ..models import ErrorOut

__all__ = ["errors"]

_MEANING = {
    400: "the request cannot be read",
    401: "no token, or an invalid or revoked one",
    403: "the token's role may not do this",
    404: "no such resource",
    409: "conflicts with what exists",
    413: "body too large, or too many events",
    422: "invalid input: the field, or the line and column of a query",
    429: "rate limit reached; see Retry-After",
    503: "Redis is unavailable; see Retry-After",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error codes (plus 400, 413, 422 and 503, which any
    request may get)."""
    return {code: {"model": ErrorOut, "description": _MEANING[code]}
            for code in sorted({400, 413, 422, 503, *codes})}
