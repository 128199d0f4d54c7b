"""The job's progress reports into ``pn:metrics``, from Spark's JSON of a micro-batch's
progress (what the JVM hands the listener), with a real Redis."""

from __future__ import annotations

import json

import redis

from contract.entries import control_entry
from spark_jobs.job import _Metrics
from spark_jobs.sink import Sink


def progress(batch: int, start: dict | str | None, end: dict, **rates) -> dict:
    """A progress report as Spark writes it in JSON: a rate it cannot say (NaN, infinite)
    is left out, an offset is its parsed JSON."""
    return {"id": "7f0c2d1e-55aa-4a8e-9d0e-2b7c1f7d0a11", "runId": "0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f",
            "name": "penumbra", "timestamp": "2026-11-26T12:00:00.000Z", "batchId": batch, "batchDuration": 310,
            "numInputRows": 12, "durationMs": {"addBatch": 250, "triggerExecution": 300, "walCommit": 9},
            "stateOperators": [{"operatorName": "transformWithStateInPySparkExec", "numRowsTotal": 4,
                                "memoryUsedBytes": 2048, "customMetrics": {}}],
            "sources": [{"description": "penumbra_ingest", "startOffset": start, "endOffset": end,
                         "latestOffset": end, "numInputRows": 12, **rates}],
            "sink": {"description": "ForeachBatchSink", "numOutputRows": -1}, **rates}


def test_a_report_counts_the_entries_read_and_survives_rates_spark_leaves_out(redis_server, keys):
    client = redis.Redis.from_url(redis_server.url)
    for _ in range(5):
        client.xadd(keys.ingest, control_entry([]))
    last = client.xrevrange(keys.ingest, count=1)[0][0].decode()
    first = client.xrange(keys.ingest, count=1)[0][0].decode()
    client.hset(keys.counts, mapping={"matches": 3, "rejected": 1})
    sink = Sink(redis_server.url, keys, "job-1", 100, 100, 100)
    sink.timings[8] = {"sink_redis": 4.5}
    metrics = _Metrics(redis_server.url, keys, sink, 100)
    # the first batch: no start offset, NaN rates left out; the next: the end as text
    metrics.report(progress(7, None, {"id": first, "n": 1, "registry": 0, "splits": []}))
    metrics.report(progress(8, {"id": first, "n": 1}, json.dumps({"id": last, "n": 5, "registry": 0}),
                            inputRowsPerSecond=40.0, processedRowsPerSecond=40.0))
    reports = [json.loads(fields[b"metrics"]) for _, fields in client.xrange(keys.metrics)]
    assert [(r["batch"], r["rows"], r["routed_rows"]) for r in reports] == [(7, 1, 12), (8, 4, 12)]
    first_report, second = reports
    assert first_report["input_rate"] == 0.0 and second["input_rate"] == 4 * 40.0 / 12
    assert second["duration_ms"] == 300 and second["durations"]["walCommit"] == 9
    assert (second["state_rows"], second["state_bytes"]) == (4, 2048)
    assert (second["matches_total"], second["rejected_total"]) == (3, 1)
    assert second["sink_ms"] == {"sink_redis": 4.5} and first_report["sink_ms"] == {}
    # five entries appended, five read: nothing behind
    assert second["lag_entries"] == 0 and first_report["lag_entries"] == 4
    assert metrics.last == second
