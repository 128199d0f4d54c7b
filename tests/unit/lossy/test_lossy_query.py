"""The SEQUENCE form of the query language (AYAC section 2.2)."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from penumbra.query import QueryError, parse
from penumbra.query.ast import evaluate
from penumbra.query.parser import parse_expression
from penumbra.query.sequence import disjunctive_normal_form


def test_shoplifting_query():
    q = parse("sequence(Shelf x, !Counter y, Exit z)\n"
              "where x.tag = z.tag and y.tag = x.tag and x.aisle = 'food'\n"
              "within 2 min threshold 0.4")
    assert q.kind == "sequence"
    assert [(c.stream, c.var, c.negated) for c in q.components] == [
        ("Shelf", "x", False), ("Counter", "y", True), ("Exit", "z", False)]
    assert q.positives == (0, 2)
    assert q.window == 120 and q.threshold == 0.4
    (clause,) = q.clauses
    assert list(clause.trivial) == ["x"]                   # x.aisle = 'food' is trivial
    assert len(clause.joint) == 2


def test_defaults_and_gaps():
    q = parse("SEQUENCE(A x, B y, C z) WHERE x.tag = z.tag AND y.tag = x.tag "
              "DEFAULT y.tag = x.tag, y.note = 'missed' "
              "GAP y = exponential(40), z = histogram(5, 1, 2, 3) WITHIN 100 THRESHOLD 0.2")
    assert set(q.defaults["y"]) == {"tag", "note"}
    assert evaluate(q.defaults["y"]["tag"], {"x": {"tag": 7}}) == 7
    assert (q.gaps["y"].family, q.gaps["y"].params) == ("exponential", (40.0,))
    assert q.gaps["z"].params == (5.0, 1.0, 2.0, 3.0)


@pytest.mark.parametrize("text,message,line,column", [
    ("SEQUENCE(A x, B y) WHERE x.v = w.v WITHIN 5 THRESHOLD 0.5", "unknown variable 'w'", 1, 32),
    ("SEQUENCE(A x,\n  B x) WITHIN 5 THRESHOLD 0.5", "names two components", 2, 3),
    ("SEQUENCE(!A x) WITHIN 5 THRESHOLD 0.5", "at least one positive", 1, 1),
    ("SEQUENCE(A x, B y) WITHIN 5 THRESHOLD 0", "threshold must be in (0, 1]", 1, 39),
    ("SEQUENCE(A x, B y) WITHIN 2.5 THRESHOLD 0.5", "whole number of time units", 1, 27),
    ("SEQUENCE(A x, B y) WITHIN 20000000 THRESHOLD 0.5", "at most 10,000,000", 1, 27),
    ("SEQUENCE(A x, B y)\nWHERE x.v > 1 AND 1 = 2 WITHIN 5 THRESHOLD 0.5", "can never hold", 2, 7),
    ("SEQUENCE(A x, !B y, !C z) WHERE y.v = z.v WITHIN 5 THRESHOLD 0.5", "one negative component", 1, 33),
    ("SEQUENCE(A x, !B y) DEFAULT y.v = 1 WITHIN 5 THRESHOLD 0.5", "only a missed positive", 1, 29),
    ("SEQUENCE(A x, B y) DEFAULT y.v = 1, y.v = 2 WITHIN 5 THRESHOLD 0.5", "two defaults", 1, 37),
    ("SEQUENCE(A x, B y) DEFAULT y.v > 1 WITHIN 5 THRESHOLD 0.5", "var.attribute = value", 1, 28),
    ("SEQUENCE(A x, B y, C z) DEFAULT y.v = y.v WITHIN 5 THRESHOLD 0.5", "y.v -> y.v refers to itself", 1, 33),
    ("SEQUENCE(A x, B y, B w, C z)\nDEFAULT y.v = x.v, y.k = w.k + 1,\n  w.k = y.k WITHIN 5 THRESHOLD 0.5",
     "y.k -> w.k -> y.k refers to itself", 2, 20),
    ("SEQUENCE(A x, B y) GAP x = uniform(1, 3) WITHIN 5 THRESHOLD 0.5", "first positive", 1, 24),
    ("SEQUENCE(A x, B y) GAP y = normal(1, 3) WITHIN 5 THRESHOLD 0.5", "unknown gap density", 1, 28),
    ("SEQUENCE(A x, B y) GAP y = uniform(3) WITHIN 5 THRESHOLD 0.5", "takes 2 argument", 1, 28),
    ("SEQUENCE(A x, B y) GAP y = uniform(3, 1) WITHIN 5 THRESHOLD 0.5", "1 <= lo <= hi", 1, 28),
    ("SEQUENCE(A x, B y) GAP y = exponential(0) WITHIN 5 THRESHOLD 0.5", "mean > 0", 1, 28),
    ("SEQUENCE(A x, B y) WHERE x WITHIN 5 THRESHOLD 0.5", "alone is not a value", 1, 26),
    ("SEQUENCE(A x, B y) WHERE f(x.v) WITHIN 5 THRESHOLD 0.5", "unknown function", 1, 26),
    ("SEQUENCE(A x B y) WITHIN 5 THRESHOLD 0.5", "unexpected 'B'", 1, 14),
    ("SEQUENCE(A x, B y) WITHIN 5", "ends too early", 1, 28),
])
def test_errors_have_line_and_column(text, message, line, column):
    with pytest.raises(QueryError) as error:
        parse(text)
    assert message in error.value.message
    assert (error.value.line, error.value.column) == (line, column)


ATOMS = ["a.v = 1", "b.v > 0", "a.w < b.w", "c.v != 2"]


@st.composite
def conditions(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(ATOMS))
    op = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if op == "NOT":
        return f"NOT ({draw(conditions(depth - 1))})"
    return f"({draw(conditions(depth - 1))} {op} {draw(conditions(depth - 1))})"


@settings(max_examples=150, deadline=None)
@given(conditions())
def test_dnf_is_equivalent_on_every_assignment(text):
    """The clauses' OR agrees with the original condition on every binding, including
    missing attributes (where a comparison is unknown and so false)."""
    expr = parse_expression(text)
    clauses = disjunctive_normal_form(expr)
    values = [None, 0, 1, 2]
    for a_v, a_w, b_v, b_w, c_v in itertools.product(values, [0, 1], values, [0, 1], [None, 2]):
        binding = {"a": {"v": a_v, "w": a_w}, "b": {"v": b_v, "w": b_w}, "c": {"v": c_v}}
        expected = evaluate(expr, binding) is True
        assert any(all(evaluate(lit, binding) is True for lit in clause) for clause in clauses) == expected


def test_trivial_predicates_per_clause():
    q = parse("SEQUENCE(A x, B y) WHERE x.k = y.k AND (x.v = 1 OR y.v = 2) WITHIN 5 THRESHOLD 0.5")
    assert [sorted(c.trivial) for c in q.clauses] == [["x"], ["y"]]
    assert all(len(c.joint) == 1 for c in q.clauses)


def test_the_documented_example_runs():
    """The query docs/lossy.md opens with is one the operator accepts."""
    from pathlib import Path

    from penumbra.events import parse_streams
    from penumbra.lossy import build_operator

    text = (Path(__file__).parents[3] / "docs" / "lossy.md").read_text().split("```")[1]
    build_operator(parse(text), parse_streams({"aisle": {"miss_prob": 0.2}, "counter": {"miss_prob": 0.1}}))
