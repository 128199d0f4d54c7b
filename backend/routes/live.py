"""The live feed: WebSocket ``/ws`` (the protocol is in docs/service.md, "Live feed").

The client authenticates with its token, in the ``Authorization: Bearer`` header or,
as browsers can set no header on a websocket, in its first message ``{"token": ...}``;
then it subscribes (and may change its subscription at any time) with
``{"type": "subscribe", "queries": [...] | "*", "kinds": [...], "since": ...}``. A bad
message is answered with ``{"type": "error", "message", "field"}``, never by closing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Literal

import orjson
import redis
from fastapi import APIRouter, WebSocket
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contract.tokens import Principal, Role

from ..errors import ApiError, field_of
from ..live import (CLOSE_FORBIDDEN, CLOSE_THROTTLED, CLOSE_UNAUTHORIZED, CLOSE_UNAVAILABLE, KINDS, Client, Cursor,
                    Hub, parse_cursor)

router = APIRouter(tags=["live"])

log = logging.getLogger("penumbra.api")

#: The least role that may read the live feed.
LIVE_ROLE = Role.viewer

Kind = Literal["matches", "alarms", "partitions", "buffers", "metrics"]


class SubscribeIn(BaseModel):
    """What a client reads from now on (it replaces the previous subscription)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["subscribe"]
    queries: list[Annotated[str, Field(min_length=1, max_length=200)]] | Literal["*"] = Field(
        "*", description='query ids, or "*" for every query (also those registered later)')
    kinds: list[Kind] = Field(list(KINDS), description="the kinds of messages wanted")
    since: str | dict[str, str] | None = Field(None, description=(
        "resume after a cursor: one stream id for every feed, or one per feed name "
        '("matches:<qid>", "alarms:<qid>", "partitions:<qid>", "buffers:<qid>", "metrics")'))


def _bearer(header: str | None) -> str | None:
    if header is None:
        return None
    scheme, _, credentials = header.partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


async def _token_message(websocket: WebSocket, timeout: float) -> str | None:
    """The token of the client's first message, or None (the socket is then closed)."""
    try:
        message = await asyncio.wait_for(websocket.receive(), timeout)
    except TimeoutError:
        await websocket.close(CLOSE_UNAUTHORIZED, f"no token within {timeout:g} s")
        return None
    if message["type"] == "websocket.disconnect":
        return None
    try:
        body = orjson.loads(message.get("text") or message.get("bytes") or b"")
    except orjson.JSONDecodeError:
        body = None
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        await websocket.close(CLOSE_UNAUTHORIZED, 'the first message must be {"token": "..."}')
        return None
    return token


async def _principal(hub: Hub, token: str, websocket: WebSocket) -> Principal | None:
    """The token's principal (None: wrong or revoked); ApiError 429 when the client's
    address failed to authenticate too often (:meth:`~backend.deps.Service.authenticate`)."""
    address = websocket.client.host if websocket.client else "unknown"
    return await asyncio.to_thread(hub.service.authenticate, token, address)


def _cursors(since: str | dict[str, str] | None) -> Cursor | dict[str, Cursor] | None:
    if isinstance(since, str):
        return parse_cursor(since)
    if isinstance(since, dict):
        out = {}
        for name, cursor in since.items():
            try:
                out[name] = parse_cursor(cursor)
            except ValueError as error:
                raise ValueError(f"since.{name}", str(error)) from None
        return out
    return None


async def _handle(hub: Hub, client: Client, message: dict) -> None:
    if message.get("text") is None:
        client.send({"type": "error", "message": "send JSON text frames, not binary ones"})
        return
    try:
        body = orjson.loads(message["text"])
    except orjson.JSONDecodeError as error:
        client.send({"type": "error", "message": f"not JSON: {error}"})
        return
    kind = body.get("type") if isinstance(body, dict) else None
    if kind == "ping":
        client.send({"type": "pong"})
        return
    if kind != "subscribe":
        client.send({"type": "error", "field": "type", "message": (
            f"unknown message type {kind!r}; one of 'subscribe', 'ping'" if isinstance(body, dict)
            else 'a message is a JSON object with a "type"')})
        return
    try:
        request = SubscribeIn.model_validate(body)
        since = _cursors(request.since)
    except ValidationError as error:
        first = error.errors()[0]
        client.send({"type": "error", "field": field_of(first["loc"]) or None, "message": first["msg"]})
        return
    except ValueError as error:
        field, reason = error.args if len(error.args) == 2 else ("since", str(error))
        client.send({"type": "error", "field": field, "message": reason})
        return
    if await _principal(hub, client.token, client.websocket) is None:
        client.close(CLOSE_UNAUTHORIZED, "the token was revoked")
        return
    queries = None if request.queries == "*" else list(dict.fromkeys(request.queries))
    await hub.subscribe(client, queries, list(dict.fromkeys(request.kinds)), since)


@router.websocket("/ws", name="live")
async def live_feed(websocket: WebSocket) -> None:
    """Matches, alarms, partitions, buffers and metrics as they are written, with resume."""
    hub: Hub = websocket.app.state.live
    await websocket.accept()
    if hub.waiting >= hub.settings.ws_max_unauthenticated:
        await websocket.close(CLOSE_UNAVAILABLE, "too many connections wait to authenticate; try again later")
        return
    token = _bearer(websocket.headers.get("authorization"))
    hub.waiting += 1
    try:
        if token is None:
            token = await _token_message(websocket, hub.settings.ws_auth_timeout)
            if token is None:
                return
        principal = await _principal(hub, token, websocket)
    except (redis.RedisError, OSError):
        await websocket.close(CLOSE_UNAVAILABLE, "Redis is unavailable; try again later")
        return
    except ApiError as error:  # too many failed authentications from this address
        await websocket.close(CLOSE_THROTTLED, f"{error.message}; try again in {error.details['retry_after']} s")
        return
    finally:
        hub.waiting -= 1
    if principal is None:
        await websocket.close(CLOSE_UNAUTHORIZED, "invalid or revoked token")
        return
    if principal.role < LIVE_ROLE:
        await websocket.close(CLOSE_FORBIDDEN, f"the live feed needs the {LIVE_ROLE.name} role")
        return
    client = hub.join(websocket, principal, token)
    client.send({"type": "welcome", "role": principal.role.name, "label": principal.label,
                 "kinds": list(KINDS), "queue": hub.settings.ws_queue})
    try:
        while True:  # until the client goes, also after the sender closed it (4008, 4401)
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            try:
                await _handle(hub, client, message)
            except (redis.RedisError, OSError) as error:
                client.send({"type": "error", "message": f"Redis is unavailable ({error}); try again"})
    finally:
        await hub.leave(client)
