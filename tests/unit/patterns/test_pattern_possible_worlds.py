"""Every method and both strategies equal the possible-world semantics (section 2.3)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pattern_worlds import possible_world_matches
from penumbra.events import Event, StreamParams, Streams
from penumbra.patterns import build_operator
from penumbra.query import parse
from penumbra.timestamps import Interval

METHODS = ("point", "any_state", "sorted", "selectivity")
STRATEGIES = ("skip_till_any_match", "skip_till_next_match")
MAX_SPAN = 2
STREAMS = Streams([StreamParams("A", pi=MAX_SPAN), StreamParams("B", pi=MAX_SPAN)])


def run(text, events, blocks):
    """Feed ``events`` (already in an arrival order) in ``blocks``; signature -> (prob, lo, hi)."""
    operator = build_operator(parse(text), STREAMS)
    matches, late = [], []
    start = 0
    for size in blocks + [len(events)]:
        result = operator.feed(events[start: start + size])
        matches += result.matches
        late += result.late
        start += size
    matches += operator.flush().matches
    assert late == []
    signatures = [tuple(m.events.values()) for m in matches]
    assert len(signatures) == len(set(signatures)), "a match was emitted twice"
    return {tuple(m.events.values()): (m.prob, m.range[0], m.range[1]) for m in matches}


def assert_same(actual, expected):
    assert set(actual) == set(expected)
    for signature, (prob, lo, hi) in expected.items():
        got = actual[signature]
        assert got[0] == pytest.approx(prob, abs=1e-9), signature
        assert (got[1], got[2]) == (lo, hi), signature


@st.composite
def instances(draw):
    length = draw(st.integers(1, 3))
    types = [draw(st.sampled_from("AB")) for _ in range(length)]
    count = draw(st.integers(2, 6 if length == 2 else 5))
    events = []
    for k in range(count):
        lo = draw(st.integers(0, 5))
        span = draw(st.integers(0, MAX_SPAN))
        pmf = None
        if span and draw(st.booleans()):
            weights = [draw(st.integers(0, 3)) for _ in range(span + 1)]
            if sum(weights) == 0:
                weights[0] = 1
            pmf = [w / sum(weights) for w in weights]
        attrs = {"k": draw(st.integers(0, 1)), "v": draw(st.integers(0, 3))}
        stream = draw(st.sampled_from(types + ["B"]))
        events.append(Event(stream, f"e{k}", Interval(lo, lo + span, pmf), attrs))
    variables = ["x", "y", "z"][:length]
    conditions = []
    if draw(st.booleans()):
        conditions += [f"{a}.k = {b}.k" for a, b in zip(variables, variables[1:])]
    if draw(st.booleans()):
        conditions.append(f"{variables[-1]}.v % 2 = 1")
    if draw(st.booleans()):
        conditions.append(f"{variables[0]}.v <= {variables[-1]}.v + 1")
    window = draw(st.integers(2, 7))
    strategy = draw(st.sampled_from(STRATEGIES))
    conditions.append(f"{strategy}({', '.join(variables)})")
    seq = ", ".join(f"{t} {v}" for t, v in zip(types, variables))
    text = f"PATTERN SEQ({seq}) WHERE {' AND '.join(conditions)} WITHIN {window}"
    seed = draw(st.integers(0, 2**16))
    return text, events, seed


def arrival(events, seed):
    """A random arrival order that keeps the arrival-order constraint (an event seen
    before another starts no later than the other ends), in random blocks."""
    rng = random.Random(seed)
    ordered = sorted(events, key=lambda e: e.ts.lo + rng.uniform(0, MAX_SPAN))
    if any(a.ts.lo > b.ts.hi for k, a in enumerate(ordered) for b in ordered[k + 1:]):
        ordered = sorted(events, key=lambda e: (e.ts.lo, rng.random()))
    blocks = [rng.randint(1, 3) for _ in range(len(events))]
    return ordered, blocks


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.sampled_from(METHODS))
def test_every_method_equals_the_possible_worlds(instance, method):
    text, events, seed = instance
    expected = possible_world_matches(parse(text), events)
    ordered, blocks = arrival(events, seed)
    assert_same(run(f"{text} USING {method}", ordered, blocks), expected)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_figure_1_stream(method, strategy):
    """a1, c2, b3, c4 of Figure 1 with W = 4 (uncertainty intervals of 5, 3, 3, 5 instants)."""
    events = [Event("A", "a1", Interval(1, 5)), Event("C", "c2", Interval(3, 5)),
              Event("B", "b3", Interval(3, 5)), Event("C", "c4", Interval(4, 8))]
    text = f"PATTERN SEQ(A a, B b, C c) WHERE {strategy}(a, b, c) WITHIN 4"
    expected = possible_world_matches(parse(text), events)
    assert set(expected) == {("a1", "b3", "c2"), ("a1", "b3", "c4")}
    assert expected[("a1", "b3", "c2")][1:] == (1, 5)
    actual = run(f"{text} USING {method}", events, [1, 1, 1])
    assert_same(actual, expected)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("confidence", ["0.5", "1.0"])
def test_a_confidence_equal_to_its_threshold_is_kept_by_every_method(method, confidence):
    """a1 uniform on 1..4, b1 on 2..4: P(a1 < b1) = 6/12 exactly; a certain pair is 1. A
    confidence equal to WITH CONFIDENCE meets it, whatever its last bit in one method."""
    streams = Streams([StreamParams("A", pi=4), StreamParams("B", pi=4)])
    if confidence == "0.5":
        events = [Event("A", "a1", Interval(1, 4)), Event("B", "b1", Interval(2, 4))]
    else:
        events = [Event("A", "a1", Interval(1, 2)), Event("B", "b1", Interval(3, 4))]
    operator = build_operator(parse(f"PATTERN SEQ(A a, B b) WITHIN 6 WITH CONFIDENCE {confidence} USING {method}"),
                              streams)
    matches = operator.feed(events).matches + operator.flush().matches
    assert [(m.events, round(m.prob, 12)) for m in matches] == [({"a": "a1", "b": "b1"}, float(confidence))]


@pytest.mark.parametrize("method", METHODS)
def test_skip_till_next_takes_the_equalities_the_where_implies(method):
    """a (k=1) at 1, bx (k=2) at 2, by (k=1) at 3, c (k=1) at 4, d at 5. However the
    equalities are written (a chain, another order, through a later component, with a
    component outside them), b.k = a.k holds in every match and is checked at b: bx cannot
    share the run's key, so by is the next B and a, by, c match. An equality through
    arithmetic implies nothing: there bx is the next B, and the run fails at c."""
    streams = Streams([StreamParams(name, pi=1) for name in "ABCD"])
    events = [Event("A", "a", Interval(1, 1), {"k": 1}), Event("B", "bx", Interval(2, 2), {"k": 2}),
              Event("B", "by", Interval(3, 3), {"k": 1}), Event("C", "c", Interval(4, 4), {"k": 1}),
              Event("D", "d", Interval(5, 5), {"k": 9})]

    def matches(seq, where):
        variables = ", ".join(v for _, v in seq)
        text = (f"PATTERN SEQ({', '.join(f'{t} {v}' for t, v in seq)}) WHERE {where} AND "
                f"skip_till_next_match({variables}) WITHIN 10 USING {method}")
        operator = build_operator(parse(text), streams)
        return sorted(tuple(m.events.values()) for m in operator.feed(events).matches + operator.flush().matches)

    abc = [("A", "a"), ("B", "b"), ("C", "c")]
    for where in ("a.k = b.k AND b.k = c.k", "a.k = c.k AND b.k = c.k", "c.k = b.k AND c.k = a.k"):
        assert matches(abc, where) == [("a", "by", "c")], where
    assert matches(abc + [("D", "e")], "a.k = c.k AND b.k = c.k") == [("a", "by", "c", "d")]
    assert matches(abc, "a.k = c.k AND b.k + 0 = c.k") == []
    # an equality between a and b on another attribute says nothing of k at b
    assert matches(abc + [("D", "e")], "a.k = c.k AND b.k = c.k AND a.j = b.j".replace("j", "k2")) == []
    with_j = [Event(e.stream, e.id, e.ts, {**e.attrs, "j": 1}) for e in events]
    events[:] = with_j
    assert matches(abc + [("D", "e")], "a.k = c.k AND b.k = c.k AND a.j = b.j") == [("a", "by", "c", "d")]
    # nor do constants stop the chain: b.k = c.k and c.k = 1 make b.k = 1 known at b
    assert matches(abc, "b.k = c.k AND c.k = 1 AND a.k = 1") == [("a", "by", "c")]
    assert matches(abc, "b.k = c.k AND 1 = c.k") == [("a", "by", "c")]


@pytest.mark.parametrize("method", METHODS)
def test_a_window_is_the_decimal_the_query_wrote(method):
    """A at 0, B at 3: t_b - t_a = 3 < W for W = 3.000000001 (or 3000.000001 ms), not for
    W = 3 (or 3000 ms)."""
    streams = Streams([StreamParams("A", pi=1), StreamParams("B", pi=1)])
    events = [Event("A", "a", Interval(0, 0)), Event("B", "b", Interval(3, 3))]

    def found(within):
        operator = build_operator(parse(f"PATTERN SEQ(A a, B b) WITHIN {within} USING {method}"), streams)
        return [m.prob for m in operator.feed(events).matches + operator.flush().matches]

    assert found("3.000000001") == found("3000.000001 ms") == [1.0]
    assert found("3") == found("3000 ms") == found("0.05 min") == []


@pytest.mark.parametrize("method", METHODS)
def test_a_confidence_summed_from_thirds_is_at_most_one(method):
    """b0 at 5..7 and b1 at 9..11: every world puts b0 first within the window, so the
    confidence is 1, though nine products of thirds add up to 1.0000000000000002."""
    streams = Streams([StreamParams("B", pi=3)])
    events = [Event("B", "b0", Interval(5, 7)), Event("B", "b1", Interval(9, 11))]
    operator = build_operator(parse(f"PATTERN SEQ(B a, B b) WITHIN 8 USING {method}"), streams)
    assert [(m.events, m.prob) for m in operator.feed(events).matches + operator.flush().matches] == \
        [({"a": "b0", "b": "b1"}, 1.0)]
