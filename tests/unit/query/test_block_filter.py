"""A block's one-source conditions on numpy columns decide exactly what the per-event
evaluator decides: random conditions (comparisons, arithmetic with division and modulo by
zero, NOT, AND, OR) over random attributes (integers beyond 2**53, or whose products are,
floats, negative zero,
strings, booleans, missing ones), against ``evaluate`` event by event."""

from __future__ import annotations

from hypothesis import given, reject, settings
from hypothesis import strategies as st

from penumbra.query import QueryError, parse
from penumbra.query.ast import evaluate
from penumbra.query.block import block_filter

VALUES = st.one_of(st.integers(-50, 50), st.integers(2 ** 53 - 2, 2 ** 53 + 3), st.integers(10 ** 7, 10 ** 9),
                   st.floats(-60, 60, allow_nan=False),
                   st.just(-0.0), st.sampled_from(["a", "b", ""]), st.booleans(), st.none())
NUMBERS = st.sampled_from(["0", "3", "40", "2.5", "-1", "9007199254740993"])
ATTRS = st.sampled_from(["A.x", "A.y", "A.z"])


@st.composite
def terms(draw, depth=0):
    if depth < 2 and draw(st.booleans()):
        op = draw(st.sampled_from(["AND", "OR"]))
        return f"({draw(terms(depth + 1))} {op} {draw(terms(depth + 1))})"
    if depth < 2 and draw(st.integers(0, 5)) == 0:
        return f"NOT ({draw(terms(depth + 1))})"
    left = draw(ATTRS)
    if draw(st.booleans()):
        left = f"({left} {draw(st.sampled_from(['+', '-', '*', '/', '%']))} {draw(st.one_of(NUMBERS, ATTRS))})"
    right = draw(st.one_of(NUMBERS, ATTRS, st.just("'a'")))
    return f"{left} {draw(st.sampled_from(['=', '!=', '<', '<=', '>', '>=']))} {right}"


@settings(max_examples=300, deadline=None)
@given(terms(), st.lists(st.dictionaries(st.sampled_from(["x", "y", "z"]), VALUES), min_size=1, max_size=12))
def test_a_block_decides_what_each_event_decides(condition, events):
    try:
        query = parse(f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = 1 AND {condition} WITH THRESHOLD 0.5")
    except QueryError as error:      # a division by a constant zero is refused: it could never hold
        assert "no value whatever the events say" in error.message
        reject()
    filters = list(query.filters.get("A", ()))
    assert filters, "the condition is one-source on A"
    expected = [all(evaluate(f, {"A": e}) is True for f in filters) for e in events]
    assert block_filter(filters, "A", events).tolist() == expected


def test_integers_whose_product_passes_2_53_are_computed_exactly():
    """100000001 squared is odd, but as a float it rounds to an even number: the block
    computes it as the evaluator does, exactly."""
    condition = parse("PATTERN SEQ(A a, B b) WHERE a.v * a.v % 2 = 1 WITHIN 10").steps[0][0]
    events = [{"v": 100000001}, {"v": 3}, {"v": 4}]
    assert block_filter([condition], "a", events).tolist() == [True, True, False]
    assert [evaluate(condition, {"a": e}) for e in events] == [True, True, False]
