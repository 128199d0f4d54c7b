"""Live control of the running job: queries registered, retuned, paused and removed
while it runs, with no restart. Each expected result is one local operator driven
through the same sequence of changes."""

from __future__ import annotations

import json
import time

import numpy as np

from penumbra.engine import build_operator
from penumbra.events import Event, parse_streams
from penumbra.query import parse
from penumbra.timestamps import Interval
from tests.integration.conftest import JOB_SETTINGS
from tests.integration.test_spark_equivalence import assert_equal

STREAMS = {"A": {"pi": 10.0, "max_delay": 40.0}, "B": {"pi": 10.0, "max_delay": 40.0}}


def rename(streams: dict, prefix: str) -> dict:
    return {f"{prefix}{name}": params for name, params in streams.items()}


def intervals(prefix: str, stream: str, start: float, count: int, seed: int, region=None) -> list[Event]:
    """``count`` events of ``prefix + stream``, one per 4 time units from ``start``, lengths 2..10."""
    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        hi = start + 4 * n + float(rng.uniform(0, 2))
        lo = hi - float(rng.uniform(2, 10))
        attrs = {"region": region if region is not None else ["n", "s"][n % 2]}
        out.append(Event(f"{prefix}{stream}", f"{prefix}{stream}{seed}-{n}", Interval(round(lo, 3), round(hi, 3)), attrs))
    return out


def merged(*groups: list[Event]) -> list[Event]:
    """Events of several streams in the order of their max times (disorder within max_delay)."""
    return sorted((e for group in groups for e in group), key=lambda e: e.ts.hi)


def local_matches(text: str, streams: dict, steps) -> list[dict]:
    """One local operator through ``steps``: lists of events to feed, or a threshold to set."""
    operator = build_operator(parse(text), parse_streams(streams))
    out = []
    for item in steps:
        if isinstance(item, float):
            operator.set_threshold(item)
        else:
            out += [m.to_json() for m in operator.feed(item).matches]
    return out + [m.to_json() for m in operator.flush().matches]


def test_a_threshold_moved_live_applies_to_buffered_events(pipeline):
    streams = rename(STREAMS, "th")
    text = "SELECT * FROM thA A, thB B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.9"
    query_id = pipeline.query_id()
    pipeline.registry.put_streams(streams)
    pipeline.registry.register(text, query_id=query_id)
    first = intervals("th", "A", 0.0, 60, seed=1)
    pipeline.feed(first)
    pipeline.sync()
    pipeline.registry.update(query_id, threshold=0.3)
    second = intervals("th", "B", 1.0, 60, seed=2)
    pipeline.feed(second)
    pipeline.end(query_id)
    found = pipeline.matches(query_id)
    expected = local_matches(text, streams, [first, 0.3, second])
    assert_equal(found, expected, text)
    assert any(m["prob"] < 0.9 for m in found), "buffered A events should meet B events at the new threshold"
    pipeline.registry.remove(query_id)


def test_a_query_registered_live_starts_empty(pipeline):
    streams = rename(STREAMS, "rg")
    pipeline.registry.put_streams(streams)
    before = merged(intervals("rg", "A", 0.0, 40, seed=3), intervals("rg", "B", 1.0, 40, seed=4))
    pipeline.feed(before)
    pipeline.sync()
    text = "SELECT * FROM rgA A, rgB B WHERE WINDOW(A, B) = 3 AND A.region = B.region WITH THRESHOLD 0.3"
    query_id = pipeline.query_id()
    pipeline.registry.register(text, query_id=query_id)
    after = merged(intervals("rg", "A", 170.0, 40, seed=5), intervals("rg", "B", 171.0, 40, seed=6))
    pipeline.feed(after)
    pipeline.end(query_id)
    found = pipeline.matches(query_id)
    assert_equal(found, local_matches(text, streams, [after]), text)
    earlier = {e.id for e in before}
    assert not any(set(m["events"].values()) & earlier for m in found)
    pipeline.registry.remove(query_id)


def test_pause_stops_routing_and_resume_continues(pipeline):
    streams = rename(STREAMS, "pz")
    text = "SELECT * FROM pzA A, pzB B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.3"
    query_id = pipeline.query_id()
    pipeline.registry.put_streams(streams)
    pipeline.registry.register(text, query_id=query_id)
    one = merged(intervals("pz", "A", 0.0, 30, seed=7), intervals("pz", "B", 1.0, 30, seed=8))
    pipeline.feed(one)
    pipeline.sync()
    pipeline.registry.update(query_id, paused=True)
    paused = merged(intervals("pz", "A", 130.0, 30, seed=9), intervals("pz", "B", 131.0, 30, seed=10))
    pipeline.feed(paused)
    pipeline.sync()
    pipeline.registry.update(query_id, paused=False)
    two = merged(intervals("pz", "A", 260.0, 30, seed=11), intervals("pz", "B", 261.0, 30, seed=12))
    pipeline.feed(two)
    pipeline.end(query_id)
    found = pipeline.matches(query_id)
    assert_equal(found, local_matches(text, streams, [one, two]), text)
    skipped = {e.id for e in paused}
    assert not any(set(m["events"].values()) & skipped for m in found)
    pipeline.registry.remove(query_id)


def test_a_removed_query_drops_its_key_groups(pipeline):
    streams = rename(STREAMS, "rm")
    text = "SELECT * FROM rmA A, rmB B WHERE WINDOW(A, B) = 3 AND A.region = B.region WITH THRESHOLD 0.3"
    query_id = pipeline.query_id()
    pipeline.registry.put_streams(streams)
    pipeline.registry.register(text, query_id=query_id)
    pipeline.feed(merged(intervals("rm", "A", 0.0, 40, seed=13), intervals("rm", "B", 1.0, 40, seed=14)))
    pipeline.sync()
    groups = pipeline.client.hgetall(pipeline.keys.groups(query_id))
    assert len(groups) >= 1, "the query's key groups should hold state"
    pipeline.registry.remove(query_id)
    pipeline.sync()
    deadline = time.monotonic() + 60
    while pipeline.client.hlen(pipeline.keys.groups(query_id)) and time.monotonic() < deadline:
        pipeline.sync()
    assert pipeline.client.hlen(pipeline.keys.groups(query_id)) == 0


def test_a_querys_key_groups_take_the_shuffle_partitions_in_turn(pipeline):
    # Spark's own hash of (qid, grp) would place four groups on two partitions unevenly for
    # most query ids; the job's slots make it two and two, whatever the id
    streams = rename(STREAMS, "pl")
    text = "SELECT * FROM plA A, plB B WHERE WINDOW(A, B) = 3 AND A.region = B.region WITH THRESHOLD 0.3"
    ids = [pipeline.query_id() for _ in range(3)]
    pipeline.registry.put_streams(streams)
    for query_id in ids:
        pipeline.registry.register(text, query_id=query_id)
    pipeline.feed(merged(*(intervals("pl", stream, 0.0, 5, seed=20 + r, region=f"r{r}")
                           for r in range(16) for stream in "AB")))
    pipeline.sync()
    partitions, groups = JOB_SETTINGS["shuffle_partitions"], JOB_SETTINGS["key_groups"]
    for query_id in ids:
        ran = {int(g): json.loads(v)["partition"] for g, v in pipeline.client.hgetall(pipeline.keys.groups(query_id)).items()}
        assert sorted(ran) == list(range(groups)), "every key group ran"
        assert sorted(ran.values()) == sorted(list(range(partitions)) * (groups // partitions))
        # in turn: consecutive groups on consecutive partitions
        assert all(ran[(g + 1) % groups] == (ran[g] + 1) % partitions for g in range(groups))
        pipeline.registry.remove(query_id)
