"""The "any state" evaluation method (section 4.2, C.2) and selectivity order (section 4.3).

A run may bind any subset of the components. Each item ``(e, j)`` clones every run that
``e`` can join at an unbound component ``j`` (type, deferred predicates, the id check,
non-empty valid intervals, the window between the run's two ends) and starts a run of
its own. Runs are pruned by their time to live ``min_j(e_{m_j}.vub) + W`` and when a
bound component's predecessor is unbound and nothing still to come can fill it.

For *skip till next match*, the NELT of ``e_{m_j}`` bounds the vlb of ``e_{m_{j+1}}``
whenever both are bound (B.3); the NELT is taken over every candidate seen so far.

:class:`SelectivityEngine` buffers the events of each component and feeds the runs only
when every buffer holds an event, the most selective component first.
"""

from __future__ import annotations

import math

from .bounds import close_window, next_event_latest_time, run_bounds
from .engine import Engine, held_minimum
from .model import CompiledPattern, Found, GridEvent

__all__ = ["AnyStateEngine", "SelectivityEngine"]


class AnyStateEngine(Engine):
    def __init__(self, pattern: CompiledPattern):
        super().__init__(pattern)
        self.runs: list[dict[int, GridEvent]] = []
        self.ttl: list[int] = []
        self.arrived: list[tuple[GridEvent, int]] = []

    def _receive(self, items):
        self.arrived.extend(items)

    #: Items are inserted in order of ``lo``, so runs can be pruned while a block is inserted.
    in_arrival_order = True

    def advance(self, safe: float) -> list[Found]:
        found: list[Found] = []
        arrived, self.arrived = self.arrived, []
        frontier = self._frontier(safe, self._waiting())
        if self.in_arrival_order:
            arrived.sort(key=lambda item: item[0].lo)
        for count, (event, j) in enumerate(arrived, start=1):
            found.extend(self._insert(event, j))
            if self.in_arrival_order and count % 64 == 0:
                self._prune(min(frontier, event.lo))
        self._prune(frontier)
        return found

    def _waiting(self) -> list[list[GridEvent]]:
        return []

    def _insert(self, event: GridEvent, j: int) -> list[Found]:
        pattern = self.pattern
        found: list[Found] = []
        grown: list[dict[int, GridEvent]] = []
        grown_ttl: list[int] = []
        for run in self.runs + [{}]:
            if j in run or any(e.key == event.key for e in run.values()):
                continue
            if not pattern.admits(run, j, event):
                continue
            clone = dict(run)
            clone[j] = event
            bounds = run_bounds(clone, pattern.window)
            if bounds is None or (pattern.next_match and not self._within_nelt(clone, j, bounds[0])):
                continue
            vlb, vub = bounds
            if len(clone) < pattern.length:
                grown.append(clone)
                grown_ttl.append(min(vub.values()) + pattern.window)
                continue
            order = range(pattern.length)
            closed = close_window([vlb[k] for k in order], [vub[k] for k in order], pattern.window)
            if closed is None:
                self.pruned += 1
            else:
                found.append(Found(tuple(clone[k] for k in order), tuple(vlb[k] for k in order), closed))
        self.runs.extend(grown)
        self.ttl.extend(grown_ttl)
        return found

    def _within_nelt(self, run: dict[int, GridEvent], j: int, vlb: dict[int, int]) -> bool:
        """``vlb`` of the successor of each newly adjacent pair is at most the pair's NELT."""
        for k in (j - 1, j):
            if k in run and k + 1 in run:
                prefix = {i: e for i, e in run.items() if i <= k}
                if vlb[k + 1] > next_event_latest_time(self.pattern, self.index[k + 1], prefix, k):
                    return False
        return True

    def _prune(self, frontier: float) -> None:
        """C.2's two rules, with ``frontier`` the earliest start of anything still to come:
        the time to live ``min_j(e_{m_j}.vub) + W`` has passed, or a bound component's
        predecessor is unbound and the bound event ends by the frontier (no event still to
        come can occur before it)."""
        alive_runs, alive_ttl = [], []
        for run, ttl in zip(self.runs, self.ttl):
            if ttl > frontier and not any(j - 1 not in run and e.hi <= frontier
                                          for j, e in run.items() if j > 0):
                alive_runs.append(run)
                alive_ttl.append(ttl)
        self.pruned += len(self.runs) - len(alive_runs)
        self.runs, self.ttl = alive_runs, alive_ttl

    def open_runs(self) -> int:
        return len(self.runs)

    def buffered(self) -> list[int]:
        counts = [0] * self.pattern.length
        for _, j in self.arrived:
            counts[j] += 1
        return counts

    def earliest_held(self) -> float:
        return min(held_minimum(e for run in self.runs for e in run.values()),
                   held_minimum(e for e, _ in self.arrived))


class SelectivityEngine(AnyStateEngine):
    """Selectivity order (section 4.3, after ZStream): one buffer per component; runs are
    fed when every buffer is non-empty, the component with the fewest events first.

    While a buffer is empty, an event that can no longer meet any partner (everything to
    come, and every event held by a run, starts at least W after it ends) is dropped."""

    in_arrival_order = False

    def __init__(self, pattern: CompiledPattern):
        super().__init__(pattern)
        self.waiting: list[list[GridEvent]] = [[] for _ in range(pattern.length)]
        self.seen = [0] * pattern.length

    def _receive(self, items):
        for event, j in items:
            self.waiting[j].append(event)
            self.seen[j] += 1

    def _waiting(self) -> list[list[GridEvent]]:
        return self.waiting

    def advance(self, safe: float) -> list[Found]:
        if all(self.waiting) or safe == math.inf:
            for j in sorted(range(self.pattern.length), key=lambda k: self.seen[k]):
                self.arrived.extend((e, j) for e in self.waiting[j])
                self.waiting[j] = []
        else:
            self._drop_out_of_date(safe)
        return super().advance(safe)

    def _drop_out_of_date(self, safe: float) -> None:
        partners = min(safe, held_minimum(e for run in self.runs for e in run.values()))
        window = self.pattern.window
        for j, events in enumerate(self.waiting):
            kept = [e for e in events if e.hi + window > partners]
            self.pruned += len(events) - len(kept)
            self.waiting[j] = kept

    def buffered(self) -> list[int]:
        return [len(w) for w in self.waiting]

    def earliest_held(self) -> float:
        return min([super().earliest_held()] + [held_minimum(w) for w in self.waiting])
