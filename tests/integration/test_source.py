"""The source against a real Redis, without Spark: each ``latestOffset`` ends its batch
exactly where a count over the whole ingest stream says, with the registry version as of
the call, and the read partitions give back every entry once, numbered in stream order."""

from __future__ import annotations


import pytest
import redis
from pyspark.sql.streaming.datasource import ReadMaxRows

import spark_jobs.source
from contract import Keys, Registry
from spark_jobs.source import IngestReader

ROWS, PARTS = 500, 3


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
            "splits": [[batch[end - 1], start["n"] + end] for end in ends]}


def reader_for(url: str, keys: Keys) -> IngestReader:
    return IngestReader({"url": url, "prefix": keys.prefix, "maxrows": str(ROWS), "parts": str(PARTS)})


@pytest.mark.parametrize("walk_chunk, segment", [(1, 3), (7, 64), (64, 37), (500, 5_000)])
def test_batches_end_where_the_stream_says(redis_server, keys, monkeypatch, walk_chunk, segment):
    # the plan walks in chunks and finds each part's end in its chunk: chunks smaller than a
    # part, not dividing the batch, and as large as the batch; the next full batch is walked
    # in the background in segments, some smaller than a chunk, some not dividing the batch
    monkeypatch.setattr(spark_jobs.source, "WALK_CHUNK", walk_chunk)
    monkeypatch.setattr(spark_jobs.source, "SEGMENT", segment)
    client = redis.Redis.from_url(redis_server.url)
    registry = Registry(client, keys)
    registry.put_streams({"s": {"max_delay": 1}})
    append(client, keys, 1_234)
    reader = reader_for(redis_server.url, keys)
    start = reader.initialOffset()
    seen, walked_before = [], []
    for step in range(8):
        walked_before.append(reader.next_plan is not None and reader.next_plan.found is not None)
        end = reader.latestOffset(start, ReadMaxRows(ROWS))
        if reader.next_plan is not None:
            reader.next_plan.thread.join()  # before the stream grows, so the test knows what it saw
        ids = [entry_id.decode() for entry_id, _ in client.xrange(keys.ingest)]
        assert end == expected(ids, start, registry.version()), f"batch {step}"
        if step == 1:
            append(client, keys, 900)
        if step == 2:
            # the registry moves between two plans: the next batch routes by it
            registry.put_streams({"t": {"max_delay": 1}})
        seen.append(end["n"] - start["n"])
        start = end
    assert seen == [500, 500, 500, 500, 134, 0, 0, 0]
    # after a full batch, the next one is walked in the background when the stream holds
    # all of it (not at step 2: only 234 entries were there when batch 1 was planned)
    assert walked_before == [False, True, False, True, False, False, False, False]
    assert start["registry"] == registry.version() > 1
    reader.stop()
    client.close()


def test_a_background_plan_of_another_batch_is_not_used(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    append(client, keys, 2 * ROWS)
    reader = reader_for(redis_server.url, keys)
    first = reader.latestOffset(reader.initialOffset(), ReadMaxRows(ROWS))
    reader.next_plan.thread.join()
    # Spark asks again from the start (a restart replays the batch) and with another limit
    again = reader.latestOffset(reader.initialOffset(), ReadMaxRows(ROWS))
    assert again == first
    ids = [entry_id.decode() for entry_id, _ in client.xrange(keys.ingest)]
    smaller = reader.latestOffset(first, ReadMaxRows(ROWS // 2))
    assert smaller["id"] == ids[ROWS + ROWS // 2 - 1] and smaller["n"] == ROWS + ROWS // 2
    reader.stop()
    client.close()


def test_the_partitions_read_every_entry_once_in_order(redis_server, keys, monkeypatch):
    # chunks of 7 entries, so a partition takes several round trips
    monkeypatch.setattr(spark_jobs.source, "READ_CHUNK", 7)
    client = redis.Redis.from_url(redis_server.url)
    append(client, keys, 40)
    client.xadd(keys.ingest, {"c": b'{"end": []}'})
    client.xadd(keys.ingest, {"x": b"first", "e": b"second"})
    append(client, keys, 9)
    stream = client.xrange(keys.ingest)
    reader = reader_for(redis_server.url, keys)
    start = reader.initialOffset()
    rows = []
    while (end := reader.latestOffset(start, ReadMaxRows(ROWS))) != start:
        for partition in reader.partitions(start, end):
            for batch in reader.read(partition):
                rows += batch.to_pylist()
        start = end
    assert [(row["seq"], row["entry"], row["field"], row["data"]) for row in rows] == [
        (n, entry_id.decode(), next(iter(values)).decode(), next(iter(values.values())))
        for n, (entry_id, values) in enumerate(stream, start=1)]
    assert rows[41]["field"] == "x" and rows[41]["data"] == b"first"
    client.close()
