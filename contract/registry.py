"""The registry: registered queries and stream parameters, versioned, validated by the core.

Every change bumps the version and stores the whole registry under that version, so a
micro-batch planned at version ``v`` reads exactly what was registered then, also when
it is replayed after a crash. Every change is audited in the same MULTI/EXEC.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Mapping

import redis

from penumbra.engine import build_operator
from penumbra.errors import PenumbraError
from penumbra.events import StreamParams, Streams, parse_streams
from penumbra.operator import Operator
from penumbra.query import check_registered, parse

from .alarms import DEFAULT_PRIORITY
from .entries import audit_entry
from .keys import Keys

__all__ = ["ERROR_CHARS", "MAX_QUERIES", "MAX_STREAMS", "TOMBSTONE_SECONDS", "VERSION_RETENTION_SECONDS", "Registry",
           "RegistryError", "RegistryFull", "check_entry", "entry_operator", "validated_query"]

#: How long an old registry version stays readable (a replayed micro-batch reads the
#: version it was planned with).
VERSION_RETENTION_SECONDS = 7 * 24 * 3600
#: How long a removed query's tombstone keeps asking its key groups to drop their state.
TOMBSTONE_SECONDS = 24 * 3600
#: Audit entries kept (MAXLEN ~).
AUDIT_MAXLEN = 100_000
#: Versions deleted per command when the job releases them.
RELEASE_CHUNK = 500
#: Queries and streams a registry holds at most (every change stores a copy of it all).
MAX_QUERIES = 1000
MAX_STREAMS = 1000


#: What a query's entry says of its alarms alone: changing it does not change what the job runs.
ALARM_FIELDS = frozenset({"priority", "auto_resolve_minutes"})


class RegistryError(PenumbraError):
    """A registry change that cannot be made (unknown query, name taken, ...)."""


class RegistryFull(RegistryError):
    """A change past the registry's limit on queries or streams."""


#: Characters of a run-time error kept with a quarantined query.
ERROR_CHARS = 1000


class _Unchanged(Exception):
    """A change that turns out to change nothing: no new version is written."""


def _loads(raw) -> Any:
    return json.loads(raw) if raw is not None else None


class Registry:
    """Registered queries and stream parameters, versioned.

    Every change bumps the version and stores the whole registry under that version, so
    a micro-batch planned at version ``v`` reads exactly what was registered then, also
    when it is replayed after a crash. Queries are validated by the core's parser and
    built against the registered streams; stream parameters by the core's decoder.
    """

    def __init__(self, client: redis.Redis, keys: Keys = Keys(), *, max_queries: int = MAX_QUERIES,
                 max_streams: int = MAX_STREAMS):
        self.redis = client
        self.keys = keys
        self.max_queries, self.max_streams = max_queries, max_streams

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

    def release(self, version: int) -> int:
        """No micro-batch will read a version before ``version`` again (the job's batches up
        to one planned at ``version`` are committed): those copies go now, not after
        :data:`VERSION_RETENTION_SECONDS`. How many were deleted."""
        released = int(self.redis.get(self.keys.registry_released) or 1)
        if version <= released:
            return 0
        gone = 0
        for start in range(released, version, RELEASE_CHUNK):
            stale = [self.keys.registry_at(v) for v in range(start, min(start + RELEASE_CHUNK, version))]
            gone += self.redis.delete(*stale)
        self.redis.set(self.keys.registry_released, version)
        return gone

    def query(self, query_id: str) -> dict | None:
        return _loads(self.redis.hget(self.keys.queries, query_id))

    def snapshot(self) -> tuple[int, dict[str, dict], dict[str, dict]]:
        """The version, queries and stream parameters, read together from the current
        hashes (which, unlike the per-version copies, never expire)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(self.keys.version)
        pipe.hgetall(self.keys.queries)
        pipe.hgetall(self.keys.streams)
        version, queries, streams = pipe.execute()
        return (int(version or 0), {k.decode(): json.loads(v) for k, v in queries.items()},
                {k.decode(): json.loads(v) for k, v in streams.items()})

    # --- changing --------------------------------------------------------------------------

    def register(self, text: str, *, query_id: str | None = None, threshold: float | None = None,
                 name: str | None = None, paused: bool = False, priority: str | None = None,
                 auto_resolve_minutes: float | None = None, who: str = "system") -> dict:
        """Validate and register a query; returns its entry. ``priority`` (critical, warning,
        info; default warning) orders its alarms; ``auto_resolve_minutes`` (default: off)
        resolves an alarm instance after that much quiet."""
        parsed = parse(text)
        query_id = query_id or f"q-{secrets.token_hex(4)}"

        def change(registry: dict) -> dict:
            if query_id in registry["queries"]:
                raise RegistryError(f"query {query_id!r} is already registered")
            if len(registry["queries"]) >= self.max_queries:
                raise RegistryFull(f"at most {self.max_queries} queries are registered: remove one first")
            entry = {"id": query_id, "text": text, "kind": parsed.kind, "name": name or query_id,
                     "threshold": threshold if threshold is not None else parsed.threshold,
                     "paused": bool(paused), "priority": priority or DEFAULT_PRIORITY,
                     "auto_resolve_minutes": auto_resolve_minutes or None, "created": time.time()}
            read = check_entry(entry, registry["streams"], registered=True).partition_keys()
            # a query keeps the parameters of its streams as they were when it was registered
            entry["streams"] = {s: p for s, p in registry["streams"].items() if s.casefold() in read}
            registry["queries"][query_id] = entry
            registry["deleted"].pop(query_id, None)
            return entry

        return self._change(change, who, "register", query_id)

    def update(self, query_id: str, *, who: str = "system", **changes) -> dict:
        """Change a query's ``threshold``, ``name`` or ``paused`` flag, or how its alarms go
        (``priority``, ``auto_resolve_minutes``: 0 or None turns it off)."""
        unknown = set(changes) - {"threshold", "name", "paused", "priority", "auto_resolve_minutes"}
        if unknown:
            raise RegistryError(f"cannot change {sorted(unknown)[0]!r} of a query")
        if "auto_resolve_minutes" in changes:
            changes["auto_resolve_minutes"] = changes["auto_resolve_minutes"] or None

        def change(registry: dict) -> dict:
            entry = registry["queries"].get(query_id)
            if entry is None:
                raise RegistryError(f"no query {query_id!r}")
            entry.update(changes)
            check_entry(entry, entry["streams"])
            if set(changes) - ALARM_FIELDS:
                entry.pop("failed", None)  # a changed query runs again
            return entry

        return self._change(change, who, "update", query_id, changes)

    def fail(self, query_id: str, error: str, *, seen_version: int | None, batch: int | None = None,
             who: str = "job") -> dict | None:
        """Quarantine a query the job could not run: its entry gets ``failed`` (the error, when,
        in which micro-batch) and the job skips it from the next version on, while every other
        query goes on. Changing the query (``update``) or removing it ends the quarantine.
        Nothing happens (None) when the query is gone, was changed since the job saw it
        (its entry's version is no longer ``seen_version``), or is quarantined already."""
        def change(registry: dict) -> dict:
            entry = registry["queries"].get(query_id)
            if entry is None or entry.get("version") != seen_version or entry.get("failed"):
                raise _Unchanged
            entry["failed"] = {"error": error[:ERROR_CHARS], "at": time.time(), "batch": batch}
            return entry

        return self._change(change, who, "quarantine", query_id, {"error": error[:ERROR_CHARS]})

    def remove(self, query_id: str, *, who: str = "system") -> dict:
        def change(registry: dict) -> dict:
            entry = registry["queries"].pop(query_id, None)
            if entry is None:
                raise RegistryError(f"no query {query_id!r}")
            # what the job needs to find the state the query held (its own, or its plan's)
            registry["deleted"][query_id] = {"at": time.time(), "text": entry["text"],
                                             **({"streams": entry["streams"]} if "streams" in entry else {})}
            return entry

        return self._change(change, who, "remove", query_id)

    def put_streams(self, params: Mapping[str, Any], *, who: str = "system") -> dict:
        """Register (or replace) the parameters of the named streams."""
        given = parse_streams(params)

        def change(registry: dict) -> dict:
            merged = {**registry["streams"], **params}
            if len(merged) > max(self.max_streams, len(registry["streams"])):
                raise RegistryFull(f"at most {self.max_streams} streams are registered")
            # the registered streams were checked as they came: what is left to refuse is a
            # name equal to one of them but for case (a change costs what it changes, not
            # a parse of every stream registered)
            Streams([StreamParams(name) for name in registry["streams"] if name not in params] + list(given.values()))
            registry["streams"] = merged
            return dict(params)

        return self._change(change, who, "streams", ",".join(params))

    def audit(self, who: str, action: str, subject: str, details: Any = None) -> None:
        """Append a change made outside the registry (an alarm acknowledged, a token
        revoked) to the audit stream, in the registry's own shape, at the current version."""
        self.redis.xadd(self.keys.audit, audit_entry(time.time(), who, action, subject, details, self.version()),
                        maxlen=AUDIT_MAXLEN, approximate=True)

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
                    try:
                        result = change(registry)
                    except _Unchanged:
                        return None
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
                    pipe.xadd(keys.audit, audit_entry(now, who, action, subject, details, version + 1),
                              maxlen=AUDIT_MAXLEN, approximate=True)
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue


def validated_query(text: str, threshold: float | None, streams: Streams, *,
                    registered: bool = True) -> tuple[Any, Operator]:
    """The one validator of a query (registering, updating, ``POST /api/validate``): it
    parses, checks that every stream it reads is registered (unless ``registered`` is
    false: a query registered before, kept with its streams' parameters of then), builds
    its operator against the streams as the job will, and takes its threshold; the parsed
    query and the operator, or the core's error (a :class:`~penumbra.query.QueryError` with
    line and column, a ``ValidationError`` naming the field)."""
    parsed = parse(text)
    if registered:
        check_registered(parsed, streams)
    operator = build_operator(parsed, streams)
    if threshold is not None:
        operator.set_threshold(threshold)
    return parsed, operator


def check_entry(entry: dict, streams: Mapping[str, Any], *, registered: bool = False) -> Operator:
    """The operator of a query entry the job can run (:func:`validated_query`), the streams
    as registered (JSON parameters); ``registered``: every stream it reads must be among them."""
    return validated_query(entry["text"], entry.get("threshold"), parse_streams(streams), registered=registered)[1]


def entry_operator(entry: dict) -> Operator | None:
    """The operator of a registry entry over the streams it was registered with, at its
    registered threshold; None for an entry the core cannot build again (or one the
    archive alone knows, without a text)."""
    if not entry.get("text"):
        return None
    try:
        return check_entry(entry, entry.get("streams") or {})
    except PenumbraError:
        return None
