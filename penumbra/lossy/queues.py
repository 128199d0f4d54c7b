"""Arrival queues of the AYAC NFA (section 4): :class:`Queue` as numpy columns, and
:class:`Vague` for the imprecise events of a negative component.

A :class:`Queue` holds every hashed queue of one NFA state (its Probabilistic Arrival
Queues, PAQ, section 4.1) or of one negative component (its Negative Arrival Queues,
NAQ, section 4.2). Columns: ``t`` (time), ``key`` (code of the hash key; 0 when not
hashed), ``event`` (object column), and for a PAQ ``mask`` (bits of the WHERE clauses
whose trivial predicates the event satisfies), ``bound`` (u: an upper bound on the
score of every path reaching the state at t), and ``run`` and ``before`` for section
5.1's max_k u_k in O(1) per look-up (the paper keeps a monotonic structure for it). Time
is cut into epochs of W; ``run`` is the max of u over the key's entries of the entry's
epoch up to it, ``before`` the max over the key's entries of the epoch before, so
max(run, before) at the newest entry before t covers every entry in (t - W, t). Both are
carried only from an entry less than W older, which no dequeue has removed (dequeues
stay W behind), so they depend on the input alone, not on when entries leave. A NAQ is
kept per clause, holding the events that satisfy the clause's trivial predicates, so a
search for a negative is a count.

Entries arrive in time order and are appended (amortised O(1) each); ``order`` lists
them sorted by key code, then time, so the entries of one key (one hashed queue of
section 5.2) are a contiguous run of ``order`` in time order, and a whole block of
look-ups is one vectorised binary search. Look-ups return *ranks*, positions in
``order``. A block's entries go to the end of their key's run: one merge of the int64
``order`` per block. Entries at or before the window's horizon are a prefix of the
columns; they are dropped once a queue has doubled since it was last compacted
(dequeue by window, amortised O(1) per entry), and until then look-ups pass over them by
time. Nothing here is a Python object per entry but the events themselves.

An imprecise event of a negative component (an interval of instants, :mod:`.worlds`)
is not queued an instant at a time: a :class:`Vague` keeps it whole, by hash key, and
finds the events whose support meets an interval.

The hash keys themselves are integer codes of the events' values of the hash attribute
(:class:`HashKeys`), so a block's look-ups compare int64 columns.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from ..events import Event
from ..keygroups import KeyGroup

__all__ = ["HashKeys", "NO_KEY", "Queue", "Vague", "expand", "search"]

#: Key code of unhashed queues (hashed keys get codes from 1).
NO_KEY = 0

#: A queue is compacted once it holds twice as many entries as after its last compaction
#: (and at least this many).
COMPACT_MIN = 1024


def search(values: np.ndarray, order: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray,
           strict: bool) -> np.ndarray:
    """For each row, the first rank r in [lo, hi) with values[order[r]] > x (``strict``)
    or >= x, else hi; values[order] sorted on each [lo, hi). A vectorised binary search
    (as many rounds as the longest range has bits)."""
    lo, hi = lo.copy(), hi.copy()
    top = len(order) - 1
    open_ = lo < hi
    while open_.any():
        mid = (lo + hi) >> 1
        value = values[order[np.minimum(mid, top)]]
        right = open_ & ((value <= x) if strict else (value < x))
        lo = np.where(right, mid + 1, lo)
        hi = np.where(open_ & ~right, mid, hi)
        open_ = lo < hi
    return lo


def _running_max(first: np.ndarray, value: np.ndarray, earlier: np.ndarray) -> np.ndarray:
    """Running max of ``value`` within each group of consecutive rows (``first`` marks
    where one starts), from the group's ``earlier`` on; exact (by ranks, no arithmetic
    on values)."""
    if not len(value):
        return value.copy()
    value = value.copy()
    value[first] = np.maximum(value[first], earlier[first])
    levels, rank = np.unique(value, return_inverse=True)
    offset = (np.cumsum(first) - 1) * len(levels)
    return levels[np.maximum.accumulate(offset + rank) - offset]


def expand(start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges [start, stop) laid end to end: the row each index came from, and the index."""
    counts = stop - start
    rows = np.repeat(np.arange(len(start)), counts)
    offsets = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rows, start[rows] + offsets


class Queue:
    """Entries appended in time order, ``order`` sorting them by (key code, t); a
    ``window`` W makes it a PAQ, with the columns mask, bound, run, before and wide (the
    entry is one instant of an imprecise event). Columns hold spare capacity: entries are
    ``[0, len(queue))``."""

    __slots__ = ("size", "window", "t", "key", "event", "mask", "bound", "run", "before", "wide", "order",
                 "compacted")

    def __init__(self, window: int | None = None):
        self.size = 0
        self.window = window
        bounded = window is not None
        self.t = np.empty(0, np.int64)
        self.key = np.empty(0, np.int64)
        self.event = np.empty(0, object)
        self.mask = np.empty(0, np.int64) if bounded else None
        self.bound = np.empty(0) if bounded else None
        self.run = np.empty(0) if bounded else None
        self.before = np.empty(0) if bounded else None
        self.wide = np.empty(0, bool) if bounded else None
        self.order = np.empty(0, np.int64)
        self.compacted = 0

    def __len__(self) -> int:
        return self.size

    def _columns(self) -> tuple[str, ...]:
        return ("t", "key", "event") if self.bound is None else \
            ("t", "key", "event", "mask", "bound", "run", "before", "wide")

    def _resize(self, capacity: int, drop: int = 0) -> None:
        """Move the entries from ``drop`` on to columns of ``capacity``."""
        for name in self._columns():
            column = getattr(self, name)
            # the spare capacity zeroed: it is saved with the state, which then depends on
            # the entries alone (np.empty's leftover memory made its size vary run to run)
            resized = np.zeros(capacity, column.dtype)
            resized[:self.size - drop] = column[drop:self.size]
            setattr(self, name, resized)
        self.size -= drop

    def push(self, t: np.ndarray, key: np.ndarray, event: np.ndarray,
             mask: np.ndarray | None = None, bound: np.ndarray | None = None, wide: np.ndarray | None = None) -> None:
        """Enqueue a block of entries, in time order and not older than any queued."""
        count = len(t)
        if not count:
            return
        if self.size + count > len(self.t):
            self._resize(2 * (self.size + count))
        first = self.size
        by_key = np.argsort(key, kind="stable")           # by key, in time order within a key
        after = np.searchsorted(self.key[:first], key[by_key], side="right", sorter=self.order)
        new = {"t": t, "key": key, "event": event, "mask": mask, "bound": bound,
               "wide": np.zeros(count, bool) if wide is None else wide}
        if bound is not None:
            new["run"], new["before"] = np.empty(count), np.empty(count)
            new["run"][by_key], new["before"][by_key] = self._maxima(t[by_key], key[by_key], bound[by_key], after)
        for name in self._columns():
            getattr(self, name)[first:first + count] = new[name]
        self.size += count
        at = after + np.arange(count)
        old = np.ones(first + count, bool)
        old[at] = False
        order = np.empty(first + count, np.int64)
        order[old] = self.order
        order[at] = first + by_key
        self.order = order

    def _maxima(self, t: np.ndarray, key: np.ndarray, bound: np.ndarray,
                after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``run`` and ``before`` of new entries sorted by (key, t); ``after`` is where each
        would go among the queued ones (the key's newest queued entry is just before).
        Called once the columns have room for them (so index 0 can be read)."""
        window = self.window
        epoch = t // window
        same_key = np.concatenate(([False], key[1:] == key[:-1]))
        first = ~same_key | np.concatenate(([True], epoch[1:] != epoch[:-1]))
        # each group's predecessor: the key's previous new entry, else its newest queued one
        newest = self.order[np.maximum(after - 1, 0)] if self.size else np.zeros(len(t), np.int64)
        queued = ~same_key & (after > 0) & (self.key[newest] == key)
        queued_t, queued_run, queued_before = self.t[newest], self.run[newest], self.before[newest]
        continued = queued & (queued_t // window == epoch)          # same epoch: carry both
        run = _running_max(first, bound, np.where(continued, queued_run, 0.0))
        recent = t - window                                          # carry only from entries after this
        previous_t, previous_run = np.roll(t, 1), np.roll(run, 1)
        before = np.select(
            [continued,
             queued & (queued_t // window == epoch - 1) & (queued_t > recent),
             same_key & (previous_t // window == epoch - 1) & (previous_t > recent)],
            [queued_before, queued_run, previous_run], 0.0)
        return run, before[first][np.cumsum(first) - 1]

    def peak(self, index: np.ndarray) -> np.ndarray:
        """max u over the key's entries in (t - W, t] for the entries at ``index`` (at time t)."""
        return np.maximum(self.run[index], self.before[index])

    def find(self, key: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rank ranges [start, stop) of the entries with each key and lo < t < hi;
        ``order[start:stop]`` are their indices, in time order."""
        keys = self.key[:self.size]
        first = np.searchsorted(keys, key, side="left", sorter=self.order)
        last = np.searchsorted(keys, key, side="right", sorter=self.order)
        start = search(self.t, self.order, first, last, lo, strict=True)
        return start, search(self.t, self.order, start, last, hi, strict=False)

    def entries(self, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entries of rank ranges [start, stop): the row each came from, and its index."""
        rows, ranks = expand(start, stop)
        return rows, self.order[ranks]

    def due(self) -> bool:
        """Whether the queue has doubled since its last compaction."""
        return self.size > 2 * max(self.compacted, COMPACT_MIN)

    def expire(self, horizon: int) -> int:
        """Dequeue the entries at or before ``horizon`` (a prefix, by time order)."""
        gone = int(np.searchsorted(self.t[:self.size], horizon, side="right"))
        if gone:
            self._resize(2 * (self.size - gone), drop=gone)
            self.order = self.order[self.order >= gone] - gone
        self.compacted = self.size
        return gone

    def keys(self) -> np.ndarray:
        """The key codes with entries queued, sorted (the paper's hashed queues)."""
        keys = self.key[self.order]
        return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if self.size else keys


class Vague:
    """The imprecise events of one negative component (the NAQ's counterpart for events of
    several instants), each kept once, by hash-key code (NO_KEY when not hashed): per key,
    in order of their first instant, the support's first and last instant, the clause
    mask and the event."""

    __slots__ = ("by_key", "span", "size", "compacted")

    def __init__(self):
        self.by_key: dict[int, tuple[list[int], list[int], list[int], list[Event]]] = {}
        self.span = 0               # the widest support kept, last minus first instant
        self.size = 0
        self.compacted = 0

    def __len__(self) -> int:
        return self.size

    def push(self, lo: int, hi: int, key: int, mask: int, event: Event) -> None:
        """Keep an event; events come in order of their first instant."""
        columns = self.by_key.get(key)
        if columns is None:
            columns = self.by_key[key] = ([], [], [], [])
        for column, value in zip(columns, (lo, hi, mask, event)):
            column.append(value)
        self.span = max(self.span, hi - lo)
        self.size += 1

    def meeting(self, key: int, lo: int, hi: int) -> list[tuple[int, Event]]:
        """(clause mask, event) of the events with this key whose support meets (lo, hi)."""
        columns = self.by_key.get(key)
        if columns is None:
            return []
        firsts, lasts, masks, events = columns
        found = []
        n = bisect_left(firsts, hi) - 1
        while n >= 0 and firsts[n] > lo - self.span:
            if lasts[n] > lo:
                found.append((masks[n], events[n]))
            n -= 1
        return found

    def expire(self, horizon: int) -> int:
        """Drop the events whose support ends at or before ``horizon``."""
        gone = 0
        for key in list(self.by_key):
            firsts, lasts, masks, events = self.by_key[key]
            keep = [n for n, last in enumerate(lasts) if last > horizon]
            if len(keep) == len(lasts):
                continue
            gone += len(lasts) - len(keep)
            if keep:
                self.by_key[key] = tuple([column[n] for n in keep] for column in (firsts, lasts, masks, events))
            else:
                del self.by_key[key]
        self.size -= gone
        self.compacted = self.size
        return gone

    def due(self) -> bool:
        """Whether it has doubled since its last compaction."""
        return self.size > 2 * max(self.compacted, 64)

    def keys(self) -> np.ndarray:
        """The key codes with events kept, sorted."""
        return np.array(sorted(self.by_key), np.int64)


@dataclass
class HashKeys:
    """The codes of the hash-key values the queues are segmented by (section 5.2), by
    value (``codes``). Codes are unique, not dense: each look-up reserves one per event
    for new values, from ``next_code`` on. ``live`` is how many codes the last clean-up
    kept."""

    codes: dict
    next_code: int
    live: int

    def of(self, events: np.ndarray, name: str, key_group: KeyGroup | None) -> np.ndarray:
        """The code of each event's value of attribute ``name``: -1 when it is absent, or
        when it is a key another group of ``key_group``'s hosts owns."""
        values = [event.attrs.get(name) for event in events]
        first = self.next_code
        self.next_code += len(values)
        # true is not 1 (JSON's kinds, as conditions compare them), while 1 and 1.0 are one key
        coded = [(bool, value) if type(value) is bool else value for value in values]
        codes = np.fromiter(map(self.codes.setdefault, coded, range(first, self.next_code)),
                            dtype=np.int64, count=len(values))
        absent = self.codes.pop(None, None)
        if absent is not None:
            codes[codes == absent] = -1
        if key_group is not None and key_group.count > 1:
            # another group's keys: as if the attribute were absent
            foreign = [n for n, value in enumerate(values) if value is not None and not key_group.owns((value,))]
            codes[foreign] = -1
        return codes

    def crowded(self) -> bool:
        """Whether the codes have grown well beyond those the last clean-up kept."""
        return len(self.codes) > 4 * max(self.live, 4096)

    def keep(self, live: set[int]) -> None:
        """Forget the values whose codes are not ``live``."""
        self.codes = {value: code for value, code in self.codes.items() if code in live}
        self.live = len(self.codes)
