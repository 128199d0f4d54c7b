"""Every match names its events' time supports (``Match.times``): checked against the
input events themselves, looked up by id, for joins of the three timestamp forms,
patterns and lossy sequences, with keys and blocks."""

from __future__ import annotations

import pytest

from penumbra.engine import build_operator
from penumbra.query import parse
from tests.unit.joins.test_join_operator import workload
from tests.unit.lossy.test_lossy_operator import FIXED, HASHED, STREAMS, random_store, run
from tests.unit.test_keyed import pattern_events


def supports(events) -> dict[tuple[str, str], tuple[float, float]]:
    """(stream, id) -> (earliest, latest) of each event's timestamp as given."""
    out = {}
    for e in events:
        ts = e.ts
        edges = getattr(ts, "edges", None)
        out[(e.stream.casefold(), e.id)] = (float(edges[0]), float(edges[-1])) if edges is not None \
            else (float(ts.lo), float(ts.hi))
    return out


def check(matches, events, streams_of: dict[str, str]) -> None:
    known = supports(events)
    assert matches
    for m in matches:
        assert set(m.times) == set(m.events), m
        for var, event_id in m.events.items():
            assert tuple(m.times[var]) == known[(streams_of[var], event_id)], (var, event_id)


@pytest.mark.parametrize("kind", ["templates", "histograms", "intervals", "mixed"])
@pytest.mark.parametrize("keyed", [False, True])
def test_join_matches_carry_both_events_supports(kind, keyed):
    streams, events = workload(61, kind, n=300, late_share=0.0)
    text = ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10" + (" AND A.region = B.region" if keyed else "")
            + " WITH THRESHOLD 0.3")
    operator = build_operator(parse(text), streams)
    found = []
    for start in range(0, len(events), 97):
        found += list(operator.feed(events[start:start + 97]).matches)
    found += list(operator.flush().matches)
    check(found, events, {"A": "s", "B": "t"})


def test_pattern_matches_carry_their_returned_events_intervals():
    streams, events = pattern_events(62, n=600)
    text = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node "
            "AND skip_till_any_match(a, b, c) WITHIN 30 RETURN a, c")
    operator = build_operator(parse(text), streams)
    found = list(operator.feed(events).matches) + list(operator.flush().matches)
    check(found, events, {"a": "a", "c": "c"})


def test_lossy_matches_carry_their_observed_events_times():
    events = random_store(63)
    operator = build_operator(parse(FIXED.format(eq=HASHED, p=0.05)), STREAMS)
    found = run(operator, events)
    assert any(len(m.events) < 3 for m in found)
    check(found, events, {"x": "shelf", "a": "aisle", "z": "exit"})
