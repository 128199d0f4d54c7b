"""Penumbra's Redis schema: the ingest stream, the versioned registry, the result streams.

The job, the service and the command line meet only here (docs/redis.md describes
every key). Nothing in this module imports pyspark.

>>> keys = Keys()
>>> keys.ingest, keys.matches("q1"), keys.registry_at(7)
('pn:in', 'pn:out:matches:q1', 'pn:registry:7')
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import redis

from penumbra.engine import build_operator
from penumbra.errors import PenumbraError
from penumbra.events import parse_streams
from penumbra.operator import Operator
from penumbra.query import parse

__all__ = ["DEAD_RAW_BYTES", "Keys", "Registry", "RegistryError", "append_events", "dead_raw", "end_of_input"]

#: How long an old registry version stays readable (a replayed micro-batch reads the
#: version it was planned with).
VERSION_RETENTION_SECONDS = 7 * 24 * 3600
#: How long a removed query's tombstone keeps asking its key groups to drop their state.
TOMBSTONE_SECONDS = 24 * 3600
#: Entries per pipelined round trip when appending to a stream.
PIPELINE_CHUNK = 2000
#: Bytes of a rejected entry its dead letter keeps (enough to see what it was): a flood of
#: huge entries cannot fill Redis, whose dead-letter stream is capped by count.
DEAD_RAW_BYTES = 8192


def dead_raw(raw: bytes) -> dict[str, bytes | int]:
    """A dead letter's ``raw``: the entry as it came, cut to :data:`DEAD_RAW_BYTES` (then
    with ``raw_bytes``, its whole length).

    >>> dead_raw(b"{oops"), dead_raw(b"x" * 9000)["raw_bytes"]
    ({'raw': b'{oops'}, 9000)
    """
    if len(raw) <= DEAD_RAW_BYTES:
        return {"raw": raw}
    return {"raw": raw[:DEAD_RAW_BYTES], "raw_bytes": len(raw)}


@dataclass(frozen=True)
class Keys:
    """Key names, under one prefix (``pn`` by default)."""

    prefix: str = "pn"

    @property
    def ingest(self) -> str:
        return f"{self.prefix}:in"

    @property
    def queries(self) -> str:
        return f"{self.prefix}:queries"

    @property
    def streams(self) -> str:
        return f"{self.prefix}:streams"

    @property
    def version(self) -> str:
        return f"{self.prefix}:registry"

    def registry_at(self, version: int) -> str:
        return f"{self.prefix}:registry:{version}"

    @property
    def audit(self) -> str:
        return f"{self.prefix}:audit"

    @property
    def alarm_actions(self) -> str:
        return f"{self.prefix}:alarm-actions"

    def matches(self, query: str) -> str:
        return f"{self.prefix}:out:matches:{query}"

    def observations(self, query: str) -> str:
        return f"{self.prefix}:out:obs:{query}"

    def groups(self, query: str) -> str:
        return f"{self.prefix}:groups:{query}"

    @property
    def metrics(self) -> str:
        return f"{self.prefix}:metrics"

    @property
    def batches(self) -> str:
        return f"{self.prefix}:batches"

    @property
    def live(self) -> str:
        return f"{self.prefix}:live"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"

    @property
    def counts(self) -> str:
        return f"{self.prefix}:counts"

    @property
    def ended(self) -> str:
        return f"{self.prefix}:ended"

    @property
    def heartbeat(self) -> str:
        return f"{self.prefix}:job"

    def alarms(self, query: str) -> str:
        return f"{self.prefix}:alarms:{query}"

    @property
    def tokens(self) -> str:
        return f"{self.prefix}:tokens"

    def rate(self, who: str, slot: int) -> str:
        return f"{self.prefix}:rate:{who}:{slot}"


class RegistryError(PenumbraError):
    """A registry change that cannot be made (unknown query, name taken, ...)."""


def _loads(raw) -> Any:
    return json.loads(raw) if raw is not None else None


class Registry:
    """Registered queries and stream parameters, versioned.

    Every change bumps the version and stores the whole registry under that version, so
    a micro-batch planned at version ``v`` reads exactly what was registered then, also
    when it is replayed after a crash. Queries are validated by the core's parser and
    built against the registered streams; stream parameters by the core's decoder.
    """

    def __init__(self, client: redis.Redis, keys: Keys = Keys()):
        self.redis = client
        self.keys = keys

    # --- reading ---------------------------------------------------------------------------

    def version(self) -> int:
        return int(self.redis.get(self.keys.version) or 0)

    def at(self, version: int) -> dict:
        """The registry as of ``version`` (an empty one at 0)."""
        if version == 0:
            return {"version": 0, "queries": {}, "streams": {}, "deleted": {}}
        found = _loads(self.redis.get(self.keys.registry_at(version)))
        if found is None:
            raise RegistryError(f"registry version {version} is no longer kept")
        return found

    def current(self) -> dict:
        return self.at(self.version())

    def query(self, query_id: str) -> dict | None:
        return _loads(self.redis.hget(self.keys.queries, query_id))

    # --- changing --------------------------------------------------------------------------

    def register(self, text: str, *, query_id: str | None = None, threshold: float | None = None,
                 name: str | None = None, paused: bool = False, who: str = "system") -> dict:
        """Validate and register a query; returns its entry."""
        parsed = parse(text)
        query_id = query_id or f"q-{secrets.token_hex(4)}"

        def change(registry: dict) -> dict:
            if query_id in registry["queries"]:
                raise RegistryError(f"query {query_id!r} is already registered")
            entry = {"id": query_id, "text": text, "kind": parsed.kind, "name": name or query_id,
                     "threshold": threshold if threshold is not None else parsed.threshold,
                     "paused": bool(paused), "created": time.time()}
            read = _check(entry, registry["streams"]).partition_keys()
            # a query keeps the parameters of its streams as they were when it was registered
            entry["streams"] = {s: p for s, p in registry["streams"].items() if s.casefold() in read}
            registry["queries"][query_id] = entry
            registry["deleted"].pop(query_id, None)
            return entry

        return self._change(change, who, "register", query_id)

    def update(self, query_id: str, *, who: str = "system", **changes) -> dict:
        """Change a query's ``threshold``, ``name`` or ``paused`` flag."""
        unknown = set(changes) - {"threshold", "name", "paused"}
        if unknown:
            raise RegistryError(f"cannot change {sorted(unknown)[0]!r} of a query")

        def change(registry: dict) -> dict:
            entry = registry["queries"].get(query_id)
            if entry is None:
                raise RegistryError(f"no query {query_id!r}")
            entry.update(changes)
            _check(entry, entry["streams"])
            return entry

        return self._change(change, who, "update", query_id, changes)

    def remove(self, query_id: str, *, who: str = "system") -> dict:
        def change(registry: dict) -> dict:
            entry = registry["queries"].pop(query_id, None)
            if entry is None:
                raise RegistryError(f"no query {query_id!r}")
            registry["deleted"][query_id] = {"at": time.time()}
            return entry

        return self._change(change, who, "remove", query_id)

    def put_streams(self, params: Mapping[str, Any], *, who: str = "system") -> dict:
        """Register (or replace) the parameters of the named streams."""
        parse_streams(params)

        def change(registry: dict) -> dict:
            merged = {**registry["streams"], **params}
            parse_streams(merged)
            registry["streams"] = merged
            return dict(params)

        return self._change(change, who, "streams", ",".join(params))

    def audit(self, who: str, action: str, subject: str, details: Any = None) -> None:
        """Append a change made outside the registry (an alarm acknowledged, a token
        revoked) to the audit stream, in the registry's own shape, at the current version."""
        self.redis.xadd(self.keys.audit, {"at": time.time(), "who": who, "action": action, "subject": subject,
                                          "details": json.dumps(details), "version": self.version()},
                        maxlen=100_000, approximate=True)

    def _change(self, change, who: str, action: str, subject: str, details: Any = None) -> dict:
        keys = self.keys
        while True:
            with self.redis.pipeline() as pipe:
                try:
                    pipe.watch(keys.version)
                    version = int(pipe.get(keys.version) or 0)
                    registry = self.at(version) if version else self.at(0)
                    now = time.time()
                    registry["deleted"] = {q: t for q, t in registry["deleted"].items()
                                           if now - t["at"] < TOMBSTONE_SECONDS}
                    result = change(registry)
                    registry["version"] = version + 1
                    if subject in registry["queries"]:
                        registry["queries"][subject]["version"] = version + 1
                        registry["queries"][subject]["updated"] = now
                    pipe.multi()
                    pipe.set(keys.version, version + 1)
                    # the current version is kept while it is current; a superseded one as long as
                    # a replayed micro-batch could still ask for it
                    pipe.set(keys.registry_at(version + 1), json.dumps(registry))
                    if version:
                        pipe.expire(keys.registry_at(version), VERSION_RETENTION_SECONDS)
                    pipe.delete(keys.queries, keys.streams)
                    if registry["queries"]:
                        pipe.hset(keys.queries, mapping={q: json.dumps(e) for q, e in registry["queries"].items()})
                    if registry["streams"]:
                        pipe.hset(keys.streams, mapping={s: json.dumps(p) for s, p in registry["streams"].items()})
                    pipe.xadd(keys.audit, {"at": now, "who": who, "action": action, "subject": subject,
                                           "details": json.dumps(details), "version": version + 1},
                              maxlen=100_000, approximate=True)
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue


def _check(entry: dict, streams: Mapping[str, Any]) -> Operator:
    """The operator of a query entry the job can run: it parses, builds against the
    streams, and takes its threshold."""
    operator = build_operator(parse(entry["text"]), parse_streams(streams))
    if entry.get("threshold") is not None:
        operator.set_threshold(entry["threshold"])
    return operator


def append_events(client: redis.Redis, events: Iterable[bytes | str], keys: Keys = Keys()) -> list[bytes]:
    """Append events (JSON each) to the ingest stream in order, pipelined; their entry ids."""
    ids: list[bytes] = []
    pipe = client.pipeline(transaction=False)
    pending = 0
    for event in events:
        pipe.xadd(keys.ingest, {"e": event})
        pending += 1
        if pending == PIPELINE_CHUNK:
            ids += pipe.execute()
            pending = 0
    if pending:
        ids += pipe.execute()
    return ids


def end_of_input(client: redis.Redis, queries: Iterable[str], keys: Keys = Keys()) -> bytes:
    """Mark the end of the input of these queries: the job flushes them (emits every
    match still waiting for more input) once the events before the mark are processed.
    Returns the mark's entry id (it appears in ``ended`` once done)."""
    return client.xadd(keys.ingest, {"c": json.dumps({"end": sorted(queries)})})
