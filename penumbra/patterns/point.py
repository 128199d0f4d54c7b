"""The point-based evaluation framework (section 3).

1. Stream expansion: each event becomes one point event per instant of its interval;
   points wait in a buffer and are emitted in time order up to the safe emission time
   ``t_emit`` (every unseen event starts at or after it).
2. Pattern matching: skip till any match on the point events, with the id check (one
   event matches one component per match); for *skip till next match* a point of
   ``E_{j+1}`` after the NELT of ``e_{m_j}`` is ignored.
3. Match collapsing: point matches are grouped by signature; once every point of the
   signature's events has been emitted the group is complete and handed on with its
   point matches, whose confidence is ``C_any`` (Eq. 1) or ``C_next`` (Algorithm 1).
"""

from __future__ import annotations

import heapq
import itertools

from .bounds import close_window, next_event_latest_time, run_bounds
from .engine import Engine, held_minimum
from .model import CompiledPattern, Found, GridEvent

__all__ = ["PointEngine"]


class PointEngine(Engine):
    def __init__(self, pattern: CompiledPattern):
        super().__init__(pattern)
        self.points: list[tuple[int, int, int, GridEvent]] = []
        self.sequence = itertools.count()
        self.runs: list[list[tuple[tuple[GridEvent, ...], tuple[int, ...]]]] = \
            [[] for _ in range(pattern.length)]
        self.groups: dict[tuple, tuple[tuple[GridEvent, ...], list[tuple[int, ...]]]] = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["sequence"] = next(self.sequence)
        return state

    def __setstate__(self, state):
        state["sequence"] = itertools.count(state["sequence"])
        self.__dict__.update(state)

    def _receive(self, items):
        for event, j in items:
            for t, p in zip(range(event.lo, event.hi + 1), event.probs):
                if p > 0:
                    heapq.heappush(self.points, (t, j, next(self.sequence), event))

    def advance(self, safe: float) -> list[Found]:
        while self.points and self.points[0][0] < safe:
            t = self.points[0][0]
            instant = []
            while self.points and self.points[0][0] == t:
                _, j, _, event = heapq.heappop(self.points)
                instant.append((event, j))
            self._match(t, instant)
        window = self.pattern.window
        for j, runs in enumerate(self.runs):
            alive = [r for r in runs if r[1][0] + window > safe]
            self.pruned += len(runs) - len(alive)
            self.runs[j] = alive
        found = []
        for signature, (events, points) in list(self.groups.items()):
            if max(e.hi for e in events) < safe:
                del self.groups[signature]
                vlb, vub = run_bounds(dict(enumerate(events)), window)
                order = range(len(events))
                closed = close_window([vlb[k] for k in order], [vub[k] for k in order], window)
                found.append(Found(events, tuple(vlb[k] for k in order), closed, points))
        return found

    def _match(self, t: int, instant: list[tuple[GridEvent, int]]) -> None:
        """Extend every run by every point event at instant ``t`` (runs made at ``t`` wait)."""
        pattern = self.pattern
        new: list[list] = [[] for _ in range(pattern.length)]
        nelt: dict[tuple, float] = {}
        for event, j in instant:
            if j == 0:
                new[0].append(((event,), (t,)))
                continue
            for events, times in self.runs[j - 1]:
                if t - times[0] >= pattern.window or any(e.key == event.key for e in events):
                    continue
                bound = dict(enumerate(events))
                if not pattern.admits(bound, j, event):
                    continue
                if pattern.next_match:
                    key = tuple(e.key for e in events)
                    if key not in nelt:
                        nelt[key] = next_event_latest_time(pattern, self.index[j], bound, j - 1)
                    if t > nelt[key]:
                        continue
                new[j].append((events + (event,), times + (t,)))
        last = pattern.length - 1
        for events, times in new[last]:
            signature = tuple(e.key for e in events)
            self.groups.setdefault(signature, (events, []))[1].append(times)
        for j in range(last):
            self.runs[j].extend(new[j])

    def open_runs(self) -> int:
        return sum(len(r) for r in self.runs)

    def buffered(self) -> list[int]:
        counts = [0] * self.pattern.length
        for _, j, _, _ in self.points:
            counts[j] += 1
        return counts

    def earliest_held(self) -> float:
        return min([held_minimum(e for _, _, _, e in self.points[:1])] +
                   [held_minimum(e for runs in self.runs for events, _ in runs for e in events)] +
                   [held_minimum(e for events, _ in self.groups.values() for e in events)])
