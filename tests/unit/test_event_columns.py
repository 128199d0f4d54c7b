"""Events as columns (penumbra/events/columns.py): what goes through bytes comes back the
same (every kind of timestamp and attribute value, including what JSON cannot carry), and
a join fed the columns from bytes finds what it finds fed the events."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, reject, settings, strategies as st

from penumbra.engine import compile_query
from penumbra.errors import ValidationError
from penumbra.events import parse_event
from penumbra.events.columns import EventColumns, events_from_bytes
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


def assert_rows_by_stream(columns: EventColumns, sent: list[str]) -> None:
    """Each stream's rows (case folded) are those of the events sent with a spelling of it."""
    assert columns.streams.tolist() == sent
    for stream in ("s", "t", "u", "S"):
        assert columns.rows_of(stream).tolist() == [i for i, name in enumerate(sent) if name.casefold() == stream]


@settings(max_examples=200, deadline=None)
@given(st.lists(events(), max_size=12))
def test_columns_come_back_from_bytes_as_they_went(block):
    columns = EventColumns.from_events(block)
    back = EventColumns.from_bytes(columns.to_bytes())
    assert len(back) == len(block)
    assert_rows_by_stream(back, [e.stream for e in block])
    assert_rows_by_stream(back.take(np.arange(len(block))[::-1]), [e.stream for e in block][::-1])
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


# --- parsed straight into columns ----------------------------------------------------------

PARSE_STREAMS = {"S": {"templates": {"t": {"edges": [0, 1, 3], "probs": [0.5, 0.5]},
                                     "u": {"edges": [0, 2, 3, 7, 8], "probs": [0.1, 0.2, 0.3, 0.4]}}, "pi": 50},
                 "T": {"templates": {"t": {"edges": [0, 5], "probs": [1.0]}}}}

templates = st.builds(lambda t, name: {"detected": t, "template": name},
                      st.floats(-1e6, 1e6) | st.integers(-10 ** 6, 10 ** 6), st.sampled_from(["t", "u", "u", "v", 3]))
stamps = st.one_of(
    templates, templates,
    st.builds(lambda lo, width: {"lo": lo, "hi": lo + width}, st.floats(-1e6, 1e6), st.sampled_from([0, 0.5, 3, 60])),
    st.builds(lambda lo: {"lo": lo, "hi": lo + 2}, st.integers(-10 ** 6, 10 ** 6)),
    st.builds(lambda lo: {"edges": [lo, lo + 1, lo + 4], "probs": [0.25, 0.75]}, st.floats(-1e6, 1e6)),
    st.just({"lo": 0, "hi": 2, "pmf": [0.25, 0.5, 0.25]}),
    # instants (an RFID read): on a lossy query's grid, off it, beyond it, of -0.0
    st.builds(lambda t: {"lo": t, "hi": t}, st.integers(-10 ** 6, 10 ** 6) | st.floats(-1e6, 1e6)
              | st.sampled_from([-0.0, 2.0 ** 53, 2.0 ** 53 + 2, -1e300])),
    st.just({"lo": 3, "hi": 1}), st.just({"lo": 1}), st.just([1, 2]), st.just("now"))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
                    st.text(max_size=6), st.just([1]))


@st.composite
def raw_events(draw):
    """An input line as a client may send it: mostly events, valid or not, sometimes not
    an event at all; as text, bytes or a decoded object."""
    import json

    choice = draw(st.integers(0, 9))
    if choice == 0:
        line = draw(st.sampled_from(['[1]', '{"stream": "S"', 'NaN', '{"stream": "S", "id": "a", "ts": '
                                     '{"lo": NaN, "hi": 1}}', '', '{"stream": "S", "id": "\\ud800", "ts": '
                                     '{"lo": 1, "hi": 2}}', '{"stream": "S", "id": "w", "ts": {"lo": 1, "hi": 2}, '
                                     '"attrs": {"n": 123456789012345678901234567890}}']))
    else:
        event = {"stream": draw(st.sampled_from(["S", "S", "s", "T", "T", "U", "b@d", 4])),
                 "id": draw(st.sampled_from(["a", "b", "c", "", "x\u202e", 7])), "ts": draw(stamps)}
        if draw(st.booleans()):
            event["attrs"] = draw(st.dictionaries(st.sampled_from(["k", "v", "bad name"]), scalars, max_size=3))
        if draw(st.integers(0, 9)) == 0:
            event["extra"] = 1
        form = draw(st.sampled_from(["str", "bytes", "object"]))
        if form == "object":
            return event
        line = json.dumps(event)
        return line.encode() if form == "bytes" else line
    return line if draw(st.booleans()) else line.encode()


def same_event(x, y) -> bool:
    if (x.stream, x.id, x.template, x.detected, type(x.ts)) != (y.stream, y.id, y.template, y.detected, type(y.ts)):
        return False
    if dict(x.attrs).keys() != dict(y.attrs).keys() or not all(same(x.attrs[k], y.attrs[k]) for k in x.attrs):
        return False
    if isinstance(x.ts, Histogram):
        return np.array_equal(x.ts.edges, y.ts.edges) and np.array_equal(x.ts.probs, y.ts.probs)
    return (x.ts.lo, x.ts.hi, x.ts.pmf) == (y.ts.lo, y.ts.hi, y.ts.pmf) and same(x.ts.lo, y.ts.lo)


@settings(max_examples=300, deadline=None)
@given(st.lists(raw_events(), max_size=14))
@example([b'{"stream": "S", "id": "a", "ts": {"detected": 5, "template": "t"}}', {"stream": "T", "id": "a", "ts": {
    "detected": 5, "template": "t"}}, '{"stream": "s", "id": "b", "ts": {"detected": 5.5, "template": "u"}}'])
# instants (no continuous reading), of an integer and of -0.0, one beside a wide attribute (the long way)
@example(['{"stream": "S", "id": "p", "ts": {"lo": 5, "hi": 5}}', {"stream": "S", "id": "q", "ts": {"lo": -0.0, "hi": 0}},
          '{"stream": "T", "id": "r", "ts": {"lo": 1e300, "hi": 1e300}, "attrs": {"k": 123456789012345678901234567890}}'])
def test_parse_reads_a_block_as_the_parser_does_into_the_columns_of_its_events(raws):
    from penumbra.events import parse_event_lines, parse_streams

    streams = parse_streams(PARSE_STREAMS)
    expected = parse_event_lines(raws, streams)
    columns, kept, errors = EventColumns.parse(raws, streams)
    assert [(i, str(e)) for i, e in errors] == [(i, str(e)) for i, e in enumerate(expected)
                                                if isinstance(e, ValidationError)]
    valid = [e for e in expected if not isinstance(e, ValidationError)]
    assert kept.tolist() == [i for i, e in enumerate(expected) if not isinstance(e, ValidationError)]
    reference = EventColumns.from_events(valid)
    assert columns.streams.tolist() == reference.streams.tolist() and columns.ids.tolist() == reference.ids.tolist()
    assert columns.templates.tolist() == reference.templates.tolist() and columns.problems == reference.problems
    assert all(a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
               for a, b in zip(columns.attrs.tolist(), reference.attrs.tolist()))
    if valid:
        width = max(columns.block.buckets, reference.block.buckets)
        assert np.array_equal(columns.block.padded(width).edges, reference.block.padded(width).edges)
        assert np.array_equal(columns.block.padded(width).probs, reference.block.padded(width).probs)
    # each stream's rows, also through bytes and after take; each event given back is the
    # parser's, also after take and concat
    sent = [e.stream for e in valid]
    assert_rows_by_stream(columns, sent)
    assert_rows_by_stream(EventColumns.from_bytes(columns.to_bytes()), sent)
    assert_rows_by_stream(columns.take(np.arange(len(valid))[::-1]), sent[::-1])
    assert all(same_event(columns.event(i), event) for i, event in enumerate(valid))
    again, _, _ = EventColumns.parse(raws, streams)
    order = np.arange(len(valid))[::-1]
    taken = EventColumns.concat([again.take(order), again.take(order[:1])])
    assert all(same_event(taken.event(j), valid[i]) for j, i in enumerate(order.tolist() + order[:1].tolist()))
    # the events as bytes (what a pattern's or a lossy query's operator reads): the parser's
    # events, field for field, from a block none of whose events was made yet, after take,
    # and from events
    fresh, _, _ = EventColumns.parse(raws, streams)
    reversed_valid = [valid[i] for i in order.tolist()]
    for source, expected_events in ((fresh, valid), (EventColumns.parse(raws, streams)[0].take(order), reversed_valid),
                                    (EventColumns.from_events(valid), valid)):
        back = events_from_bytes(source.events_to_bytes(), streams)
        assert len(back) == len(expected_events)
        assert all(same_event(b, e) for b, e in zip(back, expected_events)), (back, expected_events)


#: queries over S and T that read events, and so a block's clock from its columns
CLOCKED = ["SEQUENCE(S x, !T y, S z) WHERE x.k = z.k WITHIN 100 THRESHOLD 0.1",
           "SEQUENCE(T x, U y) WITHIN 50 THRESHOLD 0.1",
           "PATTERN SEQ(S a, T b) WITHIN 40",
           "PATTERN SEQ(T a, T b) WITHIN 4"]
CLOCKERS: list = []


@settings(max_examples=300, deadline=None)
@given(st.lists(raw_events(), max_size=14))
@example(['{"stream": "S", "id": "p", "ts": {"lo": 5, "hi": 5}}', '{"stream": "s", "id": "q", "ts": {"lo": 2, "hi": 9}}',
          '{"stream": "T", "id": "r", "ts": {"lo": 1e300, "hi": 1e300}}', '{"stream": "T", "id": "v", "ts": '
          '{"lo": 0, "hi": 2, "pmf": [0.25, 0.5, 0.25]}}', '{"stream": "T", "id": "w", "ts": {"lo": -0.0, "hi": -0.0}}'])
# the grid's last instant, and one beyond it
@example(['{"stream": "S", "id": "g", "ts": {"lo": 9007199254740992, "hi": 9007199254740992}}',
          '{"stream": "S", "id": "h", "ts": {"lo": 9007199254740994, "hi": 9007199254740994}}'])
def test_a_block_s_columns_tell_an_operator_s_clock_what_its_events_tell(raws):
    """The bounds of each event's interval (NaN for any other timestamp), and the clock a
    lossy or pattern operator reads from a block's columns, as from the parser's events:
    from a fresh block, after take and concat, and from events."""
    from penumbra.events import parse_event_lines, parse_streams
    from penumbra.timestamps import Interval

    streams = parse_streams(PARSE_STREAMS)
    # an operator's clock is read from the events alone (no state): one operator a query serves every example
    if not CLOCKERS:
        CLOCKERS.extend(compile_query(text, streams) for text in CLOCKED)
    valid = [e for e in parse_event_lines(raws, streams) if not isinstance(e, ValidationError)]
    order = np.arange(len(valid))[::-1]
    again = EventColumns.parse(raws, streams)[0]
    made = EventColumns.parse(raws, streams)[0]
    made.event(0) if valid else None       # one event made already, the rest not
    for columns, events in ((EventColumns.parse(raws, streams)[0], valid), (made, valid),
                            (EventColumns.concat([again.take(order), again.take(order[:1])]),
                             [valid[i] for i in order.tolist() + order[:1].tolist()]),
                            (EventColumns.from_events(valid), valid)):
        expected = np.array([[e.ts.lo, e.ts.hi] if type(e.ts) is Interval else [np.nan, np.nan] for e in events]
                            ).reshape(-1, 2).T
        assert np.array_equal(columns.bounds(), expected, equal_nan=True)
        for text, operator in zip(CLOCKED, CLOCKERS):
            assert operator.clock_of(columns) == operator.clock_of(events), text
