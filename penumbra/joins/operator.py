"""The probabilistic timing join operator (PTJoin; the interval paper's five strategies).

Pairs ``a`` from stream A and ``b`` from stream B are a match when
``P(|X_a - X_b| <= d) >= delta``. Every strategy returns exactly the pairs a brute-force
join of all non-late events would, with their exact probabilities; they differ in how
much work it takes (:mod:`.strategies`, and :mod:`.lookup` for ``lazy_lookup``). What
the operator shows of its work is in :mod:`.inspection`.

Time is the data's: the watermark is the largest max time seen. An event whose max time
plus its stream's max delay D is below the watermark when it arrives is late: not joined,
returned with the reason. Buffers keep an event while some future, non-late partner could
still reach the threshold floor (Theorem 4 for template streams; the zero-probability
bound otherwise), so moving the threshold anywhere down to the floor loses no match.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, StreamParams, Streams, parse_streams
from ..operator import BlockResult, Late, Match, Operator, check_threshold
from ..query import JoinQuery
from ..query.ast import evaluate
from ..query.block import block_filter
from ..timestamps import Histogram
from .inspection import (
    BUFFERED_SAMPLES, NEAR_MISS_BIN, NEAR_MISS_SAMPLES, PARTITION_SAMPLES, Inspection, row_event,
)
from .held import Held
from .lookup import LookupTable
from .partitions import TemplateTables
from .rows import Rows
from .strategies import Strategies

__all__ = ["JoinMatches", "JoinOperator", "STRATEGIES"]

STRATEGIES = ("simple", "ssort", "eager", "lazy", "lazy_lookup")
DEFAULT_STRATEGY = "lazy"
DEFAULT_FLOOR = 0.05
_COUNTERS = ("events", "matches", "late", "rejected", "filtered", "unkeyed", "other_group", "ignored",
             "pairs", "void", "certain", "decided_by_templates", "probed", "lookup_hits",
             "near_misses", "evicted")


class JoinMatches(Sequence[Match]):
    """The matches of one block, kept as index arrays into the buffers' id arrays;
    ids are gathered and :class:`Match` objects made only when asked for.

    A keyed join's match gets its key (:attr:`Match.key`, by side A's attribute names)
    from the block's arrivals: every match of a block pairs at least one event that
    arrived in it, and both events of a pair share the key."""

    def __init__(self, names: tuple[str, str], parts: list[tuple[Rows, np.ndarray, Rows, np.ndarray, np.ndarray]],
                 key_names: tuple[str, ...] = (), arrivals: dict[tuple, tuple[list, list, list]] | None = None,
                 partition_of=None, sources: tuple[tuple[str, list[str]], ...] = (),
                 near: list[tuple[Rows, np.ndarray, Rows, np.ndarray, np.ndarray]] | None = None):
        self.names = names
        self.near = near or []       # the block's near misses, as parts: what a shared plan splits
        self._sources = sources      # per side: its stream and template names (for the records)
        self._partition_of = partition_of   # (A lo, A hi, A template, B hi) -> each pair's probing range
        self._parts = parts          # (A's rows, A's indices, B's rows, B's indices, probabilities)
        self._length = sum(len(part[4]) for part in parts)
        self._key_names = key_names
        self._arrivals = arrivals if key_names else None

    def __len__(self) -> int:
        return self._length

    @cached_property
    def a_ids(self) -> np.ndarray:
        return self._gather(0, "ids")

    @cached_property
    def b_ids(self) -> np.ndarray:
        return self._gather(2, "ids")

    @cached_property
    def times(self) -> list[dict[str, tuple[float, float]]]:
        """Each match's :attr:`Match.times`: both events' supports (first edge, max time)."""
        a, b = self.names
        bounds = [self._gather(k, side).tolist() for k in (0, 2) for side in ("lo", "hi")]
        return [{a: (a_lo, a_hi), b: (b_lo, b_hi)} for a_lo, a_hi, b_lo, b_hi in zip(*bounds)]

    @cached_property
    def probs(self) -> np.ndarray:
        return np.concatenate([part[4] for part in self._parts]) if self._parts else np.empty(0)

    @cached_property
    def _arrived(self) -> tuple[dict, dict]:
        """Per side, the id of each event that arrived in the block -> its key's values."""
        found: tuple[dict, dict] = ({}, {})
        for key, (new_a, new_b, _) in (self._arrivals or {}).items():
            values = tuple(value for _, value in key)
            for side, new in zip(found, (new_a, new_b)):
                for item in new:
                    side[item[2]] = values
        return found

    @cached_property
    def keys(self) -> list[dict[str, Any] | None]:
        """Each match's :attr:`Match.key`, in order."""
        if not self._key_names:
            return [None] * len(self)
        arrived_a, arrived_b = self._arrived
        names = self._key_names
        return [dict(zip(names, arrived_a[a] if a in arrived_a else arrived_b[b]))
                for a, b in zip(self.a_ids.tolist(), self.b_ids.tolist())]

    @cached_property
    def partitions(self) -> list[str | None]:
        """Each match's :attr:`Match.partition`."""
        if self._partition_of is None or not len(self):
            return [None] * len(self)
        return self._partition_of(self._gather(0, "lo"), self._gather(0, "hi"), self._gather(0, "template"),
                                  self._gather(2, "hi"))

    @cached_property
    def records(self) -> list[dict[str, dict] | None]:
        """Each match's :attr:`Match.records`: both events in the input's shape."""
        if not self._sources:
            return [None] * len(self)
        (a, b), ((a_stream, a_names), (b_stream, b_names)) = self.names, self._sources
        out: list[dict[str, dict] | None] = []
        for rows_a, ia, rows_b, ib, _ in self._parts:
            # an event is in many matches: each made once (the records are shared, never changed)
            out += [{a: x, b: y} for x, y in zip(_events_of(rows_a, ia, a_stream, a_names),
                                                 _events_of(rows_b, ib, b_stream, b_names))]
        return out

    def select(self, keep: np.ndarray, partition_of=None) -> JoinMatches:
        """The matches where ``keep`` (one flag per match, in order) holds, in order; their
        probing ranges by ``partition_of`` when given (another threshold's tables)."""
        parts, start = [], 0
        for rows_a, ia, rows_b, ib, probs in self._parts:
            mine = keep[start:start + len(probs)]
            start += len(probs)
            if mine.any():
                parts.append((rows_a, ia[mine], rows_b, ib[mine], probs[mine]))
        return JoinMatches(self.names, parts, self._key_names, self._arrivals, partition_of or self._partition_of,
                           self._sources)

    def _gather(self, k: int, column: str) -> np.ndarray:
        if not self._parts:
            return np.empty(0, dtype=object if column == "ids" else float)
        return np.concatenate([getattr(part[k], column)[part[k + 1]] for part in self._parts])

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        return Match({self.names[0]: self.a_ids[k], self.names[1]: self.b_ids[k]}, float(self.probs[k]),
                     key=self.keys[k], times=self.times[k], partition=self.partitions[k], records=self.records[k])

    def __iter__(self) -> Iterator[Match]:
        a, b = self.names
        for a_id, b_id, prob, key, times, partition, records in zip(
                self.a_ids.tolist(), self.b_ids.tolist(), self.probs.tolist(), self.keys, self.times, self.partitions,
                self.records):
            yield Match({a: a_id, b: b_id}, prob, key=key, times=times, partition=partition, records=records)


def _events_of(rows: Rows, index: np.ndarray, stream: str, template_names: list[str]) -> list[dict]:
    """``row_event`` of each row of ``index``, made once per distinct row."""
    distinct, back = np.unique(index, return_inverse=True)
    made = [row_event(rows, i, stream, template_names) for i in distinct.tolist()]
    return [made[k] for k in back.tolist()]


@dataclass
class _Side:
    """One source of the join: its stream, parameters, templates, filters and key."""

    var: str
    stream: str
    params: StreamParams
    filters: tuple = ()
    key: tuple[str, ...] = ()
    template_names: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.template_names = list(self.params.templates)
        self.template_index = {name: k for k, name in enumerate(self.template_names)}
        self.templates = [self.params.templates[name] for name in self.template_names]


class JoinOperator(Strategies, LookupTable, Inspection, Operator):
    """``P(|X_A - X_B| <= d) >= delta`` over two streams; see the module docstring."""

    def __init__(self, query: JoinQuery, streams: Streams, *, floor: float = DEFAULT_FLOOR):
        self.query = query
        self.streams = streams
        self.d = query.window
        self.strategy = query.strategy or DEFAULT_STRATEGY
        if self.strategy not in STRATEGIES:
            raise ValidationError("strategy", f"unknown strategy {self.strategy!r}")
        keys_a = tuple(k for k, _ in query.keys)
        keys_b = tuple(k for _, k in query.keys)
        self.sides = (
            _Side(query.left.var, query.left.stream.casefold(), streams.get_or_default(query.left.stream),
                  query.filters.get(query.left.var, ()), keys_a),
            _Side(query.right.var, query.right.stream.casefold(), streams.get_or_default(query.right.stream),
                  query.filters.get(query.right.var, ()), keys_b))
        self.floor = check_threshold(floor, "floor")
        self.threshold = check_threshold(query.threshold)
        if self.threshold < self.floor:
            self.floor = self.threshold
        self.watermark = -math.inf
        self.held = Held()           # the stream buffers of every key (held.py)
        self.lookup = (np.empty(0, dtype=np.int64), np.empty(0))
        self.shape_ids: tuple[dict[float, int], dict[float, int]] = ({}, {})
        self.totals = dict.fromkeys(_COUNTERS, 0)
        self.self_join = self.sides[0].stream == self.sides[1].stream
        self._build_tables()

    # --- configuration -----------------------------------------------------------------

    @property
    def names(self) -> tuple[str, str]:
        return self.sides[0].var, self.sides[1].var

    def _pi(self, side: _Side) -> float | None:
        return side.params.longest

    def _build_tables(self) -> None:
        """Theorem 2 tables at the threshold and Theorem 4 offsets at the floor (template
        streams only, and only where Lemma 2 holds: ``d >= max(pi_A, pi_B)``)."""
        a, b = self.sides
        pis = [self._pi(a), self._pi(b)]
        self.templates_apply = bool(a.templates and b.templates and None not in pis and self.d >= max(pis))
        self._threshold_tables()
        self.floor_tables = TemplateTables.build(a.templates, b.templates, self.floor) \
            if self.templates_apply else None
        # Theorem 4, both ways: the offset for evicting B by future A events, and A by future B.
        self.t_min = (self.floor_tables.t_min(), TemplateTables.build(b.templates, a.templates, self.floor).t_min()) \
            if self.templates_apply and a.params.template_only and b.params.template_only else None

    def _threshold_tables(self) -> None:
        """Theorem 2 tables at the current threshold, for A events (``tables``) and, for
        B events' probing ranges, with the roles swapped (``tables_ba``)."""
        a, b = self.sides
        self.tables = TemplateTables.build(a.templates, b.templates, self.threshold) \
            if self.templates_apply else None
        self.tables_ba = TemplateTables.build(b.templates, a.templates, self.threshold) \
            if self.templates_apply else None

    def checked_threshold(self, threshold: float) -> float:
        """``threshold`` if this join can move to it, else a clear error."""
        threshold = check_threshold(threshold)
        if threshold < self.floor:
            raise ValidationError("threshold", f"must be >= the buffer floor {self.floor!r}: events "
                                  f"that could only match below it are not kept")
        return threshold

    def set_threshold(self, threshold: float) -> None:
        self.threshold = self.checked_threshold(threshold)
        self._threshold_tables()

    # --- admission ---------------------------------------------------------------------

    def _admit(self, side: _Side, event: Event) -> tuple[Histogram, int] | str:
        """The event's histogram and template index, or why it cannot be joined."""
        if event.template is not None:
            if event.template not in side.template_index:
                return f"ts.template: unknown template {event.template!r} for stream {side.params.name!r}"
            ts = event.ts
            return ts if type(ts) is Histogram else event.histogram, side.template_index[event.template]
        if side.params.template_only:
            return (f"ts: stream {side.params.name!r} declares templates and no pi, so a join reads "
                    f"only template timestamps from it")
        try:
            histogram = event.histogram
        except ValidationError as error:
            return str(error)
        problem = side.params.too_wide(histogram.length)
        if problem is not None:
            return f"ts: {problem}"
        return histogram, -1

    def _key(self, side: _Side, event: Event) -> tuple | None:
        """The values of ``event``'s key attributes on ``side`` (``()`` for a join without
        equalities), or None when one is missing."""
        if len(side.key) == 1:
            value = event.attrs.get(side.key[0])
            return None if value is None else (value,)
        values = tuple([event.attrs.get(name) for name in side.key])
        if any(v is None for v in values):
            return None
        return values

    def _reading(self, stream: str, known: dict[str, list[int]]) -> list[int]:
        """The sides (0 for A, 1 for B) that read events of ``stream`` as spelled in them;
        ``known`` keeps the answer for the rest of a block."""
        sides = known.get(stream)
        if sides is None:
            folded = stream.casefold()
            sides = known[stream] = [k for k, side in enumerate(self.sides) if side.stream == folded]
        return sides

    # --- feeding -------------------------------------------------------------------------

    def feed(self, events: Sequence[Event]) -> BlockResult:
        before = dict(self.totals)
        late: list[Late] = []
        # per key: the new rows of A and of B, and (side, row) in arrival order
        arrivals: dict[tuple, tuple[list, list, list]] = {}
        # per block: the sides each stream name feeds, and the keys of other key groups
        reading: dict[str, list[int]] = {}
        foreign: set[tuple] = set()
        for event in events:
            self.totals["events"] += 1
            sides = self._reading(event.stream, reading)
            if not sides:
                self.totals["ignored"] += 1
                continue
            for k in sides:
                side = self.sides[k]
                if side.filters and not all(evaluate(f, {side.var: event.attrs}) is True for f in side.filters):
                    # not this side's event (never late or rejected for it); time still moves with it
                    self.totals["filtered"] += 1
                    admitted = self._admit(side, event)
                    if not isinstance(admitted, str) and admitted[0].hi > self.watermark:
                        self.watermark = admitted[0].hi
                    continue
                admitted = self._admit(side, event)
                if isinstance(admitted, str):
                    self.totals["rejected"] += 1
                    late.append(Late(event, admitted))
                    continue
                histogram, template = admitted
                hi = histogram.hi
                if hi + side.params.max_delay < self.watermark:
                    self.totals["late"] += 1
                    late.append(Late(event, f"late: max time {hi!r} + max delay "
                                     f"{side.params.max_delay!r} is before the watermark {self.watermark!r}"))
                    continue
                if hi > self.watermark:
                    self.watermark = hi
                values = self._key(side, event)
                if values is None:
                    self.totals["unkeyed"] += 1
                    continue
                # 1 and 1.0 are the same key; True is not 1.
                key = tuple([(type(v) is bool, v) for v in values])
                arrived = arrivals.get(key)
                if arrived is None:
                    # whether the key group owns a key is decided once per key and block
                    if key in foreign or self.key_group is not None and not self.key_group.owns(values):
                        foreign.add(key)
                        self.totals["other_group"] += 1
                        continue
                    arrived = arrivals[key] = ([], [], [])
                new_a, new_b, sequence = arrived
                mine = new_a if k == 0 else new_b
                sequence.append((k, len(mine)))
                mine.append((histogram, template, event.id, dict(event.attrs)))

        matches: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        near: list[dict] = []
        self._near_bins = np.zeros(round(1 / NEAR_MISS_BIN), dtype=np.int64)
        self._near_parts: list[tuple[Rows, np.ndarray, Rows, np.ndarray, np.ndarray]] = []
        partitions: list[dict] = []
        buffered: list[list[dict]] = [[], []]
        if self.strategy in ("lazy", "lazy_lookup"):
            blocks = [self._join_keys(arrivals, matches, near)] if arrivals else []
        else:
            blocks = self._join_per_key(arrivals, matches, near) if arrivals else []
        for rows in blocks:
            if len(partitions) < PARTITION_SAMPLES:
                partitions.extend(self._partition_sample(rows, PARTITION_SAMPLES - len(partitions)))
            for k in (0, 1):
                if len(buffered[k]) < BUFFERED_SAMPLES:
                    buffered[k].extend(self._as_events(k, rows[k], BUFFERED_SAMPLES - len(buffered[k])))
        evicted = self.evict(self.watermark)
        result = JoinMatches(self.names, matches, self.sides[0].key, arrivals, self._pair_partitions,
                             tuple((side.stream, side.template_names) for side in self.sides), self._near_parts)
        self.totals["matches"] += len(result)
        observations = {
            "counters": {k: self.totals[k] - before[k] for k in _COUNTERS},
            "watermark": self.watermark,
            "buffers": self.buffer_lengths(),
            "buffer_bounds": self.buffer_bounds(),
            "evicted": evicted,
            "near_misses": near[:NEAR_MISS_SAMPLES],
            "near_miss_histogram": {f"{k * NEAR_MISS_BIN:.2f}": int(count)
                                    for k, count in enumerate(self._near_bins) if count},
            "partitions": partitions,
            "newly_buffered": buffered[0] + buffered[1],
            "threshold": self.threshold,
            "floor": self.floor,
        }
        return BlockResult(result, late, observations)

    # --- eviction ------------------------------------------------------------------------

    def buffer_bounds(self) -> list[float]:
        """For each side, the max time below which a buffered event is obsolete: no future
        non-late event of the other side can reach the threshold floor with it."""
        bounds = []
        for k in (0, 1):
            other = self.sides[1 - k]
            horizon = self.watermark - other.params.max_delay - self.d
            if self.t_min is not None:
                # Theorem 4 (t_min[0] evicts B by future A events, t_min[1] evicts A by future B).
                bounds.append(horizon + self.t_min[1 - k])
            elif self._pi(other) is not None:
                bounds.append(horizon - self._pi(other))
            else:
                bounds.append(-math.inf)
        return bounds

    def evict(self, watermark: float) -> int:
        if watermark > self.watermark:
            self.watermark = watermark
        evicted = self.held.evict(self.buffer_bounds())
        self.totals["evicted"] += evicted
        return evicted

    # --- key groups ---------------------------------------------------------------------

    def partition_keys(self) -> dict[str, list[tuple[str, ...]]]:
        roles: dict[str, list[tuple[str, ...]]] = {}
        for side in self.sides:
            roles.setdefault(side.stream, []).append(side.key)
        return roles

    def concerned(self, events: Sequence[Event]) -> np.ndarray:
        """Events of a side's stream passing that side's filters (either side of a
        self-join), the filters evaluated on the whole block at once."""
        streams = np.array([e.stream.casefold() for e in events], dtype=object)
        out = np.zeros(len(events), dtype=bool)
        for side in self.sides:
            mine = np.flatnonzero(streams == side.stream)
            if not len(mine):
                continue
            if side.filters:
                mine = mine[block_filter(list(side.filters), side.var, [events[i].attrs for i in mine])]
            out[mine] = True
        return out

    def clock_of(self, events: Sequence[Event]) -> dict[str, float]:
        """The largest max time of the events either side admits (late ones lie below
        the watermark anyway, so the figure needs no state)."""
        watermark = -math.inf
        reading: dict[str, list[int]] = {}
        for event in events:
            for k in self._reading(event.stream, reading):
                admitted = self._admit(self.sides[k], event)
                if not isinstance(admitted, str) and admitted[0].hi > watermark:
                    watermark = admitted[0].hi
        return {"watermark": watermark} if watermark > -math.inf else {}

    def advance(self, clock: dict[str, float]) -> BlockResult:
        watermark = clock.get("watermark", -math.inf)
        if not watermark > self.watermark:
            return BlockResult()
        evicted = self.evict(watermark)
        return BlockResult(observations={
            "counters": {"evicted": evicted}, "watermark": self.watermark, "buffers": self.buffer_lengths(),
            "buffer_bounds": self.buffer_bounds()})

    def wake(self) -> dict[str, float]:
        """The watermark past which some buffered event falls behind its side's bound."""
        wake = math.inf
        bounds = self.buffer_bounds()
        for k in (0, 1):
            if bounds[k] == -math.inf:
                continue
            held = self.held.rows[k]
            oldest = float(held.hi.min()) if len(held) else math.inf
            # the bound moves with the watermark; a little early is harmless, late is not
            reach = oldest - (bounds[k] - self.watermark)
            wake = min(wake, reach - 1e-9 * max(1.0, abs(reach), abs(self.watermark)))
        return {"watermark": wake} if wake < math.inf else {}

    def buffer_lengths(self) -> dict[str, int]:
        return {side.var: n for side, n in zip(self.sides, self.held.lengths())}

    # --- counters ------------------------------------------------------------------------

    @property
    def counters(self) -> dict[str, int | float]:
        return {**self.totals, "watermark": self.watermark, **{f"buffer_{k}": v for k, v in self.buffer_lengths().items()}}

    # --- state -----------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        state = {
            "query": self.query, "streams": self.streams.to_json(), "floor": self.floor,
            "threshold": self.threshold, "watermark": self.watermark, "totals": self.totals,
            "lookup": self.lookup, "shape_ids": self.shape_ids, "key_group": self.key_group,
            "held": self.held.state(),
        }
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def restore(cls, data: bytes) -> JoinOperator:
        from ..timestamps import HistogramBlock

        state = pickle.loads(data)
        op = cls(state["query"], parse_streams(state["streams"]), floor=state["floor"])
        op.set_threshold(state["threshold"])
        op.watermark = state["watermark"]
        op.totals = state["totals"]
        op.key_group = state["key_group"]
        op.lookup = state["lookup"]
        op.shape_ids = state["shape_ids"]
        if "held" in state:
            op.held = Held.from_state(state["held"])
        else:   # a state written with a buffer per key (rows without attributes have six columns)
            op.held = Held.from_buffers({key: [Rows(hi, lo, HistogramBlock(edges, probs), template, ids, *attrs)
                                               for hi, lo, edges, probs, template, ids, *attrs in rows]
                                         for key, rows in state["buffers"].items()})
        return op
