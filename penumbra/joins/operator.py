"""The probabilistic timing join operator (PTJoin; the interval paper's five strategies).

Pairs ``a`` from stream A and ``b`` from stream B are a match when
``P(|X_a - X_b| <= d) >= delta``. Every strategy returns exactly the pairs a brute-force
join of all non-late events would, with their exact probabilities; they differ in how
much work it takes (:mod:`.strategies`; the pairs are decided by :mod:`.probe`, with
:mod:`.lookup` for ``lazy_lookup``). What the operator shows of its work is in
:mod:`.inspection`.

The operator owns time and state: the sides (:mod:`.sides`), the threshold and floor with
their Theorem 2 tables and Theorem 4 offsets, the watermark, the buffers (:mod:`.held`),
the look-up table and the counters. Time is the data's: the watermark is the largest max
time seen. An event whose max time plus its stream's max delay D is below the watermark
when it arrives is late: not joined, returned with the reason. Buffers keep an event while
some future, non-late partner could still reach the threshold floor (Theorem 4 for
template streams; the zero-probability bound otherwise), so moving the threshold anywhere
down to the floor loses no match.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..errors import ValidationError
from ..events import Event, Streams, parse_streams
from ..events.columns import EventColumns
from ..operator import BlockResult, Late, Operator, check_threshold
from ..query import JoinQuery
from ..query.block import block_filter
from ..state import StateError, unpickle
from .arrivals import Arrivals
from .held import Held
from .inspection import (
    BUFFERED_SAMPLES, PARTITION_SAMPLES, NearMisses, ProbingRanges, newly_buffered, probability_curve,
)
from .lookup import LookupTable
from .matches import JoinMatches
from .partitions import TemplateTables
from .probe import Probe
from .sides import Side
from .strategies import DEFAULT_STRATEGY, STRATEGIES, join_block

__all__ = ["DEFAULT_FLOOR", "JoinOperator"]

DEFAULT_FLOOR = 0.05
_COUNTERS = ("events", "matches", "late", "rejected", "filtered", "unkeyed", "other_group", "ignored",
             "pairs", "void", "certain", "decided_by_templates", "probed", "lookup_hits",
             "near_misses", "evicted")


def _running_before(hi: np.ndarray, moves: np.ndarray) -> tuple[np.ndarray, float]:
    """For each event, the largest ``hi`` of the moving events before it (-inf for none),
    and the largest of them all."""
    if not len(hi):
        return np.empty(0), -math.inf
    running = np.maximum.accumulate(np.where(moves, hi, -math.inf))
    return np.concatenate(([-math.inf], running[:-1])), float(running[-1])


def _unversioned(fields: dict[str, Any]) -> dict[str, Any]:
    """A join's state from before the versioned format: the same fields, pickled alone."""
    saved = unpickle(fields["snapshot"])
    if "held" not in saved:
        raise StateError("join operator state with a buffer per key (from before the shared buffers of every "
                         "key): not migrated; start the query's state afresh (a new checkpoint)")
    return saved


class JoinOperator(Operator):
    """``P(|X_A - X_B| <= d) >= delta`` over two streams; see the module docstring."""

    kind = "join"
    STATE_VERSION = 1
    STATE_FIELDS = ("query", "streams", "floor", "threshold", "watermark", "totals", "lookup", "shape_ids",
                    "key_group", "held")
    STATE_MIGRATIONS = {0: _unversioned}
    reports_near_misses = True

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
            Side(query.left.var, query.left.stream.casefold(), streams.get_or_default(query.left.stream),
                 query.filters.get(query.left.var, ()), keys_a),
            Side(query.right.var, query.right.stream.casefold(), streams.get_or_default(query.right.stream),
                 query.filters.get(query.right.var, ()), keys_b))
        self.floor = check_threshold(floor, "floor")
        self.threshold = check_threshold(query.threshold)
        if self.threshold < self.floor:
            self.floor = self.threshold
        self.watermark = -math.inf
        self.held = Held()           # the stream buffers of every key (held.py)
        self.lookup = LookupTable((len(self.sides[0].templates), len(self.sides[1].templates)))
        self.totals = dict.fromkeys(_COUNTERS, 0)
        self.self_join = self.sides[0].stream == self.sides[1].stream
        self._build_tables()

    # --- configuration -----------------------------------------------------------------

    @property
    def names(self) -> tuple[str, str]:
        return self.sides[0].var, self.sides[1].var

    def _build_tables(self) -> None:
        """Theorem 2 tables at the threshold and Theorem 4 offsets at the floor (template
        streams only, and only where Lemma 2 holds: ``d >= max(pi_A, pi_B)``)."""
        a, b = self.sides
        longest = [a.longest_timestamp, b.longest_timestamp]
        # (inequality 9 reads the tables at 1 - delta: below 2**-53 that rounds to 1, and every
        # pair is probed exactly instead)
        self.templates_apply = bool(a.templates and b.templates and None not in longest and self.d >= max(longest)
                                    and 1.0 - self.floor < 1.0)
        self._threshold_tables()
        self.floor_tables = TemplateTables.build(a.templates, b.templates, self.floor) \
            if self.templates_apply else None
        # Theorem 4, both ways: the offset for evicting B by future A events, and A by future B.
        self.t_min = (self.floor_tables.t_min(), TemplateTables.build(b.templates, a.templates, self.floor).t_min()) \
            if self.templates_apply and a.params.template_only and b.params.template_only else None

    def _threshold_tables(self) -> None:
        """Theorem 2 tables at the current threshold, for A events (``tables``) and, for
        B events' probing ranges, with the roles swapped (``tables_ba``); the probing ranges
        they give."""
        a, b = self.sides
        self.tables = TemplateTables.build(a.templates, b.templates, self.threshold) \
            if self.templates_apply else None
        self.tables_ba = TemplateTables.build(b.templates, a.templates, self.threshold) \
            if self.templates_apply else None
        self.probing_ranges = ProbingRanges(self.d, self.sides, self.tables, self.tables_ba)

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
        near = NearMisses(self.names, self.totals)
        probe = Probe(d=self.d, threshold=self.threshold, floor=self.floor, tables=self.tables,
                      floor_tables=self.floor_tables, self_join=self.self_join,
                      lookup=self.lookup if self.strategy == "lazy_lookup" else None, near=near, totals=self.totals)
        partitions: list[dict] = []
        buffered: list[list[dict]] = [[], []]
        for rows in join_block(self.strategy, self.held, arrived, probe):
            if len(partitions) < PARTITION_SAMPLES:
                partitions.extend(self.probing_ranges.samples(rows, PARTITION_SAMPLES - len(partitions)))
            for k in (0, 1):
                if len(buffered[k]) < BUFFERED_SAMPLES:
                    buffered[k].extend(newly_buffered(self.sides[k], rows[k], BUFFERED_SAMPLES - len(buffered[k])))
        evicted = self.evict(self.watermark)
        result = JoinMatches(self.names, probe.found, self.sides[0].key, arrived, self.pair_partitions,
                             tuple((side.stream, side.template_names) for side in self.sides), near.parts,
                             self.sides[1].key)
        self.totals["matches"] += len(result)
        observations = {
            "counters": {k: self.totals[k] - before[k] for k in _COUNTERS},
            "watermark": self.watermark,
            "buffers": self.buffer_lengths(),
            "buffer_bounds": self.buffer_bounds(),
            "evicted": evicted,
            "near_misses": near.samples,
            "near_miss_histogram": near.histogram(),
            "partitions": partitions,
            "newly_buffered": buffered[0] + buffered[1],
            "threshold": self.threshold,
            "floor": self.floor,
        }
        return BlockResult(result, late, observations)

    def _arrive(self, columns: EventColumns, prior: np.ndarray | None = None) -> tuple[Arrivals, list[Late]]:
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
            rows = reads[k]
            read[rows] = True
            passing = block_filter(list(side.filters), side.var, columns.attrs[rows].tolist()) \
                if side.filters and len(rows) else np.ones(len(rows), dtype=bool)
            template, reasons = side.admit_columns(columns, rows)
            moves[rows[template > -2]] = True       # admitted or only filtered out: time moves with it
            self.totals["filtered"] += int(len(rows) - passing.sum())
            judged.append((rows[passing], template[passing], [r for r, p in zip(reasons, passing.tolist()) if p]))
        self.totals["ignored"] += int(n - read.sum())
        if n:
            met, last = _running_before(hi, moves)
            met = np.maximum(self.watermark, met if prior is None else np.maximum(met, prior))
            self.watermark = max(self.watermark, last)
        else:
            met = hi
        late: list[tuple[int, int, str]] = []
        admitted: list[tuple[np.ndarray, np.ndarray]] = []
        for k, (rows, template, reasons) in enumerate(judged):
            side = self.sides[k]
            rejected = template == -2
            for j in np.flatnonzero(rejected).tolist():
                late.append((int(rows[j]), k, reasons[j]))
            behind = ~rejected & (hi[rows] + side.params.max_delay < met[rows])
            for i in rows[behind].tolist():
                late.append((i, k, f"late: max time {float(hi[i])!r} + max delay {side.params.max_delay!r} "
                                   f"is before the watermark {float(met[i])!r}"))
            self.totals["rejected"] += int(rejected.sum())
            self.totals["late"] += int(behind.sum())
            keep = ~rejected & ~behind
            admitted.append((rows[keep], template[keep]))
        late.sort(key=lambda item: (item[0], item[1]))
        arrived = Arrivals.by_key(columns, admitted, (self.sides[0].key, self.sides[1].key), self.key_group)
        self.totals["unkeyed"] += arrived.unkeyed
        self.totals["other_group"] += arrived.other_group
        return arrived, [Late(columns.event(i), reason) for i, _, reason in late]

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
            elif other.longest_timestamp is not None:
                bounds.append(horizon - other.longest_timestamp)
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
            rows = columns.rows_of(side.stream) if columns is not None else np.flatnonzero(streams == side.stream)
            if not len(rows):
                continue
            if side.filters:
                attrs = columns.attrs[rows].tolist() if columns is not None else [events[i].attrs for i in rows]
                rows = rows[block_filter(list(side.filters), side.var, attrs)]
            out[rows] = True
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
                admitted = self.sides[k].admit(event)
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
            rows = columns.rows_of(side.stream)
            if len(rows):
                moves[rows[side.admit_columns(columns, rows)[0] > -2]] = True
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

    # --- inspection ----------------------------------------------------------------------

    def pair_partitions(self, lo: np.ndarray, hi: np.ndarray, template: np.ndarray,
                        partner_hi: np.ndarray) -> list[str | None]:
        """Each pair's probing range at the threshold in force (:meth:`ProbingRanges.of_pairs`)."""
        return self.probing_ranges.of_pairs(lo, hi, template, partner_hi)

    def probability_curve(self, event: Event, points: int = 200, partners: Sequence[Event] = ()) -> dict[str, Any]:
        """The PTJoin paper's Figure 3 for ``event`` (:func:`.inspection.probability_curve`)."""
        return probability_curve(event, self.probing_ranges, self.threshold, self.floor, points, partners)

    # --- counters ------------------------------------------------------------------------

    @property
    def counters(self) -> dict[str, int | float]:
        return {**self.totals, "watermark": self.watermark, **{f"buffer_{k}": v for k, v in self.buffer_lengths().items()}}

    # --- state -----------------------------------------------------------------------------

    def state_fields(self) -> dict[str, Any]:
        return {"query": self.query, "streams": self.streams.to_json(), "floor": self.floor,
                "threshold": self.threshold, "watermark": self.watermark, "totals": self.totals,
                "lookup": self.lookup.entries, "shape_ids": self.lookup.shape_ids, "key_group": self.key_group,
                "held": self.held.state()}

    @classmethod
    def from_state(cls, fields: dict[str, Any]) -> JoinOperator:
        op = cls(fields["query"], parse_streams(fields["streams"]), floor=fields["floor"])
        op.set_threshold(fields["threshold"])
        op.watermark = fields["watermark"]
        op.totals = fields["totals"]
        op.key_group = fields["key_group"]
        op.lookup = LookupTable(op.lookup.template_counts, fields["lookup"], fields["shape_ids"])
        op.held = Held.from_state(fields["held"])
        return op
