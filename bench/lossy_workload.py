"""Shoplifting workloads for the lossy-CEP benchmarks (AYAC section 2.2).

Reader A (``shelf``) sees a tagged item on its shelf (a few reads), reader B
(``counter``) sees it paid for at the checkout (most items), reader C (``exit``) sees
it leave. Every reader misses a read with probability ``miss``. Times are integers.
"""

from __future__ import annotations

import time

import numpy as np

from penumbra.events import Event, Streams, parse_streams
from penumbra.lossy import build_operator
from penumbra.query import parse
from penumbra.timestamps import Interval

QUERY = ("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
         "{gaps}WITHIN {window} THRESHOLD 0.5")
#: Gap densities close to the workload's (counter 10-200 after the last shelf read, exit
#: 15-260 after it), fixed in the query: nothing is learned online.
FIXED_GAPS = "GAP y = uniform(10, 200), z = uniform(15, 260) "


def lifecycles(count: int, starts: np.ndarray, tags: np.ndarray, rng: np.random.Generator,
               miss: float = 0.1, paid: float = 0.95) -> list[Event]:
    """Events of ``count`` item visits (shelf reads, counter unless stolen, exit), in time order."""
    shelf_reads = rng.integers(1, 4, count)
    rows: list[tuple[int, str, int]] = []
    for visit in range(count):
        t = int(starts[visit])
        for _ in range(shelf_reads[visit]):
            rows.append((t, "shelf", tags[visit]))
            t += int(rng.integers(1, 20))
        t += int(rng.integers(10, 200))
        if rng.random() < paid:
            rows.append((t, "counter", tags[visit]))
            t += int(rng.integers(5, 60))
        rows.append((t, "exit", tags[visit]))
    keep = rng.random(len(rows)) >= miss
    rows = [row for row, kept in zip(rows, keep) if kept]
    rows.sort(key=lambda row: row[0])
    return [Event(stream, f"e{n}", Interval(float(t), float(t)), {"tag": int(tag)})
            for n, (t, stream, tag) in enumerate(rows)]


def shop(tags: int, visits: int, seed: int = 1) -> list[Event]:
    """``visits`` visits spread over ``tags`` tags (a tag is reused after its item is back)."""
    rng = np.random.default_rng(seed)
    per_tag = max(1, visits // tags)
    starts = (np.arange(per_tag)[None, :] * 2000 + rng.integers(0, 2000, (tags, per_tag))).ravel()
    tag_ids = np.repeat(np.arange(tags), per_tag)
    return lifecycles(tags * per_tag, starts, tag_ids, rng)


def steady(visits: int, rate: float, seed: int = 2) -> list[Event]:
    """``visits`` visits, each with its own tag, starting at ``rate`` visits per time unit."""
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.uniform(0, visits / rate, visits)).astype(np.int64)
    return lifecycles(visits, starts, np.arange(visits), rng)


def imprecise(events: list[Event], share: float, width: int, seed: int = 3) -> list[Event]:
    """The same reads, a ``share`` of them known only to ``width + 1`` instants from their
    time on (uniform), in time order of their first instant."""
    rng = np.random.default_rng(seed)
    spread = rng.random(len(events)) < share
    return [Event(e.stream, e.id, Interval(e.ts.lo, e.ts.lo + width), e.attrs) if wide else e
            for e, wide in zip(events, spread.tolist())]


def streams(miss: float) -> Streams:
    """Stream parameters: every reader misses with probability ``miss``."""
    return parse_streams({reader: {"miss_prob": miss} for reader in ("shelf", "counter", "exit")})


def scan(events: list[Event], block: int) -> float:
    """CPU seconds (process time: one core, less disturbed by other processes' load) for
    the floor of any per-event work: read each event's stream, time and tag and append
    it to a per-tag list (the baseline of the benchmarks)."""
    start = time.process_time()
    for first in range(0, len(events), block):
        by_tag: dict = {}
        for event in events[first:first + block]:
            tag = event.attrs.get("tag")
            queue = by_tag.get(tag)
            if queue is None:
                queue = by_tag[tag] = []
            queue.append((event.ts.lo, event.stream, event))
    return time.process_time() - start


def run(events: list[Event], window: int, miss: float, block: int,
        gaps: str = "") -> tuple[list[float], list[int], int]:
    """Feed ``events`` in blocks to the shoplifting operator (gap densities learned, or
    fixed by ``gaps``): CPU seconds per block, the last time of each block, and the number
    of matches."""
    op = build_operator(parse(QUERY.format(window=window, gaps=gaps)), streams(miss))
    seconds, ends, matches = [], [], 0
    for first in range(0, len(events), block):
        chunk = events[first:first + block]
        start = time.process_time()
        matches += len(op.feed(chunk).matches)
        seconds.append(time.process_time() - start)
        ends.append(int(chunk[-1].ts.lo))
    matches += len(op.flush().matches)
    return seconds, ends, matches
