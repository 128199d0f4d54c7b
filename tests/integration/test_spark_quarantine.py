"""One query never stops the others: queries that the job cannot run (registered by a
laxer validator than today's, as after an upgrade) are quarantined, marked failed with
their error in the registry, while the job goes on and every other query's matches stay
exact; changing a quarantined query brings it back, removing it leaves nothing behind.

The poison entry is written into the registry as a change of its own, past the
validator (which refuses it now): its text no longer compiles, so the router's compile
fails. A query quarantined as the stateful step does it (``Registry.fail``) is skipped,
and runs again, from the state it had, once it is changed."""

from __future__ import annotations

import time

from tests.integration.test_spark_equivalence import assert_equal
from tests.integration.test_spark_live import STREAMS, intervals, local_matches, merged, rename

JOIN = "SELECT * FROM {p}A A, {p}B B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.5"


def register_unchecked(pipeline, query_id: str, text: str, threshold: float | None, streams: dict) -> None:
    """A registry change that skips the validator: the entry as an older Penumbra stored it."""
    def change(registry: dict) -> dict:
        entry = {"id": query_id, "text": text, "kind": "join", "name": query_id, "threshold": threshold,
                 "paused": False, "created": time.time(), "streams": streams}
        registry["queries"][query_id] = entry
        return entry

    pipeline.registry._change(change, "test", "register", query_id)


def failed(pipeline, query_id: str) -> dict | None:
    entry = pipeline.registry.query(query_id)
    return entry.get("failed") if entry else None


def test_failing_queries_are_quarantined_while_the_others_go_on(pipeline):
    prefix = "qz"
    streams = rename(STREAMS, prefix)
    pipeline.registry.put_streams(streams)
    early = pipeline.registry.version()
    good, broken, marked = pipeline.query_id(), pipeline.query_id(), pipeline.query_id()
    text = JOIN.format(p=prefix)
    pipeline.registry.register(text, query_id=good)
    pipeline.registry.register(text, query_id=marked)
    register_unchecked(pipeline, broken, text.replace("WINDOW(A, B) = 3", "WINDOW(A, B) = 3 AND f(A.x) = 1"), None,
                       streams)
    first = merged(intervals(prefix, "A", 0, 40, 1), intervals(prefix, "B", 1, 40, 2))
    pipeline.feed(first)
    pipeline.end(good)
    assert pipeline.job.alive, pipeline.job.tail(20)
    assert "unknown function 'f'" in failed(pipeline, broken)["error"]
    assert failed(pipeline, good) is None and failed(pipeline, marked) is None
    # a quarantined query is skipped from the next batch on; the others stay exact
    entry = pipeline.registry.query(marked)
    assert pipeline.registry.fail(marked, "MemoryError: as if", seen_version=entry["version"]) is not None
    seen = len(pipeline.matches(marked))
    later = merged(intervals(prefix, "A", 200, 40, 3), intervals(prefix, "B", 201, 40, 4))
    pipeline.feed(later)
    pipeline.end(good)
    assert len(pipeline.matches(marked)) == seen and pipeline.matches(broken) == []
    # changing the quarantined query brings it back, with the state it had: it runs on what comes next
    pipeline.registry.update(marked, threshold=0.5)
    assert failed(pipeline, marked) is None
    last = merged(intervals(prefix, "A", 400, 30, 5), intervals(prefix, "B", 401, 30, 6))
    pipeline.feed(last)
    pipeline.end(good, marked)
    expected = local_matches(text, streams, [first + last])
    assert_equal(pipeline.matches(marked), expected, "after the change")
    # removing one leaves the job running and the others exact
    pipeline.registry.remove(broken)
    pipeline.sync()
    assert pipeline.job.alive, pipeline.job.tail(20)
    assert_equal(pipeline.matches(good), local_matches(text, streams, [first + later + last]), "the good query")
    # the registry keeps no version that no batch can read again (the job released them)
    assert not pipeline.client.exists(pipeline.keys.registry_at(early))
    assert pipeline.client.exists(pipeline.keys.registry_at(pipeline.registry.version()))
    audit = [f for _, f in pipeline.client.xrange(pipeline.keys.audit) if f[b"action"] == b"quarantine"]
    assert {f[b"subject"].decode() for f in audit} >= {broken, marked}
    for query_id in (good, marked):
        pipeline.registry.remove(query_id)
