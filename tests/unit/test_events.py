"""penumbra.events: the event and stream-parameter contract, and every rejection."""

from __future__ import annotations

import json
from types import MappingProxyType
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from penumbra.errors import ValidationError
from penumbra.events import (
    MAX_ATTRS, Admitted, Streams, admit_contents, admit_events, content_of, event_to_json, loads, parse_event,
    parse_event_line, parse_event_lines, parse_events, parse_streams, read_events)
from penumbra.events import codec, model, validation
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
             "", json.dumps(event(id="c")), json.dumps(event(id="a", stream="SEISMIC")),
             json.dumps(event(id="a", attrs={"region": "south"})), json.dumps(event(id="a", stream="acoustic"))]
    events, rejected = read_events(lines, streams)
    # line 6 says what line 1 said (the stream's name folds case): taken once; line 7 says otherwise
    assert [(e.stream, e.id) for e in events] == [("seismic", "a"), ("seismic", "c"), ("acoustic", "a")]
    assert [(r.line, r.error.field) for r in rejected] == [(2, ""), (3, "ts.hi"), (7, "id")]
    assert "conflict" in str(rejected[2])


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


# --- the block form and the decoder ------------------------------------------------------

def line(**changes) -> str:
    return json.dumps(event(**changes))


def test_a_block_of_lines_bytes_and_objects(streams):
    raws = [line(id="a"), line(id="b").encode(), event(id="c"), "not json", line(id="a", ts={"lo": 1, "hi": 2}),
            line(id="a", stream="acoustic").encode(), b"\xff\xfe", None, [1], "", line(id="d", attrs=[])]
    events, rejected = parse_events(raws, streams)
    assert [(e.stream, e.id) for e in events] == [("seismic", "a"), ("seismic", "b"), ("seismic", "c"),
                                                  ("acoustic", "a")]
    assert [(index, error.field) for index, error in rejected] == [(3, ""), (4, "id"), (6, ""), (7, ""), (8, ""),
                                                                    (9, ""), (10, "attrs")]
    assert "conflict" in str(rejected[1][1]) and "not UTF-8" in str(rejected[2][1])
    assert "got null" in str(rejected[3][1]) and "invalid JSON at column 1" in str(rejected[5][1])
    assert events[0] == parse_event(event(id="a"), streams) and events[1].template is None


def test_fast_intervals_are_ordinary_intervals(streams):
    e = parse_event_line(line(ts={"lo": 3, "hi": 13}), streams)
    assert e.ts == Interval(3, 13) and hash(e.ts) == hash(Interval(3, 13))
    assert type(e.ts.lo) is float and e.ts.pmf is None
    assert e == parse_event(event(ts={"lo": 3.0, "hi": 13.0}), streams)


WIDE = [2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, -2 ** 63, -2 ** 63 - 1, 10 ** 30, -(10 ** 400)]


@pytest.mark.parametrize("number", WIDE)
def test_integers_stay_exact(streams, number):
    e = parse_event_line(line(attrs={"n": number, "x": 1.5}), streams)
    assert type(e.attrs["n"]) is int and e.attrs["n"] == number and e.attrs["x"] == 1.5
    e = parse_events([line(attrs={"n": number}).encode()], streams)[0][0]
    assert type(e.attrs["n"]) is int and e.attrs["n"] == number


@pytest.mark.parametrize("text,field,words", [
    ('{"stream": "s", "id": "a", "ts": {"lo": NaN, "hi": 1}}', "ts.lo", "NaN is not allowed"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": -Infinity}}', "ts.hi", "-Infinity is not allowed"),
    ('{"stream": "s", "id": "a", "ts": {"edges": [0, Infinity], "probs": [1]}}', "ts.edges[1]", "Infinity is not"),
    ('{"stream": "s", "id": "a", "attrs": {"v": [1, NaN]}, "ts": {"lo": 0, "hi": 1}}', "attrs.v[1]", "NaN is not"),
    ('[NaN]', "[0]", "NaN is not allowed"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": 1e999}}', "ts.hi", "must be finite"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": 1' + "0" * 400 + '}}', "ts.hi", "beyond the range of a float"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": 1' + "0" * 5000 + '}}', "", "invalid JSON"),
    ('{"stream": "s", "id": "a", "attrs": {"x": 1e999}, "ts": {"lo": 0, "hi": 1}}', "attrs.x", "must be finite"),
    ('\ufeff{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": 1}}', "", "BOM"),
    ("[" * 100_000, "", "invalid JSON"),
    ('{"stream": "s", "id": "a", "ts": {"lo": 0, "hi": 1},}', "", "invalid JSON at column"),
])
def test_what_json_refuses_is_named(streams, text, field, words):
    for raw in (text, text.encode()):
        rejected = parse_events([raw], streams)[1]
        assert [index for index, _ in rejected] == [0]
        assert rejected[0][1].field == field and words in rejected[0][1].message


def test_what_only_the_json_module_reads(streams):
    """Lone surrogates and duplicate keys read as the json module reads them (a lone
    surrogate in an attribute's text is kept; in an id it is refused, as is any character
    that is not printable)."""
    e = parse_event_line('{"stream": "s", "id": "\\ud800", "ts": {"lo": 0, "hi": 1}, "id": "b",'
                         ' "attrs": {"note": "b\\udfff"}}', streams)
    assert (e.id, e.attrs["note"]) == ("b", "b\udfff")
    assert parse_event_line(line(attrs={"note": "\ud800x"}), streams).attrs["note"] == "\ud800x"
    with pytest.raises(ValidationError, match="U\\+D800"):
        parse_event_line(line(id="\ud800x"), streams)


def test_mappings_and_number_types_as_before(streams):
    obj = MappingProxyType({**event(), "attrs": MappingProxyType({"v": np.float64(2.5), "k": True})})
    e = parse_events([obj], streams)[0][0]
    assert dict(e.attrs) == {"v": 2.5, "k": True}
    with pytest.raises(ValidationError, match="got int64"):
        parse_event(event(attrs={"n": np.int64(3)}), streams)
    with pytest.raises(ValidationError, match="must be finite"):
        parse_event(event(ts={"lo": float("nan"), "hi": 1}), streams)


def test_oversize_raw_events(streams):
    big = line(attrs={"s": "x" * (2 << 20)})
    rejected = parse_events([big, big.encode()], streams)[1]
    assert [index for index, _ in rejected] == [0, 1] and all("too large" in str(e) for _, e in rejected)


def outcome(raw, streams):
    """What reading ``raw`` gives: the event and its attributes' types, or the error."""
    try:
        e = parse_event_line(raw, streams)
    except ValidationError as error:
        return "rejected", error.field, error.message
    return "event", e, {key: type(value) for key, value in e.attrs.items()}


json_texts = st.one_of(
    st.text(max_size=40),
    st.builds(lambda attrs, lo, width: json.dumps({"stream": "seismic", "id": "x", "ts": {"lo": lo, "hi": lo + width},
                                                  "attrs": attrs}),
              st.dictionaries(st.sampled_from(["a", "b", "bad key"]),
                              st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False),
                                        st.text(max_size=3), st.booleans(), st.none()), max_size=3),
              st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(-1e300, 1e300)), st.integers(-1, 3)),
    st.sampled_from(["NaN", "Infinity", "1e999", "-0", "[1,]", '"\\ud800"', "{}", " {} ", "\ufeff{}", "1" * 30]),
)


@settings(max_examples=400, deadline=None)
@given(json_texts)
def test_orjson_reads_what_the_json_module_reads(text):
    """Every line reads the same through orjson as through the json module alone: the same
    event with the same number types, or the same error."""
    pytest.importorskip("orjson")
    streams = parse_streams(STREAMS)
    fast = outcome(text, streams), outcome(text.encode("utf-8", "surrogatepass"), streams)
    with mock.patch.object(codec, "orjson", None):
        plain = outcome(text, streams)
    assert fast[0] == plain
    if not any("\ud800" <= c <= "\udfff" for c in text):  # else the bytes are not UTF-8
        assert fast[1] == plain


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4))
anything = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                        max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), st.binary(max_size=30), anything,
                          anything.map(lambda v: json.dumps(v, allow_nan=True)),
                          st.builds(event, id=st.sampled_from(["a", "b"])),
                          st.builds(lambda **kw: line(**kw), id=st.sampled_from(["a", "b"]))), max_size=8))
def test_a_block_of_anything_never_raises(raws):
    events, rejected = parse_events(raws, parse_streams(STREAMS))
    indices = [index for index, _ in rejected]
    # what is neither an event nor a rejection is a repeat of an identity that came before
    repeats, seen = 0, set()
    for raw in raws:
        try:
            item = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
            key = (item["stream"].casefold(), item["id"])
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        repeats += key in seen
        seen.add(key)
    assert 0 <= len(raws) - len(events) - len(rejected) <= repeats and indices == sorted(set(indices))
    assert all(isinstance(error, ValidationError) and str(error) for _, error in rejected)
    assert len({(e.stream.casefold(), e.id) for e in events}) == len(events)


def test_names_seen_are_remembered_within_a_bound(streams):
    """Valid names are remembered so the pattern runs once per name, but input cannot grow
    that memory without bound."""
    lines = [line(id=str(k), attrs={f"k{k}_{j}": j for j in range(10)}) for k in range(validation._MAX_VALID_NAMES)]
    events, rejected = parse_events(lines, streams)
    assert len(events) == len(lines) and not rejected
    assert len(validation._VALID_NAMES) <= validation._MAX_VALID_NAMES


def read_with(reader):
    """What ``reader()`` gives: the event and its attributes' types, or the error."""
    try:
        e = reader()
    except ValidationError as error:
        return "rejected", error.field, error.message
    return "event", e, {key: type(value) for key, value in e.attrs.items()}


near_numbers = st.sampled_from([0, 1, 2.5, -3.0, True, None, "1", 10 ** 400, -(10 ** 400), 1e308, -1e308,
                                float("nan"), float("inf"), np.float64(2.0)])
near_scalars = st.sampled_from([1, 2.5, True, None, "s", "x" * 5000, [1], {"a": 1}, float("nan"), float("-inf"),
                                10 ** 30, np.int64(3)])
near_events = st.fixed_dictionaries(
    {"stream": st.sampled_from(["seismic", "acoustic", "A", "bad name", 3, None, "x" * 200]),
     "id": st.sampled_from(["a", "", "x" * 300, 5, None]),
     "ts": st.one_of(st.fixed_dictionaries({"lo": near_numbers, "hi": near_numbers}),
                     st.fixed_dictionaries({"lo": near_numbers, "hi": near_numbers, "pmf": st.just([1.0])}),
                     st.fixed_dictionaries({"detected": near_numbers,
                                            "template": st.sampled_from(["s1", "s2", "S1", "nope", 1, None])}),
                     st.fixed_dictionaries({"detected": near_numbers, "template": st.just("s1"), "x": st.just(1)}),
                     st.sampled_from([[0, 1], None, {"lo": 1}, {"lo": 1, "high": 2}, {"detected": 5}]))},
    optional={"attrs": st.one_of(st.dictionaries(st.sampled_from(["v", "w", "bad key", "fresh_name"]), near_scalars,
                                                 max_size=3),
                                 st.sampled_from([[], None, "s", {f"k{n}": n for n in range(MAX_ATTRS + 1)}])),
              "extra": st.just(1)})


@settings(max_examples=800, deadline=None)
@given(near_events)
def test_the_common_shape_reads_as_the_full_checks_read_it(obj):
    """An event of the common shape, or one that just misses it, is accepted or refused (with
    the same field and words) as the full checks alone accept or refuse it."""
    streams = parse_streams(STREAMS)
    fast = read_with(lambda: parse_event(obj, streams))
    def full_checks_only(raw, streams, decoded):
        return model._checked_event(raw, streams)

    with mock.patch.object(model, "_event", full_checks_only):
        full = read_with(lambda: parse_event(obj, streams))
    assert fast == full
    if fast[0] == "event":
        ts = fast[1].ts
        assert type(ts) is Interval and type(ts.lo) is float or type(ts) is Histogram and ts.edges.dtype == float
        assert (fast[1].template, fast[1].detected) == (full[1].template, full[1].detected)
        assert type(fast[1].detected) is type(full[1].detected)


def test_attributes_of_a_caller_object_are_copied(streams):
    obj = event(attrs={"v": 1})
    e = parse_event(obj, streams)
    again = parse_event(obj, streams)
    obj["attrs"]["v"] = 2
    assert e.attrs["v"] == 1 and again.attrs["v"] == 1


def one_by_one(raw, streams):
    """What :func:`parse_event_line` (or :func:`parse_event`, for an object) says of ``raw``
    alone: the event with its attributes' types and its timestamp's exact floats, or the error."""
    try:
        e = parse_event(raw, streams) if isinstance(raw, dict) else parse_event_line(raw, streams)
    except ValidationError as error:
        return "rejected", error.field, error.message
    return described(e)


def described(e):
    ts = e.ts
    exact = (ts.edges.tobytes(), ts.probs.tobytes()) if isinstance(ts, Histogram) else (ts.lo, ts.hi, ts.pmf)
    return ("event", e, {key: type(value) for key, value in e.attrs.items()}, type(ts), exact,
            e.template, type(e.detected), e.detected)


def as_json(obj) -> str:
    return json.dumps(obj, allow_nan=True, default=lambda value: value.item())


template_lines = st.builds(
    lambda stream, n, template, detected, attrs: json.dumps(
        {"stream": stream, "id": f"e{n}", "ts": {"detected": detected, "template": template}, "attrs": attrs}),
    st.sampled_from(["seismic", "SEISMIC", "acoustic"]), st.integers(0, 5), st.sampled_from(["s1", "s2", "s3"]),
    st.one_of(st.integers(-10 ** 6, 10 ** 6), st.floats(-1e9, 1e9), st.sampled_from([1e308, -1e308, 0.1, -0.0])),
    st.dictionaries(st.sampled_from(["v", "w"]), st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3)),
                    max_size=2))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(template_lines, template_lines.map(str.encode), json_texts, near_events,
                          near_events.map(as_json), near_events.map(lambda obj: as_json(obj).encode())), max_size=16))
def test_a_block_reads_as_its_lines_one_by_one(raws):
    """The block parser gives, in each input's place, what parsing that input alone gives:
    the same event to the last bit of its timestamp, or the same error."""
    streams = parse_streams(STREAMS)
    block = parse_event_lines(raws, streams)
    assert len(block) == len(raws)
    for raw, parsed in zip(raws, block):
        got = ("rejected", parsed.field, parsed.message) if isinstance(parsed, ValidationError) else described(parsed)
        assert got == one_by_one(raw, streams)


def fate_said(fate):
    """A fate of ``admit_events`` or ``admit_contents`` as both must say it: the first
    coming of an identity with its stream, id, content, timestamp length (to the bit) and
    attributes with their types; the index of a repeat; or the refusal's field and words."""
    if isinstance(fate, ValidationError):
        return "rejected", fate.field, fate.message
    if isinstance(fate, int):
        return "repeat", fate
    length = fate.length if isinstance(fate, Admitted) else fate.ts.length
    content = fate.content if isinstance(fate, Admitted) else content_of(fate)
    # repr: equal tuples may still serialise apart (-0.0 == 0.0, True == 1 == 1.0)
    return ("event", fate.stream, fate.id, repr(content), repr(length), type(length),
            sorted((key, type(value), value) for key, value in fate.attrs.items()))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(template_lines, template_lines.map(str.encode), template_lines.map(json.loads), json_texts,
                          near_events, near_events.map(as_json), st.builds(event, id=st.sampled_from(["a", "b"])),
                          st.builds(event, id=st.sampled_from(["a", "b"]), ts=st.sampled_from(
                              [{"lo": 100, "hi": 120}, {"lo": -0.0, "hi": 0}, {"edges": [0, 1, 3], "probs": [0.5, 0.5]},
                               {"lo": 0, "hi": 2, "pmf": [0.5, 0.5]}, {"detected": 1e-300, "template": "s1"}]))),
                max_size=16), st.booleans())
def test_admitting_contents_decides_as_admitting_events(raws, registered):
    """``admit_contents`` (the ingest's check, which builds no event) gives every input the
    fate ``admit_events`` gives it, and for a valid one what its event says: the content
    the identity's digest is of, and the timestamp length the stream's pi is checked on."""
    streams = parse_streams(STREAMS) if registered else None
    expected = [fate_said(fate) for fate in admit_events(raws, streams)]
    assert [fate_said(fate) for fate in admit_contents(raws, streams)] == expected


def test_admitting_contents_takes_each_templates_own_bounds():
    """Templates made afresh at each look-up (a stream parameters' mapping of its own) may
    share an id once the first is gone: each event still gets its own template's length."""
    from collections.abc import Mapping

    from penumbra.events import StreamParams

    class Fresh(Mapping):
        def __init__(self, spec):
            self.spec = spec

        def __getitem__(self, name):
            return Histogram(*self.spec[name])

        def __iter__(self):
            return iter(self.spec)

        def __len__(self):
            return len(self.spec)

    streams = Streams([StreamParams("F", Fresh({"a": ([0, 1, 3], [0.5, 0.5]), "b": ([0, 100], [1.0])}))])
    raws = [b'{"stream":"F","id":"1","ts":{"detected":10,"template":"a"}}',
            b'{"stream":"F","id":"2","ts":{"detected":10,"template":"b"}}'] * 3
    assert [fate_said(f) for f in admit_contents(raws, streams)] == [fate_said(f) for f in admit_events(raws, streams)]
    assert [f.length for f in admit_contents(raws[:2], streams)] == [3.0, 100.0]


def test_a_block_resolves_each_template_once_for_all_its_events(streams):
    lines = [json.dumps({"stream": "seismic", "id": f"s{n}", "ts": {"detected": 100 + n, "template": "s1"}})
             for n in range(5)] + [line(id="i")]
    block = parse_event_lines(lines, streams)
    assert [e.ts.edges.tolist() for e in block[:5]] == [[60.0 + n, 80.0 + n, 90.0 + n, 100.0 + n] for n in range(5)]
    assert block[5].ts == Interval(100.0, 120.0)
    assert all(e.ts.probs is streams["seismic"].templates["s1"].probs for e in block[:5])
    assert all(not e.ts.edges.flags.writeable for e in block[:5])


@pytest.mark.parametrize("event_id, code", [("a\x00b", "U+0000"), ("\x1b[31mred", "U+001B"), ("x\u202ey", "U+202E"),
                                            ("a\u2028b", "U+2028"), ("\ud800", "U+D800"), ("nbsp\u00a0", "U+00A0")])
def test_an_id_must_be_printable(event_id, code):
    with pytest.raises(ValidationError) as refused:
        parse_event({"stream": "s", "id": event_id, "ts": {"lo": 1, "hi": 2}})
    assert refused.value.field == "id" and code in refused.value.message
    # the same in a block: the bad one rejected with its reason, the good one kept
    events, rejected = parse_events([{"stream": "s", "id": event_id, "ts": {"lo": 1, "hi": 2}},
                                     {"stream": "s", "id": "fine id é", "ts": {"lo": 1, "hi": 2}}])
    assert [e.id for e in events] == ["fine id é"] and rejected[0][1].field == "id"


def test_an_error_quotes_a_huge_input_only_in_part():
    with pytest.raises(ValidationError) as refused:
        parse_event({"stream": "s", "id": "a", "ts": {"lo": 1, "hi": 2}, "attrs": {"k" * 1_000_000: 1}})
    assert len(refused.value.field) <= 256 and len(refused.value.message) <= 1024
    assert "characters in all" in refused.value.field


@pytest.mark.parametrize("first, again, same", [
    ({"ts": {"lo": 1, "hi": 2}}, {"ts": {"hi": 2.0, "lo": 1.0}}, True),
    ({"ts": {"lo": 1, "hi": 2}}, {"ts": {"lo": 1, "hi": 3}}, False),
    ({"ts": {"edges": [0, 1, 2], "probs": [0.5, 0.5]}}, {"ts": {"edges": [0, 1, 2], "probs": [0.5, 0.5]}}, True),
    ({"ts": {"edges": [0, 1, 2], "probs": [0.5, 0.5]}}, {"ts": {"edges": [0, 1, 2], "probs": [0.4, 0.6]}}, False),
    ({"ts": {"detected": 50, "template": "s1"}}, {"ts": {"detected": 50, "template": "s1"}}, True),
    ({"ts": {"detected": 50, "template": "s1"}}, {"ts": {"detected": 51, "template": "s1"}}, False),
    ({"attrs": {"region": "north"}}, {"attrs": {"region": "south"}}, False),
    ({"attrs": {"a": 1, "b": 2}}, {"attrs": {"b": 2, "a": 1}}, True),
    ({"attrs": {"f": True}}, {"attrs": {"f": 1}}, False),          # JSON's kinds, not Python's equality
    ({"attrs": {"v": 1}}, {"attrs": {"v": 1.0}}, False),
    ({"attrs": {"v": 0.0}}, {"attrs": {"v": -0.0}}, True),
])
def test_an_identity_sent_again_is_taken_once_or_is_a_conflict(streams, first, again, same):
    events, rejected = parse_events([event(id="x", **first), event(id="x", **again), event(id="y")], streams)
    if same:
        assert [e.id for e in events] == ["x", "y"] and rejected == []
    else:
        assert [e.id for e in events] == ["x", "y"] and [(i, e.field) for i, e in rejected] == [(1, "id")]


def event_like(inner):
    return st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["attrs", "id", "ts", "x"]), inner, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=60),
    st.recursive(st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats() | st.text(max_size=5),
                 event_like, max_leaves=12)
    .map(lambda value: json.dumps(value).encode())))
def test_a_request_body_reads_as_the_strict_reader_reads_it(body):
    """``loads_events`` (orjson where it agrees) gives what ``loads`` gives, or the same error."""
    from penumbra.events import loads, loads_events

    try:
        expected = ("ok", loads(body))
    except ValidationError as error:
        expected = ("error", str(error))
    try:
        got = ("ok", loads_events(body))
    except ValidationError as error:
        got = ("error", str(error))
    assert got[0] == expected[0]
    if got[0] == "error":
        assert got == expected
        return

    def wide_as_float(value):   # outside attributes orjson reads an integer beyond 64 bits as a float
        if isinstance(value, dict):
            return {k: wide_as_float(v) for k, v in value.items()}
        if isinstance(value, list):
            return [wide_as_float(v) for v in value]
        return float(value) if type(value) is int and abs(value) >= 2 ** 63 else value

    assert repr(wide_as_float(got[1])) == repr(wide_as_float(expected[1]))
    items = [(g, e) for g, e in zip(*(v if isinstance(v, list) else [v] for v in (got[1], expected[1])))
             if isinstance(g, dict)]

    def scalars(attrs):   # an event's attributes are scalars in an object (anything else is refused anyway)
        return {k: v for k, v in attrs.items() if not isinstance(v, (dict, list))} if isinstance(attrs, dict) else None

    assert all(repr(scalars(g.get("attrs"))) == repr(scalars(e.get("attrs"))) for g, e in items), \
        "scalar attributes exactly as json reads them"


def test_a_detection_time_that_would_collapse_its_template_is_refused():
    """phi + t - max(phi) at t = 1e18: a float's spacing there (128) is wider than the
    template's buckets, so its edges would become one time; epoch seconds are fine."""
    from penumbra.events.columns import EventColumns

    streams = parse_streams({"seismic": {"templates": {"s1": {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]}}}})
    far = {"stream": "seismic", "id": "h", "ts": {"detected": 1e18, "template": "s1"}}
    with pytest.raises(ValidationError, match="too large for template 's1'") as error:
        parse_event(far, streams)
    assert error.value.field == "ts.detected"
    assert EventColumns.parse([json.dumps(far).encode()], streams)[2][0][1].field == "ts.detected"
    near = parse_event({**far, "ts": {"detected": 1.7e9, "template": "s1"}}, streams)
    assert near.ts.edges.tolist() == [1.7e9 - 40, 1.7e9 - 20, 1.7e9 - 10, 1.7e9]
