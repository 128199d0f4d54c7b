"""The pattern form of the query language: what it builds and how it refuses bad text."""

from __future__ import annotations

import pytest

from penumbra.query import QueryError, parse
from penumbra.query.ast import Compare

QUERY_1 = """PATTERN SEQ(TaskStart a, CPU b, TaskFinish c, CPU d)
WHERE a.taskId = c.taskId AND b.nodeId = a.nodeId AND d.nodeId = a.nodeId
  AND b.value > 95 AND d.value <= 70 AND skip_till_any_match(a, b, c, d)
WITHIN 15 seconds
RETURN a, b, c"""


def test_query_1():
    query = parse(QUERY_1)
    assert query.kind == "pattern"
    assert [(c.stream, c.var) for c in query.components] == [("TaskStart", "a"), ("CPU", "b"),
                                                            ("TaskFinish", "c"), ("CPU", "d")]
    assert query.window == 15.0 and query.strategy == "skip_till_any_match"
    assert query.returns == ("a", "b", "c") and query.threshold is None and query.method == "sorted"
    # each conjunct is checked at the component of its last variable
    assert [len(step) for step in query.steps] == [0, 2, 1, 2]
    assert query.partition is None  # c shares no equality with the others


def test_options_and_partition():
    query = parse("pattern seq(A x, A y, B z) where x.n = y.n and z.n = y.n and x.v * 2 + 1 >= z.v % 3 "
                  "and not (y.v = 1 or y.v = 2) and skip_till_next_match(x, y, z) "
                  "within 2 min with confidence 0.25 using selectivity")
    assert query.partition == ("n", "n", "n")
    assert query.window == 120.0 and query.threshold == 0.25 and query.method == "selectivity"
    assert query.strategy == "skip_till_next_match" and query.returns == ("x", "y", "z")
    assert isinstance(query.steps[2][-1], Compare)


@pytest.mark.parametrize("text, message, line, column", [
    ("PATTERN SEQ(A a, B b) WHERE c.x = 1 WITHIN 5", "unknown variable 'c'", 1, 29),
    ("PATTERN SEQ(A a, B b) WITHIN 5 USING fast", "unknown method 'fast'", 1, 38),
    ("PATTERN SEQ(A a, B a) WITHIN 5", "variable 'a' is used twice", 1, 18),
    ("PATTERN SEQ(A a, B b) WHERE skip_till_next_match(b, a) WITHIN 5", "skip_till_next_match(a, b)", 1, 29),
    ("PATTERN SEQ(A a, B b)\n  WITHIN 5 RETURN z", "RETURN names unknown variable 'z'", 2, 19),
    ("PATTERN SEQ(A a, B b) WITHIN 5 RETURN a, a", "RETURN names 'a' twice", 1, 42),
    ("PATTERN SEQ(A a, B b) WITHIN 0", "the window must be > 0", 1, 30),
    ("PATTERN SEQ(A a, B b) WITHIN 5 WITH CONFIDENCE 1.5", "the confidence must be in (0, 1]", 1, 48),
    ("PATTERN SEQ(A a, B b) WHERE a AND b.x = 1 WITHIN 5", "a bare variable 'a'", 1, 29),
    ("PATTERN SEQ(A a, B b) WHERE first(a) WITHIN 5", "unknown function 'first'", 1, 29),
    ("PATTERN SEQ(A a, B b) WHERE 1 = 1 WITHIN 5", "must refer to a component's attribute", 1, 29),
    ("PATTERN SEQ(A a, B b) WHERE skip_till_any_match(a, b) AND skip_till_any_match(a, b) WITHIN 5",
     "given twice", 1, 59),
    ("PATTERN SEQ(A a, B b) WHERE a.x = 1", "ends too early", 1, 36),
    ("PATTERN SEQ(A a B b) WITHIN 5", "unexpected 'B'", 1, 17),
])
def test_errors_name_the_problem_and_place(text, message, line, column):
    with pytest.raises(QueryError) as caught:
        parse(text)
    assert message in caught.value.message
    assert (caught.value.line, caught.value.column) == (line, column)
