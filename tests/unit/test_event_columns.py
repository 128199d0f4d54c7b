"""Events as columns (penumbra/events/columns.py): what goes through bytes comes back the
same (every kind of timestamp and attribute value, including what JSON cannot carry), and
a join fed the columns from bytes finds what it finds fed the events."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, reject, settings, strategies as st

from penumbra.engine import compile_query
from penumbra.errors import ValidationError
from penumbra.events import parse_event
from penumbra.events.columns import EventColumns
from penumbra.timestamps import Histogram
from tests.unit.joins.test_join_operator import workload

STREAM_PARAMS = {"S": {"templates": {"t": {"edges": [0, 1, 3], "probs": [0.5, 0.5]}}, "pi": 50}}

values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.floats(allow_nan=False, allow_infinity=False), st.just(-0.0),
    st.text(max_size=8), st.just("\ud800"))     # a lone surrogate: JSON text cannot carry it


@st.composite
def events(draw):
    from penumbra.events import parse_streams

    streams = parse_streams(STREAM_PARAMS)
    kind = draw(st.sampled_from(["interval", "histogram", "template", "pmf"]))
    lo = draw(st.floats(min_value=-1e6, max_value=1e6))
    if kind == "interval":
        ts = {"lo": lo, "hi": lo + draw(st.floats(min_value=0, max_value=40))}
    elif kind == "histogram":
        ts = {"edges": [lo, lo + 1, lo + 4], "probs": [0.25, 0.75]}
    elif kind == "template":
        ts = {"detected": lo, "template": "t"}
    else:       # an interval of whole units with a pmf: no continuous reading, a join rejects it
        ts = {"lo": 0, "hi": 2, "pmf": [0.25, 0.5, 0.25]}
    attrs = draw(st.dictionaries(st.sampled_from(["a", "b", "k"]), values, max_size=3))
    try:
        return parse_event({"stream": draw(st.sampled_from(["S", "s", "T"])),
                            "id": draw(st.text(alphabet="abcXYZ-_09é€", min_size=1, max_size=6)),
                            "ts": ts, "attrs": attrs}, streams)
    except ValidationError:
        reject()


def same(x, y) -> bool:
    """Equal, and of the same JSON kind (1 is not 1.0 nor True; -0.0 is not 0.0)."""
    if isinstance(x, float) and isinstance(y, float):
        return x == y and math.copysign(1, x) == math.copysign(1, y)
    return type(x) is type(y) and x == y


@settings(max_examples=200, deadline=None)
@given(st.lists(events(), max_size=12))
def test_columns_come_back_from_bytes_as_they_went(block):
    columns = EventColumns.from_events(block)
    back = EventColumns.from_bytes(columns.to_bytes())
    assert len(back) == len(block)
    assert back.streams.tolist() == [e.stream for e in block] and back.ids.tolist() == [e.id for e in block]
    assert back.templates.tolist() == [e.template for e in block]
    assert np.array_equal(back.block.edges, columns.block.edges) and np.array_equal(back.block.probs, columns.block.probs)
    for i, event in enumerate(block):
        assert back.attrs[i].keys() == event.attrs.keys()
        assert all(same(back.attrs[i][k], v) for k, v in event.attrs.items()), (back.attrs[i], event.attrs)
        if back.problems[i] is None:
            h = event.histogram
            assert back.block.lo[i] == h.lo and back.block.hi[i] == h.hi
            made = back.event(i)
            assert made.id == event.id and made.stream == event.stream and made.template == event.template
            assert isinstance(made.ts, Histogram) and made.ts.lo == h.lo and made.ts.hi == h.hi
        else:
            with pytest.raises(Exception) as raised:
                event.histogram
            assert back.problems[i] == str(raised.value)
        assert back.event(i) is back.event(i), "an event is made once"


@pytest.mark.parametrize("kind", ["templates", "intervals", "mixed"])
@pytest.mark.parametrize("strategy", ["lazy", "ssort"])
def test_a_join_fed_columns_from_bytes_finds_what_it_finds_fed_events(kind, strategy):
    streams, block = workload(21, kind, n=300, late_share=0.05)
    text = ("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 12 AND A.region = B.region AND B.v > 2 "
            f"WITH THRESHOLD 0.4 USING {strategy}")
    fed_events, fed_columns = compile_query(text, streams), compile_query(text, streams)
    for start in range(0, len(block), 37):
        events = block[start:start + 37]
        a = fed_events.feed(events)
        b = fed_columns.feed(EventColumns.from_bytes(EventColumns.from_events(events).to_bytes()))
        assert [(m.events, m.prob, m.key, m.times, m.partition, m.records) for m in a.matches] == \
            [(m.events, m.prob, m.key, m.times, m.partition, m.records) for m in b.matches]
        assert [(x.event.id, x.reason) for x in a.late] == [(x.event.id, x.reason) for x in b.late]
        assert a.observations["counters"] == b.observations["counters"]
    assert fed_events.totals["late"] > 0 and fed_events.totals["matches"] > 20
