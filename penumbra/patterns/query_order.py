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

import bisect
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
            if j == 0 and self.pattern.length == 1:
                self._close((event,), (event.lo,), [event.hi])
            elif j == 0:
                self.partials[0].append(Partial((event,), (event.lo,), (event.hi,)))
            else:
                self.waiting[j].append(event)

    def advance(self, safe: float) -> list[Found]:
        length = self.pattern.length
        for j in range(1, length):
            limit = self._frontier(safe, [self.waiting[j - 1]] if j > 1 else [])
            ready = [e for e in self.waiting[j] if e.hi <= limit]
            if ready:
                self.waiting[j] = [e for e in self.waiting[j] if e.hi > limit]
                self._extend(j, sorted(ready, key=lambda e: (e.hi, e.lo)))
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

    def _extend(self, j: int, events: list[GridEvent]) -> None:
        """Extend the partial matches ending at ``E_j`` (0-based ``j - 1``) by ``events``,
        released for ``E_{j+1}``, in order.

        Only the partial matches an event can extend are visited, found by bisection on
        their last vlb: it must precede the event's upper bound, and for *skip till any
        match* the window must still reach the event. Every partial match has
        ``vub_1 <= vlb_j + reach``, so ``e.lower < vub_1 + W`` needs ``vlb_j > e.lower - W - reach``.
        Skip till next match visits every earlier one, as each candidate lowers their NELT.
        The candidates are visited in the order the partial matches were made, which is the
        order their matches come out in."""
        pattern = self.pattern
        window, next_match = pattern.window, pattern.next_match
        check_keys, check_joins = pattern.reads_an_earlier_stream(j), pattern.joins_at(j)
        complete = j == pattern.length - 1
        partials = self.partials[j - 1]
        last_vlb = [p.vlb[-1] for p in partials]
        by_last_vlb = sorted(range(len(partials)), key=last_vlb.__getitem__)
        ordered_vlb = [last_vlb[i] for i in by_last_vlb]
        reach = max((p.vub[0] - p.vlb[-1] for p in partials), default=0)
        for event in events:
            lo, hi = event.lo, event.hi
            first = 0 if next_match else bisect.bisect_right(ordered_vlb, lo - window - reach)
            candidates = by_last_vlb[first: bisect.bisect_left(ordered_vlb, hi)]
            candidates.sort()
            for index in candidates:
                partial = partials[index]
                vlb = partial.vlb[-1] + 1
                if vlb < lo:
                    vlb = lo
                if vlb >= partial.vub[0] + window and not next_match:
                    continue
                if check_keys and any(e.key == event.key for e in partial.events):
                    continue
                if check_joins and not pattern.admits(dict(enumerate(partial.events)), j, event):
                    continue
                if next_match:
                    if lo > partial.events[-1].hi and hi < partial.nelt:
                        partial.nelt = hi
                    if vlb > partial.nelt or vlb >= partial.vub[0] + window:
                        continue
                # the vubs of a partial match increase strictly: the pass stops at the
                # first that the new event's upper bound leaves as it was
                vub = [*partial.vub, hi]
                k = j - 1
                while k >= 0 and vub[k] >= vub[k + 1]:
                    vub[k] = vub[k + 1] - 1
                    if vub[k] < partial.vlb[k]:
                        break
                    k -= 1
                else:
                    if vlb >= vub[0] + window:
                        continue
                    if complete:
                        self._close(partial.events + (event,), partial.vlb + (vlb,), vub)
                    else:
                        self.partials[j].append(Partial(partial.events + (event,), partial.vlb + (vlb,), tuple(vub)))

    def _close(self, events: tuple[GridEvent, ...], vlb: tuple[int, ...], vub: list[int]) -> None:
        """A complete match: its window closed (C.1's third pass), found or pruned. The vubs
        increase strictly and none is below its vlb, so a window the last one already
        keeps changes nothing."""
        closed = tuple(vub) if vub[-1] - vub[0] < self.pattern.window else close_window(vlb, vub, self.pattern.window)
        if closed is None:
            self.pruned += 1
        else:
            self.found.append(Found(events, vlb, closed))

    def open_runs(self) -> int:
        return sum(len(p) for p in self.partials)

    def buffered(self) -> list[int]:
        return [len(w) for w in self.waiting]

    def earliest_held(self) -> float:
        return min([held_minimum(w) for w in self.waiting] +
                   [held_minimum(e for p in ps for e in p.events) for ps in self.partials])
