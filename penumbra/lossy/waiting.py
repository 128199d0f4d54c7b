"""The matches the AYAC operator cannot report yet.

A match with negative components after its last positive waits until the stream has
passed t_first + W: only then is it known that none of them occurred in
(t_last, t_first + W) (section 4.2, with the NFA's final state entered at the end of
the window). A match imprecise timestamps touch waits until every instant of its
events has been processed (a later instant could add a path, never a world) and, with
trailing negatives, until that window has passed too; then it is evaluated over its
possible worlds (:mod:`.worlds`).

:class:`Waiting` keeps both kinds in heaps by deadline; the operator releases them as
time passes. Each waiting match keeps its events, so the queue entries it may still
need are kept too (:meth:`Waiting.horizon`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Iterator

from ..events import Event
from .generation import Pending
from .worlds import support

__all__ = ["Waiting"]


@dataclass
class Waiting:
    """Two heaps of waiting matches, both in order of (deadline, arrival): ``pending``,
    matches waiting for the window of their trailing negatives, as tuples (deadline,
    sequence, key code, t_last, score, path, clauses, factors); and ``worlds``, matches
    waiting for their evaluation over worlds, as (deadline, sequence, key code, horizon,
    identity, events). ``sequence`` numbers the matches of both in the order they came."""

    pending: list
    worlds: list
    sequence: int

    def __post_init__(self) -> None:
        #: the identities of the matches in ``worlds``: a match is scheduled once
        self.scheduled = {item[4] for item in self.worlds}

    def __len__(self) -> int:
        return len(self.pending) + len(self.worlds)

    def hold(self, match: Pending, factors: list[dict[str, Any]], window: int) -> None:
        """Wait for the window of a match's trailing negatives, t_first + W."""
        self.sequence += 1
        heapq.heappush(self.pending, (match.path[0][0] + window, self.sequence, match.key, match.t_last, match.score,
                                      match.path, match.clauses, factors))

    def schedule(self, events: dict[int, Event], key: int, window: int, trailing: bool) -> None:
        """Wait to evaluate a match over its worlds: until every instant of its events is
        processed and, with ``trailing`` negatives, its window has passed."""
        identity = tuple((s, e.stream, e.id) for s, e in sorted(events.items()))
        if identity in self.scheduled:
            return
        spans = {s: (e.ts.lo, e.ts.hi) for s, e in events.items()}
        first, last = min(spans), max(spans)
        deadline = max(int(hi) + (0 if lo == hi else 1) for lo, hi in spans.values())
        if trailing:
            deadline = max(deadline, int(spans[first][1]) + window)
        horizon = int(support(events[last].ts)[0][0]) - window
        self.sequence += 1
        self.scheduled.add(identity)
        heapq.heappush(self.worlds, (deadline, self.sequence, key, horizon, identity, events))

    def pending_due(self, until: float) -> Iterator[tuple]:
        """The matches waiting for trailing negatives whose window ended by ``until``, in
        order, each taken out as it is given."""
        while self.pending and self.pending[0][0] <= until:
            yield heapq.heappop(self.pending)

    def worlds_due(self, until: float) -> Iterator[tuple[int, dict[int, Event]]]:
        """(key code, events by state) of the matches due for their evaluation over worlds
        by ``until``, in order, each taken out as it is given."""
        while self.worlds and self.worlds[0][0] <= until:
            _, _, key, _, identity, events = heapq.heappop(self.worlds)
            self.scheduled.discard(identity)
            yield key, events

    def deadlines(self) -> list[int]:
        """The nearest deadline of each heap that holds a match."""
        return [item[0] for item in self.pending[:1]] + [item[0] for item in self.worlds[:1]]

    def horizon(self, horizon: int) -> int:
        """``horizon``, or earlier when a waiting match may still need queue entries at or
        before it (its trailing negatives' or its worlds' horizon)."""
        if self.pending:
            horizon = min(horizon, min(item[3] for item in self.pending))
        if self.worlds:
            horizon = min(horizon, min(item[3] for item in self.worlds))
        return horizon

    def keys(self) -> set[int]:
        """The hash-key codes of the waiting matches."""
        return {item[2] for item in self.pending} | {item[2] for item in self.worlds}
