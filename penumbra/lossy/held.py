"""The external buffer of the AYAC operator (section 2.1), and timestamps read on its grid.

Events reach the NFA in increasing time: a block may come in any order, so its events
are held, in time order, until they are older than the largest stream max delay D
(:class:`HeldEvents`). Times are read on the unit grid (:func:`grid_times`): a certain
instant ``{"lo": t, "hi": t}`` as t; an imprecise one ``{"lo": a, "hi": b[, "pmf": ...]}``
as its support, the instants a..b its pmf gives a weight (:func:`read_support`), held
once per instant (:func:`per_instant`). An event the operator cannot take is late, with the
reason (:func:`why_late`): off the grid, beyond the grid's exact range, or before the
time already processed.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from ..errors import ValidationError
from ..events import Event
from ..timestamps import Interval
from .worlds import support

__all__ = ["FIRST_INSTANT", "GRID_LIMIT", "HeldEvents", "LATER_INSTANT", "PRECISE", "SPREAD_PATHS", "WIDE",
           "first_instant", "grid_times", "per_instant", "read_support", "why_late"]

_LO, _HI = attrgetter("lo"), attrgetter("hi")

#: The largest time on the grid: beyond it a float no longer holds every integer (nor, from
#: 2**63, does the int64 the queues keep).
GRID_LIMIT = 2.0 ** 53

#: An imprecise event of more instants than this is taken once by a path (standing for
#: every instant: :mod:`.generation`); one of fewer, once per instant, where a path's exact
#: score and negatives prune more.
SPREAD_PATHS = 8

#: What each held entry is (its *part*): a precise event, or one instant of an imprecise
#: event's support, its first or a later one; WIDE is added for an event of more than
#: SPREAD_PATHS instants.
PRECISE, FIRST_INSTANT, LATER_INSTANT, WIDE = 0, 1, 2, 2


def grid_times(stamps: list) -> np.ndarray:
    """The time of each timestamp that is one instant; NaN for the others (an imprecise
    interval, or a histogram)."""
    if all(type(ts) is Interval for ts in stamps):
        times = np.array(list(map(_LO, stamps)), dtype=float)
        times[times != np.array(list(map(_HI, stamps)), dtype=float)] = math.nan
        return times
    return np.array([ts.lo if type(ts) is Interval and ts.lo == ts.hi else math.nan for ts in stamps], dtype=float)


def why_late(t: float, clock: float) -> str:
    """Why an instant ``t`` the operator cannot take is late, ``clock`` the time processed."""
    if t % 1:
        return f"time {t:g} is not on the unit grid of the query (integer times)"
    if abs(t) > GRID_LIMIT:
        return f"time {t:g} is beyond the grid's exact range (|t| <= 2**53)"
    return f"out of order: time {t:g} is before {clock:g}, already processed"


def read_support(ts, clock: float) -> np.ndarray | str:
    """The instants of an imprecise timestamp on the grid, or why it cannot be read
    (``clock`` the time processed)."""
    if type(ts) is not Interval:
        return "lossy CEP reads an interval {\"lo\": a, \"hi\": b[, \"pmf\": ...]} on its grid, " \
               "not a histogram timestamp"
    for bound in (ts.lo, ts.hi):
        if bound % 1:
            return f"time {bound:g} is not on the unit grid of the query (integer times)"
        if abs(bound) > GRID_LIMIT:
            return f"time {bound:g} is beyond the grid's exact range (|t| <= 2**53)"
    try:
        instants, _ = support(ts)
    except ValidationError as error:
        return str(error)
    if instants[0] < clock:
        return f"out of order: its first instant {int(instants[0])} is before {clock:g}, already processed"
    return instants


def first_instant(ts) -> int | None:
    """The first instant of a timestamp the operator reads (None for one it reports late,
    as :func:`read_support` would)."""
    if type(ts) is not Interval or ts.lo % 1 or ts.hi % 1 or max(abs(ts.lo), abs(ts.hi)) > GRID_LIMIT:
        return None
    if ts.lo == ts.hi:
        return int(ts.lo)
    try:
        return int(support(ts)[0][0])
    except ValidationError:
        return None


def per_instant(events: list, streams: list[int], times: np.ndarray,
           spread: dict[int, np.ndarray]) -> tuple[list, list[int], np.ndarray, list[int]]:
    """One entry per instant of each imprecise event (row -> instants in ``spread``):
    the events, streams, times and parts."""
    counts = np.ones(len(events), np.int64)
    for n, instants in spread.items():
        counts[n] = len(instants)
    rows = np.repeat(np.arange(len(events)), counts).tolist()
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    times = np.repeat(times, counts)
    parts = np.full(len(rows), PRECISE, np.int64)
    for n, instants in spread.items():
        times[starts[n]:starts[n] + len(instants)] = instants
        wide = WIDE if len(instants) > SPREAD_PATHS else 0
        parts[starts[n]] = FIRST_INSTANT + wide
        parts[starts[n] + 1:starts[n] + len(instants)] = LATER_INSTANT + wide
    return [events[n] for n in rows], [streams[n] for n in rows], times, parts.tolist()


@dataclass
class HeldEvents:
    """The held events in time order (the external buffer): per entry its time, event,
    stream index and part."""

    times: list[int]
    events: list[Event]
    streams: list[int]
    parts: list[int]

    def __len__(self) -> int:
        return len(self.times)

    def hold(self, events: list[Event], streams: list[int], times: np.ndarray, parts: list[int]) -> None:
        """Hold entries (``times`` int64), keeping the time order (a stable sort: entries of
        one time stay in the order they came)."""
        if len(times) > 1 and not (np.diff(times) >= 0).all() or (self.times and self.times[-1] > times[0]):
            times = np.concatenate((np.asarray(self.times, dtype=np.int64), times))
            order = np.argsort(times, kind="stable").tolist()
            events, streams = self.events + list(events), self.streams + streams
            parts = self.parts + parts
            self.events = [events[n] for n in order]
            self.streams = [streams[n] for n in order]
            self.parts = [parts[n] for n in order]
            self.times = times[order].tolist()
        else:
            self.times += times.tolist()
            self.events += events
            self.streams += streams
            self.parts += parts

    def ready(self, frontier: float) -> int:
        """How many held entries are at or before ``frontier``."""
        return bisect_right(self.times, frontier)

    def take(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Release the first ``count`` entries: their times, events (an object array),
        stream indices and parts."""
        times = np.asarray(self.times[:count], dtype=np.int64)
        events = np.empty(count, object)
        events[:] = self.events[:count]
        streams = np.asarray(self.streams[:count], dtype=np.int64)
        parts = np.asarray(self.parts[:count], dtype=np.int64)
        del self.times[:count], self.events[:count], self.streams[:count], self.parts[:count]
        return times, events, streams, parts
