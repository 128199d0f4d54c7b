"""The paper's worked examples, and the operator's contract around them."""

from __future__ import annotations

import itertools

import pytest

from pattern_worlds import possible_world_matches
from penumbra.events import Event, StreamParams, Streams
from penumbra.operator import check_threshold
from penumbra.patterns import PatternOperator, build_operator
from penumbra.patterns.bounds import close_window, run_bounds
from penumbra.patterns.model import GridEvent
from penumbra.query import parse
from penumbra.timestamps import Interval

import numpy as np

METHODS = ("point", "any_state", "sorted", "selectivity")
STRATEGIES = ("skip_till_any_match", "skip_till_next_match")


def grid_event(name, lo, hi):
    return GridEvent(name[0].upper(), name, {}, lo, hi, np.full(hi - lo + 1, 1 / (hi - lo + 1)))


def feed_all(operator, blocks):
    matches, late, observations = [], [], []
    for block in blocks:
        result = operator.feed(block)
        matches += result.matches
        late += result.late
        observations.append(result.observations)
    result = operator.flush()
    return matches + result.matches, late, observations + [result.observations]


def as_table(matches):
    return {tuple(m.events.values()): (m.prob, m.range) for m in matches}


def expected_table(text, events):
    return {s: (c, (float(lo), float(hi))) for s, (c, lo, hi) in possible_world_matches(parse(text), events).items()}


def assert_tables_equal(actual, expected):
    assert set(actual) == set(expected)
    for signature, (prob, span) in expected.items():
        assert actual[signature][0] == pytest.approx(prob, abs=1e-9)
        assert actual[signature][1] == span


def test_figure_3c_window_prunes_c6():
    """a1, b5, c6 with W = 4: c6.vlb = 6 is not below a1.vub + W = 6 (C.1, step 3)."""
    a1, b5, c6 = grid_event("a1", 1, 2), grid_event("b5", 2, 3), grid_event("c6", 6, 7)
    vlb, vub = run_bounds({0: a1, 1: b5}, 4)
    assert (vlb, vub) == ({0: 1, 1: 2}, {0: 2, 1: 3})
    assert run_bounds({0: a1, 1: b5, 2: c6}, 4) is None
    assert close_window((1, 2, 6), (2, 3, 7), 4) is None
    events = [Event("A", "a1", Interval(1, 2)), Event("B", "b5", Interval(2, 3)), Event("C", "c6", Interval(6, 7))]
    for method, strategy in itertools.product(METHODS, STRATEGIES):
        query = parse(f"PATTERN SEQ(A a, B b, C c) WHERE {strategy}(a, b, c) WITHIN 4 USING {method}")
        matches, _, _ = feed_all(build_operator(query, None), [events])
        assert matches == []
    assert possible_world_matches(query, events) == {}


@pytest.mark.parametrize("method", METHODS)
def test_c2_valid_interval_updates(method):
    """Run (a1, b3, c2) of Fig. 3(d): b3.vlb = 3, b3.vub = 4, c2.vlb = 4, a1.vub = 3."""
    events = [Event("A", "a1", Interval(1, 5)), Event("C", "c2", Interval(3, 5)), Event("B", "b3", Interval(3, 5))]
    query = parse(f"PATTERN SEQ(A a, B b, C c) WITHIN 4 USING {method}")
    _, _, observations = feed_all(build_operator(query, None), [[e] for e in events])
    details = [d for o in observations for d in o["matches"]]
    assert len(details) == 1
    assert details[0]["valid"] == {"a": [1.0, 3.0], "b": [3.0, 4.0], "c": [4.0, 5.0]}
    assert details[0]["intervals"] == {"a": [1.0, 5.0], "b": [3.0, 5.0], "c": [3.0, 5.0]}
    assert details[0]["range"] == [1.0, 5.0]


@pytest.mark.parametrize("method", METHODS)
def test_sorting_waits_for_a_longer_event_of_the_previous_component(method):
    """c (hi 2) is safe before b (hi 3) is, but b can precede c: c must wait for b (C.3)."""
    streams = Streams([StreamParams(s, pi=2) for s in "ABCD"])
    events = [Event("A", "a", Interval(0, 0)), Event("B", "b", Interval(1, 3)),
              Event("C", "c", Interval(2, 2)), Event("D", "d", Interval(4, 4))]
    text = "PATTERN SEQ(A x, B y, C z) WITHIN 5"
    matches, _, _ = feed_all(build_operator(parse(f"{text} USING {method}"), streams), [events])
    assert_tables_equal(as_table(matches), expected_table(text, events))
    assert as_table(matches)[("a", "b", "c")][0] == pytest.approx(1 / 3)


@pytest.mark.parametrize("method", METHODS)
def test_next_match_with_an_event_that_can_match_several_components(method):
    """Skip till next match where one event may be next for two components (Eq. 4)."""
    events = [Event("A", "a1", Interval(0, 1)), Event("A", "a2", Interval(1, 4)),
              Event("A", "a3", Interval(2, 5)), Event("A", "a4", Interval(1, 5))]
    text = "PATTERN SEQ(A x, A y, A z) WHERE skip_till_next_match(x, y, z) WITHIN 6"
    streams = Streams([StreamParams("A", pi=4)])
    matches, _, _ = feed_all(build_operator(parse(f"{text} USING {method}"), streams), [events])
    assert_tables_equal(as_table(matches), expected_table(text, events))


@pytest.mark.parametrize("method", METHODS)
def test_partitions_by_the_shared_equality(method):
    events = [Event("A", f"a{k}", Interval(k, k + 2), {"node": k % 2}) for k in range(4)] + \
             [Event("B", f"b{k}", Interval(k + 1, k + 3), {"node": k % 2}) for k in range(4)]
    events.sort(key=lambda e: e.ts.lo)
    text = "PATTERN SEQ(A x, B y) WHERE x.node = y.node WITHIN 3"
    query = parse(f"{text} USING {method}")
    assert query.partition == ("node", "node")
    operator = build_operator(query, Streams([StreamParams(s, pi=2) for s in "AB"]))
    first = operator.feed(events[:5])
    assert first.observations["keys"] == 2
    rest = operator.feed(events[5:])
    matches = first.matches + rest.matches + operator.flush().matches
    assert_tables_equal(as_table(matches), expected_table(text, events))


def test_late_events_are_reported_with_a_reason():
    operator = build_operator(parse("PATTERN SEQ(A x, B y) WITHIN 5"),
                              Streams([StreamParams(s, pi=1) for s in "AB"]))
    operator.feed([Event("A", "a1", Interval(10, 11))])
    result = operator.feed([Event("B", "b1", Interval(3, 4)), Event("B", "b2", Interval(12, 12))])
    assert [late.event.id for late in result.late] == ["b1"]
    assert "before 9.0" in result.late[0].reason and "arrival order" in result.late[0].reason
    assert operator.counters["late"] == 1


def test_bad_timestamps_are_reported_not_dropped():
    operator = build_operator(parse("PATTERN SEQ(A x, B y) WITHIN 5"), None)
    result = operator.feed([Event("A", "a1", Interval(0.5, 1.5)), Event("Z", "z1", Interval(0, 1))])
    assert [(late.event.id, "ts.lo" in late.reason) for late in result.late] == [("a1", True)]
    assert operator.counters["ignored"] == 1


def test_threshold_and_return():
    events = [Event("A", "a1", Interval(0, 3)), Event("B", "b1", Interval(2, 3)), Event("B", "b2", Interval(3, 6))]
    text = "PATTERN SEQ(A x, B y) WITHIN 10 RETURN y"
    expected = expected_table(text, events)
    low = min(c for c, _ in expected.values())
    operator = build_operator(parse(f"{text} WITH CONFIDENCE {low + 1e-6:.9f}"), None)
    matches, _, _ = feed_all(operator, [events])
    assert [m.events for m in matches] == [{"y": sig[1]} for sig, (c, _) in expected.items() if c > low + 1e-6]
    operator = build_operator(parse(text), None)
    operator.set_threshold(1.0)
    matches, _, _ = feed_all(operator, [events])
    assert matches == []
    with pytest.raises(ValueError):
        operator.set_threshold(0)
    assert check_threshold(0.5) == 0.5


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_snapshot_restore_mid_stream(method, strategy):
    events = [Event("A" if k % 3 == 0 else "B", f"e{k}", Interval(k, k + 3), {"v": k % 4}) for k in range(18)]
    text = f"PATTERN SEQ(A x, B y, B z) WHERE y.v > 0 AND {strategy}(x, y, z) WITHIN 8 USING {method}"
    streams = Streams([StreamParams(s, pi=3) for s in "AB"])
    blocks = [events[k: k + 4] for k in range(0, len(events), 4)]
    straight, _, _ = feed_all(build_operator(parse(text), streams), blocks)
    operator = build_operator(parse(text), streams)
    before = []
    for block in blocks[:2]:
        before += operator.feed(block).matches
    restored = PatternOperator.restore(operator.snapshot())
    after, _, _ = feed_all(restored, blocks[2:])
    assert after and operator.counters["open_runs"] + sum(operator.feed([]).observations["buffered"].values()) > 0
    assert as_table(before + after) == as_table(straight)
    reference, _, _ = feed_all(build_operator(parse(text.replace(f"USING {method}", "USING point")), streams), blocks)
    assert_tables_equal(as_table(straight), as_table(reference))


def test_heartbeat_releases_buffered_events():
    operator = build_operator(parse("PATTERN SEQ(A x, B y) WITHIN 5 USING sorted"), None)
    first = operator.feed([Event("A", "a1", Interval(0, 1)), Event("B", "b1", Interval(1, 2))])
    assert first.matches == [] and first.observations["buffered"] == {"x": 0, "y": 1}
    operator.evict(3)
    second = operator.feed([])
    assert [m.events for m in second.matches] == [{"x": "a1", "y": "b1"}]
    assert second.matches[0].prob == pytest.approx(0.75)


@pytest.mark.parametrize("heartbeat", [False, True])
def test_details_of_the_first_matches_of_a_block(heartbeat):
    """Every match comes out; the observations show the intervals and valid intervals of the
    first MATCH_DETAILS of a block, in the order of the matches (released by a heartbeat too)."""
    from penumbra.patterns.operator import MATCH_DETAILS

    events = [Event("A", f"a{k}", Interval(k, k + 2)) for k in range(12)] + \
             [Event("B", f"b{k}", Interval(k + 20, k + 21)) for k in range(12)]
    # streams that may carry intervals as long as the window: nothing is safe before the end
    streams = Streams([StreamParams(name, pi=40) for name in "AB"])
    operator = build_operator(parse("PATTERN SEQ(A x, B y) WITHIN 40 USING sorted"), streams)
    assert operator.feed(events).matches == []
    if heartbeat:
        operator.evict(100)
        result = operator.feed([])
    else:
        result = operator.flush()
    # every a ends before every b starts, and the widest pair spans 32 < 40: all 144 pairs
    # match, certainly, on their whole intervals
    assert sorted(tuple(m.events.values()) for m in result.matches) == \
        sorted((f"a{i}", f"b{k}") for i in range(12) for k in range(12))
    assert all(m.prob == 1.0 for m in result.matches) and len(result.matches) > MATCH_DETAILS
    details = result.observations["matches"]
    assert len(details) == MATCH_DETAILS
    by_id = {e.id: e.ts for e in events}
    for match, detail in zip(result.matches, details):
        assert detail["events"] == match.events and detail["prob"] == match.prob
        assert detail["range"] == list(match.range)
        assert detail["intervals"] == {v: [by_id[i].lo, by_id[i].hi] for v, i in match.events.items()}
        x, y = by_id[match.events["x"]], by_id[match.events["y"]]
        assert detail["valid"] == {"x": [x.lo, x.hi], "y": [y.lo, y.hi]}
