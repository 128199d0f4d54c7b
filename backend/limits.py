"""Limits: the size of a request body, and the rate of ingest per token."""

from __future__ import annotations

import math
import time

import orjson
import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spark_jobs.store import Keys

from .errors import ApiError

__all__ = ["BodySizeLimit", "RateLimiter"]


class BodyTooLarge(Exception):
    pass


class BodySizeLimit:
    """Answers 413 to a body over ``limit`` bytes: at once when its Content-Length says
    so, else as soon as the bytes received pass the limit (nothing larger is buffered)."""

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
                    raise BodyTooLarge()
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

    def __init__(self, client: redis.Redis, keys: Keys, limit: int, window: int):
        self.redis, self.keys, self.limit, self.window = client, keys, limit, window

    def hit(self, who: str) -> None:
        now = time.time()
        slot = int(now // self.window)
        key = self.keys.rate(who, slot)
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, self.window + 1)
        count, _ = pipe.execute()
        if count > self.limit:
            retry = max(1, math.ceil((slot + 1) * self.window - now))
            raise ApiError(429, f"ingest rate limit: at most {self.limit} requests per {self.window} s per token",
                           headers={"Retry-After": str(retry)}, retry_after=retry)
