"""A query whose other sources are silent keeps bounded state: the time its one talking
stream brings evicts what no future event of the silent ones could still match (each
stream declares how long its timestamps can be, and no delay). Checked for every form,
by the size of the operator's snapshot after 20 and after 200 blocks of one stream."""

from __future__ import annotations

import pytest

from penumbra.engine import compile_query
from penumbra.events import parse_events, parse_streams

STREAMS = parse_streams({"A": {"pi": 4, "max_delay": 2}, "B": {"pi": 4, "max_delay": 2},
                         "C": {"pi": 4, "max_delay": 2}})
QUERIES = {
    "join": "SELECT * FROM A X, B Y WHERE WINDOW(X, Y) = 10 WITH THRESHOLD 0.5",
    "keyed join": "SELECT * FROM A X, B Y WHERE WINDOW(X, Y) = 10 AND X.k = Y.k WITH THRESHOLD 0.5",
    "pattern": "PATTERN SEQ(A a, B b, C c) WHERE a.k = b.k AND b.k = c.k WITHIN 10 RETURN a, b, c",
    "sequence": "SEQUENCE(A a, B b, C c) WHERE a.k = c.k WITHIN 10 THRESHOLD 0.5",
}


def block(n: int, size: int = 50) -> list:
    """``size`` events of stream A only, in time order, 2 time units apart, 7 key values."""
    items = [{"stream": "A", "id": f"a{n}-{i}", "attrs": {"k": i % 7},
              "ts": {"lo": float(2 * (n * size + i)), "hi": float(2 * (n * size + i) + (i % 3))}}
             for i in range(size)]
    events, rejected = parse_events(items, STREAMS)
    assert not rejected
    return events


@pytest.mark.parametrize("form", sorted(QUERIES))
def test_a_query_whose_other_sources_are_silent_keeps_bounded_state(form):
    operator = compile_query(QUERIES[form], STREAMS)
    sizes = []
    for n in range(400):
        operator.feed(block(n))
        sizes.append(len(operator.snapshot()))
    # twice the events, the same state (within what counters add)
    assert max(sizes[200:]) < 1.1 * max(sizes[50:200]), (max(sizes[50:200]), max(sizes[200:]))
