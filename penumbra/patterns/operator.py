"""The pattern operator: blocks of events in, final matches and observations out.

Time is driven by the data (section 3, step 1): ``now.lower`` is the largest lower
bound seen and ``U_max`` the longest interval (the streams' declared ``pi`` when every
pattern stream declares one, else the longest seen), so by the arrival-order
constraint every unseen event starts at or after ``now.lower - U_max`` (less the
streams' max delay D). A heartbeat given through :meth:`PatternOperator.evict` moves
this safe time further. An event that starts before the safe time already used is late:
it is reported with the reason, never evaluated.

A match is emitted once, when final: for *skip till any match* as soon as it is found
(its confidence depends on its own events only); for *skip till next match* once the safe
time passes its last valid upper bound, when no event still to come can fall between two
of its points, so no NELT update can prune it and its confidence ``C_next`` is fixed.

State is partitioned by the equality shared by every component (``a.nodeId =
b.nodeId = ...``), as SASE partitions its active instance stacks.
"""

from __future__ import annotations

import itertools
import math
import zlib
from typing import Any, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, Streams
from ..events.columns import EventColumns
from ..timestamps import Interval
from ..operator import BlockResult, Late, Match, Operator, check_threshold
from ..probability import meets
from ..query.pattern import PatternQuery
from ..state import unpickle
from .any_state import AnyStateEngine, SelectivityEngine
from .confidence import chain_confidence, point_confidence
from .engine import Engine
from .model import CompiledPattern, Found, GridEvent, grid_record, to_grid
from .point import PointEngine
from .query_order import SortedEngine

__all__ = ["PatternOperator"]

#: Matches per block whose details (intervals, valid intervals) the observations show, as
#: for the samples of other operators: a host keeps no more (``keyed.combine``), and
#: building them for every match of a dense stream would cost as much as weighing it.
MATCH_DETAILS = 50

ENGINES: dict[str, type[Engine]] = {"point": PointEngine, "any_state": AnyStateEngine,
                                    "sorted": SortedEngine, "selectivity": SelectivityEngine}


class Partition:
    """The state of one partition: the method's engine and matches awaiting finality."""

    __slots__ = ("engine", "pending")

    def __init__(self, engine: Engine):
        self.engine = engine
        self.pending: list[Found] = []

    def __getstate__(self):
        return self.engine, self.pending

    def __setstate__(self, state):
        self.engine, self.pending = state


def _unversioned(fields: dict[str, Any]) -> dict[str, Any]:
    """A pattern's state from before the versioned format: its attributes, pickled and compressed."""
    return unpickle(zlib.decompress(fields["snapshot"]))


class PatternOperator(Operator):
    """Evaluates one pattern query with the method it names (``USING``)."""

    kind = "pattern"
    STATE_VERSION = 1
    STATE_FIELDS = ("query", "pattern", "unit", "declared_span", "delay", "streams", "threshold", "now_lower", "span",
                    "heartbeat", "horizon", "partitions", "queued", "counts", "key_group")
    STATE_MIGRATIONS = {0: _unversioned}

    def __init__(self, query: PatternQuery, streams: Streams | None = None):
        self.query = query
        self.pattern = CompiledPattern(query)
        self.unit = query.time_unit
        names = {c.stream.casefold() for c in query.components}
        params = [streams.get_or_default(name) if streams is not None else None for name in names]
        declared = [p.pi for p in params if p is not None and p.pi is not None]
        self.declared_span = max(declared) / self.unit if declared and len(declared) == len(names) else None
        self.delay = max([p.max_delay for p in params if p is not None] + [0.0]) / self.unit
        self.streams = names
        self.threshold = query.threshold
        self.now_lower = -math.inf
        self.span = self.declared_span or 0.0
        self.heartbeat = -math.inf
        self.horizon = -math.inf
        self.partitions: dict[Any, Partition] = {}
        self.queued: list[tuple[Match, dict | None]] = []
        self.counts = {"events": 0, "ignored": 0, "late": 0, "matches": 0,
                       "below_threshold": 0, "pruned": 0, "evicted": 0, "other_group": 0}

    # --- the Operator interface ------------------------------------------------------

    def feed(self, events: Sequence[Event], prior: np.ndarray | None = None) -> BlockResult:
        result = BlockResult()
        accepted: list[Event] = []
        read: list[Interval] = []
        streams, unit, horizon = self.streams, self.unit, self.horizon
        self.counts["events"] += len(events)
        for event in events:
            ts = event.ts
            if event.stream.casefold() not in streams:
                self.counts["ignored"] += 1
            elif not isinstance(ts, Interval):
                result.late.append(Late(event, "a pattern query reads an interval {lo, hi[, pmf]}, "
                                               "not a histogram timestamp"))
            else:
                read.append(ts)
                if ts.lo / unit < horizon:
                    result.late.append(Late(event, self._late_reason(event)))
                else:
                    accepted.append(event)
        # time moves with every interval read, late ones too (what a block says of time
        # must not depend on the state it meets: see Operator.clock_of)
        self._move_time(self._clock(read))
        on_grid: dict[int, GridEvent] = {}
        items: list[tuple[GridEvent, int]] = []
        for i, j in self.pattern.items_of(accepted):
            if i not in on_grid:
                try:
                    on_grid[i] = to_grid(accepted[i], self.unit)
                except ValidationError as error:
                    result.late.append(Late(accepted[i], f"cannot be read on the pattern's time grid: "
                                                         f"{error}"))
                    on_grid[i] = None
            if on_grid[i] is not None:
                items.append((on_grid[i], j))
        self.counts["late"] += len(result.late)
        self._route(items)
        return self._advance(result)

    def flush(self) -> BlockResult:
        self.heartbeat = math.inf
        return self._advance(BlockResult())

    def set_threshold(self, threshold: float) -> None:
        self.threshold = check_threshold(threshold, "confidence")

    def evict(self, watermark: float) -> int:
        """A heartbeat: every event still to come starts at or after ``watermark``.

        Buffered events it makes safe are evaluated; matches it makes final come out with
        the next :meth:`feed` or :meth:`flush`. Returns how many indexed events went."""
        before = self.counts["evicted"]
        self.heartbeat = max(self.heartbeat, watermark / self.unit)
        result = self._advance(BlockResult())
        self.queued.extend(itertools.zip_longest(result.matches, result.observations["matches"]))
        return self.counts["evicted"] - before

    def partition_keys(self) -> dict[str, list[tuple[str, ...]]]:
        partition = self.query.partition
        roles: dict[str, list[tuple[str, ...]]] = {}
        for j, component in enumerate(self.query.components):
            role = (partition[j],) if partition is not None else ()
            attrs = roles.setdefault(component.stream.casefold(), [])
            if role not in attrs:
                attrs.append(role)
        return roles

    def clock_of(self, events: Sequence[Event] | EventColumns) -> dict[str, float]:
        """``now.lower`` (the largest lower bound) and, unless the streams declare
        ``pi``, ``U_max`` (the longest interval) over the intervals of the pattern's
        streams, in grid steps (a block's columns read without making their events)."""
        if isinstance(events, EventColumns):
            rows = np.concatenate([events.rows_of(stream) for stream in self.streams])
            lo, hi = events.bounds()[:, rows]
            read = ~np.isnan(lo)
            return self._bounds_clock(lo[read].tolist(), hi[read].tolist())
        return self._clock([e.ts for e in events if isinstance(e.ts, Interval) and e.stream.casefold() in self.streams])

    def _clock(self, read: list[Interval]) -> dict[str, float]:
        """What the intervals ``read`` say of time (see :meth:`clock_of`)."""
        return self._bounds_clock([ts.lo for ts in read], [ts.hi for ts in read])

    def _bounds_clock(self, lows: list[float], highs: list[float]) -> dict[str, float]:
        if not lows:
            return {}
        clock = {"lower": max(lows) / self.unit}
        if self.declared_span is None:
            clock["span"] = max(hi - lo for lo, hi in zip(lows, highs)) / self.unit
        return clock

    def _move_time(self, clock: dict[str, float]) -> None:
        self.now_lower = max(self.now_lower, clock.get("lower", -math.inf))
        if self.declared_span is None:
            self.span = max(self.span, clock.get("span", 0.0))

    def advance(self, clock: dict[str, float]) -> BlockResult:
        self._move_time(clock)
        return self._advance(BlockResult())

    def wake(self) -> dict[str, float]:
        """The ``now.lower`` at which the safe time reaches the earliest event held or
        the earliest end of a match awaiting finality: below it, no buffered event is
        released, no run is evaluated and no match becomes final."""
        earliest = math.inf
        for partition in self.partitions.values():
            earliest = min([earliest, partition.engine.earliest_held()] + [f.vub[-1] for f in partition.pending])
        if earliest == math.inf:
            return {}
        reach = earliest + self.span + self.delay
        return {"lower": reach - 1e-9 * max(1.0, abs(reach)) - 0.5}

    def state_fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.STATE_FIELDS}

    @classmethod
    def from_state(cls, fields: dict[str, Any]) -> PatternOperator:
        operator = cls.__new__(cls)
        operator.__dict__.update(fields)
        return operator

    @property
    def counters(self) -> dict[str, int | float]:
        return dict(self.counts, keys=len(self.partitions),
                    open_runs=sum(p.engine.open_runs() for p in self.partitions.values()))

    # --- evaluation ------------------------------------------------------------------

    def _late_reason(self, event: Event) -> str:
        return (f"starts at {event.ts.lo!r}, before {self.horizon * self.unit!r}, the safe time up to "
                f"which the pattern has already been evaluated (arrival order: every event must "
                f"start at or after now.lower - U_max - D, and after the last heartbeat)")

    def _route(self, items: list[tuple[GridEvent, int]]) -> None:
        items.sort(key=lambda item: (item[0].lo, item[1]))
        by_partition: dict[Any, list[tuple[GridEvent, int]]] = {}
        if self.query.partition is None:
            if items:
                by_partition[()] = items
        else:
            for event, j in items:
                key = self.pattern.partition_of(event, j)
                if key is not None:
                    by_partition.setdefault(key, []).append((event, j))
        if self.key_group is not None:
            owned = {key: items for key, items in by_partition.items() if self.key_group.owns((key,))}
            self.counts["other_group"] += sum(map(len, by_partition.values())) - sum(map(len, owned.values()))
            by_partition = owned
        method = ENGINES[self.query.method]
        for key, items in by_partition.items():
            if key not in self.partitions:
                self.partitions[key] = Partition(method(self.pattern))
            self.partitions[key].engine.add(items)

    def _advance(self, result: BlockResult) -> BlockResult:
        self.horizon = max(self.horizon, self.now_lower - self.span - self.delay, self.heartbeat)
        details = [detail for _, detail in self.queued if detail is not None]
        result.matches.extend(match for match, _ in self.queued)
        self.queued = []
        for key in list(self.partitions):
            partition = self.partitions[key]
            engine = partition.engine
            pruned = engine.pruned
            found = engine.advance(self.horizon)
            if self.pattern.next_match:
                partition.pending.extend(found)
                found = [f for f in partition.pending if f.vub[-1] <= self.horizon]
                if found:
                    partition.pending = [f for f in partition.pending if f.vub[-1] > self.horizon]
            if found:
                self._emit(engine, found, result.matches, details)
            self.counts["pruned"] += engine.pruned - pruned
            engine.pruned = pruned
            low = min([self.horizon] + [e.lo for f in partition.pending for e in f.events])
            self.counts["evicted"] += engine.evict_index(low)
            if not partition.pending and engine.open_runs() == 0 and not any(engine.buffered()) \
                    and not any(engine.index):
                del self.partitions[key]
        result.observations = self._observe(details)
        return result

    def _emit(self, engine: Engine, found: list[Found], matches: list[Match], details: list[dict]) -> None:
        """Weigh the matches ``found`` in one partition, and keep those above the threshold
        (with the details of the first :data:`MATCH_DETAILS` of a block)."""
        pattern, unit, threshold = self.pattern, self.unit, self.threshold
        window = pattern.window
        variables = pattern.variables
        returned = [j for j, v in enumerate(variables) if v in self.query.returns]
        names = [variables[j] for j in returned]
        partition = self.query.partition
        # an event's interval and record, made once and shared by its matches (read-only
        # after: an event in many matches of a dense pattern costs its record once)
        shown: dict[int, tuple[tuple[float, float], dict[str, Any]]] = {}

        def seen(event: GridEvent) -> tuple[tuple[float, float], dict[str, Any]]:
            both = shown.get(id(event))
            if both is None:
                both = shown[id(event)] = ((event.lo * unit, event.hi * unit), grid_record(event, unit))
            return both

        kept = 0
        for match in found:
            gaps = self._excluders(engine, match) if pattern.next_match else None
            if match.points is not None:
                confidence, first, last = point_confidence(match.events, match.points, gaps)
            else:
                confidence, first, last = chain_confidence(match.events, match.vlb, match.vub, window, gaps)
            # a sum of products of probabilities may round past 1 (thirds: 1.0000000000000002)
            confidence = min(1.0, confidence)
            if not confidence > 0 or (threshold is not None and not meets(confidence, threshold)):
                self.counts["below_threshold"] += 1
                continue
            kept += 1
            events = match.events
            both = [seen(events[j]) for j in returned]
            emitted = Match(dict(zip(names, [events[j].id for j in returned])), confidence,
                            (first * unit, last * unit),
                            key={partition[0]: events[0].attrs.get(partition[0])} if partition else None,
                            times={v: interval for v, (interval, _) in zip(names, both)},
                            records={v: record for v, (_, record) in zip(names, both)})
            matches.append(emitted)
            if len(details) < MATCH_DETAILS:
                details.append(self._details(emitted, match))
        self.counts["matches"] += kept

    def _details(self, emitted: Match, match: Found) -> dict[str, Any]:
        """What the observations show of a match: its events' intervals and valid intervals."""
        unit, variables = self.unit, self.pattern.variables
        return {
            "events": dict(emitted.events), "prob": emitted.prob, "range": list(emitted.range),
            "intervals": {v: [e.lo * unit, e.hi * unit] for v, e in zip(variables, match.events)},
            "valid": {v: [lo * unit, hi * unit] for v, lo, hi in zip(variables, match.vlb, match.vub)},
        }

    def _excluders(self, engine: Engine, found: Found) -> list[list[GridEvent]]:
        """``S-bar_{m_{g+1}}`` of Algorithm 1: the events seen that could match component
        ``g + 1`` right after the match's first ``g + 1`` events (SASE checks a component's
        conditions when it is bound, so conditions on later components do not count).

        For a match weighed over its valid intervals, only the events that can fall strictly
        between ``t_g`` and ``t_{g+1}`` are kept: the others leave every point match as it is,
        and the weighing would drop them (the point-based framework weighs every one)."""
        keys = {e.key for e in found.events}
        gaps = []
        for g in range(len(found.events) - 1):
            candidates = engine.index[g + 1]
            if found.points is None:
                after, before = found.vlb[g], found.vub[g + 1]
                candidates = [e for e in candidates if e.hi > after and e.lo < before]
            candidates = [e for e in candidates if e.key not in keys]
            if self.pattern.joins_at(g + 1):
                prefix = dict(enumerate(found.events[: g + 1]))
                candidates = [e for e in candidates if self.pattern.admits(prefix, g + 1, e)]
            gaps.append(candidates)
        return gaps

    def _observe(self, details: list[dict]) -> dict[str, Any]:
        buffered = [0] * self.pattern.length
        for partition in self.partitions.values():
            for j, count in enumerate(partition.engine.buffered()):
                buffered[j] += count
        return {
            "method": self.query.method,
            "open_runs": sum(p.engine.open_runs() for p in self.partitions.values()),
            "buffered": dict(zip(self.pattern.variables, buffered)),
            "awaiting_final": sum(len(p.pending) for p in self.partitions.values()),
            "keys": len(self.partitions),
            "safe_time": self.horizon * self.unit,
            "emitted": self.counts["matches"],
            "pruned": self.counts["pruned"],
            "below_threshold": self.counts["below_threshold"],
            "matches": details,
        }
