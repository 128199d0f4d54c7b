"""The join form of the query language and the parser's errors."""

from __future__ import annotations

import pytest

from penumbra.query import JOIN_STRATEGIES, QueryError, parse, parse_expression
from penumbra.query.ast import Attr, Compare, Const, evaluate


def test_the_papers_query():
    q = parse("select * from SEISMIC A, ACOUSTIC B where WINDOW(A, B) = 2000 with THRESHOLD 0.6")
    assert (q.kind, q.left.stream, q.left.var, q.right.stream, q.right.var) == ("join", "SEISMIC", "A", "ACOUSTIC", "B")
    assert (q.window, q.threshold, q.strategy, q.keys, q.filters) == (2000.0, 0.6, None, (), {})


@pytest.mark.parametrize("strategy", JOIN_STRATEGIES)
def test_strategies_keys_and_filters(strategy):
    q = parse(f"""SELECT * FROM s A, t B
                  WHERE A.region = B.zone AND WINDOW(B, A) = 1.5e3 AND A.value > 95 AND B.ok = TRUE
                  WITH THRESHOLD .7 USING {strategy.upper()}""")
    assert q.keys == (("region", "zone"),) and q.window == 1500.0 and q.strategy == strategy
    assert q.filters["A"] == (Compare(">", Attr("A", "value"), Const(95)),)
    assert evaluate(q.filters["B"][0], {"B": {"ok": True}}) is True


@pytest.mark.parametrize("text,line,column,words", [
    ("", 1, 1, "empty"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10", 1, 47, "ends too early"),
    ("SELECT * FROM S A T B", 1, 19, "unexpected 'T'"),
    ("SELECT * FROM S A, T B\n  WHERE WINDOW(A, C) = 10 WITH THRESHOLD 0.5", 2, 9, "two join variables"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) > 10 WITH THRESHOLD 0.5", 1, 30, "takes '='"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = A.x WITH THRESHOLD 0.5", 1, 45, "must be a number"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = -5 WITH THRESHOLD 0.5", 1, 45, ">= 0"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND WINDOW(A, B) = 6 WITH THRESHOLD 0.5", 1, 51, "twice"),
    ("SELECT * FROM S A, T B WHERE A.x = 1 WITH THRESHOLD 0.5", 1, 1, "needs WINDOW"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 1.5", 1, 62, "(0, 1]"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0", 1, 62, "(0, 1]"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0.5 USING fast", 1, 72, "unknown strategy"),
    ("SELECT * FROM S A, T A WHERE WINDOW(A, A) = 5 WITH THRESHOLD 0.5", 1, 20, "different variables"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND C.x = 1 WITH THRESHOLD 0.5", 1, 51, "unknown variable 'C'"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.x < B.y WITH THRESHOLD 0.5", 1, 51, "equality"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND 1 = 1 WITH THRESHOLD 0.5", 1, 51, "refer to"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 OR A.k = B.k WITH THRESHOLD 0.5", 1, 30, "joined to the others by AND"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.k = 'x' + 1 WITH THRESHOLD 0.5", 1, 57, "no value"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 AND A.k % (2 - 2) > 1 WITH THRESHOLD 0.5", 1, 51, "no value"),
    ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0.5 $", 1, 66, "unexpected character '$'"),
])
def test_errors_point_at_the_text(text, line, column, words):
    with pytest.raises(QueryError) as error:
        parse(text)
    assert (error.value.line, error.value.column) == (line, column), str(error.value)
    assert words in error.value.message


def test_expressions_evaluate_with_sql_like_nulls():
    env = {"a": {"x": 4, "s": "ab", "n": None}}
    assert evaluate(parse_expression("a.x * 2 + 1 = 9 AND a.x % 3 = 1"), env) is True
    assert evaluate(parse_expression("NOT (a.x > 5 OR a.s = 'zz')"), env) is True
    assert evaluate(parse_expression("a.missing > 1"), env) is None
    # unknown stays unknown under NOT, as in SQL: NOT (v = 1) fails where v is missing, as v != 1 does
    assert evaluate(parse_expression("NOT a.missing > 1"), env) is None
    assert evaluate(parse_expression("NOT (a.missing = 1)"), env) is evaluate(parse_expression("a.missing != 1"), env)
    assert evaluate(parse_expression("a.missing = 1 OR a.x = 4"), env) is True
    assert evaluate(parse_expression("a.missing = 1 OR a.x = 5"), env) is None
    assert evaluate(parse_expression("NOT (a.missing = 1 AND a.x = 5)"), env) is True
    assert evaluate(parse_expression("NOT (a.missing = 1 AND a.x = 4)"), env) is None
    # JSON's kinds: true is not 1, 1 is 1.0
    flags = {"a": {"t": True, "one": 1}}
    assert evaluate(parse_expression("a.t = 1"), flags) is False
    assert evaluate(parse_expression("a.t != 1"), flags) is True
    assert evaluate(parse_expression("a.t = true AND a.one = 1.0 AND a.one != true"), flags) is True
    assert evaluate(parse_expression("a.x / 0 = 1"), env) is None
    assert evaluate(parse_expression("a.s < 3"), env) is None
    assert evaluate(parse_expression("-a.x = -4"), env) is True
