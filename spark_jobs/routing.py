"""From ingest entries to rows keyed by (query, key group).

Runs on executors over each read partition of a micro-batch (``mapInPandas``): every
event is validated by the core's parser (a bad one becomes a dead-letter row with its
reason), and each valid one goes to every key group of every running query that reads
its stream (:class:`~penumbra.keygroups.Routing`). At the end of the partition each
group of each query it concerned gets a *tick*: the clock of the partition's events for
that query (:meth:`~penumbra.operator.Operator.clock_of`) and whether the input of the
query ended; the groups merge the ticks of all partitions into the batch's clock, so
time reaches groups that got no rows. Removed queries' groups get a *drop*.

Output rows: ``(qid, grp, seq, kind, data, raw, registry)`` with kind ``e`` (an
event's JSON), ``t`` (a tick), ``d`` (drop the state), and on the control key
``("", 0)``: ``r`` (a rejected entry: reason in data, the entry itself in raw) and ``x``
(an end-of-input mark reached).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator

import pandas as pd
import redis

from penumbra.engine import build_operator
from penumbra.errors import ValidationError
from penumbra.events import Streams, parse_event_line, parse_streams
from penumbra.keygroups import Routing
from penumbra.operator import Clock, Operator, merge_clocks
from penumbra.query import parse

from .store import Keys, Registry

__all__ = ["ROUTED", "CONTROL", "CompiledQuery", "compiled", "route"]

ROUTED = "qid string, grp int, seq long, kind string, data binary, raw binary, registry long"
#: The key of rows that are not a query's: rejected entries and end marks.
CONTROL = ("", 0)


@dataclass
class CompiledQuery:
    """A registered query as the job runs it."""

    entry: dict
    query: Any
    streams: Streams
    clocker: Operator
    routing: Routing


class _Compiled:
    """One registry version, compiled: its queries by id and by stream they read."""

    def __init__(self, registry: dict, groups: int):
        self.version = registry["version"]
        self.groups = groups
        self.streams = parse_streams(registry["streams"])
        self.queries: dict[str, CompiledQuery] = {}
        self.deleted = list(registry.get("deleted", {}))
        self.readers: dict[str, list[CompiledQuery]] = {}
        for query_id, entry in registry["queries"].items():
            query = parse(entry["text"])
            streams = parse_streams(entry.get("streams", registry["streams"]))
            clocker = build_operator(query, streams)
            compiled_query = CompiledQuery(entry, query, streams, clocker, Routing(clocker.partition_keys(), groups))
            self.queries[query_id] = compiled_query
            if not entry.get("paused"):
                for stream in compiled_query.routing.roles:
                    self.readers.setdefault(stream, []).append(compiled_query)


_cache: OrderedDict[tuple[str, str, int, int], _Compiled] = OrderedDict()


def compiled(url: str, prefix: str, version: int, groups: int) -> _Compiled:
    """The registry at ``version``, compiled once per executor process."""
    key = (url, prefix, version, groups)
    if key not in _cache:
        client = redis.Redis.from_url(url)
        try:
            _cache[key] = _Compiled(Registry(client, Keys(prefix)).at(version), groups)
        finally:
            client.close()
        while len(_cache) > 8:
            _cache.popitem(last=False)
    _cache.move_to_end(key)
    return _cache[key]


def _reject(rows: list, seq: int, entry: str, reason: str, raw: bytes, version: int) -> None:
    data = json.dumps({"entry": entry, "reason": reason}).encode()
    rows.append((*CONTROL, seq, "r", data, raw, version))


def route(url: str, prefix: str, groups: int):
    """The ``mapInPandas`` function for a job on ``url`` with ``groups`` key groups."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        clocks: dict[str, Clock] = {}
        ended: set[str] = set()
        registry = None
        for frame in frames:
            if not len(frame):
                continue
            registry = compiled(url, prefix, int(frame["registry"].iloc[0]), groups)
            rows: list[tuple] = []
            by_query: dict[str, list] = {}
            for seq, entry, field, data in zip(frame["seq"].tolist(), frame["entry"].tolist(),
                                               frame["field"].tolist(), frame["data"].tolist()):
                if field == "c":
                    ended.update(_end_mark(data, registry))
                    rows.append((*CONTROL, seq, "x", json.dumps({"entry": entry}).encode(), None, registry.version))
                    continue
                if field != "e":
                    _reject(rows, seq, entry, f"unknown entry field {field!r} (expected 'e', an event)", data,
                            registry.version)
                    continue
                try:
                    event = parse_event_line(data.decode("utf-8"), registry.streams)
                except UnicodeDecodeError as error:
                    _reject(rows, seq, entry, f"not UTF-8 text ({error.reason})", data, registry.version)
                    continue
                except ValidationError as error:
                    _reject(rows, seq, entry, str(error), data, registry.version)
                    continue
                for query in registry.readers.get(event.stream.casefold(), ()):
                    by_query.setdefault(query.entry["id"], []).append(event)
                    for group in query.routing.groups(event.stream, event.attrs):
                        rows.append((query.entry["id"], group, seq, "e", data, None, registry.version))
            for query_id, events in by_query.items():
                clocks[query_id] = merge_clocks(clocks.get(query_id, {}),
                                                registry.queries[query_id].clocker.clock_of(events))
            if rows:
                yield pd.DataFrame(rows, columns=_COLUMNS)
        if registry is not None:
            yield pd.DataFrame(_ticks(registry, clocks, ended), columns=_COLUMNS)

    return run


def _ticks(registry: _Compiled, clocks: dict[str, Clock], ended: set[str]) -> list[tuple]:
    rows = []
    for query_id in sorted(set(clocks) | ended):
        query = registry.queries.get(query_id)
        if query is None or query.entry.get("paused"):
            continue
        data = json.dumps({"clock": clocks.get(query_id, {}), "end": query_id in ended}).encode()
        rows += [(query_id, group, -1, "t", data, None, registry.version) for group in range(query.routing.count)]
    for query_id in registry.deleted:
        # a removed query had one group or the job's count of them: reach them all
        rows += [(query_id, group, -1, "d", b"", None, registry.version) for group in range(registry.groups)]
    return rows


def _end_mark(data: bytes, registry: _Compiled) -> list[str]:
    try:
        mark = json.loads(data)
        queries = mark["end"]
        return [q for q in queries if isinstance(q, str) and q in registry.queries]
    except (ValueError, KeyError, TypeError):
        return []


_COLUMNS = ["qid", "grp", "seq", "kind", "data", "raw", "registry"]
