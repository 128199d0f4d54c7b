"""``Idempotency-Key`` on every request that changes something (``POST``, ``PUT``, ``PATCH``,
``DELETE`` under ``/api/``).

A client that does not know whether its request was done (the connection dropped before the
answer) sends it again with the same key and gets the first answer, status and body, with
``Idempotent-Replayed: true``, and nothing is done again. The same key with another
request (method, path or body) is a 422 that says so. Keys are kept 24 hours, per token
(one client's keys never answer another's). Two requests with one key at once do the work
once: the first takes a lease on the key (``SET NX``); the other waits for its answer, and
if the lease runs out (its process died) the key is free again.

What is kept: the answers the route gave (2xx, and 4xx but 401, 403, 408 and 429, which say
nothing about the request's work: a retry after them should go through); a 5xx or an answer
over :data:`MAX_KEPT_BYTES` releases the key, so a retry does the work (events are taken
once by their identity in any case).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time

import orjson
import redis
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response
from .security import token_id

__all__ = ["HEADER", "Idempotency", "KEEP_SECONDS"]

HEADER = b"idempotency-key"
#: How long an answer is kept for its key.
KEEP_SECONDS = 24 * 3600
#: How long a request holds its key while it runs; past it (its process died), the key is free.
LEASE_SECONDS = 60
#: The longest key, in characters (printable ASCII).
MAX_KEY = 255
#: Answers larger than this are not kept (the key is released).
MAX_KEPT_BYTES = 1 << 20
#: Answers that say nothing about the request's work, never kept.
NOT_KEPT = frozenset({401, 403, 408, 429})
#: Response headers a replay does not repeat (the server sets them anew).
_FRESH = frozenset({b"content-length", b"date", b"server"})


class Idempotency:
    """The ``Idempotency-Key`` middleware (pure ASGI); its records live in Redis under
    ``Keys.idempotency``."""

    METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in self.METHODS or not scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        raw_key = headers.get(HEADER)
        if raw_key is None:
            await self.app(scope, receive, send)
            return
        key = raw_key.decode("latin-1")
        if not key or len(key) > MAX_KEY or not all(" " <= c <= "~" for c in key):
            await error_response(422, f"Idempotency-Key must be 1 to {MAX_KEY} printable ASCII characters",
                                 field="Idempotency-Key")(scope, receive, send)
            return
        service = scope["app"].state.service
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        owner = token_id(token.strip()) if scheme.lower() == "bearer" and token.strip() else "anonymous"
        body = await _read_body(receive)
        fingerprint = hashlib.sha256(b"%s %s\n%s" % (scope["method"].encode(), scope["path"].encode(), body)).hexdigest()
        record_key = service.keys.idempotency(owner, key)
        try:
            kept = await run_in_threadpool(_claim, service.redis, record_key, fingerprint)
            while kept is not None and kept["state"] == "running" and kept["fingerprint"] == fingerprint:
                await asyncio.sleep(0.05)       # the same request is being answered: wait for its answer
                kept = await run_in_threadpool(_claim, service.redis, record_key, fingerprint)
        except redis.RedisError:
            kept = None  # the route itself answers 503 while Redis is away
            claimed = False
        else:
            claimed = kept is None
        if kept is not None:
            if kept["fingerprint"] != fingerprint:
                await error_response(422, "this Idempotency-Key was used with another request (method, path or "
                                          "body): use a new key for a new request",
                                     field="Idempotency-Key")(scope, receive, send)
                return
            await _replay(kept, send)
            return
        await self._answer(scope, body, send, service, record_key, fingerprint, claimed)

    async def _answer(self, scope: Scope, body: bytes, send: Send, service, record_key: str, fingerprint: str,
                      claimed: bool) -> None:
        status, response_headers, chunks, size = 500, [], [], 0
        sent_body = False

        async def replayed_receive() -> Message:
            nonlocal sent_body
            if sent_body:
                return {"type": "http.disconnect"}
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def kept_send(message: Message) -> None:
            nonlocal status, response_headers, size
            if message["type"] == "http.response.start":
                status, response_headers = message["status"], list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
                if size <= MAX_KEPT_BYTES:
                    chunks.append(message.get("body", b""))
            await send(message)

        done = False
        try:
            await self.app(scope, replayed_receive, kept_send)
            done = True
        finally:
            if claimed:
                keep = done and status < 500 and status not in NOT_KEPT and size <= MAX_KEPT_BYTES
                record = {"state": "done", "fingerprint": fingerprint, "status": status,
                          "headers": [[base64.b64encode(k).decode(), base64.b64encode(v).decode()]
                                      for k, v in response_headers if k.lower() not in _FRESH],
                          "body": base64.b64encode(b"".join(chunks)).decode(), "at": time.time()} if keep else None
                try:
                    await run_in_threadpool(_settle, service.redis, record_key, record)
                except redis.RedisError:
                    pass  # the lease runs out on its own


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _claim(client: redis.Redis, record_key: str, fingerprint: str) -> dict | None:
    """Take the lease on the key (None), or what the key holds: a request running, or its answer."""
    lease = orjson.dumps({"state": "running", "fingerprint": fingerprint})
    if client.set(record_key, lease, nx=True, ex=LEASE_SECONDS):
        return None
    found = client.get(record_key)
    if found is None:        # the lease ran out between the two calls: try again
        return _claim(client, record_key, fingerprint)
    return orjson.loads(found)


def _settle(client: redis.Redis, record_key: str, record: dict | None) -> None:
    """Keep the answer for the key, or release the key."""
    if record is None:
        client.delete(record_key)
    else:
        client.set(record_key, orjson.dumps(record), ex=KEEP_SECONDS)


async def _replay(kept: dict, send: Send) -> None:
    body = base64.b64decode(kept["body"])
    headers = [(base64.b64decode(k), base64.b64decode(v)) for k, v in kept["headers"]]
    headers += [(b"content-length", str(len(body)).encode()), (b"idempotent-replayed", b"true")]
    await send({"type": "http.response.start", "status": kept["status"], "headers": headers})
    await send({"type": "http.response.body", "body": body})
