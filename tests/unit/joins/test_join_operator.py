"""The join operator against a brute-force all-pairs join written here: every strategy,
intervals and template histograms, d >= pi and d < pi, keys, filters, late events,
threshold moves, snapshots. Probabilities come from tests/oracle.py (bucket-pair
integration), lateness from a plain replay of the arrival order."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import zlib
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from penumbra.engine import compile_query
from penumbra.errors import ValidationError
from penumbra.events import parse_event, parse_streams
from penumbra.joins import STRATEGIES, JoinOperator
from penumbra.query.ast import evaluate
from tests.oracle import p_geq_float
from tests.strategies import histograms

AMBIGUOUS = 1e-9


def oracle_within(h_a, h_b, d: float) -> float:
    return p_geq_float(h_a.edges, h_a.probs, h_b.edges, h_b.probs, d) - \
        p_geq_float(h_a.edges, h_a.probs, h_b.edges, h_b.probs, -d)


def workload(seed: int, kind: str, n: int = 260, spacing: float = 6.0, late_share: float = 0.03,
             at_the_edge: bool = False):
    """Two streams S and T with region attributes, in a disordered arrival order: each
    event arrives after a delay within its stream's max_delay, a few beyond it."""
    rng = np.random.default_rng(seed)
    templates = {
        "S": {"u1": {"edges": [0, 4, 6, 10], "probs": [0.2, 0.5, 0.3]}, "u2": {"edges": [0, 8], "probs": [1.0]},
              "u3": {"edges": [0, 1, 5, 6], "probs": [0.6, 0.0, 0.4]}},
        "T": {"v1": {"edges": [0, 3, 9], "probs": [0.7, 0.3]}, "v2": {"edges": [0, 2, 4, 5, 12], "probs": [0.1, 0.4, 0.3, 0.2]}},
    }
    if kind == "templates":
        params = {s: {"templates": templates[s], "max_delay": 30.0} for s in "ST"}
    elif kind == "mixed":
        params = {s: {"templates": templates[s], "pi": 14.0, "max_delay": 30.0} for s in "ST"}
    else:
        params = {"S": {"pi": 12.0, "max_delay": 30.0}, "T": {"pi": 9.0, "max_delay": 20.0}}
    raw = []
    for i in range(n):
        stream = "S" if rng.random() < 0.5 else "T"
        t = i * spacing / 2 + rng.uniform(-3, 3)
        attrs = {"region": ["n", "s"][int(rng.integers(0, 2))], "v": int(rng.integers(0, 10))}
        if kind == "templates" or (kind == "mixed" and rng.random() < 0.6):
            name = list(templates[stream])[int(rng.integers(0, len(templates[stream])))]
            ts = {"detected": round(t, 1), "template": name}
        elif kind == "mixed":
            edges = np.round(np.sort(rng.uniform(t - 14, t, 3)), 2)
            edges = np.unique(np.append(edges, round(t, 2)))
            probs = rng.dirichlet(np.ones(len(edges) - 1))
            probs[-1] = 1 - probs[:-1].sum()
            ts = {"edges": edges.tolist(), "probs": probs.tolist()}
        else:
            length = rng.uniform(0.5, params[stream]["pi"])
            ts = {"lo": round(t - length, 3), "hi": round(t, 3)}
        if at_the_edge:   # half on time, half as late as the max delay allows
            share = 0.0 if rng.random() < 0.5 else rng.uniform(0.97, 1.0)
        else:
            share = 1.5 if rng.random() < late_share else rng.random()
        delay = params[stream]["max_delay"] * share
        raw.append((t + delay, {"stream": stream, "id": f"{stream}{i}", "ts": ts, "attrs": attrs}))
    raw.sort(key=lambda item: item[0])
    streams = parse_streams(params)
    return streams, [parse_event(obj, streams) for _, obj in raw]


def admitted_events(streams, events) -> list:
    """The events that were not late, replaying the arrival order (a plain watermark)."""
    watermark, admitted = -math.inf, []
    for e in events:
        if e.histogram.hi + streams[e.stream].max_delay < watermark:
            continue
        watermark = max(watermark, e.histogram.hi)
        admitted.append(e)
    return admitted


def same_key(a, b) -> bool:
    """Whether two key values are one key: equal, neither null, and a boolean only equal to
    a boolean (1 and 1.0 are one key; True is not 1)."""
    return a is not None and b is not None and a == b and (type(a) is bool) == (type(b) is bool)


def brute_force(streams, events, d, threshold_at, keyed=False, filters=None, self_join=False):
    """All (A, B) pairs of events that were not late, keys equal and filters passing,
    with P >= the threshold in force when the later of the two arrived."""
    watermark = -math.inf
    admitted, late = [], set()
    for position, e in enumerate(events):
        hi = e.histogram.hi
        if hi + streams[e.stream].max_delay < watermark:
            late.add(e.id)
            continue
        watermark = max(watermark, hi)
        admitted.append((position, e))
    side = {"A": "S", "B": "S" if self_join else "T"}
    left = [(p, e) for p, e in admitted if e.stream == side["A"] and (filters is None or filters(e))]
    right = [(p, e) for p, e in admitted if e.stream == side["B"]]
    expected, ambiguous = {}, set()
    for (pa, a), (pb, b) in itertools.product(left, right):
        if a.id == b.id or (keyed and not same_key(a.attrs.get("region"), b.attrs.get("region"))):
            continue
        p = oracle_within(a.histogram, b.histogram, d)
        threshold = threshold_at(max(pa, pb))
        if abs(p - threshold) < AMBIGUOUS:
            ambiguous.add((a.id, b.id))
        elif p >= threshold:
            expected[(a.id, b.id)] = p
    return expected, ambiguous, late


def run(op, events, block: int):
    found, late = {}, set()
    for start in range(0, len(events), block):
        result = op.feed(events[start:start + block])
        for m in result.matches:
            pair = (m.events["A"], m.events["B"])
            assert pair not in found, f"{pair} emitted twice"
            found[pair] = m.prob
        late |= {item.event.id for item in result.late}
    return found, late


def check(found, expected, ambiguous):
    assert set(found) - ambiguous == set(expected) - ambiguous
    for pair, p in expected.items():
        if pair in found:
            assert found[pair] == pytest.approx(p, abs=1e-9), pair


QUERY = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = {d} {keys} WITH THRESHOLD {t} USING {s}"


def case_workload(name: str, kind: str):
    """A case's workload, seeded by its name the same in every process (``hash`` of a
    string is not)."""
    return workload(zlib.crc32(name.encode()) % 1000, kind)


@functools.cache
def case_brute_force(name: str, kind: str, d: float, threshold: float, keyed: bool):
    """The brute force over a case's workload, worked out once for all the strategies held
    to it (it is most of a case's time); pairs and late events are named by id, so the
    answer holds for every parse of the workload."""
    streams, events = case_workload(name, kind)
    return brute_force(streams, events, d, lambda _: threshold, keyed)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kind,d,threshold,keyed,block", [
    ("intervals", 15.0, 0.6, False, 50),    # d >= pi
    ("intervals", 4.0, 0.3, True, 7),       # d < pi: exact probing, no partitions
    ("intervals", 25.0, 0.95, True, 1000),
    ("templates", 14.0, 0.7, False, 33),    # d >= pi: Theorem 2 decides
    ("templates", 20.0, 0.1, True, 1),
    ("templates", 5.0, 0.5, False, 64),     # d < pi
    ("mixed", 16.0, 0.8, True, 40),
    ("mixed", 3.0, 0.2, False, 40),
])
def test_every_strategy_equals_brute_force(strategy, kind, d, threshold, keyed, block):
    streams, events = case_workload(f"{kind} {d}", kind)
    keys = "AND A.region = B.region" if keyed else ""
    op = compile_query(QUERY.format(d=d, keys=keys, t=threshold, s=strategy), streams)
    found, late = run(op, events, block)
    expected, ambiguous, expected_late = case_brute_force(f"{kind} {d}", kind, d, threshold, keyed)
    assert late == expected_late and late, "the workload has late events and they are reported"
    check(found, expected, ambiguous)
    assert op.counters["evicted"] > 0, "buffers were invalidated along the way"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("kind,d,threshold", [("templates", 14.0, 0.7), ("intervals", 4.0, 0.6), ("mixed", 16.0, 0.8)])
def test_near_miss_histogram_counts_every_pair_between_floor_and_threshold(strategy, kind, d, threshold):
    streams, events = case_workload(f"{kind} {d} near", kind)
    op = compile_query(QUERY.format(d=d, keys="AND A.region = B.region", t=threshold, s=strategy), streams)
    found = {}
    for start in range(0, len(events), 37):
        for bin_, count in op.feed(events[start:start + 37]).observations["near_miss_histogram"].items():
            found[bin_] = found.get(bin_, 0) + count
    # every admitted pair of the same region, weighed by the oracle, binned by hundredths; a
    # pair within rounding of the threshold may fall on either side of it
    everything, _, _ = case_brute_force(f"{kind} {d} near", kind, d, op.floor, True)
    expected, either = {}, {}
    for p in everything.values():
        hundredths = f"{math.floor(p * 100 + 1e-6) / 100:.2f}"  # a probability on an edge is the bin above
        if p < threshold - AMBIGUOUS:
            expected[hundredths] = expected.get(hundredths, 0) + 1
        elif p < threshold + AMBIGUOUS:
            either[hundredths] = either.get(hundredths, 0) + 1
    assert sum(expected.values()) > 20, "the workload has near misses"
    for bin_ in set(found) | set(expected):
        assert 0 <= found.get(bin_, 0) - expected.get(bin_, 0) <= either.get(bin_, 0), (bin_, found, expected)
    assert sum(found.values()) == op.counters["near_misses"]


@pytest.mark.parametrize("seed", range(6))
def test_random_workloads_all_strategies_agree(seed):
    rng = np.random.default_rng(100 + seed)
    kind = ["intervals", "templates", "mixed"][seed % 3]
    d = float(rng.choice([2.0, 8.0, 13.0, 30.0]))
    threshold = float(np.round(rng.uniform(0.1, 0.95), 2))
    streams, events = workload(seed, kind, n=180)
    expected, ambiguous, _ = brute_force(streams, events, d, lambda _: threshold)
    for strategy in STRATEGIES:
        op = compile_query(QUERY.format(d=d, keys="", t=threshold, s=strategy), streams)
        found, _ = run(op, events, int(rng.integers(1, 80)))
        check(found, expected, ambiguous)


@pytest.mark.parametrize("kind,d", [("intervals", 15.0), ("intervals", 0.001), ("templates", 14.0),
                                    ("mixed", 18.0)])
def test_buffers_are_tight_but_never_drop_a_partner(kind, d):
    # At the threshold floor, with partners arriving as late as their max delay allows,
    # a buffer bound any tighter than Theorem 4 (or the zero-probability bound) loses a match.
    streams, events = workload(21, kind, n=400, spacing=2.0, at_the_edge=True)
    threshold = 0.05 if d > 1 else 0.0001
    expected, ambiguous, _ = brute_force(streams, events, d, lambda _: threshold)
    for strategy in ("ssort", "lazy"):
        op = compile_query(QUERY.format(d=d, keys="", t=threshold, s=strategy), streams)
        found, _ = run(op, events, 20)
        check(found, expected, ambiguous)
        assert op.counters["evicted"] > 200


def test_threshold_moves_mid_stream_lose_nothing_down_to_the_floor():
    streams, events = workload(7, "templates", n=300)
    d, before, after, cut = 14.0, 0.9, 0.1, 150
    expected, ambiguous, _ = brute_force(streams, events, d, lambda p: before if p < cut else after)
    for strategy in STRATEGIES:
        op = compile_query(QUERY.format(d=d, keys="", t=before, s=strategy), streams)
        found, _ = run(op, events[:cut], 25)
        op.set_threshold(after)
        more, _ = run(op, events[cut:], 25)
        found.update(more)
        check(found, expected, ambiguous)


def test_threshold_below_the_floor_is_refused():
    streams, _ = workload(1, "intervals", n=2)
    op = compile_query(QUERY.format(d=10, keys="", t=0.5, s="lazy"), streams)
    with pytest.raises(Exception, match="floor"):
        op.set_threshold(0.01)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_snapshot_in_the_middle_changes_nothing(strategy):
    streams, events = workload(11, "mixed", n=240)
    text = QUERY.format(d=12.0, keys="AND A.region = B.region", t=0.5, s=strategy)
    whole, _ = run(compile_query(text, streams), events, 30)
    op = compile_query(text, streams)
    first, _ = run(op, events[:120], 30)
    restored = JoinOperator.restore(op.snapshot())
    second, _ = run(restored, events[120:], 30)
    assert {**first, **second} == whole
    assert restored.counters["events"] == len(events)


def test_filters_and_self_join():
    streams, events = workload(5, "intervals", n=200)
    text = "SELECT * FROM S A, S B WHERE WINDOW(A, B) = 10 AND A.v > 4 WITH THRESHOLD 0.5"
    found, _ = run(compile_query(text, streams), events, 40)
    expected, ambiguous, _ = brute_force(streams, events, 10.0, lambda _: 0.5,
                                         filters=lambda e: e.attrs["v"] > 4, self_join=True)
    check(found, expected, ambiguous)
    assert found and all(a != b for a, b in found)


def test_not_joinable_events_are_reported_with_a_reason():
    streams = parse_streams({"S": {"templates": {"u": {"edges": [0, 5], "probs": [1]}}},
                             "T": {"pi": 5.0}})
    op = compile_query("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10 WITH THRESHOLD 0.5", streams)
    events = [parse_event(obj, streams) for obj in [
        {"stream": "S", "id": "explicit", "ts": {"lo": 0, "hi": 1}},
        {"stream": "T", "id": "too-long", "ts": {"lo": 0, "hi": 6}},
        {"stream": "T", "id": "weighted", "ts": {"lo": 0, "hi": 2, "pmf": [0.2, 0.3, 0.5]}},
        {"stream": "T", "id": "ok", "ts": {"lo": 0, "hi": 1}},
        {"stream": "other", "id": "x", "ts": {"lo": 0, "hi": 1}},
    ]]
    result = op.feed(events)
    reasons = {item.event.id: item.reason for item in result.late}
    assert set(reasons) == {"explicit", "too-long", "weighted"}
    assert "template timestamps" in reasons["explicit"]
    assert "exceeds the stream's pi" in reasons["too-long"]
    assert "discrete grid" in reasons["weighted"]
    assert op.counters["ignored"] == 1


def test_observations_and_probability_curve():
    streams, events = workload(3, "templates", n=120)
    op = compile_query(QUERY.format(d=14.0, keys="", t=0.7, s="lazy"), streams)
    result = op.feed(events[:60])
    obs = result.observations
    assert set(obs["buffers"]) == {"A", "B"} and len(obs["buffer_bounds"]) == 2
    assert obs["counters"]["events"] == 60 and obs["partitions"]
    assert all(item["prob"] < 0.7 for item in obs["near_misses"])
    json.dumps(obs)
    for stream, partner_templates in (("S", {"v1", "v2"}), ("T", {"u1", "u2", "u3"})):
        event = next(e for e in events if e.stream == stream)
        check_curve(op, streams, event, "T" if stream == "S" else "S", partner_templates)


def check_curve(op, streams, event, partner_stream, partner_templates):
    curve = op.probability_curve(event, points=50)
    assert set(curve["curves"]) == partner_templates
    for name, values in curve["curves"].items():
        template = streams[partner_stream].templates[name]
        for x, p in zip(curve["x"][::7], values[::7]):
            partner = template.shift(x - template.hi)
            assert p == pytest.approx(oracle_within(event.histogram, partner, 14.0), abs=1e-9)
    assert curve["lpr"][0] <= curve["lpr"][1] <= curve["rpr"][0] <= curve["rpr"][1]
    # Theorem 3: partners after LPR's start and up to RPR's end hold every match
    lpr, rpr = curve["lpr"], curve["rpr"]
    for name, values in curve["curves"].items():
        for x, p in zip(curve["x"], values):
            if p >= 0.7 + 1e-9:
                assert lpr[0] - 1e-6 <= x <= rpr[1] + 1e-6
            if lpr[1] + 1e-6 <= x <= rpr[0] - 1e-6:      # SR: every template satisfies
                assert p >= 0.7 - 1e-9


@pytest.mark.parametrize("kind", ["templates", "intervals", "mixed"])
def test_buffered_sample_gives_events_back_and_partners_sit_on_the_curve(kind):
    streams, events = workload(8, kind, n=160)
    op = compile_query(QUERY.format(d=14.0, keys="", t=0.7, s="lazy"), streams)
    buffered = op.feed(events[:80]).observations["newly_buffered"]
    assert 0 < len(buffered) <= 16 and {b["stream"] for b in buffered} == {"s", "t"}
    sent = {e.id: e for e in events[:80]}
    for item in buffered:
        # the sample is the event as it was sent: the same timestamp once parsed again
        again = parse_event(item, streams)
        original = sent[item["id"]]
        assert again.histogram.edges.tolist() == original.histogram.edges.tolist()
        assert again.histogram.probs.tolist() == pytest.approx(original.histogram.probs.tolist())
    event = next(e for e in events[80:] if e.stream == "S")
    partners = [parse_event(b, streams) for b in buffered if b["stream"] == "t"]
    curve = op.probability_curve(event, points=20, partners=partners)
    assert [p["id"] for p in curve["partners"]] == [p.id for p in partners]
    for point, partner in zip(curve["partners"], partners):
        assert point["x"] == partner.histogram.hi
        assert point["prob"] == pytest.approx(oracle_within(event.histogram, partner.histogram, 14.0), abs=1e-9)
        inside = [name for name in ("lpr", "sr", "rpr") if curve[name][0] <= point["x"] <= curve[name][1]]
        assert point["partition"] == (inside[0] if inside else None)
        if point["prob"] >= 0.7 + 1e-9:      # Theorem 3: a match lies in a probing range
            assert point["partition"] is not None
    with pytest.raises(ValidationError, match="not of the partner stream"):
        op.probability_curve(event, partners=[event])


def _edge_case_events(streams, b_ts, a_ts, z_ts):
    """b (stream T) arrives first; z (stream S) sets the watermark; a (stream S) arrives
    exactly as late as S's max delay allows."""
    return [parse_event({"stream": s, "id": i, "ts": ts}, streams)
            for s, i, ts in (("T", "b", b_ts), ("S", "z", z_ts), ("S", "a", a_ts))]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_zero_probability_bound_keeps_the_last_possible_partner(strategy):
    streams = parse_streams({"S": {"pi": 10.0, "max_delay": 20.0}, "T": {"pi": 10.0, "max_delay": 20.0}})
    d, watermark = 5.0, 1000.0
    hi_a = watermark - 20.0
    hi_b = hi_a - 10.0 - d + 0.3          # 0.3 inside the zero-probability bound
    events = _edge_case_events(streams, {"lo": hi_b - 10, "hi": hi_b}, {"lo": hi_a - 10, "hi": hi_a},
                               {"lo": watermark - 1, "hi": watermark})
    p = oracle_within(events[2].histogram, events[0].histogram, d)
    assert 0 < p < 0.001
    op = compile_query(QUERY.format(d=d, keys="", t=0.0002, s=strategy), streams)
    found, late = run(op, events, 1)
    assert not late and ("a", "b") in found and found[("a", "b")] == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_theorem_4_keeps_the_last_possible_partner(strategy):
    from tests.oracle import stime_bisection

    templates_s = {"u1": {"edges": [0, 4, 6, 10], "probs": [0.2, 0.5, 0.3]}, "u2": {"edges": [0, 8], "probs": [1.0]}}
    templates_t = {"v1": {"edges": [0, 3, 9], "probs": [0.7, 0.3]}, "v2": {"edges": [0, 2, 5, 12], "probs": [0.1, 0.6, 0.3]}}
    streams = parse_streams({"S": {"templates": templates_s, "max_delay": 20.0},
                             "T": {"templates": templates_t, "max_delay": 20.0}})
    d, floor, watermark = 14.0, 0.05, 1000.0
    # t_min = min over (u, v) of stime(phi_u, phi_v, 1 - floor) - max(phi_u), by bisection
    offsets = {(u, v): stime_bisection(np.array(phi_u["edges"], float), np.array(phi_u["probs"]),
                                       np.array(phi_v["edges"], float), np.array(phi_v["probs"]), 1 - floor)
                       - phi_u["edges"][-1]
               for u, phi_u in templates_s.items() for v, phi_v in templates_t.items()}
    (u, v), t_min = min(offsets.items(), key=lambda item: item[1])
    hi_a = watermark - 20.0
    hi_b = hi_a - d + t_min + 0.05        # just inside Theorem 4's bound
    events = _edge_case_events(streams, {"detected": hi_b, "template": v}, {"detected": hi_a, "template": u},
                               {"detected": watermark, "template": "u2"})
    p = oracle_within(events[2].histogram, events[0].histogram, d)
    assert floor < p < floor + 0.05
    op = compile_query(QUERY.format(d=d, keys="", t=floor, s=strategy), streams)
    found, late = run(op, events, 1)
    assert not late and ("a", "b") in found and found[("a", "b")] == pytest.approx(p, abs=1e-9)


@st.composite
def small_join_cases(draw):
    """A small random join: interval or template streams (templates may have empty
    buckets), any window including 0, any threshold, disorder, late events, keys."""
    kind = draw(st.sampled_from(["intervals", "templates"]))
    params = {}
    for stream in "ST":
        delay = draw(st.sampled_from([0.0, 3.0, 10.0]))
        if kind == "templates":
            templates = {f"{stream.lower()}{k}": h.to_json()
                         for k, h in enumerate(draw(st.lists(histograms(max_buckets=3, origin=(0, 0), max_width=6),
                                                             min_size=1, max_size=3)))}
            params[stream] = {"templates": templates, "max_delay": delay}
        else:
            params[stream] = {"pi": draw(st.sampled_from([2.0, 6.0])), "max_delay": delay}
    streams = parse_streams(params)
    raw = []
    for i in range(draw(st.integers(2, 24))):
        stream = draw(st.sampled_from("ST"))
        t = draw(st.integers(0, 40)) / 2
        if kind == "templates":
            ts = {"detected": t, "template": draw(st.sampled_from(sorted(params[stream]["templates"])))}
        else:
            ts = {"lo": t - draw(st.sampled_from([0.5, 1.0, params[stream]["pi"]])), "hi": t}
        arrival = t + draw(st.sampled_from([0.0, 1.0, params[stream]["max_delay"], params[stream]["max_delay"] + 2]))
        raw.append((arrival, {"stream": stream, "id": f"{stream}{i}", "ts": ts,
                              "attrs": {"region": draw(st.sampled_from("nsx"))}}))
    raw.sort(key=lambda item: item[0])
    events = [parse_event(obj, streams) for _, obj in raw]
    d = draw(st.sampled_from([0.0, 0.5, 2.0, 6.0, 15.0]))
    threshold = draw(st.sampled_from([0.05, 0.3, 0.5, 0.77, 1.0]))
    return streams, events, d, threshold, draw(st.booleans()), draw(st.integers(1, 8))


@settings(max_examples=150, deadline=None)
@given(small_join_cases())
def test_hypothesis_small_joins_equal_brute_force(case):
    streams, events, d, threshold, keyed, block = case
    expected, ambiguous, expected_late = brute_force(streams, events, d, lambda _: threshold, keyed)
    keys = "AND A.region = B.region" if keyed else ""
    for strategy in STRATEGIES:
        op = compile_query(QUERY.format(d=d, keys=keys, t=threshold, s=strategy), streams)
        found, late = run(op, events, block)
        assert late == expected_late
        check(found, expected, ambiguous)


@pytest.mark.parametrize("strategy", ["lazy", "lazy_lookup"])
@pytest.mark.parametrize("kind", ["intervals", "templates", "mixed"])
def test_many_keys_in_one_block_pair_only_within_their_key(strategy, kind):
    """Blocks holding dozens of keys at once (the block join lays them end to end): each
    event pairs only with its own key's partners, 1 and 1.0 being one key, True not being
    1 nor False 0, and an event without a key (null) pairing with none."""
    streams, events = workload(zlib.crc32(f"many keys {kind}".encode()) % 1000, kind, n=500, spacing=1.0)
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    values = [f"r{k}" for k in range(12)] + [1, 1.0, 2, 2.5, -0.0, 0, True, False, None]
    events = [dataclasses.replace(e, attrs={**e.attrs, "region": values[int(rng.integers(0, len(values)))]})
              for e in events]
    op = compile_query(QUERY.format(d=16.0, keys="AND A.region = B.region", t=0.3, s=strategy), streams)
    found, late = {}, set()
    start = 0
    while start < len(events):
        size = int(rng.integers(1, 120))
        result = op.feed(events[start:start + size])
        start += size
        for m in result.matches:
            pair = (m.events["A"], m.events["B"])
            assert pair not in found, f"{pair} emitted twice"
            found[pair] = m.prob
        late |= {item.event.id for item in result.late}
    expected, ambiguous, expected_late = brute_force(streams, events, 16.0, lambda _: 0.3, keyed=True)
    assert late == expected_late
    assert len(expected) > 50, "the workload has matches"
    check(found, expected, ambiguous)
    assert op.counters["evicted"] > 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.0, 1.0, 1.5, 2.0, 7.0, -3.0])), max_size=30),
       st.lists(st.tuples(st.integers(0, 6), st.sampled_from([-4.0, 0.0, 1.0, 1.25, 2.0, 9.0])), max_size=12),
       st.sampled_from(["left", "right"]))
def test_a_search_within_keys_lands_where_the_search_within_the_key_slice_does(targets, queries, side):
    from penumbra.joins.strategies import _searches

    targets = sorted(targets)
    kid_t = np.array([k for k, _ in targets], dtype=np.int64)
    hi = np.array([v for _, v in targets])
    kid_q = np.array([k for k, _ in queries], dtype=np.int64)
    values = np.array([v for _, v in queries])
    [found] = _searches(hi, (kid_q, kid_t), [(values, side)])
    for (k, v), at in zip(queries, found.tolist()):
        start, stop = int(np.searchsorted(kid_t, k, "left")), int(np.searchsorted(kid_t, k, "right"))
        assert at == start + int(np.searchsorted(hi[start:stop], v, side)), (k, v, side)


def test_template_tables_are_built_once_per_process_and_shared_read_only():
    """An operator restored every micro-batch finds its Theorem 2 tables ready: equal
    templates at an equal threshold give the same (read-only) tables."""
    from penumbra.joins.partitions import TemplateTables
    from penumbra.probability import stime_table
    from penumbra.timestamps import Histogram

    a = [Histogram([0, 4, 6, 10], [0.2, 0.5, 0.3]), Histogram([0, 8], [1.0])]
    b = [Histogram([0, 3, 9], [0.7, 0.3])]
    tables = TemplateTables.build(a, b, 0.6)
    again = TemplateTables.build([Histogram(h.edges.tolist(), h.probs.tolist()) for h in a], b, 0.6)
    assert again is tables and TemplateTables.build(a, b, 0.7) is not tables
    assert not tables.right.flags.writeable and not tables.left.flags.writeable
    assert np.array_equal(tables.right, stime_table(a, b, 0.6))
    assert np.array_equal(tables.left, stime_table(a, b, 0.4, earliest=True))


@pytest.mark.parametrize("strategy", ["lazy", "ssort"])     # the block path and the per-key one
def test_ten_thousand_keys_equal_the_all_pairs_oracle(strategy):
    """10,000 key values drifting with time, so keys leave the buffers and come back long
    after (their codes renumbered meanwhile): every pair within a key, against the
    all-pairs oracle taken key by key (pairs of different keys never match)."""
    streams, events, expected, ambiguous, keys = ten_thousand_keys()
    op = compile_query(QUERY.format(d=12.0, keys="AND A.region = B.region", t=0.4, s=strategy), streams)
    found, late = run(op, events, 1000)
    assert keys > 8_000 and len(expected) > 1_000
    check(found, expected, ambiguous)
    assert op.counters["evicted"] > 10_000
    assert len(op.held.keys) < 4_096, "codes of keys that left were forgotten (renumbered)"


@functools.cache
def ten_thousand_keys():
    """The workload of 10,000 drifting keys and its all-pairs oracle, worked out once for
    both strategies held to it."""
    streams, events = workload(4242, "templates", n=24_000, spacing=0.5, late_share=0.01)
    rng = np.random.default_rng(4242)
    events = [dataclasses.replace(e, attrs={**e.attrs, "region": int((i // 2 + rng.integers(0, 40)) % 10_000)})
              for i, e in enumerate(events)]
    admitted = admitted_events(streams, events)
    by_key: dict[int, tuple[list, list]] = {}
    for e in admitted:
        by_key.setdefault(e.attrs["region"], ([], []))[0 if e.stream == "S" else 1].append(e)
    expected, ambiguous = {}, set()
    for left, right in by_key.values():
        for a, b in itertools.product(left, right):
            p = oracle_within(a.histogram, b.histogram, 12.0)
            if abs(p - 0.4) < AMBIGUOUS:
                ambiguous.add((a.id, b.id))
            elif p >= 0.4:
                expected[(a.id, b.id)] = p
    return streams, events, expected, ambiguous, len(by_key)


@pytest.mark.parametrize("text", [
    "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10 AND A.v % 3 = 1 AND B.v > 4 WITH THRESHOLD 0.4",
    "SELECT * FROM S A, S B WHERE WINDOW(A, B) = 10 AND A.v > 6 WITH THRESHOLD 0.4",     # a self-join: either side
    "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10 AND A.region = B.region WITH THRESHOLD 0.4",
])
def test_what_the_operator_is_not_concerned_with_changes_nothing_but_time(text):
    """A host keeps the events the query is not concerned with from its operator and gives
    it their time alone (``Operator.concerned``, then ``advance`` to the block's clock):
    the matches are the same as when it is fed everything."""
    streams, events = workload(77, "intervals", n=400, late_share=0.0)
    whole, kept = compile_query(text, streams), compile_query(text, streams)
    found_whole, found_kept, dropped = set(), set(), 0
    for start in range(0, len(events), 37):
        block = events[start:start + 37]
        found_whole |= {tuple(m.events.values()) for m in whole.feed(block).matches}
        concerned = kept.concerned(block)
        sides = kept.sides
        for event, yes in zip(block, concerned.tolist()):   # each decision as the per-event evaluator makes it
            assert yes == any(s.stream == event.stream.casefold() and all(
                evaluate(f, {s.var: event.attrs}) is True for f in s.filters) for s in sides)
        dropped += int((~concerned).sum())
        result = kept.feed([e for e, yes in zip(block, concerned.tolist()) if yes])
        result.extend(kept.advance(kept.clock_of(block)))
        found_kept |= {tuple(m.events.values()) for m in result.matches}
    found_whole |= {tuple(m.events.values()) for m in whole.flush().matches}
    found_kept |= {tuple(m.events.values()) for m in kept.flush().matches}
    assert found_whole and found_kept == found_whole
    assert dropped > 0 or "region" in text



@pytest.mark.parametrize("strategy", ["lazy", "lazy_lookup", "simple"])
def test_a_join_keyed_on_two_attributes_pairs_events_equal_in_both(strategy):
    """A key of two attributes: events pair only when both values are one key each (1 and
    1.0 alike, True apart), none when either is null."""
    streams, events = workload(zlib.crc32(b"two attributes") % 1000, "mixed", n=400, spacing=1.0)
    rng = np.random.default_rng(7)
    values = ["x", 1, 1.0, True, 0, False, None]
    events = [dataclasses.replace(e, attrs={**e.attrs, "w": values[int(rng.integers(0, len(values)))]})
              for e in events]
    op = compile_query(QUERY.format(d=16.0, keys="AND A.region = B.region AND A.w = B.w", t=0.3, s=strategy),
                       streams)
    found, late = run(op, events, 37)
    everything, ambiguous, expected_late = brute_force(streams, events, 16.0, lambda _: 0.3, keyed=True)
    attrs = {e.id: e.attrs for e in events}
    expected = {pair: p for pair, p in everything.items() if same_key(attrs[pair[0]]["w"], attrs[pair[1]]["w"])}
    assert late == expected_late
    assert len(expected) > 20 and len(expected) < len(everything), "the second attribute decides some pairs"
    check(found, expected, ambiguous)

_KEY_SCALARS = st.sampled_from([None, True, False, 0, 1, 0.0, -0.0, 1.0, 2, 2.5, "a", "1"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(_KEY_SCALARS, max_size=30),
                 st.lists(st.one_of(st.none(), st.tuples(_KEY_SCALARS, _KEY_SCALARS)), max_size=30)))
def test_a_blocks_key_values_are_coded_as_the_join_compares_keys(values):
    """Two events share a code exactly when their keys are one key (both absent, or equal
    with booleans equal only to booleans, item by item), and each code stands for the key
    of the first event that has it."""
    from penumbra.joins.keys import key_codes

    def one_key(a, b):
        if a is None or b is None:
            return a is None and b is None
        a, b = (a, b) if type(a) is tuple else ((a,), (b,))
        return all(same_key(x, y) for x, y in zip(a, b))

    values = [None if type(v) is tuple and None in v else v for v in values]
    codes, distinct = key_codes(values)
    codes = codes.tolist()
    for i, a in enumerate(values):
        for j, b in enumerate(values):
            assert (codes[i] == codes[j]) == one_key(a, b), (a, b)
    firsts = {}
    for i, code in enumerate(codes):
        firsts.setdefault(code, i)
    assert sorted(firsts) == list(range(len(distinct)))
    for code, i in firsts.items():
        value = values[i]
        expected = None if value is None else \
            tuple((type(v) is bool, v) for v in (value if type(value) is tuple else (value,)))
        assert distinct[code] == expected and repr(distinct[code]) == repr(expected)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_certain_pair_reaches_a_threshold_of_one(strategy):
    """B's mass lies in [0, 5] (a zero-probability bucket reaches 20), A is in [0, 10]: every
    outcome is within 14.9, so the pair is a match at threshold 1 under every strategy."""
    streams = parse_streams({"sa": {"max_delay": 100}, "sb": {"max_delay": 100}})
    op = compile_query(f"SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 14.9 WITH THRESHOLD 1.0 USING {strategy}",
                       streams)
    events = [parse_event({"stream": "sb", "id": "b", "ts": {"edges": [0, 5, 20], "probs": [1, 0]}}, streams),
              parse_event({"stream": "sa", "id": "a", "ts": {"lo": 0, "hi": 10}}, streams)]
    matches = list(op.feed(events).matches) + list(op.flush().matches)
    assert [(m.events, m.prob) for m in matches] == [({"A": "a", "B": "b"}, 1.0)]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("base", [0.0, 1.7e9])
def test_a_probability_equal_to_the_threshold_meets_it(strategy, base):
    """A on [t, t+1], B on [t+0.5, t+1.5]: P(|X_A - X_B| <= 0.1) = 0.1 exactly, at t = 0 and
    at epoch seconds, where its last bit falls either way: the pair meets THRESHOLD 0.1."""
    streams = parse_streams({"sa": {"max_delay": 10, "pi": 5}, "sb": {"max_delay": 10, "pi": 5}})
    op = compile_query(f"SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 0.1 WITH THRESHOLD 0.1 USING {strategy}",
                       streams)
    events = [parse_event({"stream": "sa", "id": "a", "ts": {"lo": base, "hi": base + 1}}, streams),
              parse_event({"stream": "sb", "id": "b", "ts": {"lo": base + 0.5, "hi": base + 1.5}}, streams)]
    matches = list(op.feed(events).matches) + list(op.flush().matches)
    assert [(m.events, round(m.prob, 12)) for m in matches] == [({"A": "a", "B": "b"}, 0.1)]


FLAT_AT_THE_THRESHOLD = [
    # (templates of S, of T, max delay, window, threshold, events in arrival order: stream, id, detected)
    ({"u": [[-2, 2, 5, 6, 8, 11], [0, 0, .5, 0, .5]]}, {"v": [[4, 5], [1]]}, 10, 13, 0.5,
     [("s", "a1", 100), ("t", "b1", 109.5)]),
    ({"u": [[10, 13, 16, 17, 20, 22, 24], [.375, 0, .25, .25, .125, 0]]}, {"v": [[-2, -1, 1], [1, 0]]}, 50, 14, 0.375,
     [("t", "b1", 8.5), ("s", "a1", 30)]),
    # b1's last chance is a1 (arriving at the watermark's edge): Theorem 4 must keep it
    ({"u": [[0, 4, 8, 11, 13, 15], [0, .05, 0, 0, .95]]}, {"v": [[0, 4, 5, 9, 10], [1, 0, 0, 0]]}, 10, 15, 0.05,
     [("t", "b1", 0), ("t", "b2", 21.5), ("s", "a1", 11.5)]),
]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", range(len(FLAT_AT_THE_THRESHOLD)))
def test_a_pair_exactly_at_the_threshold_on_a_flat_template_curve_matches_in_every_strategy(strategy, case):
    """Templates with zero-probability buckets make the probability flat in time; a pair
    whose exact probability (rational arithmetic over the resolved histograms) equals the
    threshold meets it in every strategy and block size, though the satisfaction times of
    Theorems 2 and 4 sit where the computed probability falls a rounding either side."""
    from tests.oracle import p_within_exact

    templates_s, templates_t, delay, d, threshold, arrivals = FLAT_AT_THE_THRESHOLD[case]
    streams = parse_streams({name: {"templates": {k: {"edges": e, "probs": p} for k, (e, p) in templates.items()},
                                    "max_delay": delay}
                             for name, templates in (("S", templates_s), ("T", templates_t))})
    events = [parse_event({"stream": s, "id": i, "ts": {"detected": t, "template": "u" if s == "s" else "v"}}, streams)
              for s, i, t in arrivals]
    resolved = {}
    for s, i, t in arrivals:
        edges, probs = (templates_s["u"] if s == "s" else templates_t["v"])
        resolved[i] = ([e + t - edges[-1] for e in edges], probs)
    expected = {}
    for a in (i for s, i, _ in arrivals if s == "s"):
        for b in (i for s, i, _ in arrivals if s == "t"):
            p = p_within_exact(*resolved[a], *resolved[b], d)
            if p >= Fraction(threshold) - Fraction(1, 10 ** 12):
                expected[a, b] = float(p)
    assert expected, "the case should have a pair at its threshold"
    for block in (1, 1000):
        op = compile_query(f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = {d} WITH THRESHOLD {threshold} "
                           f"USING {strategy}", streams)
        found, late = run(op, events, block)
        found.update({(m.events["A"], m.events["B"]): m.prob for m in op.flush().matches})
        assert not late and set(found) == set(expected), block
        assert all(found[pair] == pytest.approx(expected[pair], abs=1e-9) for pair in expected)


@pytest.mark.parametrize("threshold", ["1e-17", "1e-12"])
@pytest.mark.parametrize("kind", ["templates", "mixed"])
def test_a_threshold_within_rounding_of_zero_matches_every_pair_of_positive_probability(threshold, kind):
    """Below 2**-53, 1 - delta rounds to 1 (Theorem 2's inequality 9 has no table then),
    and at or below the rounding every pair of positive probability meets the threshold:
    every strategy finds exactly the pairs the all-pairs join gives a positive
    probability, and none of probability 0."""
    streams, events = workload(71, kind, n=160, late_share=0.0)
    expected, ambiguous, _ = brute_force(streams, events, 6.0, lambda position: 0.0)
    expected = {pair: p for pair, p in expected.items() if p > 0}
    assert len(expected) > 100
    for strategy in STRATEGIES:
        op = compile_query(f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = 6 WITH THRESHOLD {threshold} "
                           f"USING {strategy}", streams)
        found, _ = run(op, events, 50)
        assert min(found.values()) > 0
        check(found, expected, ambiguous | {pair for pair, p in expected.items() if p < 1e-9})


def uniforms_within(a: tuple[float, float], b: tuple[float, float], d: float) -> Fraction:
    """P(|X - Y| <= d), X and Y uniform on the intervals, in exact rationals: the sum of two
    uniforms has the CDF (h(r) - h(r - w_a) - h(r - w_b) + h(r - w_a - w_b)) / (w_a w_b),
    h(u) = max(u, 0)^2 / 2."""
    (a1, a2), (b1, b2), d = [tuple(map(Fraction, a)), tuple(map(Fraction, b)), Fraction(d)]
    wa, wb = a2 - a1, b2 - b1

    def below(t):       # P(X - Y <= t)
        r = t - a1 + b2
        h = [max(u, Fraction(0)) ** 2 / 2 for u in (r, r - wa, r - wb, r - wa - wb)]
        return (h[0] - h[1] - h[2] + h[3]) / (wa * wb)

    return below(d) - below(-d)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_interval_far_narrower_than_its_partner_keeps_its_probability(strategy):
    """Intervals of 1e-11 to 1e-4 against intervals of a few time units: every pair of the
    block against exact rational integration (a sum over edges of densities 1e11 times
    distances of units loses 1e-5 of such a pair to cancellation)."""
    rng = np.random.default_rng(5)
    streams = parse_streams({"A": {"pi": 10, "max_delay": 100}, "B": {"pi": 10, "max_delay": 100}})
    events = []
    for n in range(120):
        side = "AB"[n % 2]
        lo = float(rng.uniform(0, 40))
        width = 10.0 ** rng.uniform(-11, -4) if rng.random() < 0.6 else float(rng.uniform(0.5, 5))
        events.append(parse_event({"stream": side, "id": f"{side}{n}", "ts": {"lo": lo, "hi": lo + width}}, streams))
    d = 1.5
    op = compile_query(f"SELECT * FROM A A, B B WHERE WINDOW(A, B) = {d} WITH THRESHOLD 0.05 USING {strategy}",
                       streams)
    found, late = run(op, events, 40)
    assert not late
    spans = {e.id: (e.ts.lo, e.ts.hi) for e in events}
    expected = {(a, b): float(uniforms_within(spans[a], spans[b], d)) for a in spans if a[0] == "A"
                for b in spans if b[0] == "B"}
    kept = {pair: p for pair, p in expected.items() if p >= 0.05 + 1e-9}
    assert set(kept) <= set(found) <= {pair for pair, p in expected.items() if p >= 0.05 - 1e-9}
    assert len(kept) > 100
    for pair, p in found.items():
        assert p == pytest.approx(expected[pair], abs=5e-11), pair


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_narrow_events_a_window_apart_are_weighed_and_decided_exactly(strategy):
    """Events of 1e-9 a window of 1,000 apart: their pair is just above one half, which the
    differences of times far apart (steps of 1.1e-13) would round below it, losing the
    match at 0.5. And a self-join's pair that misses certainty by 1.2e-9 (an end 1.37e-9
    short of the window) is not called certain."""
    streams = parse_streams({"S": {"pi": 100, "max_delay": 1e9}, "T": {"pi": 100, "max_delay": 1e9}})
    events = [parse_event({"stream": "S", "id": "a", "ts": {"lo": 0.0, "hi": 1e-9}}, streams),
              parse_event({"stream": "T", "id": "b", "ts": {"lo": 1000.0, "hi": 1000.0 + 1e-9}}, streams)]
    exact = float(uniforms_within((0.0, 1e-9), (1000.0, 1000.0 + 1e-9), 1000.0))
    assert 0.5 < exact < 0.50001
    op = compile_query(f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = 1000 WITH THRESHOLD 0.5 USING {strategy}", streams)
    found, _ = run(op, events, 2)
    assert found.keys() == {("a", "b")} and found["a", "b"] == pytest.approx(exact, abs=1e-11)

    streams = parse_streams({"S": {"pi": 10, "max_delay": 1e9}})
    near = [parse_event({"stream": "S", "id": "x", "ts": {"lo": 500.0, "hi": 500.00000000137}}, streams),
            parse_event({"stream": "S", "id": "y", "ts": {"edges": [-1499.99999999863, -1499.99999999763],
                                                          "probs": [1.0]}}, streams)]
    exact = float(uniforms_within((500.0, 500.00000000137), (-1499.99999999863, -1499.99999999763), 2000.0))
    assert 1 - 1e-8 < exact < 1 - 1e-10
    op = compile_query(f"SELECT * FROM S A, S B WHERE WINDOW(A, B) = 2000 WITH THRESHOLD 0.9 USING {strategy}",
                       streams)
    found, _ = run(op, near[::-1], 1)
    assert found.keys() == {("x", "y"), ("y", "x")}
    for p in found.values():
        assert p < 1.0 and p == pytest.approx(exact, abs=1e-11)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_nearly_certain_pair_at_epoch_seconds_is_not_rounded_to_certain(strategy):
    """At 1.7e9 a float steps by 2.4e-7, so ``max(H_a) - d`` rounds; the supports' test
    subtracts the times first, as the probability does. This pair's probability is
    0.99991..., not 1: it matches at 0.9, not at 1 (nor do the millisecond-wide ones,
    1 - 7e-9)."""
    streams = parse_streams({"A": {"pi": 1, "max_delay": 10}, "B": {"pi": 1, "max_delay": 10}})
    pairs = [((1700000000.0, 1700000000.0000048), (1699999999.9998877, 1699999999.9998925), 0.000117),
             ((1700000012.0, 1700000012.001), (1700000011.9999957, 1700000012.0009956), 0.0010041)]
    for (a_lo, a_hi), (b_lo, b_hi), d in pairs:
        events = [parse_event({"stream": "A", "id": "a1", "ts": {"lo": a_lo, "hi": a_hi}}, streams),
                  parse_event({"stream": "B", "id": "b1", "ts": {"lo": b_lo, "hi": b_hi}}, streams)]
        exact = float(uniforms_within((a_lo, a_hi), (b_lo, b_hi), d))
        assert 0.999 < exact < 1 - 1e-9
        for threshold, expected in (("1.0", {}), ("0.9", {("a1", "b1"): exact})):
            op = compile_query(f"SELECT * FROM A A, B B WHERE WINDOW(A, B) = {d!r} WITH THRESHOLD {threshold} "
                               f"USING {strategy}", streams)
            found, _ = run(op, events, 2)
            assert found.keys() == expected.keys()
            for pair, p in expected.items():
                assert found[pair] == pytest.approx(p, abs=1e-12)
