"""The process's live feed: its clients' subscriptions, the catch-up of each new feed and
the one reader that hands the result streams out to the live feeds.

A feed joins the live reading after a catch-up from its cursor (XRANGE from the cursor,
then again until the cursor reaches where the reader stands, all on the same event
loop): the reader hands a feed only entries newer than its cursor, so a resumed feed
gets every entry after its cursor once, in stream order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

import orjson
import redis
import redis.asyncio as aioredis
from starlette.websockets import WebSocket

from contract.entries import read_alarm_action
from contract.tokens import Principal

from ..deps import Service
from ..records import PARTS, alarm_views, match_record, metrics_record, projection
from .client import KINDS, Client, Feed, feed_name
from .cursor import ZERO, Cursor, encode, entry_cursor, format_cursor

__all__ = ["REDIS_CONNECTIONS", "Hub"]

log = logging.getLogger("penumbra.api")

#: Entries per XREAD / XRANGE round trip.
READ_COUNT = 500
#: Connections of the process's live feed to Redis, and the seconds a call may wait for one.
REDIS_CONNECTIONS = 64
REDIS_POOL_WAIT = 30.0


def _command(parts: list[str]) -> bytes:
    """A Redis command in RESP."""
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        raw = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class Hub:
    """The process's live feed: its clients, the streams their feeds read and the reader."""

    def __init__(self, service: Service):
        self.service = service
        self.settings = service.settings
        self.keys = service.keys
        self.redis: aioredis.Redis | None = None
        self.clients: set[Client] = set()
        #: sockets accepted that have not authenticated yet (at most ``ws_max_unauthenticated``)
        self.waiting = 0
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
        client = Client(self.settings.ws_queue, websocket, principal, token)
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
                         "cursors": {name: format_cursor(feed.cursor) for name, feed in client.feeds.items()}})
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
                feed.cursor = entry_cursor(latest[0][0]) if latest else ZERO
            else:
                feed.cursor = entry_cursor(latest[1][0]) if len(latest) > 1 else ZERO
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
        after = f"({format_cursor(feed.cursor)}"
        if feed.kind == "alarms":
            await self._catch_up_alarms(feed)
            return
        if feed.kind != "matches":
            latest = await self.redis.xrevrange(feed.stream, "+", after, count=1)
            if latest:
                await self._deliver_latest(feed, latest[0])
            return
        # chunks of a quarter of the queue, each once the queue is at most half full
        chunk = min(READ_COUNT, max(1, self.settings.ws_queue // 4))
        while True:
            await feed.client.room()
            found = await self.redis.xrange(feed.stream, f"({format_cursor(feed.cursor)}", "+", count=chunk)
            for entry_id, fields in found:
                feed.client.put(self._match_message(feed.query, entry_id, fields))
            if found:
                feed.cursor = entry_cursor(found[-1][0])
            if len(found) < chunk or feed.client.closing is not None:
                return

    async def _catch_up_alarms(self, feed: Feed) -> None:
        """The latest state of every instance that matches or actions touched after the
        feed's cursor (the actions by Redis's clock: both streams' ids are its milliseconds)."""
        touched: set[str] = set()
        cursor = feed.cursor
        while True:
            found = await self.redis.xrange(feed.stream, f"({format_cursor(cursor)}", "+", count=READ_COUNT)
            touched.update(f[b"i"].decode() for _, f in found if b"i" in f)
            if found:
                cursor = entry_cursor(found[-1][0])
            if len(found) < READ_COUNT:
                break
        if feed.cursor != ZERO:
            acted = await self.redis.xrange(self.keys.alarm_actions, f"{feed.cursor[0]}-0", "+")
            for _, fields in acted:
                query, _, instance = read_alarm_action(fields)
                if query == feed.query and instance:
                    touched.add(instance)
        for text in (await self._alarms({feed.query: touched})).get(feed.query, ()) if touched else ():
            feed.client.put(text)
        feed.cursor = max(feed.cursor, cursor)

    async def _deliver_latest(self, feed: Feed, entry) -> None:
        entry_id, fields = entry
        feed.client.put(self._latest_message(feed.kind, feed.query, entry_id, fields), feed.name)
        feed.cursor = max(feed.cursor, entry_cursor(entry_id))

    async def _report_gap(self, feed: Feed) -> None:
        """Tell a resuming client when entries after its cursor were trimmed away."""
        try:
            info = await self.redis.xinfo_stream(feed.stream)
        except redis.ResponseError:
            return
        trimmed = info.get("max-deleted-entry-id")
        if trimmed and entry_cursor(trimmed) > feed.cursor:
            first = info.get("first-entry")
            feed.client.send({"type": "gap", "feed": feed.name, "since": format_cursor(feed.cursor),
                              "first": first[0].decode() if first else None,
                              "message": "entries after your cursor were trimmed from the capped stream"})

    # ---- messages

    def _match_message(self, query: str, entry_id: bytes, fields: dict) -> str:
        return encode({"type": "matches", "query": query, "id": entry_id.decode(),
                       "data": match_record(entry_id, fields)})

    def _latest_message(self, kind: str, query: str | None, entry_id: bytes, fields: dict) -> str:
        if kind == "metrics":
            data = metrics_record(fields)
        else:
            data = projection(entry_id, fields, PARTS[kind])
        return encode({"type": kind, **({} if query is None else {"query": query}), "id": entry_id.decode(),
                       "data": data})

    async def _alarms(self, touched: dict[str, set[str]]) -> dict[str, list[str]]:
        """The alarm messages of these instances, per query (each as GET /api/alarms/{id}
        has it, by the REST code), in the order of their latest matches."""

        def compute() -> dict[str, list[str]]:
            entries = {q: e for q in touched if (e := self.service.registry.query(q)) is not None}
            out: dict[str, list[str]] = defaultdict(list)
            views = alarm_views(self.service, entries, {q: sorted(touched[q]) for q in entries})
            for view in sorted(views, key=lambda v: v["last"] or ""):
                out[view["query"]].append(encode({"type": "alarms", "query": view["query"], "id": view["last"],
                                                  "data": view}))
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
            self.actions = entry_cursor(latest[0][0]) if latest else ZERO
        wanted = {s: format_cursor(c) for s, c in request.items()}
        wanted[self.keys.alarm_actions] = format_cursor(self.actions)
        found = await self.redis.xread(wanted, count=READ_COUNT)
        if not found:
            return False
        entries = {stream.decode(): items for stream, items in found}
        acted = entries.pop(self.keys.alarm_actions, [])
        # the instances new matches touched, and those acted on, for the queries with live alarm feeds
        touched: dict[str, set[str]] = defaultdict(set)
        for stream, items in entries.items():
            for feed in self.feeds.get(stream, ()):
                if feed.kind == "alarms" and feed.live:
                    touched[feed.query].update(f[b"i"].decode() for _, f in items if b"i" in f)
                    break
        acted_on: dict[str, set[str]] = defaultdict(set)
        for _, fields in acted:
            query, _, instance = read_alarm_action(fields)
            if query and instance and self._alarm_feeds(query):
                acted_on[query].add(instance)
                touched[query].add(instance)
        alarms = await self._alarms(touched) if touched else {}
        more = len(acted) == READ_COUNT
        # from here to the end, no await: positions and cursors move together
        for stream, items in entries.items():
            if self.positions.get(stream) != request[stream]:
                continue  # dropped (or dropped and taken up again) meanwhile: read again next time
            more = more or len(items) == READ_COUNT
            self._hand_out(stream, items, alarms)
            self.positions[stream] = entry_cursor(items[-1][0])
        if acted:
            self.actions = entry_cursor(acted[-1][0])
            for query in acted_on:
                if self.keys.matches(query) in entries:
                    continue  # its new matches carried the new states
                for feed in self._alarm_feeds(query):
                    for text in alarms.get(query, ()):
                        feed.client.put(text)
        return more

    def _alarm_feeds(self, query: str) -> list[Feed]:
        return [f for f in self.feeds.get(self.keys.matches(query), ()) if f.kind == "alarms" and f.live]

    def _hand_out(self, stream: str, items: list, alarms: dict[str, list[str]]) -> None:
        last = entry_cursor(items[-1][0])
        by_kind: dict[tuple[str, str | None], list[Feed]] = defaultdict(list)
        for feed in self.feeds.get(stream, ()):
            if feed.live and feed.cursor < last:
                by_kind[(feed.kind, feed.query)].append(feed)
        for (kind, query), feeds in by_kind.items():
            if kind == "matches":
                messages = [(entry_cursor(i), self._match_message(query, i, f)) for i, f in items]
                for feed in feeds:
                    put = feed.client.put
                    for cursor, text in messages:
                        if cursor > feed.cursor:
                            put(text)
                    feed.cursor = last
            elif kind == "alarms":
                for feed in feeds:
                    for text in alarms.get(query, ()):
                        feed.client.put(text)
                    feed.cursor = last
            else:
                text = self._latest_message(kind, query, *items[-1])
                for feed in feeds:
                    feed.client.put(text, feed.name)
                    feed.cursor = last
