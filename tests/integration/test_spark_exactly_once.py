"""Exactly once: kill -9 of the job in the middle of a stream, restart from the checkpoint.

The job is killed (its whole process group, JVM included) right after a micro-batch
was committed, while the next one is in flight, at several points of the stream; each
restart resumes from the checkpoint. The matches must equal the local engine's, none
lost and none written twice.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from contract import end_of_input
from contract.alarms import instance_id, read_instance
from contract.entries import read_match
from contract.history import Filters, History
from tests.integration.test_spark_equivalence import assert_equal, local
from tests.unit.joins.test_join_operator import workload
from tests.unit.test_keyed import pattern_events

pytestmark = pytest.mark.slow

def committed(pipeline) -> int:
    marker = pipeline.client.hget(pipeline.keys.batches, _job_id(pipeline))
    return int(marker) if marker is not None else -1

def _job_id(pipeline) -> str:
    return json.loads((pipeline.home / "var" / "checkpoint" / "penumbra.json").read_text())["job"]

def restart_writes(pipeline) -> int:
    """Lines of the job's log saying a start wrote a batch stored before a crash."""
    return sum("written on restart" in line for line in pipeline.job.log.read_text(errors="replace").splitlines())

def pages(history: History, query: str, limit: int = 500) -> list[dict]:
    items, after = [], None
    while True:
        page, after = history.page(query, Filters(), limit, after)
        items += page
        if after is None:
            return items

def test_kill_9_at_several_points_loses_and_duplicates_nothing(pipeline):
    streams, joins = workload(51, "templates", n=1500, late_share=0.0)
    pattern_streams, patterns = pattern_events(52, n=1500)
    join_text = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 20 AND A.region = B.region WITH THRESHOLD 0.3"
    pattern_text = ("PATTERN SEQ(A a, B b, C c) WHERE a.node = b.node AND b.node = c.node "
                    "AND skip_till_next_match(a, b, c) WITHIN 30 USING sorted")
    join_id, pattern_id = pipeline.query_id(), pipeline.query_id()
    pipeline.registry.put_streams({**streams.to_json(), **pattern_streams.to_json()})
    pipeline.registry.register(join_text, query_id=join_id)
    pipeline.registry.register(pattern_text, query_id=pattern_id)
    # the two workloads interleaved at random, each in its own order (disorder within max_delay)
    rng = random.Random(53)
    picks = [0] * len(joins) + [1] * len(patterns)
    rng.shuffle(picks)
    cursors = (iter(joins), iter(patterns))
    ordered = [next(cursors[pick]) for pick in picks]
    start = committed(pipeline)
    pipeline.feed(ordered)
    kills = 0
    for target in (start + 2, start + 6):
        deadline = time.monotonic() + 120
        while committed(pipeline) < target:
            assert time.monotonic() < deadline, "the job stopped making progress"
            time.sleep(0.01)
        # the first kill as soon as the marker moves: most likely before Spark's own commit,
        # so the restart replays a batch the sink already wrote
        time.sleep(0.0 if kills == 0 else rng.uniform(0.0, 0.3))
        scratch = pipeline.scratch()
        pipeline.job.kill()
        kills += 1
        # what the killed JVM unpacked and kept (some 15 MB) stays until the next start
        assert any(scratch.glob("librocksdbjni*"))
        pipeline.start()
        assert not scratch.exists()
    pipeline.end(join_id, pattern_id)
    assert kills == 2
    expected = {join_id: local(join_text, streams, joins), pattern_id: local(pattern_text, pattern_streams, patterns)}
    assert_equal(pipeline.matches(join_id), expected[join_id], join_text)
    assert_equal(pipeline.matches(pattern_id), expected[pattern_id], pattern_text)
    # the archive too: each match once, under the id of its live entry, though batches were written twice
    history = History(pipeline.home / "var" / "archive")
    for query in (join_id, pattern_id):
        archived = pages(history, query)
        assert_equal(archived, expected[query], query)
        assert [m["id"] for m in archived] == [i.decode() for i, _ in pipeline.client.xrange(
            pipeline.keys.matches(query))]
    # every live match carries its events as they came in (what its explanation reads), the
    # join's state having been restored from checkpoints twice: ids and attributes
    by_id = {(e.stream.casefold(), e.id): e for e in joins + patterns}
    for query in (join_id, pattern_id):
        for _, fields in pipeline.client.xrange(pipeline.keys.matches(query)):
            match = read_match(b"0-0", fields)
            assert set(match["records"]) == set(match["events"])
            for var, record in match["records"].items():
                given = by_id[(record["stream"].casefold(), match["events"][var])]
                assert record["id"] == given.id and record["attrs"] == dict(given.attrs)
    # every alarm instance counts its key's matches once: counted here from the matched events' keys
    for query, events, stream, var, attr in ((join_id, joins, "s", "A", "region"),
                                             (pattern_id, patterns, "a", "a", "node")):
        attrs = {e.id: e.attrs for e in events if e.stream.casefold() == stream}
        counted = Counter(instance_id(query, {attr: attrs[m["events"][var]][attr]}) for m in expected[query])
        stored = {i.decode(): read_instance(r)["added"]
                  for i, r in pipeline.client.hgetall(pipeline.keys.instances(query)).items()}
        assert stored == dict(counted) and len(counted) > 1
    pipeline.registry.remove(join_id)
    pipeline.registry.remove(pattern_id)

def test_a_batch_written_before_a_crash_is_replayed_for_its_state_only(pipeline):
    """As after a crash between the sink's EXEC and Spark's commit: the marker is one batch
    ahead of Spark. That batch runs (its state commits) and writes nothing; the job goes on."""
    pipeline.sync()
    done = committed(pipeline)
    pipeline.client.hset(pipeline.keys.batches, _job_id(pipeline), done + 1)
    skipped = end_of_input(pipeline.client, [], pipeline.keys)
    deadline = time.monotonic() + 240
    while not any(json.loads(f[b"metrics"])["batch"] > done
                  for _, f in pipeline.client.xrevrange(pipeline.keys.metrics, count=5)):
        assert pipeline.job.alive, pipeline.job.tail(20)
        assert time.monotonic() < deadline, "the replayed batch did not run"
        time.sleep(0.05)
    assert pipeline.client.hget(pipeline.keys.ended, skipped) is None, "a replayed batch writes nothing"
    # the job is alive and its state whole: a join still equals the local engine
    streams, events = workload(54, "intervals", n=300, late_share=0.0)
    text = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 10 AND A.region = B.region WITH THRESHOLD 0.3"
    query_id = pipeline.query_id()
    found = pipeline.run(streams.to_json(), {query_id: text}, events)
    assert_equal(found[query_id], local(text, streams, events), text)
    assert committed(pipeline) > done + 1

def test_kill_9_between_a_stored_batch_and_its_write_loses_and_duplicates_nothing(pipeline):
    """The sink writes a batch behind Spark's commit, from rows it stored in Redis first. The
    job is caught with a batch stored and not written (Redis's writes paused at that moment,
    so the write waits) and killed; the restart writes the stored batch, once."""
    streams, events = workload(55, "templates", n=1200, late_share=0.0)
    text = "SELECT * FROM S A, T B WHERE WINDOW(A, B) = 20 AND A.region = B.region WITH THRESHOLD 0.3"
    query_id = pipeline.query_id()
    pipeline.registry.put_streams(streams.to_json())
    pipeline.registry.register(text, query_id=query_id)
    pending = pipeline.keys.pending(_job_id(pipeline))
    caught, fed = None, 0
    # a few events at a time, each piece a batch or two, each batch a chance: polled until its
    # rows appear stored or its write is done
    while caught is None and fed < len(events):
        before = committed(pipeline)
        pipeline.feed(events[fed:fed + 25])
        fed += 25
        deadline = time.monotonic() + 10
        while caught is None and time.monotonic() < deadline:
            if pipeline.client.exists(pending):
                pipeline.client.client_pause(10_000, all=False)     # writes wait; reads go on
                stored = pipeline.client.get(pending)
                if stored is not None:
                    caught = int(stored.split(b"\n", 1)[0])
                else:
                    pipeline.client.client_unpause()
            elif committed(pipeline) > before:
                break
    assert caught is not None, "no batch was seen stored and not yet written"
    recovered = restart_writes(pipeline)
    try:
        assert committed(pipeline) < caught
        pipeline.job.kill()
    finally:
        pipeline.client.client_unpause()
    pipeline.start()
    assert committed(pipeline) >= caught and pipeline.client.get(pending) is None
    assert restart_writes(pipeline) == recovered + 1
    pipeline.feed(events[fed:])
    pipeline.end(query_id)
    assert_equal(pipeline.matches(query_id), local(text, streams, events), text)
    pipeline.registry.remove(query_id)
