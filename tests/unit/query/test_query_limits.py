"""The parser's limits: what the largest query the API takes (20,000 characters) can hold,
each shape that once took the parser down, and time that grows linearly with the
query's length whatever its shape."""

from __future__ import annotations

import time

import pytest

from penumbra.query import QueryError, parse
from penumbra.query.ast import MAX_DEPTH

CAP = 20_000  # the API's largest query text

JOIN = "SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND {} WITH THRESHOLD 0.5"
#: the worst shapes: a query of ``n`` repetitions of the part each form repeats
SHAPES = {
    "AND chain": lambda n: JOIN.format(" AND ".join(["A.x = 1"] * n)),
    "OR chain": lambda n: JOIN.format("(" + " OR ".join(["A.x = 'v'"] * n) + ")"),
    "nesting at the limit, repeated": lambda n: JOIN.format(
        " AND ".join(["(" * (MAX_DEPTH - 3) + "A.x = 1" + ")" * (MAX_DEPTH - 3)] * max(1, n // 60))),
    "arithmetic at the limit, repeated": lambda n: JOIN.format(
        " AND ".join(["A.x = " + " + ".join(["1"] * (MAX_DEPTH - 2))] * max(1, n // 60))),
    "comments": lambda n: JOIN.format("A.x = 1" + " -- note\n AND A.x = 1" * n),
    "pattern conditions": lambda n: "PATTERN SEQ(SA a, SB b, SC c) WHERE " + " AND ".join(
        ["a.k = b.k AND b.v > 95"] * max(1, n // 3)) + " WITHIN 10",
    "sequence clauses at the cap": lambda n: "SEQUENCE(SA x, !SB y, SC z) WHERE " + " AND ".join(
        ["(x.k = 1 OR z.k = 2)"] * 6 + ["x.k = z.k"] * n) + " WITHIN 10 THRESHOLD 0.5",
}


def seconds(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        parse(text)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_parse_time_grows_linearly_with_the_length(shape):
    build = SHAPES[shape]
    small, large = build(200), build(1600)
    assert len(large) <= 2.2 * CAP  # about the largest query anyone can send
    ratio = seconds(large) / seconds(small)
    growth = len(large) / len(small)
    # linear: about `growth`; quadratic would be its square (about 60)
    assert ratio < 3 * growth, f"{shape}: {len(small)} -> {len(large)} characters, time x{ratio:.1f}"


@pytest.mark.parametrize("text, words", [
    (JOIN.format("NOT " * 4000 + "A.x = 1"), "nests too deeply"),
    (JOIN.format("A.x = " + "- " * 5000 + "A.y"), "nests too deeply"),
    (JOIN.format("A.x = " + " + ".join(["1"] * 3000)), "nests too deeply"),
    (JOIN.format("A.x = " + "9" * 19_000), "is too large"),
    (JOIN.format("A.x = 1e999"), "is too large"),
    (JOIN.format("A.x = 9223372036854775808"), "is too large"),
    ("SEQUENCE(SA x, SB y) WHERE " + " AND ".join(["(x.k = 1 OR y.k = 2)"] * 300) + " WITHIN 10 THRESHOLD 0.5",
     "clauses in disjunctive normal form"),
])
def test_a_query_beyond_a_limit_is_refused_at_once_with_its_place(text, words):
    started = time.perf_counter()
    with pytest.raises(QueryError) as refused:
        parse(text)
    assert words in refused.value.message
    assert refused.value.line == 1 and 1 <= refused.value.column <= len(text)
    assert time.perf_counter() - started < 10.0  # no exponential work before the refusal


def test_the_largest_numbers_within_the_limits_are_kept_exactly():
    query = parse(JOIN.format("A.x = 9223372036854775807 AND A.y < 1.7976931348623157e308"))
    values = sorted(str(term.right.value) for term in query.filters["A"])
    assert values == ["1.7976931348623157e+308", "9223372036854775807"]
    assert parse(JOIN.format(" AND ".join(["A.x = 1"] * 2500))).filters["A"][-1].right.value == 1
