"""Arrival queues of the AYAC NFA (section 4).

* :class:`ArrivalQueue` is a Probabilistic Arrival Queue (PAQ, section 4.1): the
  arrivals at one NFA state in increasing time t, each with u, an upper bound on the
  score of every path reaching the state at t. Old arrivals leave by the window
  (dequeue); the largest u of the queue, needed by the bound v_new of section 5.1, is
  kept by a monotonic queue of decreasing u, so it costs amortised O(1).
* :class:`TimeQueue` holds entries in time order, searched by binary search: the
  Negative Arrival Queue (NAQ, section 4.2) of a negative component, and the PAQ of
  V_1, whose arrivals all carry the same u = G_{0,1}(W) (so no maxima are kept).

An entry is a tuple ``(t, mask, event)`` (PAQ: ``(t, mask, event, u)``), ``mask`` the
bits of the WHERE clauses whose trivial predicates the event satisfies. Tuples compare
on t first and then on the integer mask, so ``bisect`` with ``(t, inf)`` or ``(t,)``
finds time bounds without a key function. A moving head keeps dequeue O(1); the list
is compacted when half of it is dead.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

__all__ = ["ArrivalQueue", "TimeQueue"]

_COMPACT_AT = 64


class TimeQueue:
    """Entries ``(t, mask, event, ...)`` with non-decreasing t."""

    __slots__ = ("entries", "head")

    def __init__(self):
        self.entries: list[tuple] = []
        self.head = 0

    def __len__(self) -> int:
        return len(self.entries) - self.head

    def expire(self, horizon: int) -> int:
        """Dequeue the entries at or before ``horizon``; returns how many went."""
        entries, head = self.entries, self.head
        if head == len(entries) or entries[head][0] > horizon:
            return 0
        self.head = bisect_right(entries, (horizon, math.inf), head)
        gone = self.head - head
        if self.head >= _COMPACT_AT and 2 * self.head >= len(entries):
            self._compact()
        return gone

    def _compact(self) -> None:
        del self.entries[:self.head]
        self.head = 0

    def span(self, lo: int, hi: int) -> range:
        """Indices of the entries with lo < t < hi (open interval, binary search)."""
        entries = self.entries
        return range(bisect_right(entries, (lo, math.inf), self.head), bisect_left(entries, (hi,), self.head))

    def oldest(self) -> int | None:
        return self.entries[self.head][0] if self.head < len(self.entries) else None


class ArrivalQueue(TimeQueue):
    """PAQ: entries ``(t, mask, event, u)``, with max u in amortised O(1)."""

    __slots__ = ("peaks", "peaks_head")

    def __init__(self):
        self.entries: list[tuple] = []
        self.head = 0
        # indices of entries whose u is larger than every later u (a monotonic queue)
        self.peaks: list[int] = []
        self.peaks_head = 0

    def push(self, t: int, event, mask: int, bound: float = 1.0) -> None:
        peaks, entries = self.peaks, self.entries
        while len(peaks) > self.peaks_head and entries[peaks[-1]][3] <= bound:
            peaks.pop()
        peaks.append(len(entries))
        entries.append((t, mask, event, bound))

    def max_bound(self) -> float:
        """max_k u_k over the queue (0 when empty)."""
        peaks = self.peaks
        while self.peaks_head < len(peaks) and peaks[self.peaks_head] < self.head:
            self.peaks_head += 1
        return self.entries[peaks[self.peaks_head]][3] if self.peaks_head < len(peaks) else 0.0

    def _compact(self) -> None:
        head = self.head
        self.peaks = [k - head for k in self.peaks[self.peaks_head:] if k >= head]
        self.peaks_head = 0
        super()._compact()
