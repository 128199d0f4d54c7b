"""Events on the grid, and block evaluation of conditions against the per-event evaluator."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from penumbra.errors import ValidationError
from penumbra.events import Event
from penumbra.patterns.model import CompiledPattern, to_grid
from penumbra.query import parse
from penumbra.query.ast import evaluate
from penumbra.timestamps import Histogram, Interval


def test_grid_trims_instants_of_zero_probability():
    e = to_grid(Event("A", "a", Interval(2, 6, [0, 0.5, 0, 0.5, 0])), 1.0)
    assert (e.lo, e.hi, e.probs.tolist()) == (3, 5, [0.5, 0, 0.5])
    e = to_grid(Event("A", "a", Interval(1.5, 2.5)), 0.5)
    assert (e.lo, e.hi, e.probs.tolist()) == (3, 5, [1 / 3] * 3)


@pytest.mark.parametrize("ts, field", [(Interval(0.5, 1.5), "ts.lo"), (Histogram([0, 1], [1.0]), "ts")])
def test_grid_errors_name_the_field(ts, field):
    with pytest.raises(ValidationError) as caught:
        to_grid(Event("A", "a", ts), 1.0)
    assert caught.value.field == field


CONDITIONS = ["x.v % 3 = 0", "x.v / x.w > 1", "-x.v + 2 * x.w != 4", "NOT (x.v >= 2 AND x.w < 1)",
              "x.v = 1 OR x.w = 0", "x.v % x.w = 1", "NOT x.v / x.w <= 0"]
VALUES = st.one_of(st.none(), st.integers(-4, 4), st.floats(-4, 4, allow_nan=False).map(lambda f: round(f, 1)))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CONDITIONS), st.lists(st.fixed_dictionaries({"v": VALUES, "w": VALUES}), min_size=1, max_size=8),
       st.booleans())
def test_block_conditions_equal_the_evaluator(condition, rows, with_text):
    if with_text:
        rows = rows + [{"v": "7", "w": True}]
    pattern = CompiledPattern(parse(f"PATTERN SEQ(A x, B y) WHERE {condition} WITHIN 5"))
    events = [Event("A", str(k), Interval(0, 0), {key: v for key, v in row.items() if v is not None})
              for k, row in enumerate(rows)]
    chosen = {i for i, j in pattern.items_of(events) if j == 0}
    expression = parse(f"PATTERN SEQ(A x, B y) WHERE {condition} WITHIN 5").steps[0]
    expected = {i for i, e in enumerate(events) if all(evaluate(t, {"x": e.attrs}) is True for t in expression)}
    assert chosen == expected
