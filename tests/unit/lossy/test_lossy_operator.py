"""The lossy operator's interface: input handling, hashing, pruning, state."""

from __future__ import annotations

import functools
import math
from collections import Counter

import numpy as np
import pytest

from penumbra.engine import compile_query
from penumbra.errors import ValidationError
from penumbra.events import Event, parse_event, parse_streams
from penumbra.lossy import GapHistogram, LossyOperator, build_operator
from penumbra.lossy import operator as lossy_operator
from penumbra.lossy import queues as lossy_queues
from penumbra.lossy.operator import LEARN_EVERY
from penumbra.query import QueryError, parse
from penumbra.timestamps import Histogram, Interval

STREAMS = parse_streams({"shelf": {"miss_prob": 0.2}, "counter": {"miss_prob": 0.3},
                         "aisle": {"miss_prob": 0.4}, "exit": {"miss_prob": 0.1}})


def rfid(reader, ident, t, tag):
    return Event(reader, ident, Interval(float(t), float(t)), {"tag": tag})


def random_store(seed, visits=300, tags=40):
    """Visits of ``tags`` tags: shelf, sometimes aisle, sometimes counter, exit; reads lost."""
    rng = np.random.default_rng(seed)
    events = []
    for n in range(visits):
        tag = int(rng.integers(tags))
        t = int(rng.integers(0, 3000))
        route = ["shelf"] + (["aisle"] if rng.random() < 0.6 else []) + \
                (["counter"] if rng.random() < 0.7 else []) + ["exit"]
        for reader in route:
            if rng.random() > 0.15:
                events.append(rfid(reader, f"{reader}-{n}", t, tag))
            t += int(rng.integers(1, 25))
    return sorted(events, key=lambda e: e.ts.lo)


FIXED = ("SEQUENCE(Shelf x, Aisle a, !Counter y, Exit z) WHERE {eq} DEFAULT a.tag = x.tag "
         "GAP a = uniform(1, 24), y = exponential(20), z = histogram(10, 3, 2, 1) WITHIN 80 THRESHOLD {p}")
HASHED = "x.tag = a.tag AND a.tag = z.tag AND y.tag = x.tag"
UNHASHED = "x.tag + 0 = a.tag + 0 AND a.tag + 0 = z.tag + 0 AND y.tag + 0 = x.tag + 0"


def run(op, events, block=50):
    matches = []
    for start in range(0, len(events), block):
        matches += op.feed(events[start:start + block]).matches
    return matches + op.flush().matches


def as_set(matches):
    return Counter((tuple(sorted(m.events.items())), m.prob) for m in matches)


def test_hashed_queues_equal_one_queue():
    """Section 5.2: hashing on the tag changes the work, not the matches or probabilities."""
    events = random_store(1)
    hashed = build_operator(parse(FIXED.format(eq=HASHED, p=0.05)), STREAMS)
    single = build_operator(parse(FIXED.format(eq=UNHASHED, p=0.05)), STREAMS)
    assert hashed.nfa.key_attributes and not single.nfa.key_attributes
    found = run(hashed, events)
    assert any(len(m.events) == 2 for m in found) and any(len(m.events) == 3 for m in found)
    assert as_set(found) == as_set(run(single, events))


@pytest.mark.parametrize("threshold", [0.1, 0.3, 0.6, 0.9])
def test_pruning_loses_no_match(threshold):
    """Threshold pruning (arrivals, edges, paths) returns exactly the matches a run with a
    tiny threshold finds at or above the threshold."""
    events = random_store(2)
    everything = run(build_operator(parse(FIXED.format(eq=HASHED, p=1e-9)), STREAMS), events)
    pruned_op = build_operator(parse(FIXED.format(eq=HASHED, p=threshold)), STREAMS)
    pruned = run(pruned_op, events)
    assert as_set(pruned) == as_set(m for m in everything if m.prob >= threshold)
    assert pruned_op.counters["pruned_arrivals"] + pruned_op.counters["pruned_paths"] > 0


@pytest.mark.parametrize("block", [1, 7, 1000])
def test_learning_does_not_depend_on_blocks(block, monkeypatch):
    """The tables move at the same events however the input is cut (here four times:
    checked every 1000 events instead of LEARN_CHECK_EVERY, to keep the stream short)."""
    monkeypatch.setattr(lossy_operator, "LEARN_CHECK_EVERY", 1000)
    query, events, reference, observations = learning_reference()
    assert observations > 4 * LEARN_EVERY
    assert as_set(run(build_operator(query, STREAMS), events, block=block)) == reference


@functools.cache
def learning_reference():
    """The learning run in blocks of 50 the cuts are held to, run once for all of them
    (with LEARN_CHECK_EVERY at 1000, as each test sets it): its query, events, matches and
    the observations its tables learned from."""
    query = parse("SEQUENCE(Shelf x, Aisle a, !Counter y, Exit z) WHERE " + HASHED +
                  " DEFAULT a.tag = x.tag WITHIN 80 THRESHOLD 0.05")
    events = random_store(3, visits=3000)
    op = build_operator(query, STREAMS)
    reference = as_set(run(op, events, block=50))
    return query, events, reference, sum(h.observations for h in op.densities.learned.values())


def test_learning_moves_the_probabilities():
    """Densities learned from completed matches replace the uniform prior."""
    query = parse("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
                  "WITHIN 1000 THRESHOLD 0.01")
    op = build_operator(query, STREAMS)
    prior = op.tables.score[0, 1][5]
    events = []
    for n in range(4000):     # exits 5 after the shelf, counters 3 after: short gaps
        events += [rfid("shelf", f"a{n}", 20 * n, n), rfid("exit", f"c{n}", 20 * n + 5, n)]
        if n % 2:
            events.append(rfid("counter", f"b{n}", 20 * n + 3, n))
    run(op, sorted(events, key=lambda e: e.ts.lo), block=500)
    assert op.densities.learned["z"].observations > 500 and op.densities.learned["y"].observations > 500
    pmf_y = op.densities.learned["y"].pmf()
    assert pmf_y[1:16].sum() > 0.5                  # mass moved to the short gaps seen
    assert op.tables.score[0, 1][5] < prior                # so a 5-long gap hides a counter read more likely


def test_late_and_off_grid_events_are_reported():
    op = build_operator(parse("SEQUENCE(Shelf x, Exit z) WITHIN 10 THRESHOLD 0.5"), STREAMS)
    out = op.feed([rfid("shelf", "a1", 5, 1), rfid("exit", "c1", 8, 1)])
    assert [m.events for m in out.matches] == [{"x": "a1", "z": "c1"}]
    odd = [rfid("shelf", "old", 7, 1),
           Event("shelf", "wide", Interval(9.0, 12.0), {}),           # imprecise, on the grid: read
           Event("shelf", "early", Interval(7.0, 12.0), {}),          # its first instant already passed
           Event("shelf", "ragged", Interval(9.0, 12.5), {}),
           Event("shelf", "hist", Histogram([1, 2], [1.0]), {}),
           rfid("shelf", "half", 9.5, 1),
           rfid("other", "x1", 3, 1)]
    out = op.feed(odd)
    reasons = {late.event.id: late.reason for late in out.late}
    assert set(reasons) == {"old", "early", "ragged", "hist", "half"}
    assert "out of order" in reasons["old"] and "out of order" in reasons["early"]
    assert "unit grid" in reasons["ragged"] and "unit grid" in reasons["half"]
    assert "histogram" in reasons["hist"]
    assert op.counters["late"] == 5 and op.counters["ignored"] == 1 and op.counters["events"] == 9


def test_max_delay_reorders_before_processing():
    streams = parse_streams({"shelf": {"max_delay": 10}, "exit": {"max_delay": 10}})
    op = build_operator(parse("SEQUENCE(Shelf x, Exit z) WHERE x.tag = z.tag WITHIN 50 THRESHOLD 0.5"), streams)
    first = op.feed([rfid("exit", "c1", 30, 1), rfid("shelf", "a2", 31, 2)])
    assert first.matches == [] and first.observations["held"] == 2      # within D of the newest
    second = op.feed([rfid("shelf", "a1", 25, 1), rfid("exit", "c2", 45, 2)])   # a1 came late, within D
    assert [m.events for m in second.matches] == [{"x": "a1", "z": "c1"}]
    third = op.feed([rfid("shelf", "a0", 20, 1)])      # older than what was processed
    assert [late.event.id for late in third.late] == ["a0"]
    assert [m.events for m in op.flush().matches] == [{"x": "a2", "z": "c2"}]


def test_trailing_negative_waits_for_the_window():
    """A trailing negative must be absent from (t_last, t_first + W): the match waits."""
    op = build_operator(parse("SEQUENCE(Shelf x, Exit z, !Counter y) WHERE x.tag = z.tag AND y.tag = z.tag "
                              "WITHIN 20 THRESHOLD 0.5"), parse_streams({}))
    assert op.feed([rfid("shelf", "a1", 0, 1), rfid("exit", "c1", 5, 1),
                    rfid("shelf", "a2", 1, 2), rfid("exit", "c2", 6, 2)]).matches == []
    assert op.counters["pending"] == 2
    out = op.feed([rfid("counter", "b2", 20, 2)])       # time 20 closes a1's window (0 + 20)
    assert [m.events for m in out.matches] == [{"x": "a1", "z": "c1"}]
    assert op.feed([rfid("shelf", "a9", 21, 9)]).matches == []     # b2 at 20 is inside (6, 21)
    assert op.feed([rfid("shelf", "a3", 30, 3), rfid("exit", "c3", 35, 3)]).matches == []
    assert [m.events for m in op.flush().matches] == [{"x": "a3", "z": "c3"}]     # end of input


def test_snapshot_restore_continues_exactly():
    events = random_store(4)
    query = parse(FIXED.format(eq=HASHED, p=0.05))
    whole = run(build_operator(query, STREAMS), events)
    op = build_operator(query, STREAMS)
    half = len(events) // 2
    first = run_blocks = []
    for start in range(0, half, 50):
        first += op.feed(events[start:min(start + 50, half)]).matches
    restored = LossyOperator.restore(op.snapshot())
    rest = run(restored, events[half:])
    assert as_set(run_blocks + rest) == as_set(whole)
    assert restored.counters["events"] == len(events)


def test_set_threshold_and_evict():
    op = build_operator(parse("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
                              "GAP y = uniform(1, 10) WITHIN 100 THRESHOLD 0.9"), STREAMS)
    # counter missed with eps = 0.3: S^N(T) = (1 - F) / (0.3 F + 1 - F), F = min(T - 1, 10) / 10
    out = op.feed([rfid("shelf", "a1", 0, 1), rfid("exit", "c1", 5, 1)])
    assert out.matches == []                              # S^N(5) = 0.6 / 0.72 < 0.9
    op.set_threshold(0.5)
    out = op.feed([rfid("shelf", "a2", 10, 2), rfid("exit", "c2", 15, 2)])
    assert [(m.events, m.prob) for m in out.matches] == [({"x": "a2", "z": "c2"}, pytest.approx(0.6 / 0.72))]
    assert op.evict(1000) == 2 and op.counters["paq_entries"] == 0
    with pytest.raises(ValueError):
        op.set_threshold(0)


def test_missable_component_needs_defaults():
    text = "SEQUENCE(Shelf x, Aisle a, Exit z) WHERE x.tag = a.tag AND a.tag = z.tag WITHIN 80 THRESHOLD 0.1"
    with pytest.raises(QueryError, match="DEFAULT a.tag") as error:
        build_operator(parse(text), STREAMS)
    assert error.value.line == 1 and error.value.column == 50
    build_operator(parse(text), parse_streams({}))        # never missed: no default needed


def test_engine_builds_the_operator():
    op = compile_query("SEQUENCE(Shelf x, Exit z) WHERE x.tag = z.tag WITHIN 10 THRESHOLD 0.5", STREAMS)
    event = parse_event({"stream": "SHELF", "id": "a", "ts": {"lo": 1, "hi": 1}, "attrs": {"tag": 1}})
    out = op.feed([event, rfid("Exit", "c", 4, 1)])
    assert [m.to_json() for m in out.matches] == [{"events": {"x": "a", "z": "c"}, "prob": 1.0}]
    assert math.isclose(out.matches[0].prob, 1.0)


def test_idle_queues_are_swept():
    """A tag per visit leaves a queue per visit: sweeps keep their number O(W), not O(stream)."""
    op = build_operator(parse("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
                              "WITHIN 50 THRESHOLD 0.5"), parse_streams({}))
    events = [rfid(reader, f"{reader}-{n}", n + lag, n) for n in range(20_000)
              for reader, lag in (("shelf", 0), ("counter", 1))]
    for start in range(0, len(events), 1000):
        op.feed(events[start:start + 1000])
    assert op.queue_count() < 6_000 < 40_000 == len(events)


def test_stream_gap_parameters_fix_the_density():
    """A stream's ``gap`` fixes f like the query's GAP clause, which takes precedence."""
    streams = parse_streams({"shelf": {"miss_prob": 0.2}, "counter": {"miss_prob": 0.3, "gap": {"uniform": [1, 10]}},
                             "exit": {"miss_prob": 0.1}})
    events = [rfid("shelf", "a1", 0, 1), rfid("exit", "c1", 5, 1)]
    query = "SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag {gap}WITHIN 100 THRESHOLD 0.5"
    op = build_operator(parse(query.format(gap="")), streams)
    assert "y" not in op.densities.learned
    # S^N(5) = (1 - F) / (0.3 F + 1 - F) with F = P(gap < 5) = 4/10, then 4/20 under the query's GAP
    assert [m.prob for m in op.feed(events).matches] == [pytest.approx(0.6 / 0.72)]
    op = build_operator(parse(query.format(gap="GAP y = uniform(1, 20) ")), streams)
    assert [m.prob for m in op.feed(events).matches] == [pytest.approx(0.8 / 0.86)]


def test_a_stream_gap_no_component_uses_is_not_checked():
    """A stream's ``gap`` outside the window refuses a query only where it would serve: not
    under the query's GAP, nor for the first positive, which has no gap."""
    far = {"gap": {"uniform": [20, 30]}}
    events = [rfid("shelf", "a1", 0, 1), rfid("exit", "c1", 4, 1)]
    query = "SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag {gap}WITHIN 10 THRESHOLD 0.1"
    streams = parse_streams({"counter": {"miss_prob": 0.5, **far}})
    with pytest.raises(ValidationError, match="counter.gap: uniform"):
        build_operator(parse(query.format(gap="")), streams)
    # under GAP y = uniform(1, 5): F(4) = 3/5, S^N(4) = 0.4 / (0.5 * 0.6 + 0.4)
    op = build_operator(parse(query.format(gap="GAP y = uniform(1, 5) ")), streams)
    assert [m.prob for m in op.feed(events).matches] == [pytest.approx(0.4 / 0.7)]
    op = build_operator(parse(query.format(gap="")), parse_streams({"shelf": far}))
    assert [m.prob for m in op.feed(events).matches] == [1.0]


@pytest.mark.parametrize("threshold", [0.05, 0.9])
def test_negative_densities_learn_from_their_own_events(threshold):
    """A negative's gap samples are the time from the newest earlier read of the positive
    before it (the aisle) of the same tag, within W, to each counter read: a brute-force
    scan finds the same gaps, at any threshold."""
    window = 80
    query = parse("SEQUENCE(Shelf x, Aisle a, !Counter y, Exit z) WHERE " + HASHED +
                  f" DEFAULT a.tag = x.tag WITHIN {window} THRESHOLD {threshold}")
    events = random_store(6, visits=900)
    op = build_operator(query, STREAMS)
    run(op, events)
    gaps = []
    for counter in (e for e in events if e.stream == "counter"):
        aisles = [e.ts.lo for e in events if e.stream == "aisle" and e.attrs["tag"] == counter.attrs["tag"]
                  and counter.ts.lo - window < e.ts.lo < counter.ts.lo]
        if aisles:
            gaps.append(counter.ts.lo - max(aisles))
    expected = GapHistogram(window)
    expected.add(np.array(gaps))
    learned = op.densities.learned["y"]
    learned.add(np.array(op.densities.gap_samples["y"], dtype=np.int64))
    assert learned.observations == len(gaps) > 300
    assert learned.counts.tolist() == expected.counts.tolist()


@pytest.mark.parametrize("block", [1, 7])
def test_bounds_do_not_depend_on_when_entries_leave(block, monkeypatch):
    """With learned tables, a bound u computed before the tables move decides pruning
    after: u must not depend on when old entries were dequeued, which depends on the
    blocks. An old arrival of w's tag (w0, u = 1), far outside the window, must not
    raise v1's bound in one cutting of the input and not in another."""
    monkeypatch.setattr(lossy_operator, "LEARN_CHECK_EVERY", 200)
    monkeypatch.setattr(lossy_operator, "LEARN_EVERY", 10)
    monkeypatch.setattr(lossy_queues, "COMPACT_MIN", 8)
    query = parse("SEQUENCE(A x, !N y0, B w, !M y, D v, C z) WHERE x.tag = w.tag AND w.tag = v.tag "
                  "AND v.tag = z.tag AND y0.tag = x.tag AND y.tag = w.tag GAP y0 = uniform(1, 19) "
                  "WITHIN 20 THRESHOLD 0.65")
    streams = parse_streams({"N": {"miss_prob": 0.5}, "M": {"miss_prob": 0.5}})
    events = [rfid("A", "x0", 0, 1), rfid("B", "w0", 1, 1)]
    for n in range(40):        # other tags fill w's queue (compactions) and teach y a gap of 19
        t = 100 + 3 * n
        events += [rfid("A", f"a{n}", t, f"f{n}"), rfid("B", f"b{n}", t + 1, f"f{n}"),
                   rfid("M", f"m{n}", t + 20, f"f{n}")]
    late = 100 + 3 * 40 + 50
    events += [rfid("A", "x1", late, 1), rfid("B", "w1", late + 10, 1), rfid("D", "v1", late + 15, 1)]
    events.sort(key=lambda e: e.ts.lo)
    events += [rfid("A", f"pad{n}", late + 16, f"p{n}") for n in range(200 - len(events))]   # tables move
    events.append(rfid("C", "z1", late + 17, 1))
    whole = as_set(run(build_operator(query, streams), events, block=len(events)))
    assert as_set(run(build_operator(query, streams), events, block=block)) == whole


def test_a_hash_key_of_true_is_not_one():
    """Hashed queues tell JSON's kinds apart as conditions do: x's tag true meets z2's true,
    not z1's 1."""
    op = build_operator(parse("SEQUENCE(A x, C z) WHERE x.tag = z.tag WITHIN 10 THRESHOLD 0.1"), parse_streams({}))
    events = [parse_event({"stream": "a", "id": "x1", "ts": {"lo": 0, "hi": 0}, "attrs": {"tag": True}}),
              parse_event({"stream": "c", "id": "z1", "ts": {"lo": 4, "hi": 4}, "attrs": {"tag": 1}}),
              parse_event({"stream": "c", "id": "z2", "ts": {"lo": 5, "hi": 5}, "attrs": {"tag": True}})]
    assert [m.events for m in op.feed(events).matches + op.flush().matches] == [{"x": "x1", "z": "z2"}]


def test_times_beyond_the_grids_exact_range_are_not_processed():
    """1e19 is past 2**63 (and 2**53): such events are returned with their reason, and the
    match of the events before them stays."""
    op = build_operator(parse("SEQUENCE(A x, C z) WITHIN 100 THRESHOLD 0.5"), parse_streams({}))
    events = [parse_event({"stream": "a", "id": "x1", "ts": {"lo": 10, "hi": 10}}),
              parse_event({"stream": "c", "id": "z1", "ts": {"lo": 20, "hi": 20}}),
              parse_event({"stream": "a", "id": "x2", "ts": {"lo": 1e19, "hi": 1e19}}),
              parse_event({"stream": "c", "id": "z2", "ts": {"lo": 1e19, "hi": 1e19}})]
    result = op.feed(events)
    matches = result.matches + op.flush().matches
    assert [m.events for m in matches] == [{"x": "x1", "z": "z1"}]
    assert sorted(late.event.id for late in result.late) == ["x2", "z2"]
    assert all("exact range" in late.reason for late in result.late)
