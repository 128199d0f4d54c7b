"""Explaining a match (penumbra.explain) from the events the match carries.

Every match carries its events (``Match.records``), checked against the input events by
id. The explanation's numbers are checked against computations written here: exact
rational integration for a join's probability and the satisfaction time by bisection
(tests/oracle.py), brute-force possible worlds for a pattern's orderings, and a lossy
match's factors against the model's closed forms; and each against the probability the
operator itself gave the match."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from penumbra.engine import build_operator
from penumbra.errors import ValidationError
from penumbra.events import parse_event, parse_streams
from penumbra.explain import explain
from penumbra.query import parse
from tests.oracle import p_geq_exact, p_within_exact, stime_bisection
from tests.unit.joins.test_join_operator import workload

JOIN = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10 AND A.region = B.region WITH THRESHOLD 0.3"


def _run(text, streams, events, step=97):
    operator = build_operator(parse(text), streams)
    found = []
    for start in range(0, len(events), step):
        found += list(operator.feed(events[start:start + step]).matches)
    return found + list(operator.flush().matches)


def _as_dict(m):
    return {"events": m.events, "prob": m.prob, "records": m.records, "factors": m.factors}


@pytest.mark.parametrize("kind", ["templates", "histograms", "intervals", "mixed"])
def test_a_join_match_carries_its_events_as_they_came(kind):
    streams, events = workload(71, kind, n=240, late_share=0.0)
    by_id = {e.id: e for e in events}
    found = _run(JOIN, streams, events)
    assert found
    for m in found:
        assert set(m.records) == {"A", "B"}
        for var, record in m.records.items():
            given = by_id[m.events[var]]
            assert record["id"] == given.id and record["stream"].casefold() == given.stream.casefold()
            assert record["attrs"] == dict(given.attrs)
            again = parse_event(record, streams)
            assert np.allclose(again.histogram.edges, given.histogram.edges)
            assert np.allclose(again.histogram.probs, given.histogram.probs)


@pytest.mark.parametrize("kind", ["templates", "histograms", "intervals", "mixed"])
def test_a_join_explanation_recomputes_the_probability_and_places_the_partner(kind):
    streams, events = workload(72, kind, n=240, late_share=0.0)
    by_id = {e.id: e for e in events}
    found = _run(JOIN, streams, events)
    assert len(found) >= 10
    for m in found[:: max(1, len(found) // 25)]:
        got = explain(JOIN, streams, _as_dict(m))
        a, b = (by_id[m.events[v]].histogram for v in "AB")
        exact = float(p_within_exact(a.edges, a.probs, b.edges, b.probs, 10.0))
        assert got["probability"]["within"] == pytest.approx(exact, abs=1e-9)
        assert got["probability"]["within"] == pytest.approx(m.prob, abs=1e-12)     # the operator's own figure
        assert got["probability"]["no_later"] == pytest.approx(float(p_geq_exact(a.edges, a.probs, b.edges, b.probs, 10.0)), abs=1e-9)
        assert got["probability"]["no_later"] - got["probability"]["too_early"] == pytest.approx(exact, abs=1e-9)
        assert got["partition"]["range"] == m.partition
        assert got["partition"]["partner_max_time"] == b.hi
        sat = got["satisfaction"]
        later, earlier = (b, a) if b.hi >= a.hi else (a, b)
        assert sat["later_max_time"] == later.hi
        assert sat["stime"] == pytest.approx(stime_bisection(earlier.edges, earlier.probs, later.edges, later.probs, 0.3),
                                             abs=1e-6)
        # Definition 8: at its satisfaction time, the later event's shape meets the threshold exactly
        moved = later.shift(sat["latest_max_time"] - later.hi)
        assert float(p_geq_exact(earlier.edges, earlier.probs, moved.edges, moved.probs, 10.0)) == pytest.approx(0.3, abs=1e-6)
        assert [e["id"] for e in got["events"]] == [m.events["A"], m.events["B"]]
        assert got["events"][0]["attrs"] == dict(by_id[m.events["A"]].attrs)


def test_a_join_curve_passes_through_the_pair():
    streams, events = workload(73, "templates", n=200, late_share=0.0)
    m = _run(JOIN, streams, events)[0]
    got = explain(JOIN, streams, _as_dict(m))
    shape = m.records["B"]["ts"]["template"]
    xs, ys = np.array(got["curve"]["x"]), np.array(got["curve"]["curves"][shape])
    x = got["partition"]["partner_max_time"]
    if xs[0] <= x <= xs[-1]:
        assert np.interp(x, xs, ys) == pytest.approx(m.prob, abs=0.05)   # linear between 200 samples
    lo, hi = got["partition"][got["partition"]["range"]] if got["partition"]["range"] else (None, None)
    if lo is not None:
        assert lo <= x <= hi


def test_a_match_without_its_events_cannot_be_explained():
    streams, _ = workload(74, "templates", n=10)
    with pytest.raises(ValidationError) as failure:
        explain(JOIN, streams, {"events": {"A": "S1", "B": "T2"}, "prob": 0.5})
    assert failure.value.field == "records"


# --- patterns ---------------------------------------------------------------------------------

def _pattern_events(seed: int, n: int):
    """Three streams of small integer intervals (some with a pmf), one node attribute."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        stream = "ABC"[i % 3]
        t = i * 2 + int(rng.integers(0, 3))
        width = int(rng.integers(0, 4))
        ts = {"lo": t, "hi": t + width}
        if width and rng.random() < 0.4:
            ts["pmf"] = rng.dirichlet(np.ones(width + 1)).tolist()
        out.append(parse_event({"stream": stream, "id": f"{stream}{i}", "ts": ts, "attrs": {"node": int(rng.integers(0, 2))}},
                               parse_streams({})))
    return out


def _worlds(events, window: int):
    """Brute force over every possible world (one instant per event): each strict
    ordering's probability, and the pattern order's within the window."""
    supports = []
    for e in events:
        lo, hi = int(e.ts.lo), int(e.ts.hi)
        supports.append(list(zip(range(lo, hi + 1), e.ts.pmf or [1 / (hi - lo + 1)] * (hi - lo + 1))))
    orders: dict[tuple[int, ...], float] = {}
    in_window = 0.0
    for world in itertools.product(*supports):
        times = [t for t, _ in world]
        p = math.prod(w for _, w in world)
        if len(set(times)) < len(times):
            continue
        order = tuple(sorted(range(len(times)), key=times.__getitem__))
        orders[order] = orders.get(order, 0.0) + p
        if order == tuple(range(len(times))) and times[-1] - times[0] < window:
            in_window += p
    return orders, in_window


def test_a_pattern_explanation_weighs_each_ordering_by_its_possible_worlds():
    text = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node "
            "AND skip_till_any_match(a, b, c) WITHIN 7")
    events = _pattern_events(81, 90)
    by_id = {e.id: e for e in events}
    found = _run(text, parse_streams({}), events, step=30)
    assert len(found) >= 5
    for m in found[:: max(1, len(found) // 12)]:
        got = explain(text, parse_streams({}), _as_dict(m))
        chain = [by_id[m.events[v]] for v in "abc"]
        orders, in_window = _worlds(chain, 7)
        assert got["in_window"] == pytest.approx(in_window, abs=1e-12)
        assert got["in_window"] == pytest.approx(m.prob, abs=1e-12)     # the operator's confidence
        assert got["no_other_between"] == 1.0
        listed = {tuple("abc".index(v) for v in o["order"]): o["prob"] for o in got["orderings"]}
        assert len(listed) == 6
        for order, prob in listed.items():
            assert prob == pytest.approx(orders.get(order, 0.0), abs=1e-12), order
        assert got["ties"] == pytest.approx(1 - sum(orders.values()), abs=1e-9)
        assert [o["pattern"] for o in got["orderings"]].count(True) == 1
        assert got["in_order"] == pytest.approx(orders.get((0, 1, 2), 0.0), abs=1e-12)
        assert [e["density"]["times"][0] for e in got["events"]] == [e.ts.lo for e in chain]


def test_a_pattern_match_carries_its_events_as_they_came_each_record_made_once():
    """Every match of a dense pattern names its events with their input shape; an event in
    many matches found together has one record, shared (a match's records are only read)."""
    text = "PATTERN SEQ(A a, B b, C c) WHERE skip_till_any_match(a, b, c) WITHIN 20 WITH CONFIDENCE 0.01"
    events = _pattern_events(83, 90)
    by_id = {e.id: e for e in events}
    found = list(build_operator(parse(text), parse_streams({})).feed(events).matches)   # one block
    assert len(found) > len(events)
    records: dict[str, dict] = {}
    for m in found:
        for var, record in m.records.items():
            event = by_id[m.events[var]]
            assert (record["stream"], record["id"], record["attrs"]) == (event.stream, event.id, dict(event.attrs))
            assert (record["ts"]["lo"], record["ts"]["hi"]) == m.times[var] == (event.ts.lo, event.ts.hi)
            assert record["ts"].get("pmf") == (list(event.ts.pmf) if event.ts.pmf is not None else None)
            assert records.setdefault(event.id, record) is record


def test_a_next_match_pattern_names_the_factor_of_the_events_between():
    text = "PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node AND skip_till_next_match(a, b, c) WITHIN 9"
    events = _pattern_events(82, 90)
    found = _run(text, parse_streams({}), events, step=30)
    assert found
    for m in found[:10]:
        got = explain(text, parse_streams({}), _as_dict(m))
        assert got["next_match"] is True
        assert 0 < got["no_other_between"] <= 1 + 1e-12
        assert got["in_window"] * got["no_other_between"] == pytest.approx(m.prob, abs=1e-12)


# --- lossy sequences ----------------------------------------------------------------------------

def test_a_lossy_explanation_takes_the_probability_apart_by_runs():
    """B may be missed (eps 0.2), !N is negated (eps 0.1), A and C are never missed; no gap
    is learned yet, so every gap density is the prior, uniform over 1..W-1 (W = 10), and
    F(T) = P(gap < T) = (T - 1) / 9. The closed forms of the AYAC model: a negative run
    S^N(T) = (1 - F) / (eps F + 1 - F); a missed B then the negative (Markov form)
    eps_B sum_{0<t<T} f(t) S^N(T - t)."""
    streams = parse_streams({"b": {"miss_prob": 0.2}, "n": {"miss_prob": 0.1}})
    text = "SEQUENCE(A x, B y, !N z, C w) WHERE x.tag = w.tag WITHIN 10 THRESHOLD 0.001"
    raw = [("a", "a1", 0), ("c", "c1", 5), ("a", "a2", 20), ("b", "b2", 22), ("c", "c2", 26), ("a", "a3", 40), ("c", "c3", 49)]
    events = [parse_event({"stream": s, "id": i, "ts": {"lo": t, "hi": t}, "attrs": {"tag": 1}}, streams) for s, i, t in raw]
    found = _run(text, streams, events)

    def f_before(t):
        return max(0, t - 1) / 9

    def s_negative(t):
        return (1 - f_before(t)) / (0.1 * f_before(t) + 1 - f_before(t))

    expected = {("a1", "c1"): 0.2 * sum(s_negative(5 - t) / 9 for t in range(1, 5)),
                ("a2", "c2"): 0.2 * sum(s_negative(6 - t) / 9 for t in range(1, 6)),
                ("a3", "c3"): 0.2 * sum(s_negative(9 - t) / 9 for t in range(1, 9)),
                ("a2", "b2", "c2"): s_negative(4)}
    assert {tuple(m.events.values()) for m in found} == set(expected)
    for m in found:
        got = explain(text, streams, _as_dict(m))
        assert got["product"] == pytest.approx(m.prob, rel=1e-12)
        assert got["product"] == pytest.approx(expected[tuple(m.events.values())], rel=1e-9)
        assert {e["var"] for e in got["events"]} == set(m.events)
        times = {v: r["ts"]["lo"] for v, r in m.records.items()}
        (factor,) = got["factors"]
        assert factor["gap"] == times[factor["before"]] - times[factor["after"]]
        if "y" in m.events:
            assert [c["var"] for c in factor["components"]] == ["z"] and got["missed"] == []
        else:
            assert [c["var"] for c in factor["components"]] == ["y", "z"]
            assert got["missed"] == [{"var": "y", "stream": "B", "miss_prob": 0.2}]


def test_a_lossy_match_over_imprecise_times_is_explained_by_its_worlds():
    """The exit happened at 3, 4 or 5 (uniform), the shelf read at 1 or 2; W = 4, so the
    combinations in order and within the window are (1, 3), (1, 4), (2, 3), (2, 4), (2, 5):
    the one factor is their sum, with their count."""
    text = "SEQUENCE(A x, C z) WHERE x.tag = z.tag WITHIN 4 THRESHOLD 0.01"
    streams = parse_streams({})
    events = [parse_event({"stream": "a", "id": "a1", "ts": {"lo": 1, "hi": 2}, "attrs": {"tag": 1}}, streams),
              parse_event({"stream": "c", "id": "c1", "ts": {"lo": 3, "hi": 5}, "attrs": {"tag": 1}}, streams)]
    (match,) = _run(text, streams, events)
    assert match.prob == pytest.approx(5 / 6, rel=1e-12)
    got = explain(text, streams, _as_dict(match))
    (factor,) = got["factors"]
    assert factor["worlds"] == 5 and factor["gap"] is None
    assert got["product"] == pytest.approx(5 / 6, rel=1e-12)
    assert {e["var"]: e["support"] for e in got["events"]} == {"x": [1.0, 2.0], "z": [3.0, 5.0]}
