"""Bad and late events end in the dead-letter stream with their reasons, are counted in
the metrics, and lose nothing valid; a flood of them does not stop the job."""

from __future__ import annotations

import json
import time

from contract.entries import DEAD_RAW_BYTES, block_entry
from tests.integration.test_spark_equivalence import assert_equal
from tests.integration.test_spark_live import intervals, local_matches, merged

STREAMS = {"dlA": {"pi": 10.0, "max_delay": 20.0, "templates": {"t1": {"edges": [0, 2, 6], "probs": [0.5, 0.5]}}},
           "dlB": {"pi": 10.0, "max_delay": 20.0}}
TEXT = "SELECT * FROM dlA A, dlB B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.3"

#: Bad entries and a word their reason must contain.
BAD = [
    (b'{"stream": "dlA", "id": "x1", "ts": {"lo": 1, "hi": 2}', "JSON"),
    (b'{"stream": "dlA", "id": "x2", "ts": {"lo": NaN, "hi": 2}}', "NaN"),
    (b'{"stream": "dlA", "id": "x3", "ts": {"lo": 5, "hi": 2}}', "lo"),
    (b'{"stream": "dlA", "ts": {"lo": 1, "hi": 2}}', "id"),
    (b'{"stream": "dlA", "id": 17, "ts": {"lo": 1, "hi": 2}}', "id"),
    (b'{"stream": "dlA", "id": "x6", "ts": {"detected": 9, "template": "nope"}}', "template"),
    (b'{"stream": "dlA", "id": "x7", "ts": {"edges": [0, 1], "probs": [0.7]}}', "ts"),
    (b'{"stream": "dlA", "id": "x8", "ts": {"lo": 1, "hi": 2}, "attrs": {"deep": {"a": 1}}}', "attrs.deep"),
    (b'[1, 2, 3]', "object"),
    (b'\xff\xfe{"stream": "dlA"}', "UTF-8"),
    (b'{"stream": "dlA", "id": "x9", "ts": {"lo": 1, "hi": 2}, "attrs": {"s": "' + b"y" * (1 << 20) + b'"}}',
     "too large"),
    (b'{"stream": "dlA", "id": "x10", "ts": {"lo": true, "hi": 2}}', "ts.lo"),
]

BAD_IN_BLOCK = b'{"stream": "dlA", "id": "x11", "ts": {"lo": 7, "hi": 3}}'


def dead_entries(pipeline) -> list[dict]:
    return [{k.decode(): v for k, v in fields.items()} for _, fields in pipeline.client.xrange(pipeline.keys.dead)]


def test_bad_and_late_events_are_dead_letters_and_nothing_valid_is_lost(pipeline):
    query_id = pipeline.query_id()
    pipeline.registry.put_streams(STREAMS)
    pipeline.registry.register(TEXT, query_id=query_id)
    before = len(dead_entries(pipeline))
    counts_before = {k.decode(): int(v) for k, v in pipeline.client.hgetall(pipeline.keys.counts).items()}
    valid = merged(intervals("dl", "A", 0.0, 50, seed=21), intervals("dl", "B", 1.0, 50, seed=22))
    late = intervals("dl", "B", -200.0, 3, seed=23)
    lines = [json.dumps({"stream": e.stream, "id": e.id, "ts": e.ts.to_json(), "attrs": dict(e.attrs)}).encode()
             for e in valid]
    mixed = []
    for n, line in enumerate(lines):
        mixed.append(line)
        if n < len(BAD):
            mixed.append(BAD[n][0])
    pipeline.feed(mixed[: len(mixed) // 2])
    pipeline.sync()
    pipeline.client.xadd(pipeline.keys.ingest, {"x": b"an entry of no known field"})
    # a block's bad event is named by its entry and place; a block whose count is wrong is
    # rejected whole; the valid events around them are kept
    rest = mixed[len(mixed) // 2:]
    assert all(line in lines for line in rest[:3])
    in_block = pipeline.client.xadd(pipeline.keys.ingest, block_entry([rest[0], BAD_IN_BLOCK, rest[1], rest[2]]))
    pipeline.client.xadd(pipeline.keys.ingest, {"b": b"[1]\n[2]", "n": b"3"})
    pipeline.feed(rest[3:])
    pipeline.sync()
    pipeline.feed(late)
    pipeline.end(query_id)
    assert_equal(pipeline.matches(query_id), local_matches(TEXT, STREAMS, [valid]), TEXT)

    dead = dead_entries(pipeline)[before:]
    rejected = [d for d in dead if d["kind"] == b"rejected"]
    assert len(rejected) == len(BAD) + 3
    (named,) = [d for d in rejected if d["raw"] == BAD_IN_BLOCK]
    assert named["entry"] == in_block and named["index"] == b"1" and b"lo" in named["reason"]
    (whole,) = [d for d in rejected if d["raw"] == b"[1]\n[2]"]
    assert b"block" in whole["reason"] and "index" not in whole
    raws = [d["raw"] for d in rejected]
    for raw, word in BAD:
        # a dead letter keeps the entry as it came, its first DEAD_RAW_BYTES and whole length beyond
        entry = rejected[raws.index(raw[:DEAD_RAW_BYTES])]
        assert word.encode() in entry["reason"], (raw[:60], entry["reason"])
        assert int(entry.get("raw_bytes", len(raw))) == len(raw) and ("raw_bytes" in entry) == (len(raw) > DEAD_RAW_BYTES)
    assert b"unknown entry field" in rejected[-1]["reason"] or any(b"unknown entry field" in d["reason"]
                                                                    for d in rejected)
    lateness = [d for d in dead if d["kind"] == b"late"]
    assert sorted(d["id"].decode() for d in lateness) == sorted(e.id for e in late)
    assert all(b"late" in d["reason"] and d["query"] == query_id.encode() for d in lateness)

    counts = {k.decode(): int(v) for k, v in pipeline.client.hgetall(pipeline.keys.counts).items()}
    assert counts["rejected"] - counts_before.get("rejected", 0) == len(BAD) + 3
    assert counts["late"] - counts_before.get("late", 0) == len(late)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        _, fields = pipeline.client.xrevrange(pipeline.keys.metrics, count=1)[0]
        metrics = json.loads(fields[b"metrics"])
        if metrics["rejected_total"] >= counts["rejected"] and metrics["late_total"] >= counts["late"]:
            break
        pipeline.sync()
    assert metrics["rejected_total"] == counts["rejected"] and metrics["late_total"] == counts["late"]
    pipeline.registry.remove(query_id)


def test_a_flood_of_bad_entries_does_not_stop_the_job(pipeline):
    before = len(dead_entries(pipeline))
    small = [raw for raw, _ in BAD if len(raw) < 1000]
    flood = [small[n % len(small)] for n in range(3000)]
    pipeline.feed(flood)
    query_id = pipeline.query_id()
    pipeline.registry.put_streams(STREAMS)
    pipeline.registry.register(TEXT, query_id=query_id)
    valid = merged(intervals("dl", "A", 1000.0, 30, seed=24), intervals("dl", "B", 1001.0, 30, seed=25))
    pipeline.feed(valid)
    pipeline.end(query_id)
    assert pipeline.job.alive
    # every entry of the flood is invalid, so none takes an identity at the ingest: each is
    # dead-lettered by the job, however often it comes
    assert len(dead_entries(pipeline)) - before == len(flood)
    assert_equal(pipeline.matches(query_id), local_matches(TEXT, STREAMS, [valid]), TEXT)
    pipeline.registry.remove(query_id)


def test_a_key_json_cannot_carry_as_utf_8_is_matched_and_written(pipeline):
    # a lone surrogate ("\ud800", which only the JSON escape can spell) and an integer beyond
    # 64 bits as the join's key: the match reaches its stream and its alarm instance its key
    query_id = pipeline.query_id()
    pipeline.registry.put_streams({"lsA": {"pi": 10.0}, "lsB": {"pi": 10.0}})
    pipeline.registry.register("SELECT * FROM lsA A, lsB B WHERE WINDOW(A, B) = 3 AND A.k = B.k WITH THRESHOLD 0.3",
                               query_id=query_id)
    lines = [b'{"stream": "lsA", "id": "a1", "ts": {"lo": 1, "hi": 2}, "attrs": {"k": "x\\ud800"}}',
             b'{"stream": "lsB", "id": "b1", "ts": {"lo": 1, "hi": 2}, "attrs": {"k": "x\\ud800"}}',
             b'{"stream": "lsA", "id": "a2", "ts": {"lo": 5, "hi": 6}, "attrs": {"k": 1180591620717411303425}}',
             b'{"stream": "lsB", "id": "b2", "ts": {"lo": 5, "hi": 6}, "attrs": {"k": 1180591620717411303425}}']
    pipeline.feed(lines)
    pipeline.end(query_id)
    found = sorted((m["events"]["A"], m["events"]["B"]) for m in pipeline.matches(query_id))
    assert found == [("a1", "b1"), ("a2", "b2")]
    keys = sorted((json.loads(fields[b"k"]) for _, fields in pipeline.client.xrange(pipeline.keys.matches(query_id))),
                  key=str)
    assert keys == sorted([{"k": "x\ud800"}, {"k": 2 ** 70 + 1}], key=str)
    pipeline.registry.remove(query_id)


def _reported(pipeline, timeout: float = 120.0) -> list[tuple[bytes, dict]]:
    """The job's progress reports, once the last committed micro-batch has reported (they
    are written after the commit)."""
    job = json.loads((pipeline.home / "var" / "checkpoint" / "penumbra.json").read_text())["job"]
    deadline = time.monotonic() + timeout
    while True:
        done = int(pipeline.client.hget(pipeline.keys.batches, job) or -1)
        reports = [(entry, json.loads(fields[b"metrics"]))
                   for entry, fields in pipeline.client.xrange(pipeline.keys.metrics)]
        if reports and reports[-1][1]["batch"] >= done:
            return reports
        assert time.monotonic() < deadline, f"no progress report of batch {done}"
        time.sleep(0.05)


def test_each_micro_batch_reports_the_entries_it_read_and_its_durations(pipeline):
    pipeline.registry.put_streams(STREAMS)
    pipeline.sync()
    seen = {entry for entry, _ in _reported(pipeline)}
    events = merged(intervals("mr", "A", 0.0, 40, seed=31), intervals("mr", "B", 1.0, 40, seed=32))
    lines = [json.dumps({"stream": "dl" + e.stream[2:], "id": e.id, "ts": e.ts.to_json()}).encode() for e in events]
    pipeline.feed(lines[:50])
    pipeline.sync()
    pipeline.feed(lines[50:])
    pipeline.sync()
    new = [report for entry, report in _reported(pipeline) if entry not in seen]
    # every entry appended since (the events and the two end marks) read by one batch
    assert sum(report["rows"] for report in new) == len(lines) + 2
    assert [report["batch"] for report in new] == list(range(new[0]["batch"], new[0]["batch"] + len(new)))
    for report in new:
        assert report["duration_ms"] == report["durations"]["triggerExecution"] > 0
        assert report["routed_rows"] >= (report["rows"] > 0) and report["lag_entries"] >= 0
        assert isinstance(report["state_rows"], int) and report["state_rows"] >= 0
