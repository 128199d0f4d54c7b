"""PAQ and NAQ (AYAC sections 4.1, 4.2, 5.1) against plain lists."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from penumbra.lossy.queues import ArrivalQueue, TimeQueue

operations = st.lists(st.one_of(
    st.tuples(st.just("push"), st.integers(0, 3), st.floats(0, 1)),
    st.tuples(st.just("expire"), st.integers(0, 6), st.just(0.0))), max_size=300)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_max_bound_and_span_follow_the_live_entries(ops):
    """max u and the open-interval search equal a scan of the entries still queued,
    through pushes, dequeues by window and compactions."""
    queue, live, t = ArrivalQueue(), [], 0
    for op, step, value in ops:
        if op == "push":
            t += step
            queue.push(t, f"e{t}", 1, value)
            live.append((t, value))
        else:
            horizon = t - step
            gone = queue.expire(horizon)
            assert gone == sum(1 for time, _ in live if time <= horizon)
            live = [(time, u) for time, u in live if time > horizon]
        assert len(queue) == len(live)
        assert queue.max_bound() == max((u for _, u in live), default=0.0)
        assert queue.oldest() == (live[0][0] if live else None)
        lo, hi = t - 5, t
        assert [queue.entries[n][0] for n in queue.span(lo, hi)] == [time for time, _ in live if lo < time < hi]


def test_naq_binary_search_is_open_on_both_sides():
    queue = TimeQueue()
    for time in (1, 3, 3, 5, 8):
        queue.entries.append((time, 1, f"e{time}"))
    assert [queue.entries[n][0] for n in queue.span(1, 8)] == [3, 3, 5]
    assert list(queue.span(3, 5)) == [] and list(queue.span(8, 20)) == []
    assert queue.expire(3) == 3 and [queue.entries[n][0] for n in queue.span(0, 100)] == [5, 8]
