"""The latency runs' feeder: every event appended at the rate asked, in one call a tick
(not a call for each event or two as soon as it is due, which spun a core), each with the
time of its entry."""

from __future__ import annotations

import json
import time

import redis

from bench.pipeline import STREAMS, feed_at, intrusions
from contract.registry import Registry


def test_the_feeder_appends_what_is_due_each_tick_at_the_rate(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    Registry(client, keys).put_streams(STREAMS)      # registered events go in blocks
    lines = intrusions(1_200)[:1_200]
    started = time.monotonic()
    ingested = feed_at(client, keys, lines, rate=4_000, tick=0.02)
    took = time.monotonic() - started
    assert 0.28 <= took < 1.0, took
    assert set(ingested) == {json.loads(line)["id"] for line in lines}
    entries = client.xrange(keys.ingest)
    # a call a tick: about 0.3 s / 0.02 s of them, never one an event
    assert len(entries) <= 0.3 / 0.02 + 3, len(entries)
    assert sum(int(f.get(b"n", b"1")) for _, f in entries) == len(lines)
    times = {int(entry.split(b"-")[0]) for entry, _ in entries}
    assert set(ingested.values()) <= times
    client.close()
