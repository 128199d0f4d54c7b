"""A query checked against the registered streams: a stream not registered is named at its
line and column with the closest registered name; a join over a stream that bounds its
lengths neither by pi nor by templates is refused at that stream's name."""

from __future__ import annotations

import pytest

from penumbra.events import parse_streams
from penumbra.query import QueryError, check_registered, parse

STREAMS = parse_streams({"Seismic": {"pi": 30}, "Acoustic": {"templates": {"s1": {"edges": [0, 5], "probs": [1]}}},
                         "CPU": {}})


@pytest.mark.parametrize("text, line, column, words", [
    ("SELECT * FROM seismic A,\n  ACOUSTIK B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0.5", 2, 3,
     ["'ACOUSTIK' is not registered", "did you mean 'Acoustic'"]),
    ("PATTERN SEQ(Seismic a, Disk b) WITHIN 10", 1, 24, ["'Disk' is not registered"]),
    ("SEQUENCE(Seismic a, !Nothing b, CPU c) WITHIN 10 THRESHOLD 0.5", 1, 22, ["'Nothing' is not registered"]),
    ("SELECT * FROM Seismic A, CPU B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0.5", 1, 26,
     ["'CPU' declares neither pi", "nor templates"]),
])
def test_a_stream_the_deployment_cannot_run_is_refused_at_its_name(text, line, column, words):
    with pytest.raises(QueryError) as refused:
        check_registered(parse(text), STREAMS)
    assert (refused.value.line, refused.value.column) == (line, column)
    assert all(word in refused.value.message for word in words), refused.value.message


@pytest.mark.parametrize("text", [
    "SELECT * FROM SEISMIC A, acoustic B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0.5",   # names fold case
    "PATTERN SEQ(Seismic a, CPU b) WITHIN 10",        # patterns and sequences need no pi
    "SEQUENCE(Seismic a, !CPU b, Acoustic c) WITHIN 10 THRESHOLD 0.5",
])
def test_a_query_on_registered_streams_passes(text):
    check_registered(parse(text), STREAMS)


def test_many_registered_names_are_listed_up_to_a_dozen():
    many = parse_streams({f"s{n:02d}": {"pi": 1} for n in range(30)})
    with pytest.raises(QueryError) as refused:
        check_registered(parse("PATTERN SEQ(zzz a, s01 b) WITHIN 10"), many)
    assert "s00, s01" in refused.value.message and "and 18 more" in refused.value.message
