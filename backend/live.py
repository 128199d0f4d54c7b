"""The live feed's fan-out: one Redis reader per process, a bounded queue and one sender
task per websocket client.

A client subscribes to *feeds*: a kind (``matches``, ``alarms``, ``partitions``,
``buffers``) of a query, or ``metrics``. Each feed reads one result stream
(docs/redis.md): matches and alarms ``pn:out:matches:<qid>``, partitions and buffers
``pn:out:obs:<qid>``, metrics ``pn:metrics``; every message carries the id of the
stream entry it comes from, the client's cursor for that feed.

The reader is woken by the job's ``pn:live`` messages (and every ``ws_poll`` seconds,
for writers that publish nothing), reads every stream some feed needs with one
non-blocking XREAD from where it stopped, and hands each entry to the live feeds on
that stream: a call that appends to the client's queue and never waits for it. Each
client's sender task empties its queue onto the socket, so a slow client only delays
itself. Its queue holds at most ``ws_queue`` matches and alarms (beyond, the client is
closed with 4008 and resumes from its cursors); partitions, buffers and metrics keep
only the latest message per feed.

A feed joins the live reading after a catch-up from its cursor (XRANGE from the cursor,
then again until the cursor reaches where the reader stands, all on the same event
loop): the reader hands a feed only entries newer than its cursor, so a resumed feed
gets every entry after its cursor once, in stream order.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict, deque
from dataclasses import dataclass, field

import orjson
import redis
import redis.asyncio as aioredis
from starlette.websockets import WebSocket, WebSocketDisconnect

from .deps import Service
from .routes.alarms import alarm
from .routes.results import PARTS, finite, match_record, projection
from .security import Principal

__all__ = ["CLOSE_FORBIDDEN", "CLOSE_TOO_SLOW", "CLOSE_UNAUTHORIZED", "CLOSE_UNAVAILABLE", "KINDS", "Client",
           "Hub", "parse_cursor"]

log = logging.getLogger("penumbra.api")

KINDS = ("matches", "alarms", "partitions", "buffers", "metrics")
#: Kinds of which a slow client gets only the latest message per feed.
COALESCED = frozenset({"partitions", "buffers", "metrics"})

CLOSE_TOO_SLOW = 4008       # the client's queue of matches and alarms overflowed: reconnect and resume
CLOSE_UNAUTHORIZED = 4401   # no token, an unknown or a revoked one
CLOSE_FORBIDDEN = 4403      # the token's role may not read the live feed
CLOSE_UNAVAILABLE = 1013    # Redis unavailable: try again later

#: Entries per XREAD / XRANGE round trip.
READ_COUNT = 500
#: Connections of the process's live feed to Redis, and the seconds a call may wait for one.
REDIS_CONNECTIONS = 64
REDIS_POOL_WAIT = 30.0

_CURSOR = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")
_LIMIT = 2 ** 64

Cursor = tuple[int, int]
ZERO: Cursor = (0, 0)


def parse_cursor(text: str) -> Cursor:
    """A stream id (``"1700000000000-3"``, or ``"1700000000000"`` for ``-0``) as a pair.

    >>> parse_cursor("17-3") > parse_cursor("17")
    True
    """
    found = _CURSOR.match(text) if isinstance(text, str) else None
    if not found or int(found.group(1)) >= _LIMIT or int(found.group(2) or 0) >= _LIMIT:
        raise ValueError(f"{text!r} is not a stream id (milliseconds-sequence)")
    return int(found.group(1)), int(found.group(2) or 0)


def _text(cursor: Cursor) -> str:
    return f"{cursor[0]}-{cursor[1]}"


def _cursor(entry_id: bytes) -> Cursor:
    ms, _, seq = entry_id.partition(b"-")
    return int(ms), int(seq or 0)


def _command(parts: list[str]) -> bytes:
    """A Redis command in RESP."""
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        raw = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def encode(message: dict) -> str:
    return orjson.dumps(message).decode()


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

    hub: Hub
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
            if self.waiting >= self.hub.settings.ws_queue:
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
        while self.closing is None and self.waiting > self.hub.settings.ws_queue // 2:
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
                    if self.waiting <= self.hub.settings.ws_queue // 4:
                        self.drained.set()
                await websocket.send_text(text)
            await websocket.close(*self.closing)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client went away; the receiving side sees it too
        except Exception:  # noqa: BLE001 - uvicorn's own "client disconnected" and the like
            log.debug("live feed: sender stopped", exc_info=True)
        finally:
            self.close(1000, "")  # nothing more is queued (a catch-up waiting for room stops)


class Hub:
    """The process's live feed: its clients, the streams their feeds read and the reader."""

    def __init__(self, service: Service):
        self.service = service
        self.settings = service.settings
        self.keys = service.keys
        self.redis: aioredis.Redis | None = None
        self.clients: set[Client] = set()
        #: stream -> the feeds reading it (live or catching up)
        self.feeds: dict[str, set[Feed]] = defaultdict(set)
        #: stream -> the id up to which the reader has handed entries out (streams some feed reads)
        self.positions: dict[str, Cursor] = {}
        #: the registry's query ids (for subscriptions to every query) and its version
        self.queries: dict[str, dict] = {}
        self.version: int | None = None
        #: where the reader stands in ``pn:alarm-actions`` (None: not read yet; it starts at the end)
        self.actions: Cursor | None = None
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.refreshing: set[asyncio.Task] = set()

    # ---- lifecycle

    async def start(self) -> None:
        settings = self.settings
        # a burst of clients subscribing at once waits for a free connection; a pool that
        # refused (redis-py's default beyond 100) would tell them Redis is unavailable
        self.redis = aioredis.Redis.from_pool(aioredis.BlockingConnectionPool.from_url(
            settings.redis_url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_POOL_WAIT,
            socket_timeout=settings.redis_timeout, socket_connect_timeout=settings.redis_timeout))
        self.wake = asyncio.Event()
        self.tasks = [asyncio.create_task(self._listen(), name="live-listener"),
                      asyncio.create_task(self._read(), name="live-reader")]

    async def stop(self) -> None:
        for client in list(self.clients):
            client.close(1001, "the service is stopping")
        # cancelled again until done: under the test client's portal a first cancel can go unseen
        pending = {t for t in [*self.tasks, *self.refreshing] if not t.done()}
        for _ in range(50):
            if not pending:
                break
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.1)
        self.tasks = []
        if self.redis is not None:
            await self.redis.aclose()

    # ---- clients

    def join(self, websocket: WebSocket, principal: Principal, token: str) -> Client:
        client = Client(self, websocket, principal, token)
        client.sender = asyncio.create_task(client.run_sender(), name="live-sender")
        self.clients.add(client)
        return client

    async def leave(self, client: Client) -> None:
        client.close(1000, "")
        async with client.lock:
            for feed in list(client.feeds.values()):
                self._detach(feed)
            self.clients.discard(client)
        if client.sender is not None:
            client.sender.cancel()
            await asyncio.gather(client.sender, return_exceptions=True)

    async def subscribe(self, client: Client, queries: list[str] | None, kinds: list[str],
                        since: Cursor | dict[str, Cursor] | None) -> None:
        """Make ``client``'s feeds those of ``kinds`` over ``queries`` (None: every query,
        also those registered later). ``since`` resumes feeds after a cursor (one for all,
        or per feed name); feeds kept from the previous subscription and not named in
        ``since`` go on where they were. Unknown query ids are answered with an error."""
        async with client.lock:
            registered = await self._registry()
            unknown = [] if queries is None else sorted(set(queries) - set(registered))
            chosen = set(registered) if queries is None else set(queries) - set(unknown)
            wanted = self._feed_specs(chosen, kinds)
            if isinstance(since, dict):
                stray = sorted(set(since) - set(wanted))
                if stray:
                    client.send({"type": "error", "field": f"since.{stray[0]}",
                                 "message": f"since names {stray[0]!r}, which this subscription does not hold"})
                    return
            if unknown:
                client.send({"type": "error", "field": "queries",
                             "message": f"no query {', '.join(map(repr, unknown))}; subscribed to the others"})
            client.everything, client.queries = queries is None, chosen
            client.kinds = frozenset(kinds)
            for name, feed in list(client.feeds.items()):
                if name not in wanted or (since is not None and (not isinstance(since, dict) or name in since)):
                    self._detach(feed)
            started = []
            for name, (kind, query) in wanted.items():
                if name not in client.feeds:
                    start = since.get(name) if isinstance(since, dict) else since
                    started.append(await self._start(client, kind, query, start))
            # every entry after these cursors comes next (the catch-up, then the live reading)
            client.send({"type": "subscribed", "queries": "*" if queries is None else sorted(chosen),
                         "kinds": [k for k in KINDS if k in kinds],
                         "cursors": {name: _text(feed.cursor) for name, feed in client.feeds.items()}})
            for feed in started:
                await self._go_live(feed)
                if client.closing is not None:
                    return

    # ---- feeds

    def _feed_specs(self, queries: set[str], kinds) -> dict[str, tuple[str, str | None]]:
        specs = {}
        for kind in KINDS:
            if kind not in kinds:
                continue
            for query in ([None] if kind == "metrics" else sorted(queries)):
                specs[feed_name(kind, query)] = (kind, query)
        return specs

    def _stream(self, kind: str, query: str | None) -> str:
        if kind == "metrics":
            return self.keys.metrics
        if kind in ("matches", "alarms"):
            return self.keys.matches(query)
        return self.keys.observations(query)

    def _detach(self, feed: Feed) -> None:
        feed.client.feeds.pop(feed.name, None)
        readers = self.feeds.get(feed.stream)
        if readers is not None:
            readers.discard(feed)
            if not readers:
                del self.feeds[feed.stream]
                self.positions.pop(feed.stream, None)

    async def _attach(self, client: Client, kind: str, query: str | None, since: Cursor | None) -> None:
        await self._go_live(await self._start(client, kind, query, since))

    async def _start(self, client: Client, kind: str, query: str | None, since: Cursor | None) -> Feed:
        """A new feed, from ``since``; without it, from now for matches and from just before
        the latest entry for the other kinds (so their latest state comes at once)."""
        feed = Feed(client, kind, query, self._stream(kind, query))
        client.feeds[feed.name] = feed
        self.feeds[feed.stream].add(feed)
        if since is not None:
            feed.cursor = since
        else:
            latest = await self.redis.xrevrange(feed.stream, count=1 if kind == "matches" else 2)
            if kind == "matches":
                feed.cursor = _cursor(latest[0][0]) if latest else ZERO
            else:
                feed.cursor = _cursor(latest[1][0]) if len(latest) > 1 else ZERO
        return feed

    async def _go_live(self, feed: Feed) -> None:
        """Catch the feed up from its cursor, then hand it to the reader."""
        client = feed.client
        if feed.kind == "matches" and feed.cursor != ZERO:
            await self._report_gap(feed)
        while client.feeds.get(feed.name) is feed:
            await self._catch_up(feed)
            target = self.positions.get(feed.stream)
            if target is None:
                self.positions[feed.stream] = feed.cursor
                self.wake.set()
            if target is None or feed.cursor >= target:
                feed.live = True
                return

    async def _catch_up(self, feed: Feed) -> None:
        after = f"({_text(feed.cursor)}"
        if feed.kind != "matches":
            latest = await self.redis.xrevrange(feed.stream, "+", after, count=1)
            if latest:
                await self._deliver_latest(feed, latest[0])
            return
        # chunks of a quarter of the queue, each once the queue is at most half full
        chunk = min(READ_COUNT, max(1, self.settings.ws_queue // 4))
        while True:
            await feed.client.room()
            found = await self.redis.xrange(feed.stream, f"({_text(feed.cursor)}", "+", count=chunk)
            for entry_id, fields in found:
                feed.client.put(self._match_message(feed.query, entry_id, fields))
            if found:
                feed.cursor = _cursor(found[-1][0])
            if len(found) < chunk or feed.client.closing is not None:
                return

    async def _deliver_latest(self, feed: Feed, entry) -> None:
        entry_id, fields = entry
        if feed.kind == "alarms":
            text = (await self._alarms({feed.query})).get(feed.query)
            if text is not None:
                feed.client.put(text)
        else:
            feed.client.put(self._latest_message(feed.kind, feed.query, entry_id, fields), feed.name)
        feed.cursor = max(feed.cursor, _cursor(entry_id))

    async def _report_gap(self, feed: Feed) -> None:
        """Tell a resuming client when entries after its cursor were trimmed away."""
        try:
            info = await self.redis.xinfo_stream(feed.stream)
        except redis.ResponseError:
            return
        trimmed = info.get("max-deleted-entry-id")
        if trimmed and _cursor(trimmed) > feed.cursor:
            first = info.get("first-entry")
            feed.client.send({"type": "gap", "feed": feed.name, "since": _text(feed.cursor),
                              "first": first[0].decode() if first else None,
                              "message": "entries after your cursor were trimmed from the capped stream"})

    # ---- messages

    def _match_message(self, query: str, entry_id: bytes, fields: dict) -> str:
        return encode({"type": "matches", "query": query, "id": entry_id.decode(),
                       "data": match_record(entry_id, fields)})

    def _latest_message(self, kind: str, query: str | None, entry_id: bytes, fields: dict) -> str:
        if kind == "metrics":
            data = finite(orjson.loads(fields[b"metrics"]))
        else:
            data = projection(entry_id, fields, PARTS[kind])
        return encode({"type": kind, **({} if query is None else {"query": query}), "id": entry_id.decode(),
                       "data": data})

    async def _alarms(self, queries: set[str]) -> dict[str, str]:
        """The alarm message of each query (as GET /api/alarms/{id} has it), by the REST code."""

        def compute() -> dict[str, str]:
            out = {}
            for query in queries:
                entry = self.service.registry.query(query)
                state = alarm(self.service, entry) if entry is not None else None
                if state is not None:
                    out[query] = encode({"type": "alarms", "query": query, "id": state["last"], "data": state})
            return out

        return await asyncio.to_thread(compute)

    # ---- the registry (subscriptions to every query)

    async def _registry(self) -> dict[str, dict]:
        version = int(await self.redis.get(self.keys.version) or 0)
        if version != self.version:
            raw = await self.redis.hgetall(self.keys.queries)
            self.queries = {k.decode(): orjson.loads(v) for k, v in raw.items()}
            self.version = version
        return self.queries

    async def _follow_registry(self) -> None:
        """Feeds for queries registered since, and none for removed ones, for clients of every query."""
        everyone = [c for c in self.clients if c.everything and c.closing is None]
        if not everyone:
            return
        registered = await self._registry()
        for client in everyone:
            if client.queries != set(registered):
                task = asyncio.create_task(self._refresh(client, registered))
                self.refreshing.add(task)
                task.add_done_callback(self.refreshing.discard)

    async def _refresh(self, client: Client, registered: dict[str, dict]) -> None:
        async with client.lock:
            if not client.everything or client.closing is not None or client.queries == set(registered):
                return
            client.queries = set(registered)
            wanted = self._feed_specs(client.queries, client.kinds)
            for name, feed in list(client.feeds.items()):
                if name not in wanted:
                    self._detach(feed)
            for name, (kind, query) in wanted.items():
                if name not in client.feeds:
                    # a query registered meanwhile: from its registration on
                    created = registered[query].get("created") or 0
                    try:
                        await self._attach(client, kind, query, (int(created * 1000), 0))
                    except redis.RedisError as error:
                        log.warning("live feed: %s of a new query: %s", name, error)

    # ---- the reader

    async def _listen(self) -> None:
        """Wake the reader on every ``pn:live`` message. A plain SUBSCRIBE connection, whose
        content is not parsed (any message means: read the streams); it ends at once when
        cancelled, which a timed pub/sub read of redis-py does not always do."""
        options = self.redis.connection_pool.connection_kwargs
        while True:
            writer = None
            try:
                if options.get("path"):
                    opened = asyncio.open_unix_connection(options["path"])
                else:
                    opened = asyncio.open_connection(options.get("host", "127.0.0.1"), options.get("port", 6379))
                reader, writer = await asyncio.wait_for(opened, self.settings.redis_timeout)
                commands = []
                if options.get("password"):
                    commands.append(["AUTH", *filter(None, [options.get("username")]), options["password"]])
                commands.append(["SUBSCRIBE", self.keys.live])
                writer.write(b"".join(_command(c) for c in commands))
                self.wake.set()  # anything written while not listening
                while await reader.read(65536):
                    self.wake.set()
                raise ConnectionError("closed by Redis")
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError) as error:
                log.warning("live feed: pn:live subscription lost (%s); retrying", error)
                await asyncio.sleep(1.0)
            finally:
                if writer is not None:
                    writer.close()

    async def _read(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), self.settings.ws_poll)
            except TimeoutError:
                pass
            self.wake.clear()
            try:
                await self._follow_registry()
                while await self._read_once():
                    pass
            except asyncio.CancelledError:
                raise
            except (redis.RedisError, OSError) as error:
                log.warning("live feed: reading the result streams failed (%s); retrying", error)
                await asyncio.sleep(min(1.0, self.settings.ws_poll))
            except Exception:
                log.exception("live feed: reader error")
                await asyncio.sleep(1.0)

    async def _read_once(self) -> bool:
        """One XREAD of every stream some live feed reads, and of the alarm actions; True
        when there may be more."""
        request = dict(self.positions)
        if not request:
            return False
        if self.actions is None:
            latest = await self.redis.xrevrange(self.keys.alarm_actions, count=1)
            self.actions = _cursor(latest[0][0]) if latest else ZERO
        wanted = {s: _text(c) for s, c in request.items()}
        wanted[self.keys.alarm_actions] = _text(self.actions)
        found = await self.redis.xread(wanted, count=READ_COUNT)
        if not found:
            return False
        entries = {stream.decode(): items for stream, items in found}
        acted = entries.pop(self.keys.alarm_actions, [])
        # an action's new state goes to the query's alarm feeds, unless its new matches carry it
        acted_on = {q for q in {fields[b"q"].decode() for _, fields in acted if b"q" in fields}
                    if self.keys.matches(q) not in entries}
        alarm_queries = {f.query for s in entries for f in self.feeds.get(s, ()) if f.kind == "alarms" and f.live}
        alarm_queries |= {q for q in acted_on if self._alarm_feeds(q)}
        alarms = await self._alarms(alarm_queries) if alarm_queries else {}
        more = len(acted) == READ_COUNT
        # from here to the end, no await: positions and cursors move together
        for stream, items in entries.items():
            if self.positions.get(stream) != request[stream]:
                continue  # dropped (or dropped and taken up again) meanwhile: read again next time
            more = more or len(items) == READ_COUNT
            self._hand_out(stream, items, alarms)
            self.positions[stream] = _cursor(items[-1][0])
        if acted:
            self.actions = _cursor(acted[-1][0])
            for query in acted_on:
                text = alarms.get(query)
                for feed in self._alarm_feeds(query) if text is not None else ():
                    feed.client.put(text)
        return more

    def _alarm_feeds(self, query: str) -> list[Feed]:
        return [f for f in self.feeds.get(self.keys.matches(query), ()) if f.kind == "alarms" and f.live]

    def _hand_out(self, stream: str, items: list, alarms: dict[str, str]) -> None:
        last = _cursor(items[-1][0])
        by_kind: dict[tuple[str, str | None], list[Feed]] = defaultdict(list)
        for feed in self.feeds.get(stream, ()):
            if feed.live and feed.cursor < last:
                by_kind[(feed.kind, feed.query)].append(feed)
        for (kind, query), feeds in by_kind.items():
            if kind == "matches":
                messages = [(_cursor(i), self._match_message(query, i, f)) for i, f in items]
                for feed in feeds:
                    put = feed.client.put
                    for cursor, text in messages:
                        if cursor > feed.cursor:
                            put(text)
                    feed.cursor = last
            elif kind == "alarms":
                text = alarms.get(query)
                for feed in feeds:
                    if text is not None:
                        feed.client.put(text)
                    feed.cursor = last
            else:
                text = self._latest_message(kind, query, *items[-1])
                for feed in feeds:
                    feed.client.put(text, feed.name)
                    feed.cursor = last
