"""Limits: the size of a request body, and the rate of ingest per token."""

from __future__ import annotations

import logging
import math
import re
import secrets
import time
from typing import Callable

import orjson
import redis
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract.keys import Keys
from contract.tokens import token_id

from .errors import ApiError, error_response

__all__ = ["AccessLog", "BodySizeLimit", "FailedAuthentications", "RateLimiter", "WriteRateLimit", "bearer_token",
           "changing_request"]

log = logging.getLogger("penumbra.api")


class BodyTooLarge(HTTPException):
    """Raised while a body is read (an HTTPException, so the framework passes it on and
    the error handlers answer it)."""

    def __init__(self, limit: int):
        super().__init__(413, f"request body too large: over {limit} bytes")


class BodySizeLimit:
    """Answers 413 to a body over ``limit`` bytes: at once when its Content-Length says
    so, else as soon as the bytes received pass the limit (nothing larger is buffered).

    Pure ASGI (no BaseHTTPMiddleware anywhere in the stack), so the error raised from
    ``receive`` reaches the handlers unwrapped."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.limit
            except ValueError:
                too_large = False
            if too_large:
                await self._refuse(send)
                return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = orjson.dumps({"error": {"message": f"request body too large: over {self.limit} bytes",
                                       "limit": self.limit}})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """At most ``limit`` requests per token per window of ``window`` seconds, counted in
    Redis (so every worker of the service shares the count); past it, 429 with
    ``Retry-After`` = the seconds until the window ends."""

    def __init__(self, client: redis.Redis, keys: Keys, limit: int, window: int, what: str = "ingest"):
        self.redis, self.keys, self.limit, self.window, self.what = client, keys, limit, window, what

    def hit(self, who: str) -> None:
        now, slot = _window(self.window)
        key = self.keys.rate(f"{self.what}:{who}", slot)
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, self.window + 1)
        count, _ = pipe.execute()
        if count > self.limit:
            raise _too_many(f"{self.what} rate limit: at most {self.limit} requests per {self.window} s per token",
                            now, slot, self.window)


def _window(seconds: int) -> tuple[float, int]:
    """Now, and the number of the window of ``seconds`` it falls in."""
    now = time.time()
    return now, int(now // seconds)


def _too_many(message: str, now: float, slot: int, seconds: int) -> ApiError:
    """429, with ``Retry-After`` the seconds until the window ends."""
    retry = max(1, math.ceil((slot + 1) * seconds - now))
    return ApiError(429, message, headers={"Retry-After": str(retry)}, retry_after=retry)


#: The methods of a request that changes something.
CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def changing_request(scope: Scope, exempt: frozenset[str]) -> bool:
    """An HTTP request that changes something under ``/api/`` (not one of the ``exempt`` paths)."""
    return (scope["type"] == "http" and scope["method"] in CHANGING_METHODS and scope["path"].startswith("/api/")
            and scope["path"] not in exempt)


def bearer_token(headers: dict[bytes, bytes]) -> str:
    """The token of an ``Authorization: Bearer`` header, or ``""``."""
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class WriteRateLimit:
    """Every change (``POST``, ``PUT``, ``PATCH``, ``DELETE`` under ``/api/``, but events,
    which have their own limit, and validation, which changes nothing) counts against its
    token's write limit (the service's ``write_limiter``): past it, 429 with ``Retry-After``
    before the route runs. A request without a token counts against its address (the route
    then answers 401)."""

    EXEMPT = frozenset({"/api/events", "/api/validate"})

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not changing_request(scope, self.EXEMPT):
            await self.app(scope, receive, send)
            return
        token = bearer_token(dict(scope.get("headers", [])))
        client = scope.get("client")
        who = token_id(token) if token else f"address-{client[0] if client else 'unknown'}"
        try:
            await run_in_threadpool(scope["app"].state.service.write_limiter.hit, who)
        except ApiError as error:
            response = error_response(error.status, error.message, error.headers, **error.details)
            await response(scope, receive, send)
            return
        except redis.RedisError:
            pass  # the route itself answers 503 while Redis is away
        await self.app(scope, receive, send)


class FailedAuthentications:
    """At most ``limit`` failed authentications (a token that is wrong or revoked) per
    client address per window of ``window`` seconds, counted in Redis; past it, the
    address gets 429 with ``Retry-After`` before its token is even looked at, so tokens
    cannot be guessed at speed. Each failure is logged with the address and the count,
    never the token."""

    def __init__(self, client: redis.Redis, keys: Keys, limit: int, window: int):
        self.redis, self.keys, self.limit, self.window = client, keys, limit, window

    def _key(self, address: str) -> tuple[str, float, int]:
        now, slot = _window(self.window)
        return self.keys.auth_failures(address, slot), now, slot

    def check(self, pipe: redis.client.Pipeline, address: str) -> Callable[[bytes | None], None]:
        """Queue the read of the address's failures on ``pipe`` (so that it costs the request
        no round trip of its own); the returned call, given what was read, raises 429 when
        the address is over its failures in this window."""
        key, now, slot = self._key(address)
        pipe.get(key)

        def judge(count: bytes | None) -> None:
            if int(count or 0) >= self.limit:
                raise _too_many(f"too many failed authentications from this address: at most {self.limit} per "
                                f"{self.window} s", now, slot, self.window)

        return judge

    def failed(self, address: str) -> None:
        """Count one failure of the address, and log it."""
        key, _, _ = self._key(address)
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, self.window + 1)
        count, _ = pipe.execute()
        log.warning("authentication failed from %s (%d in this %d s window)", address, count, self.window)


#: A request id a client may choose (``X-Request-Id``); any other is replaced by one of ours.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class AccessLog:
    """One log record per request: its id, method, path, status, milliseconds (pure ASGI).

    Every request has an id: the client's ``X-Request-Id`` when it is 1 to 64 of
    ``[A-Za-z0-9._:-]``, else a new one; it is answered in ``X-Request-Id`` and kept in
    ``request.state.request_id`` for the routes' own records (the ingest logs it with the
    entries it appended)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        given = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.fullmatch(given) else secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = request_id

        async def noted_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, noted_send)
        finally:
            ms = round((time.perf_counter() - started) * 1000, 2)
            log.info("%s %s %d in %.1f ms", scope["method"], scope["path"], status, ms,
                     extra={"request": request_id, "method": scope["method"], "path": scope["path"],
                            "status": status, "ms": ms})
