"""The stateful step's isolation, without Spark: a key group whose block makes its query
fail gives the failure (the query and its error) instead of taking the micro-batch
down, and keeps the state it had. The registry is a real Redis; Spark's per-group value
state is stood in for by a dict-backed holder with the same three calls."""

from __future__ import annotations

import json

import pandas as pd
import redis

from contract import Registry
from spark_jobs.processor import GroupProcessor
from spark_jobs.routing import ROUTED, compiled

COLUMNS = [part.split()[0] for part in ROUTED.split(", ")]
JOIN = "SELECT * FROM pa A, pb B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.5"


class ValueState:
    """The calls the processor makes on Spark's ValueState (``get`` is None when no state is held)."""

    def __init__(self, value=None):
        self.value = value

    def get(self):
        return self.value

    def update(self, value) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


def test_a_group_that_fails_gives_its_error_and_keeps_its_state(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    registry = Registry(client, keys)
    registry.put_streams({"pa": {"max_delay": 1, "pi": 5}, "pb": {"max_delay": 1, "pi": 5}})
    entry = registry.register(JOIN, query_id="q1")
    processor = GroupProcessor(redis_server.url, keys.prefix, groups=1)
    kept = ("join", b"a snapshot", "{}", "{}")
    processor.state = ValueState(kept)
    block = b"this is no block"  # what a bug in the router could hand over (a join's plan takes columns)
    tick = json.dumps({"clock": {}, "end": []}).encode()
    unit = compiled(redis_server.url, keys.prefix, registry.version(), 1).unit_of["q1"]   # the join's plan
    frame = pd.DataFrame([(unit, 0, 0, "b", block, None, registry.version(), 0),
                          (unit, 0, -1, "t", tick, None, registry.version(), 0)], columns=COLUMNS)
    out = processor._handle(unit, 0, frame)
    assert list(out["kind"]) == ["f"]
    failure = json.loads(out["data"][0])
    assert failure["query"] == "q1" and failure["version"] == entry["version"]
    assert failure["error"].startswith("UnpicklingError")
    assert processor.state.get() == kept
    client.close()
