"""What every evaluation method shares: the index of candidate events per component."""

from __future__ import annotations

import abc
import math

from .model import CompiledPattern, Found, GridEvent

__all__ = ["Engine"]


class Engine(abc.ABC):
    """One evaluation method over one partition of the state.

    ``index[j]`` holds every event seen that can match component ``j`` on its own (type
    and one-variable conditions): the events NELT and ``C_next`` consult. An engine
    receives items ``(event, j)`` with :meth:`add` and, with :meth:`advance`, evaluates
    what ``safe`` allows: every event still to come starts at or after ``safe``.
    """

    def __init__(self, pattern: CompiledPattern):
        self.pattern = pattern
        self.index: list[list[GridEvent]] = [[] for _ in range(pattern.length)]
        self.pruned = 0

    def add(self, items: list[tuple[GridEvent, int]]) -> None:
        for event, j in items:
            self.index[j].append(event)
        self._receive(items)

    @abc.abstractmethod
    def _receive(self, items: list[tuple[GridEvent, int]]) -> None:
        """Take new items (their events are already indexed)."""

    @abc.abstractmethod
    def advance(self, safe: float) -> list[Found]:
        """Evaluate what ``safe`` allows; the signatures found (valid, not yet weighed)."""

    @abc.abstractmethod
    def open_runs(self) -> int:
        """Runs (partial matches) alive."""

    @abc.abstractmethod
    def buffered(self) -> list[int]:
        """Events waiting in the method's buffers, per component."""

    @abc.abstractmethod
    def earliest_held(self) -> float:
        """The least ``lo`` of the events the method still holds (``inf`` if none)."""

    def evict_index(self, horizon: float) -> int:
        """Drop indexed events that no match still to be found or weighed can use: an
        excluder or NELT candidate must end after some point of such a match."""
        low = min(horizon, self.earliest_held())
        dropped = 0
        for j, events in enumerate(self.index):
            kept = [e for e in events if e.hi > low]
            dropped += len(events) - len(kept)
            self.index[j] = kept
        return dropped

    def _frontier(self, safe: float, waiting: list[list[GridEvent]]) -> float:
        """The earliest start of an item not yet evaluated: to come, or waiting in a buffer."""
        return min([safe] + [min(e.lo for e in w) for w in waiting if w])


def held_minimum(events) -> float:
    """The least ``lo`` of ``events`` (``inf`` for none)."""
    return min((e.lo for e in events), default=math.inf)
