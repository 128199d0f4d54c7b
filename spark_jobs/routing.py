"""From ingest entries to rows keyed by (unit, key group).

A unit is what the job keeps state for (:class:`Unit`): a query, or the running joins that
differ only in one-source conditions and thresholds, run as one plan
(:mod:`penumbra.plans`) under the plan's key.

Runs on executors inside the source's ``read`` (:class:`~spark_jobs.source.IngestReader`),
over each read partition of a micro-batch as it is read, so the entries cross from the
JVM to Python once: every event is validated by the core's parser (a bad one becomes a dead-letter row with its
reason), and each valid one goes to every key group of every running query that reads
its stream and is concerned with it (:class:`~penumbra.keygroups.Routing`). At the end of the
partition each group of each unit it concerned gets a *tick*: the clock of the partition's
events for that unit (:meth:`~penumbra.operator.Operator.clock_of`) and the queries of it
whose input ended; the groups merge the ticks of all partitions into the batch's clock, so
time reaches groups that got no rows. Removed queries' groups, and plans no join holds any
more, get a *drop*.

Output rows: ``(qid, grp, seq, kind, data, raw, registry, slot)`` with kind ``b`` (a block:
the group's events of the read partition and their ordinals, packed in one row so the
shuffle moves a few rows per group, not one per event, built from the events parsed
here, so the stateful step never parses them again: a join plan's as columns, another
query's as its events; ``seq`` is the first ordinal), ``t`` (a tick), ``d`` (drop the state), and on the control key
``("", 0)``: ``r`` (a rejected entry: reason in data, the entry itself in raw) and ``x``
(an end-of-input mark reached). ``slot`` places the group on its shuffle partition
(:mod:`spark_jobs.placement`; 0 on the control key and when the job does not place).
"""

from __future__ import annotations

import gc
import json
import math
import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import redis

from contract.connection import riding_out
from contract.entries import BLOCK_FIELD, CONTROL_FIELD, COUNT_FIELD, EVENT_FIELD, encode, read_end_mark
from contract.keys import Keys
from contract.registry import ERROR_CHARS, Registry
from penumbra.engine import build_operator
from penumbra.events import Event, EventColumns, Streams, collector_paused, events_from_bytes, parse_streams
from penumbra.plans import Member, Plan, plan_key
from penumbra.keygroups import Routing
from penumbra.operator import Clock, Operator, merge_clocks
from penumbra.query import parse

from .placement import slot

__all__ = ["CONTROL", "ROUTED", "CompiledQuery", "Router", "Unit", "compiled", "failure", "pack_columns", "pack_events",
           "settle_heap", "unpack_columns", "unpack_events"]

ROUTED = "qid string, grp int, seq long, kind string, data binary, raw binary, registry long, slot int"
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


@dataclass
class Unit:
    """What the job keeps state for, under its ``id``: one query (its id), or the running
    joins of one :func:`~penumbra.plans.plan_key` as one :class:`~penumbra.plans.Plan`
    (the plan's key: its members come and go, its state stays)."""

    id: str
    members: list[CompiledQuery]
    plan: Plan | None = None

    @property
    def lead(self) -> CompiledQuery:
        """The member whose operator routes and clocks the unit (members agree on both)."""
        return self.members[0]


class _Read:
    """The partition's events of one stream: their rows of the partition's columns."""

    def __init__(self, columns: EventColumns, rows: np.ndarray):
        self.rows = rows
        self.columns = columns.take(rows)

    def __len__(self) -> int:
        return len(self.rows)


def failure(error: BaseException) -> str:
    """A run-time error as a quarantined query keeps it."""
    return f"{type(error).__name__}: {error}"[:ERROR_CHARS]


class _Compiled:
    """One registry version, compiled: its queries by id, the units the job runs them in
    (by id and by stream they read), and the queries that could not be compiled
    (``broken``: id -> error), which the job quarantines."""

    def __init__(self, registry: dict, groups: int):
        self.version = registry["version"]
        self.groups = groups
        self.streams = parse_streams(registry["streams"])
        self.queries: dict[str, CompiledQuery] = {}
        self.entries: dict[str, dict] = registry["queries"]
        self.broken: dict[str, str] = {}
        self.units: dict[str, Unit] = {}
        self.unit_of: dict[str, str] = {}
        self.readers: dict[str, list[Unit]] = {}
        self.clock_keys: dict[str, Any] = {}
        plans: dict[str, list[CompiledQuery]] = {}
        held: set[str] = set()      # plan keys of every registered join, running or not
        for query_id, entry in registry["queries"].items():
            try:
                compiled_query = _compile(entry, registry["streams"], groups)
            except Exception as error:  # noqa: BLE001 - one query's error must not stop the others
                if not entry.get("failed"):
                    self.broken[query_id] = failure(error)
                continue
            if compiled_query.query.kind == "join":
                held.add(plan_key(compiled_query.clocker))
            if entry.get("failed"):
                continue  # quarantined: skipped until it is changed or removed
            self.queries[query_id] = compiled_query
            if entry.get("paused"):
                continue
            if compiled_query.query.kind == "join":
                plans.setdefault(plan_key(compiled_query.clocker), []).append(compiled_query)
            else:
                self._add(Unit(query_id, [compiled_query]), query_id)
        for key, members in plans.items():
            plan = Plan([Member(m.entry["id"], m.clocker, m.entry.get("threshold")) for m in members])
            # a join's clock is what its streams' events say (their largest max time as its
            # sides admit them): plans over the same streams with the same parameters share it
            self._add(Unit(key, members, plan), ("join", repr(sorted((side.stream, repr(side.params))
                                                                     for side in members[0].clocker.sides))))
        # the state to drop: removed queries' (kept by query before plans), and plans no join holds now
        self.deleted = list(registry.get("deleted", {}))
        for query_id, tomb in registry.get("deleted", {}).items():
            try:
                kind_key = plan_key(_compile(tomb, registry["streams"], groups).clocker) if "text" in tomb else None
            except Exception:  # noqa: BLE001 - a tomb that does not compile held no plan
                kind_key = None
            if kind_key is not None and kind_key not in held and kind_key not in self.deleted:
                self.deleted.append(kind_key)

    def _add(self, unit: Unit, clock_key: Any) -> None:
        self.units[unit.id] = unit
        self.clock_keys[unit.id] = clock_key
        for member in unit.members:
            self.unit_of[member.entry["id"]] = unit.id
        for stream in unit.lead.routing.roles:
            self.readers.setdefault(stream, []).append(unit)


def _compile(entry: dict, streams: dict, groups: int) -> CompiledQuery:
    query = parse(entry["text"])
    registered = parse_streams(entry.get("streams", streams))     # the streams as the query was registered
    clocker = build_operator(query, registered)
    return CompiledQuery(entry, query, registered, clocker, Routing(clocker.partition_keys(), groups))


_cache: OrderedDict[tuple[str, str, int, int], _Compiled] = OrderedDict()
_tasks = 0
#: tasks of an executor process between two reviews of what it froze
REVIEW_TASKS = 1024


def settle_heap() -> None:
    """At each task of an executor process: what is alive as it starts (the modules of
    pyspark, pandas, pyarrow, numpy and Penumbra, some 100,000 objects, and what the tasks
    before kept: compiled registries, connections) leaves the cyclic collector's sight
    (``gc.freeze``). PySpark's daemon runs a full collection after every task of a reused
    worker, and before the task starts, so what is alive then is what lasts; each
    collection would otherwise walk all of it again (some 8 ms a task in a reader that
    compiled its registry after its first task, half its CPU at 1,000 events/s). Frozen
    objects are still freed when their last reference goes; only a cycle among them would
    stay, so every ``REVIEW_TASKS`` tasks they are unfrozen and collected once."""
    global _tasks
    if _tasks % REVIEW_TASKS == 0:
        gc.unfreeze()
        gc.collect()
    _tasks += 1
    gc.freeze()


def compiled(url: str, prefix: str, version: int, groups: int) -> _Compiled:
    """The registry at ``version``, compiled once per executor process."""
    key = (url, prefix, version, groups)
    if key not in _cache:
        client = riding_out(url)
        try:
            _cache[key] = _Compiled(Registry(client, Keys(prefix)).at(version), groups)
        finally:
            client.close()
        while len(_cache) > 8:
            _cache.popitem(last=False)
    _cache.move_to_end(key)
    return _cache[key]


def _quarantine(rows: list, query_id: str, entry: dict | None, error: str, version: int) -> None:
    data = encode({"query": query_id, "error": error, "version": entry.get("version") if entry else None})
    rows.append((*CONTROL, -1, "f", data, None, version, 0))


def _reject(rows: list, seq: int, entry: str, reason: str, raw: bytes, version: int) -> None:
    """A rejected entry's row; an event of a block (``<id>/<place>``) is named by its entry
    and its place in it (the dead letter's ``index``)."""
    entry_id, _, place = entry.partition("/")
    data = json.dumps({"entry": entry_id, "reason": reason, **({"index": int(place)} if place else {})}).encode()
    rows.append((*CONTROL, seq, "r", data, raw, version, 0))


class Router:
    """Routes the entries of one read partition, in order (:meth:`route`), then gives the
    ticks and drops that close the partition (:meth:`close`). With ``partitions`` (the
    job's shuffle partitions) each group's rows carry the slot that places it; with 0,
    slot 0."""

    def __init__(self, url: str, prefix: str, groups: int, partitions: int = 0, first: int = 0):
        self.url, self.prefix, self.groups, self.partitions = url, prefix, groups, partitions
        self.first = first          # the ordinal of the partition's first entry
        self.clocks: dict[str, Clock] = {}
        self.ended: set[str] = set()
        self.registry: _Compiled | None = None

    def route(self, version: int, entries: Iterable[tuple[int, str, str, bytes]]) -> list[tuple]:
        """Rows for ``(seq, entry id, field, data)`` entries read with registry ``version``."""
        registry = self.registry = compiled(self.url, self.prefix, version, self.groups)
        # the parsed events are gone, freed as they go out of use, before the collector runs again
        with collector_paused():
            return self._route(registry, version, entries)

    def _route(self, registry: _Compiled, version: int, entries) -> list[tuple]:
        rows: list[tuple] = []
        broken = dict(registry.broken)
        entries = list(entries)
        events_in = [entry for entry in entries if entry[2] == EVENT_FIELD]
        # parsed straight into columns: the common event never becomes an object here
        columns, kept, errors = EventColumns.parse([data for _, _, _, data in events_in], registry.streams)
        if errors or len(events_in) < len(entries):
            refused = dict(errors)
            at = 0
            for seq, entry, field, data in entries:
                if field == EVENT_FIELD:
                    if at in refused:
                        _reject(rows, seq, entry, str(refused[at]), data, version)
                    at += 1
                elif field == CONTROL_FIELD:
                    self.ended.update(_end_mark(data, registry))
                    rows.append((*CONTROL, seq, "x", json.dumps({"entry": entry}).encode(), None, version, 0))
                elif field == BLOCK_FIELD:
                    _reject(rows, seq, entry, f"a block entry ({BLOCK_FIELD!r}) needs its count of events "
                                              f"({COUNT_FIELD!r}, a positive integer) as its second field, "
                                              f"and one line an event", data, version)
                else:
                    _reject(rows, seq, entry, f"unknown entry field {field!r} (expected {EVENT_FIELD!r}, an event)",
                            data, version)
        kept_list = kept.tolist()
        seqs = np.asarray([events_in[i][0] for i in kept_list], dtype=np.int64)
        # the partition's valid events by stream (case folded, in order of first appearance), as columns
        by_stream = {stream: _Read(columns, columns.rows_of(stream))
                     for stream in dict.fromkeys(name.casefold() for name in columns.coded[0])}
        # each unit gets the events some running query of it is concerned with (their one-source
        # conditions decided for the whole block at once), so a selective query costs what it keeps
        blocks: dict[tuple[str, int], list[np.ndarray]] = {}
        for stream, read in by_stream.items():
            # units keyed alike send an event to the same groups: found once per stream
            groups_of: dict[tuple, dict[int, np.ndarray]] = {}
            for unit in registry.readers.get(stream, ()):
                concerned = np.zeros(len(read), dtype=bool)
                for query in unit.members:
                    if query.entry["id"] not in broken:
                        try:
                            concerned |= query.clocker.concerned(read.columns)
                        except Exception as error:  # noqa: BLE001 - quarantined, the others go on
                            broken[query.entry["id"]] = failure(error)
                routing = unit.lead.routing
                alike = (tuple(sorted(routing.roles.items())), routing.count)
                try:
                    shares = groups_of.get(alike)
                    if shares is None:
                        shares = groups_of[alike] = routing.assign(stream, read.columns.attrs.tolist())
                    every = bool(concerned.all())
                    for group, positions in shares.items():
                        taken = positions if every else positions[concerned[positions]]
                        if len(taken):
                            blocks.setdefault((unit.id, group), []).append(read.rows[taken])
                except Exception as error:  # noqa: BLE001 - quarantined, the others go on
                    for query in unit.members:
                        broken.setdefault(query.entry["id"], failure(error))
        # the clock of every unit from all the events of its streams; one computation
        # serves every unit with the same streams and parameters (registry.clock_keys)
        clocks: dict[Any, Clock] = {}
        priors: dict[Any, np.ndarray] = {}
        earlier: dict[str, float] = {}      # a unit's watermark from the partition's chunks before this one
        for unit_id, unit in registry.units.items():
            if all(query.entry["id"] in broken for query in unit.members):
                continue
            read = [by_stream[s] for s in unit.lead.routing.roles if s in by_stream]
            if not read:
                continue
            key = registry.clock_keys[unit_id]
            try:
                if key not in clocks:
                    # each operator reads its streams of the partition's columns itself; a join
                    # gives each event the clock of the events before it, all keys (the clocks
                    # of the partitions before this one join it in the stateful step)
                    if unit.plan is not None:
                        priors[key], clocks[key] = unit.lead.clocker.time_of(columns)
                    else:
                        clocks[key] = unit.lead.clocker.clock_of(columns)
            except Exception as error:  # noqa: BLE001 - quarantined, the others go on
                for query in unit.members:
                    broken.setdefault(query.entry["id"], failure(error))
                continue
            earlier[unit_id] = self.clocks.get(unit_id, {}).get("watermark", -math.inf)
            self.clocks[unit_id] = merge_clocks(self.clocks.get(unit_id, {}), clocks[key])
        for query_id, error in broken.items():
            _quarantine(rows, query_id, registry.entries.get(query_id), error, version)
            unit_id = registry.unit_of.get(query_id)
            if unit_id is not None and all(q.entry["id"] in broken for q in registry.units[unit_id].members):
                self.clocks.pop(unit_id, None)
        for (unit_id, group), parts in blocks.items():
            unit = registry.units[unit_id]
            if all(q.entry["id"] in broken for q in unit.members):
                continue
            # in arrival order, never parsed again: a join plan takes its events as columns,
            # each with its prior clock; other queries take the events
            block = np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0]
            block_seqs = seqs[block].tolist()
            if unit.plan is not None:
                prior = np.maximum(priors[registry.clock_keys[unit_id]][block], earlier[unit_id])
                data = pack_columns(block_seqs, columns.take(block), prior, self.first)
            else:
                data = pack_events(block_seqs, columns.take(block))
            rows.append((unit_id, group, block_seqs[0], "b", data, None, version,
                         _slot(unit_id, group, self.partitions)))
        return rows

    def close(self, version: int) -> list[tuple]:
        """Every group of each query the partition's events concerned gets a tick (their
        clock, and whether the query's input ended); every group of a removed query a drop."""
        registry = self.registry or compiled(self.url, self.prefix, version, self.groups)
        return _ticks(registry, self.clocks, self.ended, self.partitions, self.first)


def pack_events(seqs: list[int], columns: EventColumns) -> bytes:
    """A group's events of one read partition as one value, for a query that reads events (a
    pattern or a lossy query): their ordinals and the events
    (:meth:`~penumbra.events.columns.EventColumns.events_to_bytes`)."""
    return pickle.dumps((seqs, columns.events_to_bytes()), protocol=pickle.HIGHEST_PROTOCOL)


def pack_columns(seqs: list[int], columns: EventColumns, prior: np.ndarray | None = None, first: int = 0) -> bytes:
    """A group's events of one read partition as one value: their ordinals, columns
    (:class:`~penumbra.events.columns.EventColumns`), each one's clock of the partition's
    events before it (:meth:`~penumbra.joins.JoinOperator.clocks_before`; none: -inf) and
    the ordinal of the partition's first entry."""
    prior = np.full(len(seqs), -math.inf) if prior is None else np.asarray(prior, dtype=np.float64)
    return pickle.dumps((seqs, columns.to_bytes(), prior.tobytes(), first), protocol=pickle.HIGHEST_PROTOCOL)


def unpack_columns(blocks, ticks: Sequence[dict] = ()) -> tuple[EventColumns, np.ndarray]:
    """The columns of blocks packed by :func:`pack_columns`, in the order of their
    ordinals, and each event's prior clock over the whole micro-batch: its partition's
    share, merged with the watermark of the ``ticks`` of the partitions before it (a
    tick's ``first``, the ordinal its partition starts at, below the event's partition's)."""
    seqs: list[int] = []
    parts, priors = [], []
    for block in blocks:
        more_seqs, data, prior, first = pickle.loads(block)
        seqs += more_seqs
        parts.append(EventColumns.from_bytes(data))
        earlier = max([tick["clock"].get("watermark", -math.inf) for tick in ticks if tick.get("first", first) < first],
                      default=-math.inf)
        priors.append(np.maximum(np.frombuffer(prior, dtype=np.float64), earlier))
    columns = EventColumns.concat(parts)
    prior = np.concatenate(priors) if priors else np.empty(0)
    order = _arrival_order(seqs)
    return (columns.take(order), prior[order]) if order is not None else (columns, prior)


def unpack_events(blocks, streams: Streams) -> list[Event]:
    """The events of blocks packed by :func:`pack_events`, in the order of their ordinals;
    ``streams``: the registry's, which the router parsed them with."""
    seqs: list[int] = []
    events: list[Event] = []
    for block in blocks:
        more_seqs, data = pickle.loads(block)
        seqs += more_seqs
        events += events_from_bytes(data, streams)
    order = _arrival_order(seqs)
    return [events[i] for i in order.tolist()] if order is not None else events


def _arrival_order(seqs: list[int]) -> np.ndarray | None:
    """The order that puts blocks' events given by their ordinals in arrival order (None:
    they are in it already)."""
    ordinals = np.asarray(seqs, dtype=np.int64)
    return np.argsort(ordinals, kind="stable") if (ordinals[1:] < ordinals[:-1]).any() else None


def _slot(query_id: str, group: int, partitions: int) -> int:
    return slot(query_id, group, partitions) if partitions > 0 else 0


def _ticks(registry: _Compiled, clocks: dict[str, Clock], ended: set[str], partitions: int,
           first: int = 0) -> list[tuple]:
    rows = []
    ended_units: dict[str, list[str]] = {}
    for query_id in sorted(ended):
        if query_id in registry.unit_of:
            ended_units.setdefault(registry.unit_of[query_id], []).append(query_id)
    for unit_id in sorted(set(clocks) | set(ended_units)):
        unit = registry.units.get(unit_id)
        if unit is None:
            continue
        data = json.dumps({"clock": clocks.get(unit_id, {}), "end": ended_units.get(unit_id, []),
                           "first": first}).encode()
        rows += [(unit_id, group, -1, "t", data, None, registry.version, _slot(unit_id, group, partitions))
                 for group in range(unit.lead.routing.count)]
    for unit_id in registry.deleted:
        # a removed query (or plan) had one group or the job's count of them: reach them all
        rows += [(unit_id, group, -1, "d", b"", None, registry.version, _slot(unit_id, group, partitions))
                 for group in range(registry.groups)]
    return rows


def _end_mark(data: bytes, registry: _Compiled) -> list[str]:
    return [q for q in read_end_mark(data) if q in registry.unit_of]

