"""The source against a real Redis, without Spark: each ``latestOffset`` ends its batch
exactly where a count over the whole ingest stream says, with the registry version as of
the call, and the read partitions give back every entry once, numbered in stream order."""

from __future__ import annotations


import itertools
import random

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadMaxRows

import spark_jobs.source
from contract import Keys, Registry
from contract.entries import block_entry
from spark_jobs.source import IngestReader

ROWS, PARTS = 500, 3


def append(client: redis.Redis, keys: Keys, count: int, blocks: bool = False) -> None:
    """``count`` events: an entry each, or (``blocks``) in blocks of 1 to 40 (one alone is
    an ``e`` entry, as the ingest writes it)."""
    pipe = client.pipeline(transaction=False)
    rng = random.Random(count)
    n = 0
    while n < count:
        size = min(count - n, rng.randint(1, 40) if blocks else 1)
        lines = [f'{{"n": {k}}}'.encode() for k in range(n, n + size)]
        pipe.xadd(keys.ingest, block_entry(lines) if size > 1 else {"e": lines[0]})
        n += size
    pipe.execute()


def weights(client: redis.Redis, keys: Keys) -> list[tuple[str, int]]:
    """Every entry of the stream with the events it holds."""
    return [(entry_id.decode(), int(fields.get(b"n", 1))) for entry_id, fields in client.xrange(keys.ingest)]


def expected(stream: list[tuple[str, int]], start: dict, registry: int) -> dict:
    """The end offset of the batch after ``start``, counted over the whole stream: the
    entries until they hold ROWS events, split where each of PARTS nearly equal parts of
    them is reached."""
    batch, count = [], 0
    for entry_id, weight in stream[start["entries"]:]:
        batch.append(entry_id)
        count += weight
        if count >= ROWS:
            break
    if not batch:
        return start if registry == start["registry"] else {**start, "registry": registry, "splits": []}
    reached = list(itertools.accumulate(weight for _, weight in stream[start["entries"]:][:len(batch)]))
    total = min(count, ROWS)
    parts = min(PARTS, total)
    splits = []
    for position in (total * part // parts for part in range(1, parts + 1)):
        at = next(i for i, n in enumerate(reached) if n >= position)
        if not splits or splits[-1][0] != batch[at]:
            splits.append([batch[at], start["n"] + reached[at]])
    return {"id": batch[-1], "n": start["n"] + count, "entries": start["entries"] + len(batch),
            "registry": registry, "splits": splits}


def walking_in(monkeypatch, walk_chunk: int, segment: int, url: str, keys: Keys) -> tuple[redis.Redis, Registry]:
    """The plan walking in chunks of ``walk_chunk`` entries, the background plan in segments
    of ``segment`` events; a client and the registry."""
    monkeypatch.setattr(spark_jobs.source, "WALK_CHUNK", walk_chunk)
    monkeypatch.setattr(spark_jobs.source, "SEGMENT", segment)
    client = redis.Redis.from_url(url)
    return client, Registry(client, keys)


def reader_for(url: str, keys: Keys) -> IngestReader:
    return IngestReader({"url": url, "prefix": keys.prefix, "maxrows": str(ROWS), "parts": str(PARTS)})


@pytest.mark.parametrize("walk_chunk, segment", [(1, 3), (7, 64), (64, 37), (500, 5_000)])
def test_batches_end_where_the_stream_says(redis_server, keys, monkeypatch, walk_chunk, segment):
    # the plan walks in chunks and finds each part's end in its chunk: chunks smaller than a
    # part, not dividing the batch, and as large as the batch; the next full batch is walked
    # in the background in segments, some smaller than a chunk, some not dividing the batch
    client, registry = walking_in(monkeypatch, walk_chunk, segment, redis_server.url, keys)
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
        assert end == expected(weights(client, keys), start, registry.version()), f"batch {step}"
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


@pytest.mark.parametrize("walk_chunk, segment", [(1, 3), (7, 64), (64, 37), (500, 5_000)])
def test_batches_of_blocks_end_where_the_stream_says(redis_server, keys, monkeypatch, walk_chunk, segment):
    # blocks of 1 to 40 events: a batch ends at the entry that brings it to ROWS events or
    # more, a part at the entry that reaches its share, the background walk alike
    client, registry = walking_in(monkeypatch, walk_chunk, segment, redis_server.url, keys)
    append(client, keys, 3_000, blocks=True)
    reader = reader_for(redis_server.url, keys)
    start, seen, walked_before = reader.initialOffset(), [], []
    while True:
        walked_before.append(reader.next_plan is not None and reader.next_plan.found is not None)
        end = reader.latestOffset(start, ReadMaxRows(ROWS))
        if reader.next_plan is not None:
            reader.next_plan.thread.join()
        assert end == expected(weights(client, keys), start, registry.version()), f"batch {len(seen)}"
        if end == start:
            break
        seen.append(end["n"] - start["n"])
        start = end
    assert sum(seen) == 3_000 and min(seen[:-1]) >= ROWS and max(seen) < ROWS + 40
    assert start["entries"] == client.xlen(keys.ingest) and any(walked_before)
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


def test_the_partitions_give_a_blocks_events_one_by_one_numbered_as_the_plan_counted(redis_server, keys, monkeypatch):
    monkeypatch.setattr(spark_jobs.source, "READ_CHUNK", 3)
    client = redis.Redis.from_url(redis_server.url)
    append(client, keys, 300, blocks=True)
    # a block whose count is not its lines, and one whose count is no count: each comes whole
    # (field b, to be rejected) and takes the ordinals its count says (the plan's), or one
    client.xadd(keys.ingest, {"b": b"[1]\n[2]", "n": b"3"})
    client.xadd(keys.ingest, {"b": b"[1]\n[2]", "n": b"02"})
    append(client, keys, 50, blocks=True)
    stream = client.xrange(keys.ingest)
    reader = reader_for(redis_server.url, keys)
    start, rows = reader.initialOffset(), []
    while (end := reader.latestOffset(start, ReadMaxRows(ROWS // 4))) != start:
        for partition in reader.partitions(start, end):
            for batch in reader.read(partition):
                rows += batch.to_pylist()
        start = end
    want, seq = [], 1
    for entry_id, fields in stream:
        text = entry_id.decode()
        if b"b" in fields and fields[b"n"] != b"3" and fields[b"n"] != b"02":
            lines = fields[b"b"].split(b"\n")
            want += [(seq + i, f"{text}/{i}", "e", line) for i, line in enumerate(lines)]
            seq += len(lines)
        else:
            field, data = next(iter(fields.items()))
            want.append((seq, text, field.decode(), data))
            seq += 3 if fields.get(b"n") == b"3" else 1
    assert [(row["seq"], row["entry"], row["field"], row["data"]) for row in rows] == want
    assert [row["field"] for row in rows].count("b") == 2 and start["n"] == 300 + 3 + 1 + 50
    client.close()
