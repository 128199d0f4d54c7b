"""PAQ and NAQ columns (AYAC sections 4.1, 4.2, 5.1, 5.2) against plain lists."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
from hypothesis import given, settings

from penumbra.lossy.queues import Queue, expand, search

blocks = st.lists(st.one_of(
    st.tuples(st.just("push"), st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.floats(0, 1)),
                                        max_size=12)),
    st.tuples(st.just("expire"), st.integers(0, 8))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(blocks, st.integers(1, 12), st.integers(0, 12))
def test_queue_follows_a_list_of_entries(ops, window, back):
    """Blocks pushed in time order over several keys, dequeues at least W behind: the
    ranges found and the keys queued equal a scan of the live entries; the max u at the
    newest entry before t bounds every u in (t - W, t) and equals its definition over
    the whole input (epochs of W: the key's entries of t's epoch so far, and those of the
    epoch before when its last one is less than W older than the epoch's first)."""
    queue, live, history, clock = Queue(window), [], [], 0
    for op, arg in ops:
        if op == "push":
            rows = []
            for step, key, u in arg:
                clock += step
                rows.append((clock, key, u))
            queue.push(np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64),
                       np.array([f"e{r[0]}-{r[1]}" for r in rows], object), np.ones(len(rows), np.int64),
                       np.array([r[2] for r in rows]))
            live += rows
            history += rows
        else:
            horizon = clock - window - arg
            assert queue.expire(horizon) == sum(1 for t, _, _ in live if t <= horizon)
            live = [row for row in live if row[0] > horizon]
        assert len(queue) == len(live)
        assert queue.keys().tolist() == sorted({key for _, key, _ in live})
        keys = np.arange(0, 6, dtype=np.int64)
        hi = np.full(len(keys), clock - back, np.int64)
        start, stop = queue.find(keys, hi - window, hi)
        for n, key in enumerate(keys.tolist()):
            inside = [(t, u) for t, k, u in live if k == key and hi[n] - window < t < hi[n]]
            found = queue.order[start[n]:stop[n]]
            assert queue.t[found].tolist() == [t for t, _ in inside]
            assert queue.event[found].tolist() == [f"e{t}-{key}" for t, _ in inside]
            if inside:
                peak = queue.peak(queue.order[stop[n] - 1])
                assert peak >= max(u for _, u in inside)
                assert peak == defined_peak([(t, u) for t, k, u in history if k == key and t < hi[n]], window)


def defined_peak(entries, window):
    """max(run, before) of the last of a key's entries (in input order), from scratch."""
    t_last = entries[-1][0]
    epoch = t_last // window
    this = [(t, u) for t, u in entries if t // window == epoch]
    earlier = [(t, u) for t, u in entries if t // window == epoch - 1]
    run = max(u for _, u in this)
    carried = earlier and earlier[-1][0] > this[0][0] - window
    return max(run, max(u for _, u in earlier) if carried else 0.0)


def test_search_is_a_binary_search_per_row():
    values = np.array([9, 1, 2, 3, 3, 5, 8, 2], np.int64)
    order = np.array([1, 3, 4, 5, 6, 2, 7, 0], np.int64)     # two sorted ranks ranges: [0, 5) and [5, 8)
    lo, hi = np.array([0, 0, 0, 5, 5], np.int64), np.array([5, 5, 5, 8, 8], np.int64)
    x = np.array([3, 3, 100, 2, 0], np.int64)
    assert search(values, order, lo, hi, x, strict=True).tolist() == [3, 3, 5, 7, 5]
    assert search(values, order, lo, hi, x, strict=False).tolist() == [1, 1, 5, 5, 5]


def test_naq_search_is_open_on_both_sides():
    queue = Queue()
    times = np.array([1, 3, 3, 5, 8], np.int64)
    queue.push(times, np.zeros(5, np.int64), np.array([f"e{t}" for t in times], object))
    one = np.zeros(1, np.int64)
    start, stop = queue.find(one, np.array([1]), np.array([8]))
    assert queue.t[queue.order[start[0]:stop[0]]].tolist() == [3, 3, 5]
    for lo, hi in ((3, 5), (8, 20), (5, 5)):
        start, stop = queue.find(one, np.array([lo]), np.array([hi]))
        assert start[0] == stop[0]
    assert queue.expire(3) == 3 and queue.t[:len(queue)].tolist() == [5, 8]


def test_queue_capacity_and_expiry_keep_the_order():
    """Appends past the capacity and compactions keep every key's entries in time order."""
    queue = Queue()
    rng = np.random.default_rng(5)
    clock = 0
    for block in range(60):
        times = clock + np.sort(rng.integers(0, 50, 40))
        clock = int(times[-1])
        queue.push(times, rng.integers(0, 7, 40), np.array([f"b{block}"] * 40, object))
        if block % 9 == 8:
            queue.expire(clock - 300)
        keys, ts = queue.key[queue.order], queue.t[queue.order]
        assert len(queue.order) == len(queue) and sorted(queue.order.tolist()) == list(range(len(queue)))
        assert np.all((np.diff(keys) > 0) | ((np.diff(keys) == 0) & (np.diff(ts) >= 0)))


def test_expand_lays_ranges_end_to_end():
    rows, index = expand(np.array([4, 0, 7], np.int64), np.array([6, 0, 10], np.int64))
    assert rows.tolist() == [0, 0, 2, 2, 2] and index.tolist() == [4, 5, 7, 8, 9]
