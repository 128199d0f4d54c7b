"""The Spark job's matches equal the local engine's, in every query form.

Generated workloads with disorder within the streams' max delay go through the real
pipeline (Redis ingest, the Spark job with micro-batches of 300 entries and 4 key
groups, the Redis result streams); the same events go through one local operator. The
match sets must be equal, each match once, probabilities equal to 1e-12. The local
engine is itself checked against brute force in tests/unit (the join also here).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from contract.entries import read_dead, read_observation
from penumbra.engine import build_operator
from penumbra.events import parse_event, parse_streams
from penumbra.query import parse
from tests.unit.joins.test_join_operator import brute_force, workload
from tests.unit.test_keyed import pattern_events, rekeyed, store_events


def local(text, streams, events, block=1000, late=None):
    """One operator's matches over ``events`` fed in blocks; with a Counter ``late``, the
    events it reports late counted there (stream, id, reason)."""
    operator = build_operator(parse(text), streams)
    matches = []
    results = [operator.feed(events[start:start + block]) for start in range(0, len(events), block)]
    results.append(operator.flush())
    for result in results:
        matches += [m.to_json() for m in result.matches]
        if late is not None:
            late.update((item.event.stream, item.event.id, item.reason) for item in result.late)
    return matches


def late_letters(pipeline, query_id) -> Counter:
    """The events the job reported late (or not joinable) for a query: (stream, id, reason)."""
    letters = [read_dead(fields) for _, fields in pipeline.client.xrange(pipeline.keys.dead)]
    return Counter((letter["stream"], letter["id"], letter["reason"]) for letter in letters
                   if letter.get("kind") == "late" and letter.get("query") == query_id)


def signature(match: dict):
    return tuple(sorted(match["events"].items())), tuple(match.get("range") or ())


def assert_equal(found: list[dict], expected: list[dict], label: str):
    assert expected, f"{label}: the workload should produce matches"
    counted = Counter(signature(m) for m in found)
    assert max(counted.values()) == 1, f"{label}: a match written twice"
    wanted = {signature(m) for m in expected}
    assert set(counted) == wanted, (f"{label}: missing {sorted(wanted - set(counted))[:5]}, "
                                    f"unexpected {sorted(set(counted) - wanted)[:5]}")
    probs = {signature(m): m["prob"] for m in expected}
    for m in found:
        assert abs(m["prob"] - probs[signature(m)]) <= 1e-12, (label, m)


def stream_params(streams) -> dict:
    return streams.to_json()


@pytest.mark.parametrize("kind", ["intervals", "templates", "mixed"])
def test_keyed_join(pipeline, kind):
    streams, events = workload(7, kind, n=900, late_share=0.0)
    texts = {f"{pipeline.query_id()}": f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = {d} AND A.region = B.region "
                                       f"WITH THRESHOLD {p} USING {strategy}"
             for d, p, strategy in ((10.0, 0.3, "lazy"), (25.0, 0.7, "lazy_lookup"), (6.0, 0.5, "eager"))}
    found = pipeline.run(stream_params(streams), texts, events)
    for query_id, text in texts.items():
        expected = local(text, streams, events)
        assert_equal(found[query_id], expected, text)
    # and the first query against the brute-force all-pairs join
    text = next(iter(texts.values()))
    pairs, ambiguous, late = brute_force(streams, events, 10.0, lambda position: 0.3, keyed=True)
    assert not late
    assert {(m["events"]["A"], m["events"]["B"]) for m in found[next(iter(texts))]} - ambiguous == set(pairs) - ambiguous


def test_keyed_join_late_events(pipeline):
    """Events beyond the max delay, over 12 keys: an event is late by the events before it
    of every key, whichever key group and read partition they went to, so the job reports
    the same late events (with the same watermark in the reason) and finds the same
    matches as one operator, whatever its micro-batches."""
    streams, events = workload(9, "mixed", n=900, late_share=0.15)
    events = rekeyed(events, 9)
    texts = {pipeline.query_id(): f"SELECT * FROM S A, T B WHERE WINDOW(A, B) = {d} AND A.region = B.region "
                                  f"WITH THRESHOLD {p} USING {strategy}"
             for d, p, strategy in ((10.0, 0.3, "lazy"), (25.0, 0.7, "eager"))}
    found = pipeline.run(stream_params(streams), texts, events)
    for query_id, text in texts.items():
        late = Counter()
        assert_equal(found[query_id], local(text, streams, events, late=late), text)
        assert sum(late.values()) > 50 and late_letters(pipeline, query_id) == late


def test_a_self_join_keyed_on_two_attributes_reports_each_late_event_once_a_side(pipeline):
    """An event plays A keyed by x and B keyed by y, so it reaches two key groups, and
    both judge it: the job still reports it late once for each side, as one operator does."""
    rng = np.random.default_rng(6)
    streams = parse_streams({"S": {"pi": 6.0, "max_delay": 10.0}})
    raw = []
    for i in range(400):
        t = i * 1.5 + rng.uniform(-1, 1)
        delay = 25.0 if rng.random() < 0.1 else rng.uniform(0, 10)
        raw.append((t + delay, {"stream": "S", "id": f"s{i}", "ts": {"lo": round(t - 4, 2), "hi": round(t, 2)},
                                "attrs": {"x": int(rng.integers(0, 6)), "y": int(rng.integers(0, 6))}}))
    events = [parse_event(obj, streams) for _, obj in sorted(raw, key=lambda item: item[0])]
    text = "SELECT * FROM S A, S B WHERE WINDOW(A, B) = 6 AND A.x = B.y WITH THRESHOLD 0.2"
    query_id = pipeline.query_id()
    found = pipeline.run(stream_params(streams), {query_id: text}, events)
    late = Counter()
    assert_equal(found[query_id], local(text, streams, events, late=late), text)
    assert late and max(late.values()) == 2 and late_letters(pipeline, query_id) == late
    # and the query's counters count each of them once a side too
    counted = Counter()
    for entry_id, fields in pipeline.client.xrange(pipeline.keys.observations(query_id)):
        counted.update(read_observation(entry_id, fields)["observations"].get("counters", {}))
    assert counted["late"] == sum(n for (_, _, reason), n in late.items() if reason.startswith("late:"))
    assert counted["rejected"] == sum(late.values()) - counted["late"]


def test_patterns_and_lossy_late_events_in_the_same_blocks(pipeline):
    """A pattern and a lossy query judge lateness at the end of a micro-batch: fed in the
    blocks the local engine is fed (each appended once the job has taken the one before,
    as `penumbra eval --engine spark` cuts them), the job reports the same late events and
    finds the same matches."""
    pattern_streams, pattern_in = pattern_events(33, n=400, keys=5, late_share=0.1)
    store_streams, store_in = store_events(43, visits=300, imprecise=0.2, late_share=0.05)
    pattern = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node AND b.v > 2 "
               "AND skip_till_next_match(a, b, c) WITHIN 30 USING sorted")
    lossy = ("SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
             "GAP y = uniform(1, 30), z = exponential(25) WITHIN 90 THRESHOLD 0.3")
    block = 100
    for streams, events, text in ((pattern_streams, pattern_in, pattern), (store_streams, store_in, lossy)):
        query_id = pipeline.query_id()
        pipeline.registry.put_streams(stream_params(streams))
        pipeline.registry.register(text, query_id=query_id)
        for start in range(0, len(events), block):
            pipeline.feed(events[start:start + block])
            pipeline.sync()
        pipeline.end(query_id)
        late = Counter()
        assert_equal(pipeline.matches(query_id), local(text, streams, events, block=block, late=late), text)
        assert late and late_letters(pipeline, query_id) == late
        pipeline.registry.remove(query_id)


def test_patterns_every_method_and_strategy(pipeline):
    streams, events = pattern_events(31, n=600)
    texts = {}
    for strategy in ("skip_till_any_match", "skip_till_next_match"):
        for method in ("sorted", "any_state", "selectivity"):
            texts[pipeline.query_id()] = (
                f"PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node AND b.v > 2 "
                f"AND {strategy}(a, b, c) WITHIN 30 USING {method}")
    texts[pipeline.query_id()] = "PATTERN SEQ(A a, B b) WHERE a.v < b.v WITHIN 12 WITH CONFIDENCE 0.2 USING sorted"
    found = pipeline.run(stream_params(streams), texts, events)
    for query_id, text in texts.items():
        assert_equal(found[query_id], local(text, streams, events), text)


def test_pattern_point_method(pipeline):
    streams, events = pattern_events(32, n=250)
    text = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node "
            "AND skip_till_next_match(a, b, c) WITHIN 20 USING point")
    query_id = pipeline.query_id()
    found = pipeline.run(stream_params(streams), {query_id: text}, events)
    assert_equal(found[query_id], local(text, streams, events), text)


def test_lossy_hashed_and_learning(pipeline):
    """A third of the reads imprecise (2-4 instants): matches they touch are summed over worlds."""
    streams, events = store_events(41, visits=700, imprecise=0.3)
    hashed = ("SEQUENCE(Shelf x, !Counter y, !Sweep w, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
              "GAP y = uniform(1, 30), w = uniform(1, 60), z = exponential(25) WITHIN 90 THRESHOLD 0.3")
    learning = "SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag WITHIN 90 THRESHOLD 0.3"
    texts = {pipeline.query_id(): hashed, pipeline.query_id(): learning}
    found = pipeline.run(stream_params(streams), texts, events)
    for query_id, text in texts.items():
        assert_equal(found[query_id], local(text, streams, events), text)


def test_results_name_their_batch_and_group(pipeline):
    streams, events = workload(8, "intervals", n=700, late_share=0.0)
    query_id = pipeline.query_id()
    pipeline.run(stream_params(streams), {query_id: "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10 "
                                                    "AND A.region = B.region WITH THRESHOLD 0.3"}, events)
    entries = pipeline.client.xrange(pipeline.keys.matches(query_id))
    batches = {int(fields[b"b"]) for _, fields in entries}
    groups = {int(fields[b"g"]) for _, fields in entries}
    assert len(batches) > 1, "the events should span several micro-batches"
    assert groups and groups <= {0, 1, 2, 3}
    observed = [json.loads(fields[b"o"]) for _, fields in pipeline.client.xrange(pipeline.keys.observations(query_id))]
    assert observed and all({"buffers", "buffer_bounds", "watermark", "counters"} <= set(o) for o in observed)
    assert sum(o["counters"]["events"] for o in observed) == len(events)
