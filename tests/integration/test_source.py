"""The source's batch plan against a real Redis, without Spark: each ``latestOffset`` ends
its batch exactly where a count over the whole ingest stream says, whether the walk was
done ahead in the background or not, and reads the registry version as of the call."""

from __future__ import annotations

import uuid

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_jobs.source import IngestReader
from spark_jobs.store import Keys, Registry

ROWS, PARTS = 500, 3


@pytest.fixture
def keys(redis_server):
    """Keys of their own; they go when the test ends, also when it fails."""
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys(f"pn-source-{uuid.uuid4().hex[:8]}")
    try:
        yield keys
    finally:
        found = client.keys(f"{keys.prefix}:*")
        if found:
            client.delete(*found)
        client.close()


def append(client: redis.Redis, keys: Keys, count: int) -> None:
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        pipe.xadd(keys.ingest, {"e": f'{{"n": {n}}}'})
    pipe.execute()


def expected(ids: list[str], start: dict, registry: int) -> dict:
    """The end offset of the batch after ``start``, counted from every id of the stream."""
    batch = ids[start["n"]:start["n"] + ROWS]
    if not batch:
        return start if registry == start["registry"] else {**start, "registry": registry, "splits": []}
    parts = min(PARTS, len(batch))
    ends = [len(batch) * part // parts for part in range(1, parts + 1)]
    return {"id": batch[-1], "n": start["n"] + len(batch), "registry": registry,
            "splits": [[batch[end - 1], start["n"] + len(batch) * part // parts]
                       for part, end in enumerate(ends, start=1)]}


def reader_for(url: str, keys: Keys) -> IngestReader:
    return IngestReader({"url": url, "prefix": keys.prefix, "maxrows": str(ROWS), "parts": str(PARTS)})


def test_batches_end_where_the_stream_says_with_the_walk_done_ahead(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    registry = Registry(client, keys)
    registry.put_streams({"s": {"max_delay": 1}})
    append(client, keys, 1_234)
    reader = reader_for(redis_server.url, keys)
    start = reader.initialOffset()
    seen = []
    for step in range(8):
        end = reader.latestOffset(start, ReadMaxRows(ROWS))
        ids = [entry_id.decode() for entry_id, _ in client.xrange(keys.ingest)]
        assert end == expected(ids, start, registry.version()), f"batch {step}"
        # a fresh reader, with nothing walked ahead, plans the same batch
        assert reader_for(redis_server.url, keys).latestOffset(start, ReadMaxRows(ROWS)) == end
        full = end["n"] - start["n"] == ROWS
        assert (reader.ahead is not None) == full
        if reader.ahead is not None:
            reader.ahead.thread.join()
        if step == 1:
            # the walk ahead saw 234 entries, not a full batch; more arrive before the next plan
            append(client, keys, 900)
        if step == 2:
            # the registry moves after the walk ahead was done: the next batch routes by it
            registry.put_streams({"t": {"max_delay": 1}})
        seen.append(end["n"] - start["n"])
        start = end
    assert seen == [500, 500, 500, 500, 134, 0, 0, 0]
    assert start["registry"] == registry.version() > 1
    client.close()


def test_a_walk_ahead_for_another_start_is_not_used(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    append(client, keys, 2 * ROWS + 10)
    reader = reader_for(redis_server.url, keys)
    first = reader.latestOffset(reader.initialOffset(), ReadMaxRows(ROWS))
    assert reader.ahead is not None and reader.ahead.walk[0] == first["id"]
    # Spark asks again from the same start (the batch was not run): the same batch
    assert reader.latestOffset(reader.initialOffset(), ReadMaxRows(ROWS)) == first
    second = reader.latestOffset(first, ReadMaxRows(ROWS))
    ids = [entry_id.decode() for entry_id, _ in client.xrange(keys.ingest)]
    assert second == expected(ids, first, 0)
    client.close()
