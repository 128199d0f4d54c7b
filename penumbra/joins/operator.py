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
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, StreamParams, Streams, parse_streams
from ..events.columns import EventColumns
from ..operator import BlockResult, Late, Match, Operator, check_threshold
from ..query import JoinQuery
from ..query.block import block_filter
from ..state import StateError, unpickle
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
                 key_names: tuple[str, ...] = (), arrivals: _Arrived | None = None,
                 partition_of=None, sources: tuple[tuple[str, list[str]], ...] = (),
                 near: list[tuple[Rows, np.ndarray, Rows, np.ndarray, np.ndarray]] | None = None,
                 b_key_names: tuple[str, ...] = ()):
        self.names = names
        self._b_key_names = b_key_names
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
        return self._arrivals.values_by_id() if self._arrivals is not None else ({}, {})

    @cached_property
    def keys(self) -> list[dict[str, Any] | None]:
        """Each match's :attr:`Match.key`, in order: the key's values of the event of the
        pair that arrived in the block (A's when both did), by A's attribute names."""
        if not self._key_names:
            return [None] * len(self)
        names = self._key_names
        new = self._arrivals.new if self._arrivals is not None else (None, None)
        out: list[dict[str, Any] | None] = []
        for rows_a, ia, rows_b, ib, _ in self._parts:
            if rows_a is new[0]:            # the block's new A rows (the lazy strategies' parts)
                out += [{name: attrs[name] for name in names} for attrs in rows_a.attrs[ia].tolist()]
            elif rows_b is new[1]:          # old A, new B: B's values under A's names
                out += [dict(zip(names, (attrs[name] for name in self._b_key_names)))
                        for attrs in rows_b.attrs[ib].tolist()]
            else:                           # rows of one event at a time (the per-key strategies)
                arrived_a, arrived_b = self._arrived
                out += [dict(zip(names, arrived_a[a] if a in arrived_a else arrived_b[b]))
                        for a, b in zip(rows_a.ids[ia].tolist(), rows_b.ids[ib].tolist())]
        return out

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
                           self._sources, b_key_names=self._b_key_names)

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


def _running_before(hi: np.ndarray, moves: np.ndarray) -> tuple[np.ndarray, float]:
    """For each event, the largest ``hi`` of the moving events before it (-inf for none),
    and the largest of them all."""
    if not len(hi):
        return np.empty(0), -math.inf
    running = np.maximum.accumulate(np.where(moves, hi, -math.inf))
    return np.concatenate(([-math.inf], running[:-1])), float(running[-1])


def _events_of(rows: Rows, index: np.ndarray, stream: str, template_names: list[str]) -> list[dict]:
    """``row_event`` of each row of ``index``, made once per distinct row."""
    distinct, back = np.unique(index, return_inverse=True)
    made = [row_event(rows, i, stream, template_names) for i in distinct.tolist()]
    return [made[k] for k in back.tolist()]


def _key_values(attrs: list[Mapping[str, Any]], names: tuple[str, ...]) -> list:
    """Each event's key values: with one name the value itself, with several their tuple;
    None for an event without one of them (missing or null)."""
    if len(names) == 1:
        name = names[0]
        return [values.get(name) for values in attrs]
    found = [tuple([values.get(name) for name in names]) for values in attrs]
    return [None if None in values else values for values in found]


def _key_codes(values: list) -> tuple[np.ndarray, list[tuple | None]]:
    """Each event's code for its key values (:func:`_key_values`), and for each code in order
    of first appearance the join's key, ``((is_boolean, value), ...)`` (None: no key). Values
    the join takes as one key share a code: 1, 1.0 and -0.0/0.0 alike, but True is not 1.

    Values are coded as they are, in one dict pass; only when a boolean may hide behind an
    equal number (some key equal to 0 or 1, or a tuple) are they looked at one by one.

    >>> codes, keys = _key_codes(["n", 1, None, 1.0, True, "n"])
    >>> codes.tolist(), keys
    ([0, 1, 2, 1, 3, 0], [((False, 'n'),), ((False, 1),), None, ((True, True),)])
    """
    first: dict = {}
    codes = [first.setdefault(value, len(first)) for value in values]
    if (0 in first or 1 in first or any(type(value) is tuple for value in first)) \
            and any(_holds_boolean(value) for value in values):
        first = {}
        codes = [first.setdefault(_key(value), len(first)) for value in values]
        distinct = list(first)
    else:
        distinct = [_key(value) for value in first]
    return np.asarray(codes, dtype=np.int64), distinct


def _holds_boolean(value: Any) -> bool:
    return type(value) is bool or type(value) is tuple and any(type(item) is bool for item in value)


def _key(value: Any) -> tuple | None:
    """The join's key of an event's key values (:func:`_key_codes`)."""
    if value is None:
        return None
    return tuple([(type(item) is bool, item) for item in (value if type(value) is tuple else (value,))])


class _Arrived:
    """A block's arrived events with their keys (``keys``: each distinct key once, in order
    of first arrival): the new rows of each side grouped by key in that order (``new``),
    their key codes, and each key's arrival sequence (for the per-key strategies)."""

    def __init__(self, operator: JoinOperator, columns: EventColumns, entries: np.ndarray, order: np.ndarray,
                 rank: np.ndarray, keys: list[tuple], templates: list[np.ndarray]):
        self.keys = keys
        self._codes: np.ndarray | None = None
        arrival = order[rank[order] >= 0]                # the kept (event, side) entries, in arrival order
        self._arrival = (entries[1, arrival], rank[arrival])
        offsets = (0, len(templates[0]))
        self.new: list[Rows] = []
        self.ranks: list[np.ndarray] = []
        hi, lo, block = columns.block.hi, columns.block.lo, columns.block
        for k in (0, 1):
            mine = arrival[entries[1, arrival] == k]
            mine = mine[np.argsort(rank[mine], kind="stable")]
            events = entries[0, mine]
            self.new.append(Rows(hi[events], lo[events], block.take(events), templates[k][mine - offsets[k]],
                                 columns.ids[events], columns.attrs[events]) if len(events) else Rows.empty())
            self.ranks.append(rank[mine])

    def codes(self, held: Held) -> np.ndarray:
        """The held key code of each key (given once, then kept)."""
        if self._codes is None:
            self._codes = np.fromiter((held.code(key) for key in self.keys), dtype=np.int64, count=len(self.keys))
        return self._codes

    def new_kid(self, held: Held) -> list[np.ndarray]:
        codes = self.codes(held)
        return [codes[ranks] for ranks in self.ranks]

    def per_key(self) -> list[tuple[list[Rows], list[tuple[int, int]]]]:
        """For each key in order: its new rows of A and of B, and (side, row) in arrival order."""
        cuts = [np.searchsorted(ranks, np.arange(len(self.keys) + 1)) for ranks in self.ranks]
        out = [([self.new[k].take(slice(cuts[k][r], cuts[k][r + 1])) for k in (0, 1)], [])
               for r in range(len(self.keys))]
        seen = np.zeros((len(self.keys), 2), dtype=np.int64)
        for k, r in zip(*(part.tolist() for part in self._arrival)):
            out[r][1].append((k, int(seen[r, k])))
            seen[r, k] += 1
        return out

    def values_by_id(self) -> tuple[dict, dict]:
        """Per side, the id of each arrived event -> its key's values."""
        values = [tuple(v for _, v in key) for key in self.keys]
        return tuple({event_id: values[r] for event_id, r in zip(self.new[k].ids.tolist(), self.ranks[k].tolist())}
                     for k in (0, 1))


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


def _unversioned(fields: dict[str, Any]) -> dict[str, Any]:
    """A join's state from before the versioned format: the same fields, pickled alone."""
    saved = unpickle(fields["snapshot"])
    if "held" not in saved:
        raise StateError("join operator state with a buffer per key (from before the shared buffers of every "
                         "key): not migrated; start the query's state afresh (a new checkpoint)")
    return saved


class JoinOperator(Strategies, LookupTable, Inspection, Operator):
    """``P(|X_A - X_B| <= d) >= delta`` over two streams; see the module docstring."""

    kind = "join"
    STATE_VERSION = 1
    STATE_FIELDS = ("query", "streams", "floor", "threshold", "watermark", "totals", "lookup", "shape_ids",
                    "key_group", "held")
    STATE_MIGRATIONS = {0: _unversioned}

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
        # (inequality 9 reads the tables at 1 - delta: below 2**-53 that rounds to 1, and every
        # pair is probed exactly instead)
        self.templates_apply = bool(a.templates and b.templates and None not in pis and self.d >= max(pis)
                                    and 1.0 - self.floor < 1.0)
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

    def _reading(self, stream: str, known: dict[str, list[int]]) -> list[int]:
        """The sides (0 for A, 1 for B) that read events of ``stream`` as spelled in them;
        ``known`` keeps the answer for the rest of a block."""
        sides = known.get(stream)
        if sides is None:
            folded = stream.casefold()
            sides = known[stream] = [k for k, side in enumerate(self.sides) if side.stream == folded]
        return sides

    # --- feeding -------------------------------------------------------------------------

    def feed(self, events: Sequence[Event] | EventColumns, prior: np.ndarray | None = None) -> BlockResult:
        """One block: events (or their columns, :class:`~penumbra.events.columns.EventColumns`)
        in arrival order, each admitted, late or rejected for each side that reads its
        stream, the admitted ones joined with their key's partners.

        ``prior`` (a key group's block, :func:`~penumbra.keyed.step`): for each event, the
        clock of the micro-batch's events that arrived before it, whichever key group they
        went to (:meth:`clocks_before`); the watermark the event meets is at least that, so
        a group judges lateness as one operator fed every event would."""
        columns = events if isinstance(events, EventColumns) else EventColumns.from_events(events)
        before = dict(self.totals)
        arrived, late = self._arrive(columns, prior)
        matches: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        near: list[dict] = []
        self._near_bins = np.zeros(round(1 / NEAR_MISS_BIN), dtype=np.int64)
        self._near_parts: list[tuple[Rows, np.ndarray, Rows, np.ndarray, np.ndarray]] = []
        partitions: list[dict] = []
        buffered: list[list[dict]] = [[], []]
        if not arrived.keys:
            blocks = []
        elif self.strategy in ("lazy", "lazy_lookup"):
            blocks = [self._join_keys(arrived.codes(self.held), arrived.new, arrived.new_kid(self.held), matches, near)]
        else:
            blocks = self._join_per_key(arrived.codes(self.held), arrived.per_key(), matches, near)
        for rows in blocks:
            if len(partitions) < PARTITION_SAMPLES:
                partitions.extend(self._partition_sample(rows, PARTITION_SAMPLES - len(partitions)))
            for k in (0, 1):
                if len(buffered[k]) < BUFFERED_SAMPLES:
                    buffered[k].extend(self._as_events(k, rows[k], BUFFERED_SAMPLES - len(buffered[k])))
        evicted = self.evict(self.watermark)
        result = JoinMatches(self.names, matches, self.sides[0].key, arrived, self._pair_partitions,
                             tuple((side.stream, side.template_names) for side in self.sides), self._near_parts,
                             self.sides[1].key)
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

    def _arrive(self, columns: EventColumns, prior: np.ndarray | None = None) -> tuple[_Arrived, list[Late]]:
        """The block's events, side by side, as the join takes them (see the module
        docstring): filtered, rejected, late, unkeyed, of another key group, or arrived
        with their key. The watermark each event meets is the largest max time of the
        events before it that some side admits or filters out (rejected events do not move
        it; late ones cannot), so it is one running maximum over the block (and at least
        its ``prior``, the clock of events before it elsewhere)."""
        n = len(columns)
        self.totals["events"] += n
        hi = columns.block.hi
        reads = [columns.rows_of(side.stream) for side in self.sides]
        read = np.zeros(n, dtype=bool)
        moves = np.zeros(n, dtype=bool)
        judged = []
        for k, side in enumerate(self.sides):
            mine = reads[k]
            read[mine] = True
            passing = block_filter(list(side.filters), side.var, columns.attrs[mine].tolist()) \
                if side.filters and len(mine) else np.ones(len(mine), dtype=bool)
            template, reasons = self._admit_columns(side, columns, mine)
            moves[mine[template > -2]] = True       # admitted or only filtered out: time moves with it
            self.totals["filtered"] += int(len(mine) - passing.sum())
            judged.append((mine[passing], template[passing], [r for r, p in zip(reasons, passing.tolist()) if p]))
        self.totals["ignored"] += int(n - read.sum())
        if n:
            met, last = _running_before(hi, moves)
            met = np.maximum(self.watermark, met if prior is None else np.maximum(met, prior))
            self.watermark = max(self.watermark, last)
        else:
            met = hi
        late: list[tuple[int, int, str]] = []
        arrivals: list[tuple[np.ndarray, np.ndarray]] = []
        for k, (mine, template, reasons) in enumerate(judged):
            side = self.sides[k]
            rejected = template == -2
            for j in np.flatnonzero(rejected).tolist():
                late.append((int(mine[j]), k, reasons[j]))
            behind = ~rejected & (hi[mine] + side.params.max_delay < met[mine])
            for i in mine[behind].tolist():
                late.append((i, k, f"late: max time {float(hi[i])!r} + max delay {side.params.max_delay!r} "
                                   f"is before the watermark {float(met[i])!r}"))
            self.totals["rejected"] += int(rejected.sum())
            self.totals["late"] += int(behind.sum())
            keep = ~rejected & ~behind
            arrivals.append((mine[keep], template[keep]))
        late.sort(key=lambda item: (item[0], item[1]))
        return self._keyed(columns, arrivals), [Late(columns.event(i), reason) for i, _, reason in late]

    def _admit_columns(self, side: _Side, columns: EventColumns, mine: np.ndarray) -> tuple[np.ndarray, list]:
        """:meth:`_admit` for the events ``mine`` of the block: each one's template index
        (-1 for an explicit timestamp, -2 when it cannot be joined) and the reason where it
        cannot (else None)."""
        index = side.template_index
        names = columns.templates[mine].tolist()
        template = np.fromiter((-1 if name is None else index.get(name, -2) for name in names), dtype=np.int64,
                               count=len(names))
        reasons: list[str | None] = [None] * len(names)
        params = side.params
        for j in np.flatnonzero(template < 0).tolist():
            i, name = int(mine[j]), names[j]
            if name is not None:
                reasons[j] = f"ts.template: unknown template {name!r} for stream {params.name!r}"
            elif params.template_only:
                reasons[j] = (f"ts: stream {params.name!r} declares templates and no pi, so a join reads "
                              f"only template timestamps from it")
            elif columns.problems[i] is not None:
                reasons[j] = columns.problems[i]
            else:
                problem = params.too_wide(float(columns.block.hi[i] - columns.block.lo[i]))
                if problem is None:
                    continue
                reasons[j] = f"ts: {problem}"
            template[j] = -2
        return template, reasons

    def _keyed(self, columns: EventColumns, arrivals: list[tuple[np.ndarray, np.ndarray]]) -> _Arrived:
        """The arrived events with their keys, in arrival order (by event, then side), those
        without a key and those of other key groups counted and left. Each key is found and
        decided once per block (:func:`_key_codes`), not once per event."""
        ids = [np.concatenate([mine, np.full(len(mine), k)]).reshape(2, -1) for k, (mine, _) in enumerate(arrivals)]
        entries = np.concatenate(ids, axis=1)            # (event, side) of every arrival
        order = np.lexsort((entries[1], entries[0]))
        attrs = columns.attrs[entries[0, order]].tolist()
        names = [side.key for side in self.sides]
        if names[0] == names[1]:
            found = _key_values(attrs, names[0])
        else:
            found = [None] * len(attrs)
            sides = entries[1, order]
            for k in (0, 1):
                at = np.flatnonzero(sides == k).tolist()
                for i, value in zip(at, _key_values([attrs[i] for i in at], names[k])):
                    found[i] = value
        codes, distinct = _key_codes(found)
        counts = np.bincount(codes, minlength=len(distinct))
        ranked = np.full(len(distinct), -1, dtype=np.int64)     # each code's rank among the keys kept
        keys: list[tuple] = []
        owns = self.key_group.owns if self.key_group is not None else None
        for code, key in enumerate(distinct):
            if key is None:
                self.totals["unkeyed"] += int(counts[code])
            elif owns is not None and not owns(tuple([value for _, value in key])):
                self.totals["other_group"] += int(counts[code])
            else:
                ranked[code] = len(keys)
                keys.append(key)
        rank = np.empty(entries.shape[1], dtype=np.int64)
        rank[order] = ranked[codes]
        return _Arrived(self, columns, entries, order, rank, keys, [template for _, template in arrivals])

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

    def concerned(self, events: Sequence[Event] | EventColumns) -> np.ndarray:
        """Events of a side's stream passing that side's filters (either side of a
        self-join), the filters evaluated on the whole block at once."""
        columns = events if isinstance(events, EventColumns) else None
        streams = None if columns is not None else np.array([e.stream.casefold() for e in events], dtype=object)
        out = np.zeros(len(events), dtype=bool)
        for side in self.sides:
            mine = columns.rows_of(side.stream) if columns is not None else np.flatnonzero(streams == side.stream)
            if not len(mine):
                continue
            if side.filters:
                attrs = columns.attrs[mine].tolist() if columns is not None else [events[i].attrs for i in mine]
                mine = mine[block_filter(list(side.filters), side.var, attrs)]
            out[mine] = True
        return out

    def clock_of(self, events: Sequence[Event] | EventColumns) -> dict[str, float]:
        """The largest max time of the events either side admits (late ones lie below
        the watermark anyway, so the figure needs no state)."""
        if isinstance(events, EventColumns):
            return self.time_of(events)[1]
        watermark = -math.inf
        reading: dict[str, list[int]] = {}
        for event in events:
            for k in self._reading(event.stream, reading):
                admitted = self._admit(self.sides[k], event)
                if not isinstance(admitted, str) and admitted[0].hi > watermark:
                    watermark = admitted[0].hi
        return {"watermark": watermark} if watermark > -math.inf else {}

    def clocks_before(self, events: Sequence[Event] | EventColumns) -> np.ndarray:
        """For each event of the block, the largest max time of the events before it that
        either side admits or filters out (-inf for none): the part of the watermark it
        meets that the block gives (see :meth:`_arrive`; a host computes it over a whole
        micro-batch and gives each key group its events' share, :meth:`feed`'s ``prior``)."""
        return self.time_of(events if isinstance(events, EventColumns) else EventColumns.from_events(events))[0]

    def time_of(self, columns: EventColumns) -> tuple[np.ndarray, dict[str, float]]:
        """:meth:`clocks_before` and :meth:`clock_of` of a block's columns, in one pass."""
        moves = np.zeros(len(columns), dtype=bool)
        for side in self.sides:
            mine = columns.rows_of(side.stream)
            if len(mine):
                moves[mine[self._admit_columns(side, columns, mine)[0] > -2]] = True
        before, last = _running_before(columns.block.hi, moves)
        return before, ({"watermark": last} if last > -math.inf else {})

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

    def state_fields(self) -> dict[str, Any]:
        return {"query": self.query, "streams": self.streams.to_json(), "floor": self.floor,
                "threshold": self.threshold, "watermark": self.watermark, "totals": self.totals,
                "lookup": self.lookup, "shape_ids": self.shape_ids, "key_group": self.key_group,
                "held": self.held.state()}

    @classmethod
    def from_state(cls, fields: dict[str, Any]) -> JoinOperator:
        op = cls(fields["query"], parse_streams(fields["streams"]), floor=fields["floor"])
        op.set_threshold(fields["threshold"])
        op.watermark = fields["watermark"]
        op.totals = fields["totals"]
        op.key_group = fields["key_group"]
        op.lookup = fields["lookup"]
        op.shape_ids = fields["shape_ids"]
        op.held = Held.from_state(fields["held"])
        return op
