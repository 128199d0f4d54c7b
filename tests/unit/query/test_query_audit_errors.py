"""Queries the CLI audit found breaking the `penumbra eval` contract (exit 2 with one line
naming the line and column, never a traceback or a numpy warning): windows beyond any
float, constants OR-ed into one-source conditions, extreme gap densities and templates,
and error positions (duplicate variables, lines counted as lark counts them). Each
accepted query is checked against an equivalent query written another way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from penumbra.cli import main
from penumbra.query import QueryError, parse
from penumbra.query.ast import evaluate
from penumbra.query.block import block_filter

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CLUSTER = EXAMPLES / "cluster"
SHOP = EXAMPLES / "shoplifting"
SEISMIC = EXAMPLES / "seismic"
SHOP_QUERY = "SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag {} WITHIN 600 THRESHOLD 0.5"


def run(capsys, query, example, streams=None):
    code = main(["eval", "--query", query, "--streams", str(streams or example / "streams.json"),
                 "--events", str(example / "events.jsonl")])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, query, example, streams=None) -> str:
    """The one line of a refused query (exit 2, nothing on stdout)."""
    code, out, err = run(capsys, query, example, streams)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    return err


def same_matches(capsys, query, expected_query, example, streams=None, expected_streams=None):
    """``query`` runs cleanly and finds what ``expected_query`` finds."""
    code, out, err = run(capsys, query, example, streams)
    assert (code, err) == (0, "")
    assert run(capsys, expected_query, example, expected_streams) == (0, out, "")
    return out


# --- windows beyond the largest float ---------------------------------------------------

@pytest.mark.parametrize("text, column, words", [
    ("PATTERN SEQ(A a, B b) WITHIN 1e308 h", 30, "WITHIN 1e+308 h is too long"),
    ("PATTERN SEQ(A a, B b) WITHIN 1e307 minutes", 30, "WITHIN 1e+307 minutes is too long"),
    ("SEQUENCE(A x, B y) WITHIN 1e306 h THRESHOLD 0.5", 27, "at most 10,000,000 time units"),
])
def test_a_window_beyond_any_float_is_refused_at_within(text, column, words):
    with pytest.raises(QueryError) as caught:
        parse(text)
    assert (caught.value.line, caught.value.column) == (1, column) and words in caught.value.message


def test_the_cli_refuses_a_window_beyond_any_float_in_one_line(capsys):
    err = refused(capsys, "PATTERN SEQ(TaskStart a, CPU b) WITHIN 1e308 h", CLUSTER)
    assert "line 1, column 40: WITHIN 1e+308 h is too long" in err
    err = refused(capsys, SHOP_QUERY.format("").replace("WITHIN 600", "WITHIN 1e306 h"), SHOP)
    assert "too long: at most 10,000,000 time units" in err


# --- constants OR-ed, AND-ed and negated into one-source conditions ---------------------

@pytest.mark.parametrize("query, expected", [
    ("SELECT * FROM CPU A, TaskStart B WHERE WINDOW(A, B) = 5 AND (1 = 2 OR A.value > 3) WITH THRESHOLD 0.2",
     "SELECT * FROM CPU A, TaskStart B WHERE WINDOW(A, B) = 5 AND A.value > 3 WITH THRESHOLD 0.2"),
    ("PATTERN SEQ(TaskStart a, CPU b) WHERE (b.value > 95 OR 1 = 2) WITHIN 150",
     "PATTERN SEQ(TaskStart a, CPU b) WHERE b.value > 95 WITHIN 150"),
    ("PATTERN SEQ(TaskStart a, CPU b) WHERE ((b.value > 95 AND NOT 1 = 2) OR 1 = 2) WITHIN 150",
     "PATTERN SEQ(TaskStart a, CPU b) WHERE b.value > 95 WITHIN 150"),
    ("PATTERN SEQ(TaskStart a, CPU b) WHERE (b.value > 95 OR 2 > 1) WITHIN 150",
     "PATTERN SEQ(TaskStart a, CPU b) WITHIN 150"),
])
def test_a_constant_comparison_in_a_one_source_condition(capsys, query, expected):
    assert same_matches(capsys, query, expected, CLUSTER)


# (a top-level AND is split into conditions of their own, and a constant one is refused)
CONSTANT_CASES = ["(1 = 2 OR A.x > 3)", "(A.x > 3 OR 1 = 2)", "(A.x > 3 OR 1 < 2)", "((1 = 1 AND A.x > 3) OR A.y = 1)",
                  "NOT (A.x > 3 AND 2 = 3)", "NOT (1 = 2 OR A.x > 3)", "NOT (NOT 1 = 2 AND A.x < 0)",
                  "(A.x > 3 OR (1 = 1 AND 2 = 2))", "(A.x > 3 OR NOT (1 = 1 AND 2 = 2))",
                  "(A.x / A.y > 1 OR 1 = 1)", "(A.x + 1 > 3 AND (2 = 2 OR A.y = 1))", "NOT (A.x = 1 AND 1 = 1)"]
NUMERIC_EVENTS = [{"x": 5}, {"x": 2.5}, {"x": -1}, {"x": 0, "y": 1}, {}, {"y": 1}, {"x": 3, "y": 1.0}]


def one_source_filters(condition: str):
    return parse(f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = 1 AND {condition} WITH THRESHOLD 0.5").filters["A"]


@pytest.mark.parametrize("condition", CONSTANT_CASES)
def test_the_block_decides_constants_as_the_per_event_evaluator(condition):
    filters = list(one_source_filters(condition))
    expected = [all(evaluate(f, {"A": e}) is True for f in filters) for e in NUMERIC_EVENTS]
    assert block_filter(filters, "A", NUMERIC_EVENTS).tolist() == expected


@st.composite
def mixed_terms(draw, depth=0):
    """Conditions on A mixing attribute tests and comparisons of constants under AND, OR and NOT."""
    if depth < 3 and draw(st.booleans()):
        op = draw(st.sampled_from(["AND", "OR"]))
        return f"({draw(mixed_terms(depth + 1))} {op} {draw(mixed_terms(depth + 1))})"
    if depth < 3 and draw(st.integers(0, 4)) == 0:
        return f"NOT ({draw(mixed_terms(depth + 1))})"
    numbers = st.sampled_from(["0", "1", "2.5", "-3"])
    left = draw(st.one_of(numbers, st.sampled_from(["A.x", "A.y", "(A.x + 1)"])))
    return f"{left} {draw(st.sampled_from(['=', '!=', '<', '<=', '>', '>=']))} {draw(numbers)}"


@settings(max_examples=300, deadline=None)
@given(mixed_terms(), st.lists(st.dictionaries(st.sampled_from(["x", "y"]),
                                               st.one_of(st.integers(-5, 5), st.floats(-5, 5), st.none())),
                               min_size=1, max_size=8))
def test_a_block_with_constants_decides_what_each_event_decides(condition, events):
    try:
        filters = list(one_source_filters(condition))
    except QueryError:   # a condition of constants alone refers to no source
        reject()
    expected = [all(evaluate(f, {"A": e}) is True for f in filters) for e in events]
    assert block_filter(filters, "A", events).tolist() == expected


# --- extreme gap densities and templates ------------------------------------------------

@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("gap, equivalent", [
    ("GAP z = exponential(1e-320)", "GAP z = uniform(1, 1)"),     # a vanishing mean: every gap is 1
    ("GAP z = histogram(10, 1e308, 1e308)", "GAP z = histogram(10, 1, 1)"),
    ("GAP z = histogram(10, 5e-324, 1e-323)", "GAP z = histogram(10, 1, 2)"),
])
def test_extreme_gap_parameters_in_a_query_mean_their_density(capsys, gap, equivalent):
    same_matches(capsys, SHOP_QUERY.format(gap), SHOP_QUERY.format(equivalent), SHOP)


def streams_with(tmp_path, name, change):
    streams = json.loads((SHOP / "streams.json").read_text())
    change(streams)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(streams))
    return path


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("gap, equivalent", [
    ({"histogram": {"width": 1, "weights": [1e308, 1e308]}}, {"histogram": {"width": 1, "weights": [1, 1]}}),
    ({"exponential": 1e-320}, {"uniform": [1, 1]}),
])
def test_extreme_gap_parameters_in_a_streams_file_mean_their_density(capsys, tmp_path, gap, equivalent):
    streams = streams_with(tmp_path, "extreme", lambda s: s["counter"].update(gap=gap))
    expected = streams_with(tmp_path, "expected", lambda s: s["counter"].update(gap=equivalent))
    same_matches(capsys, SHOP_QUERY.format(""), SHOP_QUERY.format(""), SHOP, streams, expected)


@pytest.mark.filterwarnings("error")
def test_a_template_spanning_more_than_a_float_is_refused_naming_the_field(capsys, tmp_path):
    streams = json.loads((SEISMIC / "streams.json").read_text())
    streams["seismic"]["templates"]["s1"]["edges"] = [-1e308, 0, 1, 1e308]
    path = tmp_path / "streams.json"
    path.write_text(json.dumps(streams))
    err = refused(capsys, (SEISMIC / "query.pq").read_text(), SEISMIC, path)
    assert "seismic.templates.s1.edges: spans more than a float holds" in err


# --- error positions --------------------------------------------------------------------

@pytest.mark.parametrize("query, example, words", [
    ("SELECT * FROM SEISMIC A,\n  ACOUSTIC A WHERE WINDOW(A, A) = 2000 WITH THRESHOLD 0.6", SEISMIC,
     "the two sources need different variables"),
    ("PATTERN SEQ(TaskStart a,\n  CPU a) WITHIN 150", CLUSTER, "variable 'a' is used twice"),
    ("SEQUENCE(Shelf x,\n  Exit x) WITHIN 600 THRESHOLD 0.5", SHOP, "variable 'x' names two components"),
])
def test_a_duplicate_variable_is_reported_where_it_is_repeated(capsys, query, example, words):
    assert f"query: line 2, column 3: {words}" in refused(capsys, query, example)


def end_and_token_positions(ended: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Where the parser says ``ended`` ends too early, and where lark puts a token just after."""
    with pytest.raises(QueryError) as at_end:
        parse(ended)
    with pytest.raises(QueryError) as at_token:
        parse(ended + "@")
    assert "ends too early" in at_end.value.message and "unexpected character '@'" in at_token.value.message
    return (at_end.value.line, at_end.value.column), (at_token.value.line, at_token.value.column)


@pytest.mark.parametrize("separator", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"])
def test_only_a_newline_ends_a_line_in_comments_and_strings(separator):
    ended = (f"SELECT * FROM S A, T B -- note{separator}more\n"
             f"WHERE A.s = 'a{separator}b' AND WINDOW(A, B) = 10 WITH THRESHOLD")
    assert end_and_token_positions(ended) == ((2, 55), (2, 55))


@pytest.mark.parametrize("separator, line, column", [("\r", 1, 62), ("\x0c", 1, 62), ("\r\n", 3, 15), ("\n", 3, 15)])
def test_only_a_newline_ends_a_line_between_tokens(separator, line, column):
    ended = f"SELECT * FROM S A, T B{separator}WHERE WINDOW(A, B) = 10{separator}WITH THRESHOLD"
    assert end_and_token_positions(ended) == ((line, column), (line, column))


def test_the_end_of_a_query_is_after_its_last_non_blank_character():
    assert end_and_token_positions("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10\nWITH THRESHOLD  \n\n")[0] == (2, 15)
