"""Imprecise timestamps in lossy queries: an event ``{"lo": a, "hi": b[, "pmf"]}`` happened
at one instant of a..b (uniform or weighted), independently of the others, and a match's
probability is the sum over these possible worlds of P(world) times its probability in
the world. Checked against an enumeration of the worlds, each scored by the brute-force
model of test_lossy_probabilities (every assignment of events to components, term by
term), on random queries with OR / NOT, negatives with their own predicates, DEFAULTs,
several blocks and thresholds that the sums, not the single worlds, decide."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from penumbra.events import Event, parse_event, parse_streams
from penumbra.lossy import build_operator
from penumbra.lossy.worlds import CLAUSE_SETS
from penumbra.query import parse
from penumbra.timestamps import Interval
from test_lossy_probabilities import THRESHOLD, assert_matches, rich_query_text, rich_reference, rich_scenario


def imprecise_scenario(seed: int) -> dict:
    """A rich scenario whose events are imprecise with probability 0.35: 2-4 instants,
    uniform or with random weights (zeros included), and a threshold the sums decide."""
    s = rich_scenario(seed)
    rng = np.random.default_rng(seed + 1)
    spans = []
    for _ in s["events"]:
        if len([x for x in spans if x]) < 4 and rng.random() < 0.35:
            width = int(rng.integers(1, 4))
            pmf = None
            if rng.random() < 0.5:
                weights = rng.integers(0, 4, width + 1).astype(float)
                weights[int(rng.integers(width + 1))] += 1
                pmf = (weights / weights.sum()).tolist()
            spans.append((width, pmf))
        else:
            spans.append(None)
    s["spans"] = spans
    s["threshold"] = float(rng.choice([THRESHOLD, 0.05, 0.2]))
    return s


def instants(event, span):
    t = event[2]
    if span is None:
        return [(t, 1.0)]
    width, pmf = span
    weights = pmf or [1.0 / (width + 1)] * (width + 1)
    return [(t + d, w) for d, w in enumerate(weights) if w > 0]


def worlds_reference(s) -> dict:
    """Sum over every world (one instant per imprecise event) of its probability times
    the brute-force probability of each match in it."""
    total: dict = {}
    readings = [instants(e, span) for e, span in zip(s["events"], s["spans"])]
    for world in itertools.product(*readings):
        weight = math.prod(w for _, w in world)
        events = [(e[0], e[1], t, e[3], e[4]) for e, (t, _) in zip(s["events"], world)]
        for key, prob in rich_reference({**s, "events": events}, threshold=None).items():
            total[key] = total.get(key, 0.0) + weight * prob
    return total


def run_worlds(s) -> list:
    text = rich_query_text(s).replace(f"THRESHOLD {THRESHOLD}", f"THRESHOLD {s['threshold']}")
    op = build_operator(parse(text), parse_streams({name: {"miss_prob": e} for name, e in s["eps"].items()}))
    events = []
    for (stream, ident, t, tag, v), span in zip(s["events"], s["spans"]):
        width, pmf = span or (0, None)
        events.append(Event(stream, ident, Interval(float(t), float(t + width), None if pmf is None else tuple(pmf)),
                            {"tag": tag, "v": v}))
    # in time order of their first possible instant (a pmf may start with zeros)
    events.sort(key=lambda e: e.ts.lo + next(n for n, w in enumerate(e.ts.pmf or (1,)) if w > 0))
    size = max(1, -(-len(events) // s["blocks"]))
    matches = []
    for start in range(0, len(events), size):
        out = op.feed(events[start:start + size])
        assert not out.late
        matches += out.matches
    out = op.flush()
    assert not out.late
    return matches + out.matches


def check_worlds(s) -> None:
    assert_matches(run_worlds(s), worlds_reference(s), s["threshold"])


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1))
@example(3).via("two clauses with incomparable negative events: inclusion-exclusion")
@example(98).via("two clauses with incomparable negative events: inclusion-exclusion")
def test_probabilities_over_worlds_equal_the_enumeration(seed):
    check_worlds(imprecise_scenario(seed))


def ev(stream, ident, lo, hi=None, tag=1, pmf=None):
    ts = {"lo": lo, "hi": lo if hi is None else hi}
    if pmf is not None:
        ts["pmf"] = pmf
    return parse_event({"stream": stream, "id": ident, "ts": ts, "attrs": {"tag": tag}})


SHOPLIFTING = ("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
               "WITHIN 100 THRESHOLD 0.1")


def run(query, events, streams=None):
    op = build_operator(parse(query), parse_streams(streams or {}))
    out = op.feed(events)
    flushed = op.flush()
    return out.matches + flushed.matches, out.late + flushed.late


def test_an_imprecise_counter_read_breaks_a_match_with_its_probability():
    """The counter read happened in 8..11 uniformly; the match breaks where it lies
    strictly between the shelf read (10) and the exit (30): instants 11 only, 1/4."""
    matches, late = run(SHOPLIFTING, [ev("shelf", "x1", 10), ev("counter", "y1", 8, 11), ev("exit", "z1", 30)])
    assert not late
    assert [(m.events, m.prob) for m in matches] == [({"x": "x1", "z": "z1"}, 0.75)]


def test_a_weighted_exit_time_weighs_the_worlds():
    """The exit happened at 9 (0.2, before the shelf read: no match), 12 (0.5) or 14 (0.3)."""
    matches, _ = run(SHOPLIFTING, [ev("shelf", "x1", 10), ev("exit", "z1", 9, 14, pmf=[0.2, 0, 0, 0.5, 0, 0.3])])
    assert [(m.events, m.prob) for m in matches] == [({"x": "x1", "z": "z1"}, pytest.approx(0.8))]
    assert matches[0].times == {"x": (10.0, 10.0), "z": (9.0, 14.0)}


def test_the_threshold_applies_to_the_sum_over_worlds():
    """Each world gives 0 or 1; the match is kept only when the worlds where it holds
    weigh the threshold."""
    events = [ev("shelf", "x1", 10), ev("counter", "y1", 8, 11), ev("exit", "z1", 30)]
    assert run(SHOPLIFTING.replace("0.1", "0.75"), events)[0]
    assert not run(SHOPLIFTING.replace("0.1", "0.76"), events)[0]


def test_one_negative_event_in_two_intervals_is_one_event():
    """Two negatives read the same stream; the counter read at 14..16 lies in the first's
    interval (10, 15) at 14 and in the second's (15, 20) at 16: the match holds only where
    it is at 15 exactly, 1/3, not (1/3)(2/3)."""
    query = ("SEQUENCE(Shelf x, !Counter y, Aisle a, !Counter w, Exit z) "
             "WHERE x.tag = z.tag AND a.tag = x.tag AND y.tag = x.tag AND w.tag = x.tag WITHIN 100 THRESHOLD 0.01")
    events = [ev("shelf", "x1", 10), ev("aisle", "a1", 15), ev("counter", "y1", 14, 16), ev("exit", "z1", 20)]
    matches, _ = run(query, events)
    assert [(m.events, m.prob) for m in matches] == [({"x": "x1", "a": "a1", "z": "z1"}, pytest.approx(1 / 3))]


def test_an_imprecise_event_is_never_two_components():
    """A shelf read at 1..3 could be both x and z of SEQUENCE(Shelf x, Shelf z) in no world."""
    matches, _ = run("SEQUENCE(Shelf x, Shelf z) WHERE x.tag = z.tag WITHIN 10 THRESHOLD 0.01",
                     [ev("shelf", "s1", 1, 3)])
    assert matches == []


@pytest.mark.parametrize("shelf", [(4, 5, [1, 0]), (3, 4, None)])
def test_a_path_every_world_breaks_is_no_match_even_at_the_lowest_threshold(shelf):
    """The counter read at 7 lies after the exit (5) and within the window of the shelf
    read in every world: each world breaks the match, as the precise path with the shelf
    read at 4 is broken, so nothing comes out, not a match of probability zero."""
    lo, hi, pmf = shelf
    query = "SEQUENCE(Shelf x, Exit z, !Counter y) WHERE x.tag = z.tag AND y.tag = x.tag WITHIN 10 THRESHOLD 1e-13"
    events = [ev("shelf", "x1", lo, hi, pmf=pmf), ev("exit", "z1", 5), ev("counter", "y1", 7)]
    assert run(query, events) == ([], [])
    assert run(query, [ev("shelf", "x1", 4), *events[1:]]) == ([], [])


def test_an_or_of_clauses_unites_their_worlds():
    """Clause 1 breaks on a counter read of v = 1, clause 2 on one of tag 1. The read
    (v = 1, tag 1) lies in the interval with probability 1/2, so both clauses fail there:
    1/2; a second read of v = 1 and tag 2, certainly inside, fails clause 1 only."""
    query = ("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE (y.v = 1 OR y.tag = 1) WITHIN 100 THRESHOLD 0.01")
    read = lambda ident, lo, hi, v, tag: parse_event({"stream": "counter", "id": ident, "ts": {"lo": lo, "hi": hi},
                                                      "attrs": {"v": v, "tag": tag}})
    base = [ev("shelf", "x1", 10), ev("exit", "z1", 20)]
    matches, _ = run(query, base + [read("y1", 15, 24, 1, 1)])
    assert [m.prob for m in matches] == [pytest.approx(0.5)]
    matches, _ = run(query, base + [read("y1", 15, 24, 1, 1), read("y2", 12, 12, 1, 2)])
    assert [m.prob for m in matches] == [pytest.approx(0.5)]     # clause 2 still holds where y1 is outside
    # y1 breaks clause 1 only, y3 clause 2 only, each inside with probability 1/2:
    # P(clause 1 or clause 2 holds) = 1/2 + 1/2 - 1/4
    matches, _ = run(query, base + [read("y1", 15, 24, 1, 2), read("y3", 15, 24, 0, 1)])
    assert [m.prob for m in matches] == [pytest.approx(0.75)]


def test_results_do_not_depend_on_blocks_or_snapshots():
    events = sorted([ev("shelf", f"x{n}", 10 * n, 10 * n + n % 3, tag=n % 4) for n in range(30)]
                    + [ev("counter", f"y{n}", 10 * n + 4, 10 * n + 9, tag=n % 4) for n in range(0, 30, 3)]
                    + [ev("exit", f"z{n}", 10 * n + 7, 10 * n + 7 + n % 2, tag=n % 4) for n in range(30)],
                    key=lambda e: e.ts.lo)
    whole, _ = run(SHOPLIFTING, events)
    op = build_operator(parse(SHOPLIFTING), parse_streams({}))
    pieces = []
    for start in range(0, len(events), 7):
        pieces += op.feed(events[start:start + 7]).matches
        op = type(op).restore(op.snapshot())
    pieces += op.flush().matches
    assert len(whole) > 20
    assert sorted((tuple(sorted(m.events.items())), m.prob) for m in pieces) == \
        sorted((tuple(sorted(m.events.items())), m.prob) for m in whole)


def test_too_many_clause_sets_are_reported_not_guessed():
    """More than CLAUSE_SETS clauses, each with its own imprecise negative event: the match
    comes back in ``late`` with its reason."""
    count = CLAUSE_SETS + 1
    where = " OR ".join(f"y.v = {n}" for n in range(count))
    query = f"SEQUENCE(Shelf x, !Counter y, Exit z) WHERE {where} WITHIN 100 THRESHOLD 0.01"
    reads = [parse_event({"stream": "counter", "id": f"y{n}", "ts": {"lo": 12, "hi": 13}, "attrs": {"v": n}})
             for n in range(count)]
    matches, late = run(query, [ev("shelf", "x1", 10), *reads, ev("exit", "z1", 20)])
    assert matches == [] and len(late) == 1 and "clauses" in late[0].reason


OR_OF_KINDS = ("SEQUENCE(!Counter y, Shelf x, Exit z, !Alarm w) WHERE "
               "(x.tag = z.tag AND y.tag = x.tag AND w.tag = x.tag AND y.k = 1 AND w.k = 1) OR "
               "(x.tag = z.tag AND y.tag = x.tag AND w.tag = x.tag AND y.k = 2 AND w.k = 2) "
               "GAP z = uniform(1, 60) WITHIN 60 THRESHOLD 0.01")


def kind_event(stream, ident, lo, hi, tag, k=None):
    return Event(stream, ident, Interval(float(lo), float(hi)), {"tag": tag} if k is None else {"tag": tag, "k": k})


@pytest.mark.parametrize("crowd", [0, 5000])
def test_a_waiting_match_keeps_what_broke_its_other_clauses(crowd):
    """Clause 2 is broken by the counter read of kind 2 before the shelf read (leading),
    clause 1 by the alarm of kind 1 that certainly lies in the trailing window: no match.
    The alarm is imprecise, so the waiting match is summed over worlds when its window
    passes; by then thousands of other counter reads have made the operator compact its
    queues, which must not forget what already broke clause 2."""
    events = [kind_event("counter", "y1", 25, 25, 1, k=2), kind_event("shelf", "x1", 40, 40, 1),
              kind_event("exit", "z1", 50, 50, 1), kind_event("alarm", "w1", 60, 62, 1, k=1)]
    events += [kind_event("counter", f"f{n}", 86, 86, 100 + n, k=2) for n in range(crowd)]
    events += [kind_event("shelf", "far", 95, 95, 9)]
    op = build_operator(parse(OR_OF_KINDS), parse_streams({"shelf": {"max_delay": 3}}))
    assert op.feed(events).matches + op.flush().matches == []


def test_a_waiting_match_sums_its_trailing_window_over_worlds():
    """The alarm of kind 1 lies in the trailing window (50, 100) at 98 or 99 and outside at
    100 or 101: clause 1 holds in half the worlds, clause 2 (no counter of kind 2) in all,
    so 1; without clause 2's way out, the match holds where the alarm is outside: 1/2 of
    the score of the precise model."""
    events = [kind_event("shelf", "x1", 40, 40, 1), kind_event("exit", "z1", 50, 50, 1),
              kind_event("alarm", "w1", 98, 101, 1, k=1), kind_event("shelf", "far", 300, 300, 9)]
    both = build_operator(parse(OR_OF_KINDS), parse_streams({}))
    (match,) = both.feed(events).matches + both.flush().matches
    one = OR_OF_KINDS.split(" OR ")[0] + " GAP z = uniform(1, 60) WITHIN 60 THRESHOLD 0.01"
    alone = build_operator(parse(one), parse_streams({}))
    (half,) = alone.feed(events).matches + alone.flush().matches
    precise = build_operator(parse(one), parse_streams({}))
    (whole,) = precise.feed([e for e in events if e.id != "w1"]).matches + precise.flush().matches
    assert match.prob == pytest.approx(whole.prob, rel=1e-12)
    assert half.prob == pytest.approx(whole.prob / 2, rel=1e-12)


def test_the_clock_a_host_shares_is_the_time_the_operator_takes():
    """An imprecise read too wide for the grid is late, so it moves neither the time the
    operator takes nor the one it tells a host to share with the other key groups."""
    op = build_operator(parse(SHOPLIFTING), parse_streams({"shelf": {"max_delay": 3}}))
    block = [ev("shelf", "x1", 10), ev("shelf", "w", 1000, 6000, tag=2), ev("shelf", "p", 20, 23, tag=3,
                                                                            pmf=[0, 0, 0.5, 0.5])]
    assert op.clock_of(block) == {"seen": 22.0}
    out = op.feed(block)
    assert [late.event.id for late in out.late] == ["w"] and op.seen == 22


def in_order_within(spans: list[tuple[int, int]], window: int) -> float:
    """P(t_1 < t_2 < ... < t_n and t_n - t_1 < window), each t_k uniform on the integers
    of its span, independent: summed over every combination (numpy broadcasting)."""
    grids = np.meshgrid(*[np.arange(lo, hi + 1) for lo, hi in spans], indexing="ij", sparse=True)
    held = np.ones([hi - lo + 1 for lo, hi in spans], bool)
    for a, b in zip(grids, grids[1:]):
        held &= a < b
    held &= grids[-1] - grids[0] < window
    return held.sum() / held.size


def test_wide_imprecise_reads_are_summed_exactly_not_path_by_path():
    """Reads known to 100-160 instants: a path takes each read once, not once per instant
    (which made 10^6 paths a match here), and the sums over worlds are exact. With every
    read certain to be seen, a world holds the match exactly when its times are in order
    inside the window."""
    query = ("SEQUENCE(Shelf x, Aisle a, Exit z) WHERE x.tag = z.tag AND a.tag = x.tag "
             "WITHIN 300 THRESHOLD 0.05")
    spans = {"x1": (0, 119), "a1": (60, 219), "z1": (150, 299), "x2": (1000, 1099), "a2": (1050, 1199),
             "z2": (1100, 1259), "a3": (1400, 1500), "z3": (1450, 1600)}
    streams = {"shelf": "x", "aisle": "a", "exit": "z"}
    events = sorted((ev(next(s for s, v in streams.items() if v == name[0]), name, lo, hi, tag=int(name[1]))
                     for name, (lo, hi) in spans.items()), key=lambda e: e.ts.lo)
    matches, late = run(query, events)
    assert not late
    found = {tuple(sorted(m.events.values())): m.prob for m in matches}
    expected = {}
    for n in ("1", "2"):
        names = (f"a{n}", f"x{n}", f"z{n}")
        expected[names] = in_order_within([spans[f"x{n}"], spans[f"a{n}"], spans[f"z{n}"]], 300)
    assert all(p >= 0.05 for p in expected.values()) and set(found) == set(expected)
    for names, prob in expected.items():
        assert found[names] == pytest.approx(prob, abs=1e-12)


def test_reads_too_wide_to_sum_are_reported_without_building_their_paths():
    """Three reads of 1,500 instants each: 3.4 billion combinations a match, beyond what
    the operator sums (COMBINATIONS). Each candidate match comes back in ``late`` with its
    reason; built an instant at a time its paths alone would need tens of GiB."""
    query = "SEQUENCE(Shelf x, Aisle a, Exit z) WHERE x.tag = z.tag WITHIN 5000 THRESHOLD 0.1"
    events = []
    for n in range(4):
        for k, stream in enumerate(("shelf", "aisle", "exit")):
            t = 3000 * n + 1000 * k
            events.append(ev(stream, f"{stream}{n}", t, t + 1499, tag=n % 2))
    matches, late = run(query, sorted(events, key=lambda e: e.ts.lo))
    assert matches == []
    assert late and all("combinations of instants" in item.reason for item in late)
    # every candidate: an exit, its aisle read and shelf read of the same tag in the window
    assert {item.event.id for item in late} == {"exit0", "exit1", "exit2", "exit3"}


@pytest.mark.parametrize("width", [2, 9, 99])
def test_a_negative_read_inside_in_every_world_breaks_every_world(width):
    """A counter read of width + 1 equally likely instants (tenths do not add up to 1 in
    floating point), every one strictly between the shelf read and the exit: no world
    holds the match, so there is none even at the lowest threshold; moved to straddle
    the exit, it breaks the share of worlds inside."""
    query = SHOPLIFTING.replace("WITHIN 100 THRESHOLD 0.1", "WITHIN 1000 THRESHOLD 1e-13")
    inside = [ev("shelf", "x1", 0), ev("counter", "y1", 1, 1 + width), ev("exit", "z1", 200)]
    assert run(query, inside) == ([], [])
    straddling = [ev("shelf", "x1", 0), ev("counter", "y1", 150, 150 + width), ev("exit", "z1", 151 + width // 2)]
    matches, late = run(query, straddling)
    assert not late and [m.prob for m in matches] == [pytest.approx(1 - (width // 2 + 1) / (width + 1), abs=1e-12)]
