"""``Idempotency-Key`` on every request that changes something (``POST``, ``PUT``, ``PATCH``,
``DELETE`` under ``/api/``).

A client that does not know whether its request was done (the connection dropped before the
answer) sends it again with the same key and gets the first answer, status and body, with
``Idempotent-Replayed: true``, and nothing is done again. The same key with another
request (method, path or body) is a 422 that says so. Keys are kept 24 hours, per token
(one client's keys never answer another's). Two requests with one key at once do the work
once: the first takes a lease on the key (``SET NX``); the other waits for its answer, and
if the lease runs out (its process died) the key is free again.

Only a request whose token is valid claims a key (one that is not goes on to its 401,
keeping nothing), so keys cost Redis memory only within a token's write rate limit. What is
kept: the answers the route gave (2xx, and 4xx but 401, 403, 408 and 429, which say nothing
about the request's work: a retry after them should go through); a 5xx or an answer over
:data:`MAX_KEPT_BYTES` releases the key, so a retry does the work (events are taken once by
their identity in any case). ``POST /api/tokens`` takes no key: its answer holds a new
token's secret, which Redis never keeps. A request cut off while its body was coming claims
nothing. A lease belongs to its request: one that outlives its lease (over a minute) does not
overwrite what a later request with the key settled.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import time

import orjson
import redis
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response
from .limits import bearer_token, changing_request

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

    #: Routes whose answers are never kept (a token's secret, a contact point's).
    EXEMPT = frozenset({"/api/tokens", "/api/contact-points"})

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not changing_request(scope, self.EXEMPT):
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
        token = bearer_token(headers)
        try:
            owner = await run_in_threadpool(_owner, service, token)
        except redis.RedisError:
            owner = None  # the route itself answers 503 while Redis is away
        body = await _read_body(receive)
        if body is None:
            return                              # the client went away before its body came
        if owner is None:                       # no valid token: the route answers 401, nothing kept
            await self._answer(scope, body, send, service, "", "", None)
            return
        fingerprint = hashlib.sha256(b"%s %s?%s\n%s" % (scope["method"].encode(), scope["path"].encode(),
                                                         scope.get("query_string", b""), body)).hexdigest()
        record_key = service.keys.idempotency(owner, key)
        lease = orjson.dumps({"state": "running", "fingerprint": fingerprint, "lease": secrets.token_hex(8)})
        try:
            kept = await run_in_threadpool(_claim, service.redis, record_key, lease)
            while kept is not None and kept["state"] == "running" and kept["fingerprint"] == fingerprint:
                await asyncio.sleep(0.05)       # the same request is being answered: wait for its answer
                kept = await run_in_threadpool(_claim, service.redis, record_key, lease)
        except redis.RedisError:
            kept, lease = None, None            # the route itself answers 503 while Redis is away
        if kept is not None:
            if kept["fingerprint"] != fingerprint:
                await error_response(422, "this Idempotency-Key was used with another request (method, path or "
                                          "body): use a new key for a new request",
                                     field="Idempotency-Key")(scope, receive, send)
                return
            await _replay(kept, send)
            return
        await self._answer(scope, body, send, service, record_key, fingerprint, lease)

    async def _answer(self, scope: Scope, body: bytes, send: Send, service, record_key: str, fingerprint: str,
                      lease: bytes | None) -> None:
        """Run the route on the body read, and settle the key's lease (if held) with its answer."""
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
            if lease is not None:
                keep = done and status < 500 and status not in NOT_KEPT and size <= MAX_KEPT_BYTES
                record = {"state": "done", "fingerprint": fingerprint, "status": status,
                          "headers": [[base64.b64encode(k).decode(), base64.b64encode(v).decode()]
                                      for k, v in response_headers if k.lower() not in _FRESH],
                          "body": base64.b64encode(b"".join(chunks)).decode(), "at": time.time()} if keep else None
                try:
                    await run_in_threadpool(_settle, service.redis, record_key, lease, record)
                except redis.RedisError:
                    pass  # the lease runs out on its own


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body; None when the client went away before it came."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _owner(service, token: str) -> str | None:
    """The id of the request's token when it is valid (no failure is counted here: the route
    does that), else None."""
    if not token:
        return None
    service.bootstrap()
    principal = service.tokens.check(token)
    return principal.id if principal is not None else None


def _claim(client: redis.Redis, record_key: str, lease: bytes) -> dict | None:
    """Take the lease on the key (None), or what the key holds: a request running, or its answer."""
    while True:
        if client.set(record_key, lease, nx=True, ex=LEASE_SECONDS):
            return None
        found = client.get(record_key)
        if found is not None:    # else the lease ran out between the two calls: try again
            return orjson.loads(found)


# Settle a lease only if it is still this request's (a request that outlived its lease
# leaves alone what a later one settled): KEYS[1] the key; ARGV: the lease, the answer kept
# ("" to release the key), seconds to keep it.
_SETTLE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3]) end
return 1
"""


def _settle(client: redis.Redis, record_key: str, lease: bytes, record: dict | None) -> None:
    """Keep the answer for the key, or release the key, if the lease is still ours."""
    client.register_script(_SETTLE)(keys=[record_key],
                                    args=[lease, orjson.dumps(record) if record else b"", KEEP_SECONDS])


async def _replay(kept: dict, send: Send) -> None:
    body = base64.b64decode(kept["body"])
    headers = [(base64.b64decode(k), base64.b64decode(v)) for k, v in kept["headers"]]
    headers += [(b"content-length", str(len(body)).encode()), (b"idempotent-replayed", b"true")]
    await send({"type": "http.response.start", "status": kept["status"], "headers": headers})
    await send({"type": "http.response.body", "body": body})
