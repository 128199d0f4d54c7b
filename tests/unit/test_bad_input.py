"""Bad input of any shape gets a clear error, never a crash: random JSON for events and
stream parameters, random text for queries."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from penumbra.errors import ValidationError
from penumbra.events import Event, parse_event, parse_event_line, parse_streams
from penumbra.query import QueryError, parse

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=5))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                           max_leaves=12)
field_names = st.sampled_from(["stream", "id", "ts", "attrs", "lo", "hi", "pmf", "edges", "probs", "detected",
                               "template", "max_delay", "pi", "rho", "miss_prob", "templates"])
event_like = st.fixed_dictionaries(
    {"stream": st.one_of(st.just("s"), scalars), "id": st.one_of(st.just("x"), scalars)},
    optional={"ts": st.one_of(json_values, st.dictionaries(field_names, json_values, max_size=4),
                              st.fixed_dictionaries({"lo": scalars, "hi": scalars})),
              "attrs": st.one_of(json_values, st.dictionaries(st.text(max_size=4), scalars, max_size=3))})
STREAMS = parse_streams({"s": {"templates": {"t": {"edges": [0, 1], "probs": [1]}}}})


@settings(max_examples=400, deadline=None)
@given(st.one_of(json_values, event_like))
def test_events_of_any_shape(value):
    try:
        assert isinstance(parse_event(value, STREAMS), Event)
    except ValidationError as error:
        assert str(error)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_event_lines_of_any_text(text):
    try:
        parse_event_line(text, STREAMS)
    except ValidationError as error:
        assert str(error)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), st.one_of(json_values, st.dictionaries(field_names, json_values,
                                                                                      max_size=4)), max_size=3))
def test_stream_parameters_of_any_shape(value):
    try:
        parse_streams(json.loads(json.dumps(value, allow_nan=True)))
    except ValidationError as error:
        assert str(error)


query_words = st.sampled_from(["SELECT", "*", "FROM", "S", "A", ",", "T", "B", "WHERE", "WINDOW", "(", ")", "=",
                               "2000", "AND", "A.x", "B.y", "WITH", "THRESHOLD", "0.6", "USING", "lazy", "OR",
                               "NOT", "-", "1e9", "'s'", "\n", "PATTERN", "SEQ", "SEQUENCE", "WITHIN", "!",
                               "skip_till_any_match", "RETURN", "CONFIDENCE", "1.5", "0"])


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60), st.lists(query_words, max_size=30).map(" ".join)))
def test_queries_of_any_text(text):
    try:
        parse(text)
    except QueryError as error:
        assert str(error) and error.line is not None and error.column is not None
