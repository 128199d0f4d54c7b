"""penumbra.events: the event and stream-parameter contract, and every rejection."""

from __future__ import annotations

import json

import pytest

from penumbra.errors import ValidationError
from penumbra.events import (
    Streams, event_to_json, loads, parse_event, parse_event_line, parse_streams, read_events)
from penumbra.timestamps import Histogram, Interval

STREAMS = {"seismic": {"templates": {"s1": {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]},
                                     "s2": {"edges": [0, 10, 20, 30, 40], "probs": [0.15, 0.3, 0.4, 0.15]}},
                       "max_delay": 500},
           "acoustic": {"pi": 20, "rho": 5, "max_delay": 100, "miss_prob": 0.1},
           "exit": {"miss_prob": 0.2, "gap": {"histogram": {"width": 10, "weights": [3, 2, 1]}}},
           "counter": {"gap": {"uniform": [10, 200]}},
           "aisle": {"gap": {"exponential": 40}}}


@pytest.fixture
def streams() -> Streams:
    return parse_streams(STREAMS)


def event(**changes):
    base = {"stream": "seismic", "id": "s-17", "ts": {"lo": 100.0, "hi": 120.0},
            "attrs": {"region": "north", "value": 97.5}}
    base.update(changes)
    return base


def test_the_three_timestamp_forms(streams):
    e = parse_event(event(), streams)
    assert isinstance(e.ts, Interval) and e.histogram == Histogram([100, 120], [1])
    assert dict(e.attrs) == {"region": "north", "value": 97.5}
    e = parse_event(event(ts={"edges": [0, 1, 2], "probs": [0.5, 0.5]}), streams)
    assert e.ts == Histogram([0, 1, 2], [0.5, 0.5])
    e = parse_event(event(ts={"detected": 210, "template": "s1"}), streams)
    assert e.histogram.edges.tolist() == [170, 190, 200, 210] and e.template == "s1"
    e = parse_event(event(ts={"lo": 3, "hi": 5, "pmf": [0.2, 0.3, 0.5]}), streams)
    assert e.ts.pmf == pytest.approx((0.2, 0.3, 0.5))


def test_stream_names_are_case_insensitive(streams):
    e = parse_event(event(stream="SEISMIC", ts={"detected": 60, "template": "s2"}), streams)
    assert e.template == "s2" and streams["Seismic"].max_delay == 500


def test_round_trip(streams):
    for ts in ({"lo": 1.0, "hi": 2.0}, {"edges": [0.0, 1.0], "probs": [1.0]},
               {"detected": 60.0, "template": "s1"}, {"lo": 1.0, "hi": 3.0, "pmf": [0.25, 0.5, 0.25]}):
        obj = event(ts=ts)
        assert event_to_json(parse_event(obj, streams)) == obj


@pytest.mark.parametrize("changes,field,words", [
    ({"stream": None}, "stream", "string"),
    ({"stream": "has space"}, "stream", "name"),
    ({"id": ""}, "id", "non-empty"),
    ({"id": 17}, "id", "string"),
    ({"id": "x" * 300}, "id", "too long"),
    ({"ts": {"lo": 5, "hi": 4}}, "ts.hi", ">= lo"),
    ({"ts": {"lo": "5", "hi": 6}}, "ts.lo", "number"),
    ({"ts": {"lo": True, "hi": 6}}, "ts.lo", "number"),
    ({"ts": {"lo": 5}}, "ts", "must be one of"),
    ({"ts": [1, 2]}, "ts", "object"),
    ({"ts": {"lo": 1, "hi": 2, "extra": 1}}, "ts", "must be one of"),
    ({"ts": {"edges": [0, 1, 1], "probs": [0.5, 0.5]}}, "ts.edges[2]", "strictly increasing"),
    ({"ts": {"edges": [0, 1, 2], "probs": [0.5, 0.49]}}, "ts.probs", "sum to 1"),
    ({"ts": {"edges": [0, 1, 2], "probs": [1.1, -0.1]}}, "ts.probs[1]", ">= 0"),
    ({"ts": {"detected": 10, "template": "nope"}}, "ts.template", "unknown template"),
    ({"ts": {"detected": "10", "template": "s1"}}, "ts.detected", "number"),
    ({"ts": {"lo": 0, "hi": 2, "pmf": [1.0]}}, "ts.pmf", "3 weights"),
    ({"attrs": []}, "attrs", "object"),
    ({"attrs": {"x": {"nested": 1}}}, "attrs.x", "string, number"),
    ({"attrs": {"bad key": 1}}, "attrs.bad key", "name"),
    ({"attrs": {f"k{i}": i for i in range(100)}}, "attrs", "too many"),
    ({"attrs": {"s": "x" * 5000}}, "attrs.s", "too long"),
    ({"color": "red"}, "color", "unknown field"),
])
def test_bad_events_name_the_field(streams, changes, field, words):
    with pytest.raises(ValidationError) as error:
        parse_event(event(**changes), streams)
    assert error.value.field == field
    assert words in error.value.message


@pytest.mark.parametrize("missing", ["stream", "id", "ts"])
def test_missing_fields(streams, missing):
    obj = event()
    del obj[missing]
    with pytest.raises(ValidationError, match="missing required field") as error:
        parse_event(obj, streams)
    assert error.value.field == missing


@pytest.mark.parametrize("text,words", [
    ('{"stream": "s", "id": "a", "ts": {"lo": NaN, "hi": 1}}', "NaN is not allowed"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": Infinity}}', "Infinity is not allowed"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": 1e999}}', "finite"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, ', "invalid JSON"),
    ('[1, 2]', "JSON object"),
])
def test_bad_lines(streams, text, words):
    with pytest.raises(ValidationError, match=words):
        parse_event_line(text, streams)


def test_oversize_line(streams):
    with pytest.raises(ValidationError, match="too large"):
        parse_event_line(json.dumps(event(attrs={"s": "x" * (2 << 20)})), streams)


def test_a_batch_keeps_every_valid_event(streams):
    lines = [json.dumps(event(id="a")), "not json", json.dumps(event(id="b", ts={"lo": 2, "hi": 1})),
             "", json.dumps(event(id="c")), json.dumps(event(id="a")),
             json.dumps(event(id="a", stream="acoustic"))]
    events, rejected = read_events(lines, streams)
    assert [(e.stream, e.id) for e in events] == [("seismic", "a"), ("seismic", "c"), ("acoustic", "a")]
    assert [(r.line, r.error.field) for r in rejected] == [(2, ""), (3, "ts.hi"), (6, "id")]
    assert "duplicate id" in str(rejected[2])


def test_stream_parameters(streams):
    seismic, acoustic = streams["seismic"], streams["acoustic"]
    assert (seismic.longest, seismic.shortest, seismic.max_delay) == (40, 40, 500)
    assert seismic.pi is None and seismic.template_only
    assert (acoustic.longest, acoustic.shortest, acoustic.miss_prob) == (20, 5, 0.1)
    assert not acoustic.template_only and acoustic.longest == acoustic.pi
    mixed = parse_streams({"m": {"templates": STREAMS["seismic"]["templates"], "pi": 60, "rho": 2}})["m"]
    assert (mixed.longest, mixed.shortest, mixed.template_only) == (60, 2, False)
    assert streams.get_or_default("other").max_delay == 0
    assert streams["exit"].gap == ("histogram", (10.0, 3.0, 2.0, 1.0))
    assert streams["counter"].gap == ("uniform", (10.0, 200.0))
    assert streams["aisle"].gap == ("exponential", (40.0,)) and seismic.gap is None
    assert parse_streams(streams.to_json()).to_json() == streams.to_json()


@pytest.mark.parametrize("spec,field,words", [
    ({"s": {"max_delay": -1}}, "s.max_delay", ">= 0"),
    ({"s": {"max_delay": float("nan")}}, "s.max_delay", "finite"),
    ({"s": {"miss_prob": 1.0}}, "s.miss_prob", "< 1"),
    ({"s": {"pi": 2, "rho": 5}}, "s.rho", "<= pi"),
    ({"s": {"templates": {"t": {"edges": [0, 1]}}}}, "s.templates.t", "both edges and probs"),
    ({"s": {"templates": {"t": {"edges": [0, 2, 1], "probs": [0.5, 0.5]}}}}, "s.templates.t.edges[2]",
     "strictly increasing"),
    ({"s": {"delay": 3}}, "s.delay", "unknown field"),
    ({"s": {"gap": {"normal": [1, 2]}}}, "s.gap", "one density"),
    ({"s": {"gap": {"uniform": [1, 2], "exponential": 3}}}, "s.gap", "one density"),
    ({"s": {"gap": {"uniform": [5, 2]}}}, "s.gap.uniform", "1 <= lo <= hi"),
    ({"s": {"gap": {"uniform": 5}}}, "s.gap.uniform", "[lo, hi]"),
    ({"s": {"gap": {"exponential": -1}}}, "s.gap.exponential", "mean > 0"),
    ({"s": {"gap": {"exponential": "40"}}}, "s.gap.exponential", "number"),
    ({"s": {"gap": {"histogram": {"width": 0, "weights": [1]}}}}, "s.gap.histogram", "width >= 1"),
    ({"s": {"gap": {"histogram": {"width": 2, "weights": []}}}}, "s.gap.histogram.weights", "list of 1"),
    ({"s": {"gap": {"histogram": {"width": 2, "weights": [0, 0]}}}}, "s.gap.histogram", "not all 0"),
    ({"s": {"gap": {"histogram": {"width": 2, "weights": [1, None]}}}}, "s.gap.histogram.weights[1]", "number"),
    ({"s": {"gap": {"histogram": {"width": 2, "weights": [1], "bins": 3}}}}, "s.gap.histogram.bins",
     "unknown field"),
    ({"s": [1]}, "s", "object"),
    ({"A": {}, "a": {}}, "a", "case-insensitive"),
])
def test_bad_stream_parameters(spec, field, words):
    with pytest.raises(ValidationError) as error:
        parse_streams(spec)
    assert error.value.field == field
    assert words in error.value.message


def test_strict_json():
    assert loads('{"a": 1}') == {"a": 1}
    with pytest.raises(ValidationError):
        loads('{"a": -Infinity}')
