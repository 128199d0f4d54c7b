"""One websocket client of the live feed: its feeds, its bounded queue and the sender task
that empties the queue onto the socket.

The queue holds at most ``ws_queue`` matches and alarms (beyond, the client is closed with
4008 and resumes from its cursors); partitions, buffers and metrics keep only the latest
message per feed.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from starlette.websockets import WebSocket, WebSocketDisconnect

from contract.tokens import Principal

from .cursor import ZERO, Cursor, encode

__all__ = ["CLOSE_FORBIDDEN", "CLOSE_THROTTLED", "CLOSE_TOO_SLOW", "CLOSE_UNAUTHORIZED", "CLOSE_UNAVAILABLE", "KINDS",
           "Client", "Feed", "feed_name"]

log = logging.getLogger("penumbra.api")

KINDS = ("matches", "alarms", "partitions", "buffers", "metrics")

CLOSE_TOO_SLOW = 4008       # the client's queue of matches and alarms overflowed: reconnect and resume
CLOSE_UNAUTHORIZED = 4401   # no token, an unknown or a revoked one
CLOSE_FORBIDDEN = 4403      # the token's role may not read the live feed
CLOSE_UNAVAILABLE = 1013    # Redis unavailable: try again later
CLOSE_THROTTLED = 4429      # too many failed authentications from the client's address: try again later


def feed_name(kind: str, query: str | None) -> str:
    return kind if query is None else f"{kind}:{query}"


@dataclass(eq=False)
class Feed:
    """One kind of one query (or the metrics) for one client, and its cursor."""

    client: Client
    kind: str
    query: str | None
    stream: str
    cursor: Cursor = ZERO
    #: the reader hands it entries (after its catch-up)
    live: bool = False

    @property
    def name(self) -> str:
        return feed_name(self.kind, self.query)


@dataclass(frozen=True)
class _Latest:
    """A place in a client's queue for a coalesced feed's latest message."""

    name: str


@dataclass(eq=False)
class Client:
    """A websocket client: its feeds, its queue and its sender task."""

    #: the most matches and alarms its queue holds (``ws_queue``)
    queue_limit: int
    websocket: WebSocket
    principal: Principal
    token: str
    feeds: dict[str, Feed] = field(default_factory=dict)
    #: subscribed to every query (also those registered later)
    everything: bool = False
    #: the query ids its feeds are for
    queries: set[str] = field(default_factory=set)
    kinds: frozenset[str] = frozenset()
    pending: deque = field(default_factory=deque)
    latest: dict[str, str] = field(default_factory=dict)
    waiting: int = 0                    # matches and alarms in ``pending``
    closing: tuple[int, str] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    sender: asyncio.Task | None = None

    def send(self, message: dict) -> None:
        """A control message (welcome, subscribed, error, gap, pong)."""
        self.put(encode(message))

    def put(self, text: str, name: str | None = None) -> None:
        """Queue a message; ``name`` (a coalesced feed) replaces that feed's waiting message."""
        if self.closing is not None:
            return
        if name is not None:
            if name not in self.latest:
                self.pending.append(_Latest(name))
            self.latest[name] = text
        else:
            if self.waiting >= self.queue_limit:
                self.close(CLOSE_TOO_SLOW, "too slow: reconnect and resume from your cursors")
                return
            self.pending.append(text)
            self.waiting += 1
            self.drained.clear()
        self.wake.set()

    def close(self, code: int, reason: str) -> None:
        """Close after what is being sent now; what waits is dropped (the client resumes it)."""
        if self.closing is None:
            self.closing = (code, reason)
            self.pending.clear()
            self.latest.clear()
            self.waiting = 0
            self.drained.set()
            self.wake.set()

    async def room(self) -> None:
        """Wait until the queue is at most half full (a catch-up goes at the client's pace)."""
        while self.closing is None and self.waiting > self.queue_limit // 2:
            await self.drained.wait()

    async def run_sender(self) -> None:
        websocket = self.websocket
        try:
            while self.closing is None:
                if not self.pending:
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                item = self.pending.popleft()
                if isinstance(item, _Latest):
                    text = self.latest.pop(item.name)
                else:
                    text = item
                    self.waiting -= 1
                    if self.waiting <= self.queue_limit // 4:
                        self.drained.set()
                await websocket.send_text(text)
            await websocket.close(*self.closing)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client went away; the receiving side sees it too
        except Exception:  # noqa: BLE001 - uvicorn's own "client disconnected" and the like
            log.debug("live feed: sender stopped", exc_info=True)
        finally:
            self.close(1000, "")  # nothing more is queued (a catch-up waiting for room stops)
