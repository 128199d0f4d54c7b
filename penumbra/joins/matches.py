"""A block's matches as the strategies found them: index arrays into the buffers' rows,
turned into :class:`~penumbra.operator.Match` objects only when read.

A strategy step finds pairs ``(a, b)`` with their exact probability ``P(|X_a - X_b| <= d)``
(:class:`FoundPairs`); :class:`JoinMatches` is the sequence of them all, gathering ids,
keys, time supports, probing ranges (LPR / SR / RPR, the PTJoin paper's Theorem 3) and
records column by column, for the matches a reader asks for.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from ..operator import Match
from .arrivals import Arrivals
from .rows import Rows

__all__ = ["FoundPairs", "JoinMatches", "gather"]

#: the probing range of each pair, from its A event's support (min, max), template index and
#: its B event's max time: ``lpr``, ``sr``, ``rpr`` or None
PartitionOf = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], list]


class FoundPairs(NamedTuple):
    """Pairs one step of a strategy found: A's rows and, per pair, the index of its A event
    in them (``ia``), the same for B (``ib``), and each pair's probability."""

    a: Rows
    ia: np.ndarray
    b: Rows
    ib: np.ndarray
    probs: np.ndarray


class JoinMatches(Sequence[Match]):
    """The matches of one block, kept as index arrays into the buffers' id arrays;
    ids are gathered and :class:`Match` objects made only when asked for.

    A keyed join's match gets its key (:attr:`Match.key`, by side A's attribute names)
    from the block's arrivals: every match of a block pairs at least one event that
    arrived in it, and both events of a pair share the key."""

    def __init__(self, names: tuple[str, str], parts: list[FoundPairs],
                 key_names: tuple[str, ...] = (), arrivals: Arrivals | None = None,
                 partition_of: PartitionOf | None = None, sources: tuple[tuple[str, list[str]], ...] = (),
                 near: list[FoundPairs] | None = None, b_key_names: tuple[str, ...] = ()):
        self.names = names
        self._b_key_names = b_key_names
        self.near = near or []       # the block's near misses, as parts: what a shared plan splits
        self._sources = sources      # per side: its stream and template names (for the records)
        self._partition_of = partition_of
        self._parts = parts
        self._length = sum(len(part.probs) for part in parts)
        self._key_names = key_names
        self._arrivals = arrivals if key_names else None

    def __len__(self) -> int:
        return self._length

    @cached_property
    def a_ids(self) -> np.ndarray:
        return self.column(0, "ids")

    @cached_property
    def b_ids(self) -> np.ndarray:
        return self.column(1, "ids")

    @cached_property
    def times(self) -> list[dict[str, tuple[float, float]]]:
        """Each match's :attr:`Match.times`: both events' supports (first edge, max time)."""
        a, b = self.names
        bounds = [self.column(k, name).tolist() for k in (0, 1) for name in ("lo", "hi")]
        return [{a: (a_lo, a_hi), b: (b_lo, b_hi)} for a_lo, a_hi, b_lo, b_hi in zip(*bounds)]

    @cached_property
    def probs(self) -> np.ndarray:
        return np.concatenate([part.probs for part in self._parts]) if self._parts else np.empty(0)

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
        return self._partition_of(self.column(0, "lo"), self.column(0, "hi"), self.column(0, "template"),
                                  self.column(1, "hi"))

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

    def select(self, keep: np.ndarray, partition_of: PartitionOf | None = None) -> JoinMatches:
        """The matches where ``keep`` (one flag per match, in order) holds, in order; their
        probing ranges by ``partition_of`` when given (another threshold's tables)."""
        parts, start = [], 0
        for part in self._parts:
            kept = keep[start:start + len(part.probs)]
            start += len(part.probs)
            if kept.any():
                parts.append(FoundPairs(part.a, part.ia[kept], part.b, part.ib[kept], part.probs[kept]))
        return JoinMatches(self.names, parts, self._key_names, self._arrivals, partition_of or self._partition_of,
                           self._sources, b_key_names=self._b_key_names)

    def column(self, k: int, name: str) -> np.ndarray:
        """:func:`gather` over the block's matches."""
        return gather(self._parts, k, name)

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


def gather(parts: Sequence[FoundPairs], k: int, name: str) -> np.ndarray:
    """The :class:`Rows` column ``name`` of every pair's event of side ``k`` (0: A, 1: B),
    over ``parts`` in order."""
    if not parts:
        return np.empty(0, dtype=object if name == "ids" else float)
    return np.concatenate([getattr(part[2 * k], name)[part[2 * k + 1]] for part in parts])


def _events_of(rows: Rows, index: np.ndarray, stream: str, template_names: list[str]) -> list[dict]:
    """:meth:`Rows.event` of each row of ``index``, made once per distinct row."""
    distinct, back = np.unique(index, return_inverse=True)
    made = [rows.event(i, stream, template_names) for i in distinct.tolist()]
    return [made[k] for k in back.tolist()]
