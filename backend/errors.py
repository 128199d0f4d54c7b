"""Every error as JSON ``{"error": {"message": ..., ...}}``.

Client mistakes answer 4xx and name what is wrong: the field (a dotted path) for bad
values, the line and column for a query that does not parse. Redis being unreachable
answers 503 with ``Retry-After``; the connection pool reconnects by itself once Redis
is back, so the service needs no restart.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from penumbra.errors import PenumbraError, ValidationError
from penumbra.query import QueryError

__all__ = ["ApiError", "install_error_handlers", "field_of"]

log = logging.getLogger("penumbra.api")

#: Seconds a client is asked to wait before trying again while Redis is unavailable.
REDIS_RETRY_AFTER = 2
#: ... and while Redis refuses writes at its memory limit.
REDIS_FULL_RETRY_AFTER = 30


class ApiError(Exception):
    """An error answered as ``status`` with ``message`` and any extra details."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None, **details: Any):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers
        self.details = details


class Response(JSONResponse):
    """The service's JSON: UTF-8 as Starlette writes it, and where a value holds a lone
    surrogate (an attribute sent as the JSON escape ``"\\ud800"``, which UTF-8 cannot carry)
    with its characters escaped, rather than a failed response."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


def error_response(status: int, message: str, headers: dict[str, str] | None = None, **details: Any) -> JSONResponse:
    body = {"message": message, **{k: v for k, v in details.items() if v is not None}}
    return Response({"error": body}, status_code=status, headers=headers)


def field_of(location: tuple | list) -> str:
    """``("body", "templates", "s1", "probs", 2)`` as ``templates.s1.probs[2]``."""
    parts = list(location)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] or parts
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def penumbra_error(error: PenumbraError, prefix: str = "") -> ApiError:
    """A core error as a 422 naming its field, or its line and column."""
    if isinstance(error, QueryError):
        return ApiError(422, error.message, line=error.line, column=error.column)
    if isinstance(error, ValidationError):
        field = error.within(prefix).field if prefix else error.field
        return ApiError(422, str(error), field=field or None)
    return ApiError(422, str(error))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return error_response(error.status, error.message, error.headers, **error.details)

    @app.exception_handler(PenumbraError)
    async def core_error(request: Request, error: PenumbraError) -> JSONResponse:
        converted = penumbra_error(error)
        return error_response(converted.status, converted.message, **converted.details)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [{"field": field_of(e.get("loc", ())), "message": e.get("msg", "invalid"), "type": e.get("type")}
                    for e in error.errors()]
        first = problems[0] if problems else {"field": None, "message": "invalid request"}
        if first.get("type") == "json_invalid":
            return error_response(400, f"invalid JSON: {error.errors()[0].get('ctx', {}).get('error', 'malformed')}",
                                  field="body")
        return error_response(422, f"{first['field']}: {first['message']}" if first["field"] else first["message"],
                              field=first["field"] or None, errors=problems)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        headers = dict(getattr(error, "headers", None) or {})
        details = {}
        if error.status_code == 405:    # every method of the path, not only one router's
            allowed = request.app.state.operations.allowed_methods(request.url.path)
            headers["Allow"] = ", ".join(allowed)
            details["allowed"] = allowed
        elif error.status_code == 413:
            details["limit"] = request.app.state.service.settings.max_body_bytes
        return error_response(error.status_code, str(error.detail), headers or None, **details)

    @app.exception_handler(redis.ConnectionError)
    @app.exception_handler(redis.TimeoutError)
    async def redis_down(request: Request, error: Exception) -> JSONResponse:
        log.warning("redis unavailable: %s", error)
        return error_response(503, "Redis is unavailable; try again shortly",
                              {"Retry-After": str(REDIS_RETRY_AFTER)})

    @app.exception_handler(redis.OutOfMemoryError)
    @app.exception_handler(redis.exceptions.ExecAbortError)
    async def redis_full(request: Request, error: Exception) -> JSONResponse:
        # a transaction refused whole (OOM under maxmemory with noeviction): nothing was written
        log.warning("redis refused a write: %s", error)
        return error_response(503, "Redis is at its memory limit: nothing was written; try again once room is made",
                              {"Retry-After": str(REDIS_FULL_RETRY_AFTER)})

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error")
