"""Events on the query's discrete grid, and the pattern compiled for matching.

An event's uncertainty interval ``UI = [lower, upper]`` (section 2.2) is read on the
query's grid: instants are numbered ``lo, lo + 1, ..., hi`` in grid steps, with the
event's pmf (uniform by default). Instants of zero probability at either end are
trimmed, so ``lo`` and ``hi`` bound the instants the event can really occur at.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import numpy as np

from ..errors import ValidationError
from ..events import Event
from ..query.ast import Expr, evaluate, variables_of
from ..query.block import block_filter
from ..query.pattern import PatternQuery
from ..timestamps import Interval

__all__ = ["CompiledPattern", "Found", "GridEvent", "grid_record", "to_grid"]


class GridEvent:
    """One event on the grid: ``key = (stream, id)``, support ``[lo, hi]`` and, over it,
    ``probs`` (for the common uniform interval, one read-only array shared by every event
    of its length)."""

    __slots__ = ("key", "stream", "id", "attrs", "lo", "hi", "_probs")

    def __init__(self, stream: str, event_id: str, attrs: Mapping[str, Any], lo: int, hi: int,
                 probs: np.ndarray | None = None):
        self.key = (stream.casefold(), event_id)
        self.stream = stream
        self.id = event_id
        self.attrs = dict(attrs)
        self.lo = lo
        self.hi = hi
        self._probs = probs

    @property
    def uniform(self) -> bool:
        """Whether the event has the default uniform pmf (``probs`` given by the interval alone)."""
        return self._probs is None

    @property
    def probs(self) -> np.ndarray:
        return _uniform_probs(self.hi - self.lo + 1) if self._probs is None else self._probs

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state):
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"GridEvent({self.stream}:{self.id} [{self.lo}, {self.hi}])"


@functools.lru_cache(maxsize=256)
def _uniform_probs(count: int) -> np.ndarray:
    probs = np.full(count, 1.0 / count)
    probs.flags.writeable = False
    return probs


def to_grid(event: Event, unit: float) -> GridEvent:
    """The event's discrete reading, or a :class:`ValidationError` naming the field."""
    ts = event.ts
    if not isinstance(ts, Interval):
        raise ValidationError("ts", "a pattern query reads an interval {lo, hi[, pmf]}, "
                              "not a histogram timestamp")
    first = ts.lo / unit
    if not first.is_integer() and abs(first - round(first)) > 1e-9 * max(1.0, abs(first)):
        raise ValidationError("ts.lo", f"{ts.lo!r} is not on the query's grid of step {unit!r}")
    if ts.pmf is None and unit == 1.0 and ts.hi.is_integer():
        return GridEvent(event.stream, event.id, event.attrs, int(ts.lo), int(ts.hi))
    instants, probs = ts.grid(unit)
    support = np.flatnonzero(probs > 0)
    lo = int(round(first)) + int(support[0])
    hi = int(round(first)) + int(support[-1])
    return GridEvent(event.stream, event.id, event.attrs, lo, hi,
                     np.ascontiguousarray(probs[support[0]: support[-1] + 1]))


def grid_record(event: GridEvent, unit: float) -> dict[str, Any]:
    """The event in the input's shape (its support on the grid, with its pmf when not
    uniform and the grid's step is 1), and under ``grid`` its exact reading: step, first
    and last instant, weights (None: uniform)."""
    ts: dict[str, Any] = {"lo": event.lo * unit, "hi": event.hi * unit}
    probs = None if event.uniform else [float(p) for p in event.probs]
    if probs is not None and unit == 1.0:
        ts["pmf"] = probs
    return {"stream": event.stream, "id": event.id, "ts": ts, "attrs": dict(event.attrs),
            "grid": {"unit": unit, "lo": event.lo, "hi": event.hi, "probs": probs}}


@dataclass
class Found:
    """A match signature found by an engine: its events in pattern order and their valid
    intervals ``[vlb, vub]``; the point-based framework adds its point matches."""

    events: tuple[GridEvent, ...]
    vlb: tuple[int, ...]
    vub: tuple[int, ...]
    points: list[tuple[int, ...]] | None = None


class CompiledPattern:
    """The query's components, conditions and window in the form the engines use.

    ``admits(bound, j, event)`` checks the conjuncts that become decidable when ``event``
    binds component ``j`` next to the components already in ``bound`` (SASE's deferred
    predicates); conjuncts on component ``j`` alone are checked once, in :meth:`components_of`.
    """

    def __init__(self, query: PatternQuery):
        self.query = query
        self.length = query.length
        self.variables = query.variables
        self.window = _window_steps(query.window, query.time_unit)
        self.next_match = query.strategy == "skip_till_next_match"
        self._streams = [c.stream.casefold() for c in query.components]
        order = {v: j for j, v in enumerate(self.variables)}
        self._filters: list[list[Expr]] = [[] for _ in self.variables]
        self._joins: list[list[tuple[Expr, frozenset[int]]]] = [[] for _ in self.variables]
        for step in query.steps:
            for term in step:
                used = frozenset(order[v] for v in variables_of(term))
                if len(used) == 1:
                    self._filters[next(iter(used))].append(term)
                else:
                    for j in used:
                        self._joins[j].append((term, used))

    def items_of(self, events: list[Event]) -> list[tuple[int, int]]:
        """``(i, j)`` for every component ``j`` whose type and one-variable conditions
        ``events[i]`` satisfies, the conditions evaluated over the whole block at once."""
        by_stream: dict[str, list[int]] = {}
        for i, e in enumerate(events):
            by_stream.setdefault(e.stream.casefold(), []).append(i)
        items = []
        for j, name in enumerate(self._streams):
            chosen = np.array(by_stream.get(name, ()), dtype=np.intp)
            if chosen.size and self._filters[j]:
                chosen = chosen[block_filter(self._filters[j], self.variables[j],
                                              [events[i].attrs for i in chosen])]
            items.extend((i, j) for i in chosen.tolist())
        return items

    def partition_of(self, event: GridEvent, j: int):
        """The partition key of ``event`` as component ``j`` (``()`` without a partition),
        or ``None`` when it lacks the key attribute and so can match nothing."""
        if self.query.partition is None:
            return ()
        return event.attrs.get(self.query.partition[j])

    def joins_at(self, j: int) -> bool:
        """Whether :meth:`admits` has any condition to check when component ``j`` is bound."""
        return bool(self._joins[j])

    def reads_an_earlier_stream(self, j: int) -> bool:
        """Whether component ``j`` reads the stream of a component before it, so one event
        could be bound to both."""
        return self._streams[j] in self._streams[:j]

    def admits(self, bound: Mapping[int, GridEvent], j: int, event: GridEvent) -> bool:
        terms = self._joins[j]
        if not terms:
            return True
        bindings = None
        for term, used in terms:
            if all(k == j or k in bound for k in used):
                if bindings is None:
                    bindings = {self.variables[k]: e.attrs for k, e in bound.items()}
                    bindings[self.variables[j]] = event.attrs
                if evaluate(term, bindings) is not True:
                    return False
        return True


def _window_steps(window: float, unit: float) -> int:
    """W in grid steps: ``t_l - t_1 < W`` holds for grid instants iff their step difference
    is below this. W and the step are taken as the decimals they print as (what the query
    and the streams wrote), so ``WITHIN 0.3`` on a grid of 0.1 is 3 steps and ``WITHIN
    3.000000001`` on a grid of 1 admits a difference of 3."""
    return math.ceil(Fraction(repr(float(window))) / Fraction(repr(float(unit))))
