"""Query-order evaluation (section 4.1, C.1) fed by sorting (section 4.3, C.3).

Events that match ``E_1`` are evaluated on arrival; an event for ``E_j`` (``j > 1``)
waits in the buffer of ``E_j`` until it is safe to output: no unseen event can precede
it (``e.upper <= safe``, from the arrival-order constraint ``now.lower - U_max`` or a
heartbeat), and no event still waiting for ``E_{j-1}`` starts before it ends. Released
events are evaluated component by component, so every event for ``E_{j-1}`` that can
precede an event for ``E_j`` has been evaluated first: the stream reaches the engine in
query order even when an event matches several components.

A partial match is extended by the one-pass incremental form of C.1: the new event's vlb
from its predecessor's, the vubs of the partial match updated in reverse pattern order,
and the window checked as ``e.vlb < e_{m_1}.vub + W``. For *skip till next match* each
partial match keeps its NELT (B.3), lowered by every candidate for the next component;
an event whose vlb lies after it cannot be next.
"""

from __future__ import annotations

import math

from .bounds import close_window
from .engine import Engine, held_minimum
from .model import CompiledPattern, Found, GridEvent

__all__ = ["SortedEngine"]


class Partial:
    """A partial match ``(e_{m_1}, ..., e_{m_j})`` with its current vlb, vub and NELT."""

    __slots__ = ("events", "vlb", "vub", "nelt")

    def __init__(self, events, vlb, vub):
        self.events = events
        self.vlb = vlb
        self.vub = vub
        self.nelt = math.inf

    def __getstate__(self):
        return self.events, self.vlb, self.vub, self.nelt

    def __setstate__(self, state):
        self.events, self.vlb, self.vub, self.nelt = state


class SortedEngine(Engine):
    def __init__(self, pattern: CompiledPattern):
        super().__init__(pattern)
        self.waiting: list[list[GridEvent]] = [[] for _ in range(pattern.length)]
        self.partials: list[list[Partial]] = [[] for _ in range(pattern.length)]
        self.found: list[Found] = []

    def _receive(self, items):
        for event, j in items:
            if j == 0:
                self._extend(0, event)
            else:
                self.waiting[j].append(event)

    def advance(self, safe: float) -> list[Found]:
        length = self.pattern.length
        for j in range(1, length):
            limit = self._frontier(safe, [self.waiting[j - 1]] if j > 1 else [])
            ready = [e for e in self.waiting[j] if e.hi <= limit]
            if ready:
                self.waiting[j] = [e for e in self.waiting[j] if e.hi > limit]
                for event in sorted(ready, key=lambda e: (e.hi, e.lo)):
                    self._extend(j, event)
        for j in range(length - 1):
            self._prune(j, self._frontier(safe, [self.waiting[j + 1]]))
        found, self.found = self.found, []
        return found

    def _prune(self, j: int, frontier: float) -> None:
        """Time to live: a partial match ending at ``E_{j+1}`` (0-based ``j``) needs a later
        event starting before ``e_{m_1}.vub + W``, and for skip-till-next before its NELT."""
        window = self.pattern.window
        alive = [p for p in self.partials[j] if p.vub[0] + window > frontier and p.nelt >= frontier]
        self.pruned += len(self.partials[j]) - len(alive)
        self.partials[j] = alive

    def _extend(self, j: int, event: GridEvent) -> None:
        pattern = self.pattern
        if j == 0:
            self._keep(0, Partial((event,), (event.lo,), (event.hi,)))
            return
        window = pattern.window
        for partial in self.partials[j - 1]:
            vlb = max(partial.vlb[-1] + 1, event.lo)
            if vlb > event.hi or (vlb >= partial.vub[0] + window and not pattern.next_match):
                continue
            if any(e.key == event.key for e in partial.events):
                continue
            if not pattern.admits(dict(enumerate(partial.events)), j, event):
                continue
            if pattern.next_match:
                if event.lo > partial.events[-1].hi:
                    partial.nelt = min(partial.nelt, event.hi)
                if vlb > partial.nelt or vlb >= partial.vub[0] + window:
                    continue
            vub = list(partial.vub) + [event.hi]
            for k in range(j - 1, -1, -1):
                vub[k] = min(vub[k], vub[k + 1] - 1)
                if vub[k] < partial.vlb[k]:
                    break
            else:
                if vlb < vub[0] + window:
                    self._keep(j, Partial(partial.events + (event,), partial.vlb + (vlb,), tuple(vub)))

    def _keep(self, j: int, partial: Partial) -> None:
        if j < self.pattern.length - 1:
            self.partials[j].append(partial)
            return
        vub = close_window(partial.vlb, partial.vub, self.pattern.window)
        if vub is None:
            self.pruned += 1
        else:
            self.found.append(Found(partial.events, partial.vlb, vub))

    def open_runs(self) -> int:
        return sum(len(p) for p in self.partials)

    def buffered(self) -> list[int]:
        return [len(w) for w in self.waiting]

    def earliest_held(self) -> float:
        return min([held_minimum(w) for w in self.waiting] +
                   [held_minimum(e for p in ps for e in p.events) for ps in self.partials])
